"""``remember`` with text a model can send in JSON but a store cannot take (a NUL, which
PostgreSQL refuses in text, or a lone surrogate): a tool error the model reads, on both backends,
not a database error the activity retries (tests/security/test_memory_attacks.py has the rest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.memory import Namespace
from activities.memory.store_url import configure, default_store
from activities.tools.memory_tools import remember
from activities.tools.registry import ToolContext, ToolError


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_text_no_store_takes_is_a_tool_error(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
):
    url = (
        request.getfixturevalue("postgres_url")
        if backend == "postgres"
        else f"sqlite:///{tmp_path}/m.db"
    )
    configure(url)
    ctx = ToolContext(workspace=tmp_path, run_id="r", tenant_id="t", principal_id="ann")
    for text in ["Ann's PIN hint\x00 is her cat", "\ud800 Ann likes tea"]:
        with pytest.raises(ToolError, match="NUL or a lone surrogate"):
            remember(ctx, text)
    assert remember(ctx, "Ann likes tea.").startswith("remembered as")
    ns = Namespace(tenant_id="t", scope="user:ann")
    assert [i.text for i in default_store().list(ns)] == ["Ann likes tea."]
