"""Memory tools for the model: ``search_memory`` and ``remember`` (docs/memory.md).

The namespace never comes from the model: the tenant is the run's, the scope the run's principal
(``user:<principal_id>``) and thread (``thread:<workflow id>``). ``remember`` writes one fact to
the user's scope, once per tool call (the call's idempotency key), with the run, turn and call as
provenance, and not at all when a live item of that scope has the same text (whitespace
normalised): the model is then told "already remembered as <id>". A text holding a secret (a
value the run's redactor knows: ``OPENAI_API_KEY``, the spec's ``secrets``...) is refused, as
consolidation drops such a fact: the run's secret values never reach the store. Both run under
the run's policy like any tool (``remember`` is a write: it asks for approval under ``by_risk``
unless the spec allows it).
"""

from __future__ import annotations

from activities import redaction
from activities.memory.items import MemoryItem, Namespace, Provenance, scope, storable
from activities.memory.store_url import default_store
from activities.tools.registry import ToolContext, ToolError, tool


def _namespaces(ctx: ToolContext) -> list[Namespace]:
    out = [Namespace(tenant_id=ctx.tenant_id, scope=scope("user", ctx.principal_id))]
    if ctx.run_id:
        out.append(Namespace(tenant_id=ctx.tenant_id, scope=scope("thread", ctx.run_id)))
    return out


@tool
def search_memory(ctx: ToolContext, query: str, limit: int = 5) -> str:
    """Search what was remembered about this user and this conversation.

    Args:
        ctx: the call's context (injected, not sent by the model).
        query: what to look for, in words.
        limit: at most this many items (1 to 20).
    """
    if not query.strip():
        raise ToolError("query is empty")
    hits = default_store().search(_namespaces(ctx), query, max(1, min(20, limit)))
    if not hits:
        return "no memory matches"
    return "\n".join(f"[{h.item.id}] {h.item.text}" for h in hits)


@tool(risk="write")
def remember(ctx: ToolContext, text: str) -> str:
    """Remember one fact about the user for later runs.

    Args:
        ctx: the call's context (injected, not sent by the model).
        text: the fact, one short sentence.
    """
    text = text.strip()
    if not text or len(text) > 2000:
        raise ToolError("text must be 1 to 2000 characters")
    if not storable(text):
        raise ToolError("text holds a NUL or a lone surrogate: write plain text")
    if redaction.current().contains(text):
        raise ToolError("text holds a secret of this run: not remembered")
    new = MemoryItem(
        namespace=Namespace(tenant_id=ctx.tenant_id, scope=scope("user", ctx.principal_id)),
        text=text,
        provenance=Provenance(
            run_id=ctx.run_id or None, turn=ctx.turn, tool_call_id=ctx.call_id or None
        ),
        idempotency_key=ctx.idempotency_key or None,
    )
    item = default_store().put(new)
    retry = new.idempotency_key is not None and item.idempotency_key == new.idempotency_key
    if item.id != new.id and not retry:
        return f"already remembered as {item.id}"
    return f"remembered as {item.id}"
