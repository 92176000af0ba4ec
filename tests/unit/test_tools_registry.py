"""The tool registry: invoking tools (validation, errors, threads, truncation) and loading tool modules (activities/tools/registry.py)."""

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from activities.contracts import ToolOutcome
from activities.tools import (
    REGISTRY,
    ToolArgumentsError,
    ToolContext,
    ToolError,
    ToolModuleImportError,
    UnknownToolError,
    load_tool_modules,
    tool,
)

# --------------------------------------------------------------------------- invoke


@pytest.fixture
def adder(reg):
    @tool(registry=reg)
    def add(a: int, b: int = 2) -> int:
        """Add two numbers.

        Args:
            a: first number.
            b: second number.
        """
        return a + b

    return reg


async def test_invoke_ok_records_arguments(adder, ctx):
    out = await adder.invoke("add", '{"a": 3}', ctx, 100)
    assert isinstance(out, ToolOutcome)
    assert (out.status, out.content, out.call_id, out.name) == ("ok", "5", "call-1", "add")
    assert out.arguments == {"a": 3, "b": 2}
    assert out.output_chars == 1 and not out.truncated
    out = await adder.invoke("add", {"a": 1, "b": 1}, ctx, 100)  # a dict edited at approval
    assert out.content == "2"


async def test_invoke_validation_errors(adder, ctx):
    out = await adder.invoke("add", '{"a": "many", "c": 1}', ctx, 1000)
    assert out.status == "error"
    assert "- a: Input should be a valid integer" in out.content
    assert "- c: Extra inputs are not permitted" in out.content
    assert "a (integer, required), b (integer)" in out.content
    assert out.arguments == {"a": "many", "c": 1}
    out = await adder.invoke("add", "{}", ctx, 1000)
    assert "- a: Field required" in out.content


async def test_invoke_malformed_and_non_object_json(adder, ctx):
    out = await adder.invoke("add", '{"a": 1,', ctx, 1000)
    assert out.status == "error" and out.arguments is None
    assert "not valid JSON" in out.content and "line 1 column" in out.content
    assert "valid JSON object" in out.content
    out = await adder.invoke("add", "[1, 2]", ctx, 1000)
    assert out.status == "error" and "must be a JSON object, not list" in out.content
    out = await adder.invoke("add", json.dumps('{"a": 4}'), ctx, 1000)  # encoded twice: accepted
    assert (out.status, out.content) == ("ok", "6")


async def test_invoke_unknown_tool(adder, ctx):
    out = await adder.invoke("subtract", "{}", ctx, 1000)
    assert out.status == "error"
    assert "unknown tool 'subtract'" in out.content and "Available tools: add" in out.content


async def test_tool_error_vs_infrastructure_error(reg, ctx):
    @tool(registry=reg)
    def refuse() -> str:
        """Refuse."""
        raise ToolError("not today")

    @tool(registry=reg)
    def crash() -> str:
        """Crash."""
        raise ConnectionError("database down")

    out = await reg.invoke("refuse", "{}", ctx, 1000)
    assert (out.status, out.content) == ("error", "Error: not today")
    with pytest.raises(ConnectionError, match="database down"):
        await reg.invoke("crash", "{}", ctx, 1000)


async def test_sync_runs_in_thread_async_awaited_ctx_injected(reg, ctx):
    main = threading.get_ident()

    @tool(registry=reg)
    def where(ctx: ToolContext) -> dict:
        """Where am I."""
        return {"thread": threading.get_ident() != main, "run": ctx.run_id, "ws": ctx.workspace}

    @tool(registry=reg)
    async def nap(seconds: float) -> str:
        """Sleep.

        Args:
            seconds: how long.
        """
        await asyncio.sleep(seconds)
        return "rested"

    out = await reg.invoke("where", "", ctx, 1000)
    assert json.loads(out.content) == {"thread": True, "run": "run-1", "ws": str(ctx.workspace)}
    out = await reg.invoke("nap", '{"seconds": 0.05}', ctx, 1000)
    assert out.content == "rested"
    assert 40 <= out.duration_ms < 5000


async def test_truncation(reg, ctx):
    @tool(registry=reg)
    def big() -> str:
        """Big."""
        return "x" * 1000

    out = await reg.invoke("big", "{}", ctx, 100)
    assert out.truncated and out.output_chars == 1000
    assert out.content == "x" * 100 + "\n[... output truncated: 1000 characters in all, 100 shown]"
    out = await reg.invoke("big", "{}", ctx, 1000)
    assert not out.truncated and out.content == "x" * 1000
    with pytest.raises(ValueError):
        await reg.invoke("big", "{}", ctx, 0)


# --------------------------------------------------------------------------- tool modules


def test_load_tool_modules(tmp_path, monkeypatch):
    monkeypatch.setattr(REGISTRY, "_tools", dict(REGISTRY._tools))
    (tmp_path / "my_test_tools.py").write_text(
        "from activities.tools import tool\n\n"
        "@tool\n"
        "def shout(text: str) -> str:\n"
        '    """Shout.\n\n    Args:\n        text: what to shout.\n    """\n'
        "    return text.upper()\n"
    )
    (tmp_path / "broken_test_tools.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("my_test_tools", "broken_test_tools"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    mods = load_tool_modules(" my_test_tools , ")
    assert [m.__name__ for m in mods] == ["my_test_tools"]
    assert REGISTRY.info("shout").parameters["properties"]["text"]["description"] == (
        "what to shout."
    )
    with pytest.raises(ToolModuleImportError, match="no_such_tools_module") as info:
        load_tool_modules(["my_test_tools", "no_such_tools_module"])
    assert isinstance(info.value, ImportError) and info.value.name == "no_such_tools_module"
    with pytest.raises(ImportError, match="broken_test_tools.*boom"):
        load_tool_modules(["broken_test_tools"])


def test_tool_argument_error_types():
    assert issubclass(ToolArgumentsError, ToolError) and issubclass(UnknownToolError, ToolError)
    assert ToolContext(workspace=Path(".")).workspace == Path(os.getcwd()).resolve()


async def test_parameter_names_that_shadow_pydantic(reg, ctx):
    @tool(registry=reg)
    def odd(schema: str, json: int = 1) -> str:
        """Odd names.

        Args:
            schema: a schema name.
            json: a number.
        """
        return f"{schema}-{json}"

    params = reg.info("odd").parameters
    assert list(params["properties"]) == ["schema", "json"] and params["required"] == ["schema"]
    out = await reg.invoke("odd", '{"schema": "s", "json": 5}', ctx, 100)
    assert (out.content, out.arguments) == ("s-5", {"schema": "s", "json": 5})
    reg.info("odd").parameters["properties"].clear()  # infos are copies
    assert reg.info("odd").parameters["properties"]
