"""The ``agentctl`` app with every command registered: importing a command module registers it.

The modules are imported in the order ``agentctl --help`` lists them. :func:`workers.cli.main`
runs :data:`app`; the package ``workers.cli`` itself imports nothing heavy, so a stand-alone
server can use :mod:`workers.cli.entrypoints` without loading every command.
"""

from __future__ import annotations

# isort: off
# importing these registers their commands on `app`, in this order (the order of --help)
from workers.cli import runs, servers, inspection, evals, versions, memory  # noqa: F401

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
