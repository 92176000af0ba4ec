"""``agentctl memory list|search|show|edit|delete``: people see and correct what agents remember.

Every command names the tenant (``--tenant``, default ``default``); list and search name one
scope: ``--principal P`` (``user:P``), ``--agent A`` (``agent:A``) or ``--thread RUN_ID``. People's
deletes are real deletes and are logged (event ``memory_deleted`` in the audit log,
``<AGENT_STATE_DIR>/memory-audit.jsonl``, with who, when and the item). ``--json`` prints JSON only.
"""

from __future__ import annotations

import getpass
import json
from typing import TYPE_CHECKING

import typer

from workers.cli.base import CommandFailed, app, cli_settings

if TYPE_CHECKING:  # the store loads when a memory command runs, not with every command
    from activities.memory import MemoryItem, Namespace

memory_app = typer.Typer(no_args_is_help=True, help="What agents remember: list, search, fix.")
app.add_typer(memory_app, name="memory")

TENANT = typer.Option("default", "--tenant", help="tenant of the items")
JSON = typer.Option(False, "--json", help="print JSON only")


def _store():  # noqa: ANN202 - the protocol type
    from activities.memory import open_store

    return open_store(cli_settings().memory_store_url)


def _namespace(
    tenant: str, principal: str | None, agent: str | None, thread: str | None
) -> Namespace:
    from activities.memory import Namespace

    given = [(k, v) for k, v in (("user", principal), ("agent", agent), ("thread", thread)) if v]
    if len(given) != 1:
        raise typer.BadParameter("name exactly one of --principal, --agent, --thread")
    kind, ident = given[0]
    return Namespace(tenant_id=tenant, scope=f"{kind}:{ident}")


def _print(items: list[MemoryItem], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([i.model_dump(mode="json") for i in items], indent=2))
        return
    for i in items:
        closed = f"  (superseded by {i.superseded_by})" if i.superseded_by else ""
        typer.echo(f"{i.id}  {i.namespace.scope}  {i.text}{closed}")
    if not items:
        typer.echo("no items")


@memory_app.command("list")
def list_items(
    tenant: str = TENANT,
    principal: str | None = typer.Option(None, "--principal", help="the namespace user:PRINCIPAL"),
    agent: str | None = typer.Option(None, "--agent", help="the namespace agent:AGENT"),
    thread: str | None = typer.Option(None, "--thread", help="the namespace thread:THREAD"),
    all_: bool = typer.Option(False, "--all", help="superseded items too"),
    as_json: bool = JSON,
) -> None:
    """Items of one namespace, newest first."""
    ns = _namespace(tenant, principal, agent, thread)
    _print(_store().list(ns, include_superseded=all_), as_json)


@memory_app.command("search")
def search(
    query: str,
    tenant: str = TENANT,
    principal: str | None = typer.Option(None, "--principal", help="the namespace user:PRINCIPAL"),
    agent: str | None = typer.Option(None, "--agent", help="the namespace agent:AGENT"),
    thread: str | None = typer.Option(None, "--thread", help="the namespace thread:THREAD"),
    limit: int = typer.Option(5, "--limit", help="at most this many items"),
    as_json: bool = JSON,
) -> None:
    """Hybrid search in one namespace (what a model step would be given)."""
    ns = _namespace(tenant, principal, agent, thread)
    _print([h.item for h in _store().search([ns], query, limit)], as_json)


@memory_app.command("show")
def show(item_id: str, tenant: str = TENANT, as_json: bool = JSON) -> None:
    """One item with its provenance."""
    item = _store().get(tenant, item_id)
    if item is None:
        raise CommandFailed(f"no memory item {item_id} in tenant {tenant}")
    typer.echo(item.model_dump_json(indent=2) if as_json else item.model_dump_json(indent=2))


def _audit(action: str, tenant: str, item: MemoryItem, **extra: str) -> None:
    from workers.console import memory_audit

    memory_audit.record(cli_settings().state_dir, action, tenant, item, getpass.getuser(), **extra)


@memory_app.command("edit")
def edit(item_id: str, text: str, tenant: str = TENANT) -> None:
    """Correct an item's text (people only; logged)."""
    try:
        before = _store().get(tenant, item_id)
        item = _store().edit(tenant, item_id, text)
    except KeyError:
        raise CommandFailed(f"no live memory item {item_id} in tenant {tenant}") from None
    if before is not None:
        _audit("edited", tenant, before, new_text=text)
    typer.echo(f"edited {item.id}")


@memory_app.command("delete")
def delete(item_id: str, tenant: str = TENANT) -> None:
    """Delete an item for real (people only; logged)."""
    item = _store().get(tenant, item_id)
    if item is None or not _store().delete(tenant, item_id):
        raise CommandFailed(f"no memory item {item_id} in tenant {tenant}")
    _audit("deleted", tenant, item)
    typer.echo(f"deleted {item_id}")
