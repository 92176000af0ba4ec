"""Optional parts of the runtime (pyproject.toml ``[project.optional-dependencies]``).

A heavy package that only one feature uses is an extra, imported where that feature runs, so the
runtime installs light and ``agentctl`` starts fast (issue #35). When it is missing, the feature
fails with :class:`MissingExtraError`, whose message names the pip command that installs it.

=============  =========================================  ======================================
extra          packages                                   what imports them
=============  =========================================  ======================================
``evals``      scipy (and numpy)                          the evaluation report's interval and
                                                          McNemar test (activities/evals/report.py)
``postgres``   psycopg[binary]                            the memory store on PostgreSQL
                                                          (activities/memory/pg_store.py)
=============  =========================================  ======================================
"""

from __future__ import annotations

import importlib
from types import ModuleType

PACKAGE = "agent-runtime"


class MissingExtraError(ImportError):
    """A feature needs an optional package that is not installed; the message says how to add it."""


def install_hint(extra: str) -> str:
    """The pip command that installs ``extra``: ``pip install 'agent-runtime[extra]'``."""
    return f"pip install '{PACKAGE}[{extra}]'"


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming ``extra``.

    Args:
        module: the module to import, e.g. ``"scipy.stats"``.
        extra: the optional-dependency group that installs it, e.g. ``"evals"``.
        feature: what needs it, for the message, e.g. ``"the evaluation report"``.

    Raises:
        MissingExtraError: ``module`` (or a package it needs) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise MissingExtraError(
            f"{feature} needs {e.name or module}, which is not installed: {install_hint(extra)}"
        ) from e
