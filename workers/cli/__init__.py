"""``agentctl``: the command line (docs/contract.md). Thin: parse arguments, call a client helper, print.

Exit status: 0 the run completed (or the command succeeded), 1 the run ended otherwise or the
command failed, 2 a usage error or a bad setting (an invalid environment variable,
``AGENT_ENCRYPTION_KEYS`` or ``TEMPORAL_ADDRESS``: one line names it), 3 the Temporal server cannot
be reached.

The commands live in :mod:`workers.cli.runs`, :mod:`workers.cli.servers`,
:mod:`workers.cli.inspection`, :mod:`workers.cli.evals`, :mod:`workers.cli.versions` and
:mod:`workers.cli.memory`; :mod:`workers.cli.commands` imports them, which registers them on
:data:`app`. This package resolves :data:`app` and the other names below on first use (PEP 562),
so importing a helper such as :mod:`workers.cli.entrypoints` does not load every command.
``agentctl`` is :func:`main` (``workers.cli:main``); ``python -m workers.cli`` runs it too. When
its first argument names a command of :mod:`workers.cli.runs` (``status``, ``list``, ``approve``...)
:func:`main` registers that module's commands alone (see :func:`_app_for`).
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

__all__ = [
    "EXIT_OK",
    "EXIT_RUN_NOT_COMPLETED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "CommandFailed",
    "_follow",
    "_print_result",
    "app",
    "main",
    "web_ui_url",
]

_LAZY = frozenset(__all__) - {"main"}

if TYPE_CHECKING:
    from workers.cli.commands import (
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


def __getattr__(name: str) -> Any:
    """Import :mod:`workers.cli.commands` (every command) on first use of ``app`` and the rest."""
    if name not in _LAZY:
        raise AttributeError(f"module 'workers.cli' has no attribute {name!r}")
    value = getattr(importlib.import_module("workers.cli.commands"), name)
    globals()[name] = value
    return value


RUN_COMMANDS = frozenset(
    {
        "run",
        "follow",
        "status",
        "result",
        "approve",
        "reject",
        "tool-result",
        "interrupt",
        "pause",
        "resume",
        "send",
        "list",
        "chat",
    }
)
"""The commands of :mod:`workers.cli.runs` (tests/unit/test_light_imports.py checks the list)."""


def _app_for(first: list[str]) -> Any:
    """The app with the command ``first`` names registered: only :mod:`workers.cli.runs` if it is there.

    The run commands (``status``, ``list``, ``approve``...) are the ones people and scripts call
    most; registering them alone spares importing the other command modules and typer turning
    their 20-odd commands into click commands at every call (issue #35: about 5 ms of the 0.3 s).
    Anything else (another command, a group, ``--help``, nothing) gets every command.

    A run command is a short-lived client that hosts nothing, so it also loads no pydantic plugin
    (``PYDANTIC_DISABLE_PLUGINS=__all__`` unless the variable is set; none is installed here and
    this project registers none): pydantic otherwise reads every installed package's entry points
    to look for one when it builds the first model (about 5 ms). The servers (``agentctl worker``,
    ``serve``...) keep them.
    """
    if first and first[0] in RUN_COMMANDS:
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
        import workers.cli.runs  # noqa: F401 - registers the run commands on app
        from workers.cli.base import app

        return app
    from workers.cli.commands import app

    return app


def main() -> None:
    """Entry point of ``agentctl``: runs the command, then ends the process without finalisation.

    The Temporal SDK's native runtime keeps threads that can abort the interpreter while it
    finalises (SIGABRT/SIGSEGV seen in 6 of 20 short scripts, docs/temporal-facts.md), even
    after a failed connect. Once the command is done and its output flushed, nothing is left to
    clean up, so the process exits with the command's status through ``os._exit``.

    The garbage collector is off while the commands are imported: importing makes hundreds of
    thousands of objects and next to no garbage, and the collections it set off took about 40 ms
    of the 0.3 s a command such as ``agentctl status`` takes (151 collections, one of them full;
    measured 2026-11-27). What was imported is then frozen out of its reach (``gc.freeze``), so
    the one full collection a command makes (:func:`workers.cli.base._with_client`, dropping its
    client) scans only what the command made (it took 32 ms scanning every module's objects).
    """
    gc.disable()
    try:
        app = _app_for(sys.argv[1:2])
    finally:
        gc.freeze()
        gc.enable()

    try:
        app()
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
