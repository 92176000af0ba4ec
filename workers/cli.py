"""``agentctl``: the command line (CONTRACT.md). Thin: parse arguments, call a client helper, print.

Exit status: 0 the run completed (or the command succeeded), 1 the run ended otherwise or the
command failed, 2 a usage error, 3 the Temporal server cannot be reached.

The commands live in :mod:`workers.cli_runs`, :mod:`workers.cli_servers` and
:mod:`workers.cli_inspect`; importing them registers them on :data:`app`.
"""

from __future__ import annotations

import logging
import os
import sys

# isort: off
# importing these registers their commands on `app`, in this order (the order of --help)
from workers import cli_runs, cli_servers, cli_inspect  # noqa: F401

# isort: on
from workers.cli_base import (
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
    "main",
    "web_ui_url",
]


def main() -> None:
    """Entry point of ``agentctl``: runs the command, then ends the process without finalisation.

    The Temporal SDK's native runtime keeps threads that can abort the interpreter while it
    finalises (SIGABRT/SIGSEGV seen in 6 of 20 short scripts, docs/temporal-facts.md), even
    after a failed connect. Once the command is done and its output flushed, nothing is left to
    clean up, so the process exits with the command's status through ``os._exit``.
    """
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


if __name__ == "__main__":
    main()
