"""Former home of :mod:`workers.history` (audit, replay, fork); kept so older imports still work.

Import from ``workers.history`` instead; this module only re-exports its public names and can
be removed once no branch imports it.
"""

from workers.history import *  # noqa: F403
from workers.history import __all__  # noqa: F401
