"""What every ``agentctl`` command shares: the typer app, consoles, exit codes, client and printing.

Exit status: 0 the run completed (or the command succeeded), 1 the run ended otherwise or the
command failed, 2 a usage error (bad arguments, or a bad setting: an invalid environment variable,
``AGENT_ENCRYPTION_KEYS`` or ``TEMPORAL_ADDRESS``), 3 the Temporal server cannot be reached.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from activities.extras import MissingExtraError
from workers import client as rc
from workers.config import Settings, load_settings, settings_errors
from workers.payloads.converter import PayloadStoreConfigError
from workers.payloads.encryption import EncryptionKeyError
from workers.telemetry import TelemetryUnavailableError
from workflows.view_models import RunResult

T = TypeVar("T")

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Durable AI agents on Temporal.")
# emoji=False: text is printed as written (a run's answer or a tool's arguments holding ":smile:"
# stay so), and printing does not load rich's emoji table (about 2 ms of every command, issue #35)
out = Console(soft_wrap=True, emoji=False)
err = Console(stderr=True, soft_wrap=True, emoji=False)

EXIT_OK, EXIT_RUN_NOT_COMPLETED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
PrincipalOpt = typer.Option(
    "anonymous", "--principal", "-p", envvar="AGENT_PRINCIPAL", help="who you are"
)


class CommandFailed(Exception):
    """A command failed for a reason to print as one line (exit 1)."""


@contextmanager
def config_errors() -> Iterator[None]:
    """Turn a bad setting into one ``error:`` line per problem and exit 2 (no traceback).

    Bad settings: invalid environment variables (each named, with pydantic's short reason),
    ``AGENT_ENCRYPTION_KEYS``, a malformed ``TEMPORAL_ADDRESS``, the payload store, tracing.
    """
    try:
        yield
    except ValidationError as e:
        lines = settings_errors(e)
        if lines is None:
            raise
        for line in lines:
            err.print(f"[red]error:[/red] invalid setting {escape(line)}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except PayloadStoreConfigError as e:
        err.print(f"[red]error:[/red] payload store: {e}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except (EncryptionKeyError, rc.ConnectionSettingsError, TelemetryUnavailableError) as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None


def _invalid_input(e: ValidationError) -> NoReturn:
    """Each problem of a request the command built, one ``error:`` line each; exit 2."""
    for x in e.errors():
        where = ".".join(map(str, x["loc"])) or e.title
        err.print(f"[red]error:[/red] {escape(where)}: {escape(x['msg'])}", highlight=False)
    raise typer.Exit(EXIT_USAGE) from None


@contextmanager
def valid_input() -> Iterator[None]:
    """Around building a request from options: a ``ValidationError`` is a usage error (exit 2)."""
    try:
        yield
    except ValidationError as e:
        _invalid_input(e)


def cli_settings() -> Settings:
    """:func:`load_settings` for a command: an invalid variable is an error line and exit 2."""
    with config_errors():
        return load_settings()


def _with_client(fn: Callable[[Client], Awaitable[T]], **connect_options: Any) -> T:
    """Connect, run ``fn``, and drop the client before the loop closes (avoids a crash at exit).

    ``connect_options`` go to :func:`workers.client.connect` (e.g. ``runtime=``).
    """

    async def main() -> T:
        client = await rc.connect(**connect_options)
        try:
            return await fn(client)
        finally:
            del client
            gc.collect()

    try:
        with config_errors():
            return asyncio.run(main())
    except rc.ServerUnreachable as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(EXIT_UNREACHABLE) from None
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            err.print(f"[red]error:[/red] no such run: {e.message}", highlight=False)
        elif e.status == RPCStatusCode.UNAVAILABLE:
            err.print(
                f"[red]error:[/red] the Temporal server is unavailable: {e.message}",
                highlight=False,
            )
            raise typer.Exit(EXIT_UNREACHABLE) from None
        else:
            err.print(f"[red]error:[/red] {e.message}", highlight=False)
        raise typer.Exit(EXIT_RUN_NOT_COMPLETED) from None
    except (CommandFailed, WorkflowUpdateFailedError, MissingExtraError) as e:
        msg = str(e.cause) if isinstance(e, WorkflowUpdateFailedError) and e.cause else str(e)
        err.print(f"[red]error:[/red] {msg}", highlight=False)
        raise typer.Exit(EXIT_RUN_NOT_COMPLETED) from None
    except ValidationError as e:  # a request the command built is not valid (e.g. too long)
        _invalid_input(e)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _exit_for(res: RunResult) -> int:
    return EXIT_OK if res.status == "completed" else EXIT_RUN_NOT_COMPLETED


def _print_result(res: RunResult, as_json: bool, run_id: str | None = None) -> None:
    if as_json:
        sys.stdout.write(res.model_dump_json() + "\n")
        return
    colour = "green" if res.status == "completed" else "yellow"
    out.print(
        f"[bold {colour}]{res.status}[/] after {res.turns} turn(s): {res.stopped_reason}",
        highlight=False,
    )
    if res.error:
        out.print(f"[red]error:[/red] {res.error}", highlight=False)
    for c in res.tool_calls:
        args = json.dumps(c.arguments) if isinstance(c.arguments, dict) else c.arguments
        out.print(
            f"  tool {c.name}({args}) -> {c.status} [{c.duration_ms:.0f} ms]",
            highlight=False,
            markup=False,
        )
    u = res.usage
    out.print(
        f"tokens: {u.prompt_tokens} prompt + {u.completion_tokens} completion = {u.total_tokens}; "
        f"cost ${u.cost_usd:.6f}; {res.duration_ms / 1000:.1f} s",
        highlight=False,
    )
    if res.output:
        out.print("\n[bold]Answer:[/bold]")
        out.print(res.output, markup=False, highlight=False)
    if run_id:
        out.print(f"\nWeb UI: {web_ui_url(run_id)}", highlight=False)


def web_ui_url(run_id: str) -> str:
    """The run's page in the Temporal Web UI (the dev server's UI port from temporal-dev.yml)."""
    s = load_settings()
    try:
        from workers.local.dev_server import load_dev_config

        base = load_dev_config("temporal-dev.yml").ui_url
    except Exception:  # noqa: BLE001 - no dev config: the usual default
        base = "http://127.0.0.1:8233"
    return f"{base}/namespaces/{s.temporal_namespace}/workflows/{run_id}"


async def _follow(client: Client, run_id: str, principal: str, interactive: bool) -> RunResult:
    """Print the run live from its event stream until it ends (:mod:`workers.cli.follow`)."""
    from workers.cli.follow import follow_run

    return await follow_run(client, run_id, out, principal=principal, interactive=interactive)


def _print_line(text: str) -> None:
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def _runtime_converter() -> Any:
    """The workers' data converter (resolves external payload references in stored histories)."""
    from workers.payloads.converter import build_data_converter

    with config_errors():
        return build_data_converter()
