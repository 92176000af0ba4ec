"""``agentctl versions``: the builds of deployment ``agent-runtime``, the runs on each, and routing.

``versions`` lists the versions (current, ramping, draining...) and how many runs are open on
each with a few of their ids; ``versions ramp BUILD PERCENT`` sends that share of new runs to
``BUILD``; ``versions current BUILD`` makes it take every new run (ending a ramp to it);
``versions rollback [BUILD]`` ends any ramp and makes ``BUILD`` (default: the newest version that
is neither current nor ramping) current again. Runs already started stay on their build
(``PINNED``); see docs/upgrades.md for the release procedure.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import typer

from workers.cli.base import EXIT_OK, EXIT_RUN_NOT_COMPLETED, _with_client, app, err, out

if TYPE_CHECKING:  # each command imports what it uses (workers.versioning loads the SDK's worker)
    from temporalio.client import Client

NO_DEPLOYMENT = (
    "error: no versioned worker has polled yet: start workers with AGENT_WORKER_VERSIONING=true "
    "(docs/upgrades.md)"
)
versions_app = typer.Typer(help="Worker Versioning: builds, the runs on each, ramp and roll back.")
app.add_typer(versions_app, name="versions")


async def overview(client: Client) -> dict[str, Any]:
    """:func:`workers.versioning.describe` plus ``runs`` and ``run_ids`` for every version."""
    from workers import versioning

    desc = await versioning.describe(client)
    for v in desc["versions"]:
        v["runs"], v["run_ids"] = await versioning.runs_on(client, v["build_id"])
    return desc


@versions_app.callback(invoke_without_command=True)
def list_cmd(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="print JSON only"),
) -> None:
    """List the versions of deployment agent-runtime and the runs open on each."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table
    from temporalio.service import RPCError, RPCStatusCode

    async def go(client: Client) -> int:
        try:
            d = await overview(client)
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:
                raise
            err.print(NO_DEPLOYMENT, markup=False, highlight=False)
            return EXIT_RUN_NOT_COMPLETED
        if as_json:
            sys.stdout.write(json.dumps(d) + "\n")
            return EXIT_OK
        ramp = f", ramping {d['ramping']} at {d['ramp_percent']:g}%" if d["ramping"] else ""
        out.print(
            f"deployment {d['deployment']}: current {d['current'] or 'unversioned'}{ramp}",
            highlight=False,
        )
        t = Table("build", "status", "open runs", "some of them")
        for v in d["versions"]:
            t.add_row(v["build_id"], v["status"], str(v["runs"]), ", ".join(v["run_ids"][:3]))
        out.print(t)
        return EXIT_OK

    raise typer.Exit(_with_client(go))


@versions_app.command("ramp")
def ramp_cmd(
    build: str = typer.Argument(..., help="the build id to ramp"),
    percent: float = typer.Argument(..., min=0, max=100, help="share of new runs, 0-100"),
) -> None:
    """Send PERCENT of new runs to BUILD (the rest to the current version)."""
    from workers import versioning

    async def go(client: Client) -> int:
        await versioning.set_ramp(client, build, percent)
        out.print(f"ramping {build} at {percent:g}%", highlight=False)
        return EXIT_OK

    raise typer.Exit(_with_client(go))


@versions_app.command("current")
def current_cmd(build: str = typer.Argument(..., help="the build id to make current")) -> None:
    """Make BUILD the current version: every new run starts on it."""
    from workers import versioning

    async def go(client: Client) -> int:
        await versioning.set_current(client, build)
        out.print(f"current version: {build}", highlight=False)
        return EXIT_OK

    raise typer.Exit(_with_client(go))


@versions_app.command("rollback")
def rollback_cmd(
    build: str | None = typer.Argument(None, help="default: the previous version"),
) -> None:
    """End any ramp and make BUILD (default: the previous version) current again."""
    from workers import versioning

    async def go(client: Client) -> int:
        try:
            target = await versioning.rollback(client, build)
        except ValueError as e:
            err.print(f"error: {e}", markup=False, highlight=False)
            return EXIT_RUN_NOT_COMPLETED
        out.print(f"rolled back: current version {target}", highlight=False)
        return EXIT_OK

    raise typer.Exit(_with_client(go))
