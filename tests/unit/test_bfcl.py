"""BFCL through the runtime: the dataset, its tools' schemas, the raw path's table (issue #40)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from activities.evals.contracts import (
    RunFacts,
)
from activities.evals.dataset import load_dataset
from bench.bfcl_dataset import expected_args, json_schema, openai_function, tool_name


def _run(output: str = "", calls: list[tuple[str, dict]] | None = None, **kw) -> RunFacts:
    tc = [{"name": n, "arguments": a, "status": "ok"} for n, a in calls or []]
    return RunFacts(status=kw.pop("status", "completed"), output=output, tool_calls=tc, **kw)


def test_bfcl_conversion() -> None:
    schema = json_schema(
        {
            "type": "dict",
            "properties": {
                "r": {"type": "float", "optional": True},
                "xs": {"type": "tuple", "items": {"type": "any"}},
            },
            "required": ["xs"],
        }
    )
    assert schema == {
        "type": "object",
        "properties": {"r": {"type": "number"}, "xs": {"type": "array", "items": {}}},
        "required": ["xs"],
    }
    assert tool_name("math.factorial") == "math_factorial"
    assert expected_args({"a": [5], "b": ["", 0], "c": [""], "d": [1, 2]}) == {
        "a": 5,
        "b": {"one_of": [0], "optional": True},
        "d": {"one_of": [1, 2], "optional": False},
    }


def test_bfcl_tools_record_calls_and_check_required_arguments() -> None:
    from activities.tools import REGISTRY, ToolContext
    from activities.tools.bfcl import NAMES

    assert "calculate_triangle_area" in NAMES
    ok = asyncio.run(
        REGISTRY.invoke(
            "calculate_triangle_area", {"base": 10, "height": 5}, ToolContext(workspace=Path("."))
        )
    )
    assert ok.status == "ok" and json.loads(ok.content)["arguments"] == {"base": 10, "height": 5}
    bad = asyncio.run(
        REGISTRY.invoke("calculate_triangle_area", {"base": 10}, ToolContext(workspace=Path(".")))
    )
    assert bad.status == "error" and "height" in bad.content


def test_checked_in_bfcl_dataset_loads() -> None:
    from pathlib import Path

    ds = load_dataset(Path(__file__).resolve().parents[2] / "evals" / "bfcl" / "cases.jsonl")
    assert len(ds.cases) == 30 and {c.metadata["category"] for c in ds.cases} == {
        "simple_python",
        "multiple",
    }
    assert all(c.expected_tool_calls and c.metadata["tools"] for c in ds.cases)
    live = load_dataset(
        Path(__file__).resolve().parents[2] / "evals" / "bfcl" / "live_multiple.jsonl"
    )
    assert len(live.cases) == 15 and {c.metadata["category"] for c in live.cases} == {
        "live_multiple"
    }
    assert all(c.expected_tool_calls and len(c.metadata["tools"]) > 1 for c in live.cases)


def test_bfcl_functions_are_offered_as_bfcl_offers_them_to_openai_models() -> None:
    """BFCL's convert_to_tool (GORILLA_TO_OPENAPI) after its Python hint: keys kept in place."""
    doc = {
        "name": "geo.distance",
        "description": "Distance.",
        "parameters": {
            "type": "dict",
            "required": ["a"],
            "properties": {
                "a": {"type": "float", "description": "A."},
                "b": {"type": "any", "description": "B.", "default": ""},
                "c": {"type": "array", "items": {"type": "float"}, "description": "C."},
                "d": {"type": "dict", "properties": {"e": {"type": "tuple", "description": ""}}},
                "f": {"type": "string", "enum": ["x", "y"], "description": "F."},
            },
        },
    }
    got = openai_function(doc)
    assert got == {
        "name": "geo_distance",
        "description": "Distance. Note that the provided function is in Python 3 syntax.",
        "parameters": {
            "type": "object",
            "required": ["a"],
            "properties": {
                "a": {
                    "type": "number",
                    "description": "A. This is a float type value.",
                    "format": "float",
                },
                "b": {"type": "string", "description": "B.", "default": ""},
                "c": {"type": "array", "items": {"type": "number"}, "description": "C."},
                "d": {"type": "object", "properties": {"e": {"type": "array", "description": ""}}},
                "f": {"type": "string", "enum": ["x", "y"], "description": "F."},
            },
        },
    }
    assert list(got["parameters"]) == ["type", "required", "properties"]  # BFCL's order
    assert doc["parameters"]["type"] == "dict"  # the source doc is left as it was


def test_the_registry_offers_each_bfcl_function_as_the_raw_path_does() -> None:
    """The schema a run sends for every BFCL function is the raw request's, byte for byte."""
    from activities.tools import REGISTRY
    from activities.tools.bfcl import NAMES
    from bench.bfcl_raw import load_functions

    functions = load_functions()
    assert sorted(NAMES) == sorted(functions)
    for info in REGISTRY.infos(NAMES):
        raw = {"type": "function", "function": functions[info.name]}
        assert json.dumps(info.openai_schema()) == json.dumps(raw), info.name


def test_a_run_offers_its_case_tools_in_the_case_order() -> None:
    from activities.contracts import ToolInfo
    from activities.runtime import only_tools

    tools = [ToolInfo(name=n, description="", parameters={}) for n in ("a", "b", "c")]
    assert [t.name for t in only_tools(tools, ["c", "a", "c"], "x")] == ["c", "a"]
    assert [t.name for t in only_tools(tools, None, "x")] == ["a", "b", "c"]


def test_bfcl_gap_table_prints_the_gap_per_category_or_why_nothing_was_measured() -> None:
    from rich.console import Console

    from bench.bfcl_gap import table_bfcl_gap

    def shown(r: dict) -> str:
        con = Console(width=200, record=True)
        con.print(table_bfcl_gap(r))
        return con.export_text()

    rows = [
        {"category": "multiple", "cases": 4, "raw": 3, "runtime": 2, "gap": -1},
        {"category": "all", "cases": 4, "raw": 3, "runtime": 2, "gap": -1},
    ]
    out = shown({"rows": rows})
    assert "multiple" in out and "3 (75%)" in out and "2 (50%)" in out and "-1" in out
    assert "no model server" in shown({"skipped": "no model server at http://x"})
