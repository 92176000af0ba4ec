"""The console's memory handlers: what runs remember about you, and deleting one of your items.

``GET /api/memory?tenant=T&q=...`` and ``POST /api/memory/{item_id}/delete`` (docs/memory.md);
only the person's own ``user:<principal>`` scope. :mod:`workers.console.serve` re-exports
:class:`MemoryDeleteBody`.
"""

from __future__ import annotations

import json

from aiohttp import web
from pydantic import BaseModel

from workers.config import load_settings
from workers.console import auth as ca
from workers.console.common import _body, _error, _who

__all__ = ["MemoryDeleteBody"]


class MemoryDeleteBody(BaseModel):
    """Body of ``POST /api/memory/{item_id}/delete``."""

    tenant_id: str | None = None


def _memory_tenant(ident: ca.Identity, asked: str | None) -> str:
    """The tenant whose memory the person asks for: ``asked``, or their only one, or default.

    Raises:
        web.HTTPNotFound: a tenant that is not theirs (as if it had no memory at all).
    """
    mine = sorted(t for t in ident.tenants if t != "*")
    tenant = asked or (mine[0] if len(mine) == 1 else "default")
    if not ident.may_see(tenant):
        raise web.HTTPNotFound(
            text=json.dumps({"error": "no such memory"}), content_type="application/json"
        )
    return tenant


async def _memory(request: web.Request) -> web.Response:
    """``GET /api/memory?tenant=T&q=...``: what runs remember about the person.

    Their own ``user:<principal>`` scope, newest first, or the best matches of ``q``.
    """
    from activities.memory import Namespace, open_store

    ident = _who(request)
    tenant = _memory_tenant(ident, request.query.get("tenant"))
    ns = Namespace(tenant_id=tenant, scope=f"user:{ident.principal_id}")
    store = open_store(load_settings().memory_store_url)
    q = request.query.get("q", "").strip()
    items = [h.item for h in store.search([ns], q, 20)] if q else store.list(ns, limit=50)
    return web.json_response(
        {
            "tenant_id": tenant,
            "scope": ns.scope,
            "items": [i.model_dump(mode="json") for i in items],
        },
        headers={"Cache-Control": "no-store"},
    )


async def _memory_delete(request: web.Request) -> web.Response:
    """``POST /api/memory/{item_id}/delete``: delete one of the person's own items for real.

    Logged in ``memory-audit.jsonl`` with the principal.
    """
    from activities.memory import open_store
    from workers.console import memory_audit

    body = await _body(request, MemoryDeleteBody)
    ident = _who(request)
    tenant = _memory_tenant(ident, body.tenant_id)
    settings = load_settings()
    store = open_store(settings.memory_store_url)
    item = store.get(tenant, request.match_info["item_id"])
    if item is None or item.namespace.scope != f"user:{ident.principal_id}":
        return _error(404, "no such memory item of yours")
    store.delete(tenant, item.id)
    memory_audit.record(settings.state_dir, "deleted", tenant, item, ident.principal_id)
    return web.json_response({"deleted": item.id})
