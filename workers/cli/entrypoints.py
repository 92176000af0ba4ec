"""``python -m`` entry points of stand-alone servers, parsed by typer like ``agentctl``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import typer

__all__ = ["run_command"]


def run_command(command: Callable[..., Any], argv: Sequence[str] | None, prog_name: str) -> int:
    """Run ``command`` as a one-command typer app on ``argv`` and return its exit status.

    Args:
        command: a function whose parameters are ``typer.Option`` s; its docstring is the help.
        argv: the arguments (``None``: ``sys.argv[1:]``).
        prog_name: the name shown in usage and ``--help`` (``python -m ...``).

    Returns:
        0, the code of a ``typer.Exit`` the command raised, or 2 for a usage error (typer prints
        it).
    """
    app = typer.Typer(add_completion=False)
    app.command()(command)
    try:
        app(args=list(argv) if argv is not None else None, prog_name=prog_name)
    except SystemExit as e:  # typer's standalone mode always exits
        return e.code if isinstance(e.code, int) else 0
    return 0
