"""The ``agentctl`` app with every command registered: importing a command module registers it.

The modules are imported in the order ``agentctl --help`` lists them. :func:`workers.cli.main`
runs :data:`app`; the package ``workers.cli`` itself imports nothing heavy, so a stand-alone
server can use :mod:`workers.cli.entrypoints` without loading every command.
"""

from __future__ import annotations

# isort: off
# importing these registers their commands on `app`, in this order (the order of --help)
from workers.cli import runs, servers, inspection, evals, versions, memory, project  # noqa: F401

# isort: on
from workers.cli.base import (
    EXIT_OK,
    EXIT_RUN_NOT_COMPLETED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CommandFailed,
    _follow,
    _print_result,
    app,
    web_ui_url,
)

_ORDER = [m.__name__ for m in (runs, servers, inspection, evals, versions, memory, project)]


def _rank(module: str | None) -> int:
    return _ORDER.index(module) if module in _ORDER else len(_ORDER)


# --help lists commands in registration order, which is import order; a test (or a user) that
# imported one command module first would change it, so put them in the order above.
app.registered_commands.sort(key=lambda c: _rank(getattr(c.callback, "__module__", None)))
_GROUPS = ["eval", "versions", "memory"]  # the groups of evals, versions and memory, in that order
app.registered_groups.sort(
    key=lambda g: _GROUPS.index(g.name) if g.name in _GROUPS else len(_GROUPS)
)

__all__ = [
    "EXIT_OK",
    "EXIT_RUN_NOT_COMPLETED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "CommandFailed",
    "_follow",
    "_print_result",
    "app",
    "web_ui_url",
]
