"""Reading the spec file: parsed once per change of the file, never shared between callers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities.spec import SpecError, load_spec_file, resolve_agent


def test_an_edited_spec_file_is_read_again(tmp_path: Path) -> None:
    p = tmp_path / "agents.yml"
    p.write_text("agents:\n  a:\n    model: m1\n")
    assert resolve_agent(p, "a", "d").model == "m1"
    p.write_text("agents:\n  a:\n    model: m2\n")  # same size, a later modification time
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert resolve_agent(p, "a", "d").model == "m2"


def test_callers_get_their_own_copy(tmp_path: Path) -> None:
    p = tmp_path / "agents.yml"
    p.write_text("agents:\n  a:\n    tools: [calculator]\n")
    first = load_spec_file(p)
    first["agents"]["a"]["tools"].append("shell")
    first["agents"]["b"] = {}
    assert load_spec_file(p) == {"agents": {"a": {"tools": ["calculator"]}}}


def test_a_file_that_breaks_is_reported_not_served_from_memory(tmp_path: Path) -> None:
    p = tmp_path / "agents.yml"
    p.write_text("agents:\n  a: {}\n")
    assert load_spec_file(p) == {"agents": {"a": {}}}
    p.write_text("agents: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec_file(p)
    p.unlink()
    with pytest.raises(SpecError, match="not found"):
        load_spec_file(p)
