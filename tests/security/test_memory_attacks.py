"""The memory tools under a model's (or a prompt injection's) arguments: secrets it tries to
store, text JSON allows but no store takes (a lone surrogate), and the consolidation model's
facts of that kind. Each is a named tool error or dropped, never a crash the activity retries."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from activities.memory import MemoryItem, Namespace
from activities.memory.consolidation import _facts
from activities.memory.store_url import configure, default_store
from activities.redaction import redacting
from activities.tools.memory_tools import remember, search_memory
from activities.tools.registry import REGISTRY, ToolContext, ToolError

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ToolContext:
    configure(f"sqlite:///{tmp_path}/memory.db")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return ToolContext(
        workspace=tmp_path, run_id="run-1", tenant_id="acme", principal_id="ann",
        idempotency_key="run-1/1/c1",
    )  # fmt: skip


def stored(ctx: ToolContext) -> list[str]:
    ns = Namespace(tenant_id=ctx.tenant_id, scope=f"user:{ctx.principal_id}")
    return [i.text for i in default_store().list(ns)]


def test_a_secret_the_model_tries_to_remember_is_refused(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
):
    with pytest.raises(ToolError, match="secret"):
        remember(ctx, f"the user's API key is {SECRET}")
    monkeypatch.setenv("ACME_TOKEN", "acme-token-77889900")
    with redacting(["ACME_TOKEN"]), pytest.raises(ToolError, match="secret"):
        remember(ctx, "their token: acme-token-77889900")  # a secret the spec lists
    assert remember(ctx, "The user prefers tea.").startswith("remembered as")
    assert stored(ctx) == ["The user prefers tea."]


def test_lone_surrogates_are_tool_errors_not_crashes(ctx: ToolContext):
    remember(ctx, "The user lives in Lyon.")
    for name, args in [
        ("remember", '{"text": "\\ud800 lives in Lyon"}'),
        ("search_memory", '{"query": "\\ud800 Lyon"}'),
    ]:
        out = asyncio.run(REGISTRY.invoke(name, args, ctx))  # raised before: retried, then failed
        assert out.status == ("error" if name == "remember" else "ok"), out
    assert "Lyon" in search_memory(ctx, "\udcff Lyon")
    assert "Lyon" in search_memory(ctx, "where " * 200_000 + "Lyon")  # long: cut, still found


def test_a_consolidation_fact_no_store_takes_is_dropped():
    bad = "\ud800 the user likes tea"
    with pytest.raises(ValueError):  # what the activity would hit at every retry
        MemoryItem(namespace=Namespace(tenant_id="t", scope="user:u"), text=bad)
    answer = json.dumps({"facts": [{"text": bad}, {"text": "The user likes green tea."}]})
    assert [f["text"] for f in _facts(answer)] == ["The user likes green tea."]
