import asyncio
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from activities.contracts import ToolInfo, ToolOutcome
from activities.tools import (
    LEDGER_DIR,
    REGISTRY,
    ToolArgumentsError,
    ToolContext,
    ToolError,
    ToolModuleImportError,
    ToolRegistry,
    UnknownToolError,
    load_tool_modules,
    parse_docstring,
    resolve_in_workspace,
    run_once,
    tool,
)
from activities.tools.ledger import ledger_path

# --------------------------------------------------------------------------- helpers


def _keys(node, found=None):
    """All dict keys of a JSON value, except property names under ``properties``."""
    found = set() if found is None else found
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "properties":
                for sub in v.values():
                    _keys(sub, found)
            else:
                found.add(k)
                _keys(v, found)
    elif isinstance(node, list):
        for x in node:
            _keys(x, found)
    return found


@pytest.fixture
def reg():
    return ToolRegistry()


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def ctx(ws):
    return ToolContext(workspace=ws, run_id="run-1", turn=2, call_id="call-1")


async def run(name, args, ctx, max_output_chars=16_000):
    if not isinstance(args, str):
        args = json.dumps(args)
    return await REGISTRY.invoke(name, args, ctx, max_output_chars)


async def ok(name, args, ctx, **kw):
    out = await run(name, args, ctx, **kw)
    assert out.status == "ok", out.content
    return out.content


async def err(name, args, ctx, **kw):
    out = await run(name, args, ctx, **kw)
    assert out.status == "error", out.content
    assert out.content.startswith("Error: ")
    return out.content


# --------------------------------------------------------------------------- schemas


def test_schema_from_hints_and_docstring(reg):
    @tool(registry=reg, timeout_seconds=5, max_attempts=2, risk="write")
    def greet(
        ctx: ToolContext, name: str, times: int = 1, title: str | None = None, loud: bool = False
    ) -> str:
        """Greet someone by name.

        Says hello, possibly several
        times.

        Args:
            ctx: injected.
            name: who to greet.
            times (int): how many times,
                at least one.
            title: an optional title.

        Returns:
            The greeting.
        """
        return "hi"

    info = reg.info("greet")
    assert isinstance(info, ToolInfo)
    assert info.description == "Greet someone by name.\n\nSays hello, possibly several times."
    assert (info.timeout_seconds, info.max_attempts, info.risk) == (5, 2, "write")
    params = info.parameters
    assert params["type"] == "object"
    assert params["additionalProperties"] is False
    assert list(params["properties"]) == ["name", "times", "title", "loud"]
    assert params["required"] == ["name"]
    assert params["properties"]["name"] == {"type": "string", "description": "who to greet."}
    assert params["properties"]["times"]["description"] == "how many times, at least one."
    assert params["properties"]["times"]["default"] == 1
    # Optional collapses to its type; a property literally named "title" survives title-stripping.
    assert params["properties"]["title"] == {"type": "string", "description": "an optional title."}
    assert "description" not in params["properties"]["loud"]
    assert "title" not in _keys(params)
    assert "ctx" not in params["properties"]
    assert greet(None, "x") == "hi"  # the decorated function stays callable
    assert greet.__tool__.context_param == "ctx"


def test_bare_decorator_registers_in_default_registry_and_defaults():
    info = REGISTRY.info("calculator")
    assert (info.timeout_seconds, info.max_attempts, info.risk) == (30.0, 3, "read")
    assert REGISTRY.info("write_file").risk == "write"
    assert {"calculator", "list_files", "read_file", "search_files", "write_file"} <= set(
        REGISTRY.names()
    )
    for name in REGISTRY.names():
        schema = REGISTRY.info(name).openai_schema()
        assert schema["function"]["description"]
        assert "title" not in _keys(schema["function"]["parameters"])
        for prop in schema["function"]["parameters"]["properties"].values():
            assert prop.get("description"), (name, prop)


def test_parse_docstring_sections():
    desc, args = parse_docstring(
        """Do a thing.

        Args:
            a: first.
            b (list[int]): second,
                continued.

        Raises:
            ToolError: never.
        """
    )
    assert desc == "Do a thing."
    assert args == {"a": "first.", "b": "second, continued."}


def test_tool_definition_errors(reg):
    def untyped(x):
        """No hints."""

    with pytest.raises(TypeError, match="needs a type hint"):
        reg.register(untyped)

    def star(*args: int) -> None:
        """Varargs."""

    with pytest.raises(TypeError, match="plain keyword"):
        reg.register(star)

    def a(x: int) -> int:
        """A."""
        return x

    def b(x: int) -> int:
        """B."""
        return x

    reg.register(tool(a, name="same", registry=ToolRegistry()))
    with pytest.raises(ValueError, match="already registered"):
        reg.register(tool(b, name="same", registry=ToolRegistry()))
    reg.register(a)  # re-registering the same function is allowed
    assert reg.names() == ["same"]


def test_infos_unknown_names(reg):
    @tool(registry=reg)
    def alpha() -> str:
        """Alpha."""
        return "a"

    assert [i.name for i in reg.infos(["alpha"])] == ["alpha"]
    with pytest.raises(UnknownToolError, match=r"nope, zap.*Available tools: alpha"):
        reg.infos(["alpha", "nope", "zap"])
    with pytest.raises(UnknownToolError):
        reg.info("nope")


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


# --------------------------------------------------------------------------- calculator


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** 10", "1024"),
        ("-(+3)", "-3"),
        ("sqrt(16) + abs(-2)", "6"),
        ("round(pi, 3)", "3.142"),
        ("max(1, 5, 3) - min(4, 2)", "3"),
        ("log(e)", "1"),
        ("0.1 + 0.2", "0.3"),
    ],
)
async def test_calculator_values(ctx, expr, expected):
    assert await ok("calculator", {"expression": expr}, ctx) == expected


async def test_calculator_trig(ctx):
    assert math.isclose(float(await ok("calculator", {"expression": "sin(pi / 2)"}, ctx)), 1.0)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("math.sqrt(4)", "no math.sqrt"),
        ("(1).real", "attribute access"),
        ("x + 1", "unknown name 'x'"),
        ("'a' * 3", "only numbers"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("2 ** 100000", "exponent"),
        ("9 ** 9999", "too large"),
        ("(10 ** 3000) * (10 ** 3000)", "too large"),
        ("10.0 ** 400", "too large"),
        ("2 ^ 3", "**"),
        ("sqrt(-1)", "math error"),
        ("1 +", "invalid expression"),
        ("[1, 2]", "List is not allowed"),
        ("lambda: 1", "not allowed"),
    ],
)
async def test_calculator_rejects(ctx, expr, message):
    assert message in await err("calculator", {"expression": expr}, ctx)


# --------------------------------------------------------------------------- workspace


@pytest.fixture
def tree(ws, tmp_path):
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "main.py").write_text("import os\n\ndef main():\n    print('Hello')\n")
    (ws / "src" / "pkg" / "util.py").write_text("def helper():\n    return 'hello'\n")
    (ws / "README.md").write_text("# Demo\nSay Hello.\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("Hello from git\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("Hello secret\n")
    return outside


def test_resolve_in_workspace(ws, tree):
    assert resolve_in_workspace(ws, "src/pkg/util.py") == ws.resolve() / "src/pkg/util.py"
    assert resolve_in_workspace(ws, "src/../README.md") == ws.resolve() / "README.md"
    assert resolve_in_workspace(ws, "") == ws.resolve()
    assert resolve_in_workspace(ws, "new/dir/file.txt") == ws.resolve() / "new/dir/file.txt"
    with pytest.raises(ToolError, match="absolute paths are not allowed"):
        resolve_in_workspace(ws, str(tree / "secret.txt"))
    with pytest.raises(ToolError, match="outside the workspace"):
        resolve_in_workspace(ws, "../outside/secret.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        resolve_in_workspace(ws, "src/../../x")
    (ws / "link").symlink_to(tree)
    (ws / "src" / "filelink").symlink_to(tree / "secret.txt")
    (ws / "inner").symlink_to(ws / "src")
    with pytest.raises(ToolError, match="symlink"):
        resolve_in_workspace(ws, "link/secret.txt")
    with pytest.raises(ToolError, match="symlink"):
        resolve_in_workspace(ws, "src/filelink")
    with pytest.raises(ToolError, match="symlink"):
        resolve_in_workspace(ws, "link/new.txt")
    assert resolve_in_workspace(ws, "inner/main.py") == ws.resolve() / "src/main.py"


async def test_tools_refuse_escapes(ctx, ws, tree):
    (ws / "link").symlink_to(tree)
    assert "absolute" in await err("read_file", {"path": "/etc/passwd"}, ctx)
    assert "outside" in await err("read_file", {"path": "../outside/secret.txt"}, ctx)
    assert "symlink" in await err("read_file", {"path": "link/secret.txt"}, ctx)
    assert "symlink" in await err("list_files", {"path": "link"}, ctx)
    assert "symlink" in await err("write_file", {"path": "link/x.txt", "content": "x"}, ctx)
    assert not (tree / "x.txt").exists()


async def test_list_files(ctx, tree):
    assert await ok("list_files", {}, ctx) == "README.md\nsrc/"
    listing = await ok("list_files", {"recursive": True}, ctx)
    assert listing.splitlines() == [
        "README.md",
        "src/",
        "src/main.py",
        "src/pkg/",
        "src/pkg/util.py",
    ]  # .git is skipped
    assert await ok("list_files", {"path": "src", "pattern": "*.py", "recursive": True}, ctx) == (
        "src/main.py\nsrc/pkg/util.py"
    )
    limited = await ok("list_files", {"recursive": True, "max_entries": 2}, ctx)
    assert limited.splitlines()[:2] == ["README.md", "src/"]
    assert "3 more entries not shown" in limited
    assert "No entries" in await ok("list_files", {"pattern": "*.rs"}, ctx)
    assert "does not exist" in await err("list_files", {"path": "nope"}, ctx)
    assert "is a file" in await err("list_files", {"path": "README.md"}, ctx)
    assert "max_entries" in await err("list_files", {"max_entries": 0}, ctx)


async def test_read_file_ranges(ctx, ws):
    (ws / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 13)))
    full = await ok("read_file", {"path": "f.txt"}, ctx)
    lines = full.splitlines()
    assert lines[0] == "f.txt (12 lines), lines 1-12:"
    assert lines[1] == "   1| line 1" and lines[12] == "  12| line 12"
    part = await ok("read_file", {"path": "f.txt", "start_line": 3, "end_line": 4}, ctx)
    assert part.splitlines() == ["f.txt (12 lines), lines 3-4:", "   3| line 3", "   4| line 4"]
    tail = await ok("read_file", {"path": "f.txt", "start_line": 11, "end_line": 99}, ctx)
    assert tail.splitlines()[1:] == ["  11| line 11", "  12| line 12"]
    assert "past the end" in await err("read_file", {"path": "f.txt", "start_line": 13}, ctx)
    assert "before start_line" in await err(
        "read_file", {"path": "f.txt", "start_line": 5, "end_line": 2}, ctx
    )
    assert "start_line" in await err("read_file", {"path": "f.txt", "start_line": 0}, ctx)
    assert "not found" in await err("read_file", {"path": "missing.txt"}, ctx)
    (ws / "blob.bin").write_bytes(b"\x89PNG\x00\x00\x01")
    assert "binary" in await err("read_file", {"path": "blob.bin"}, ctx)


async def test_read_file_caps_lines(ctx, ws):
    (ws / "long.txt").write_text("x\n" * 1200)
    out = (await ok("read_file", {"path": "long.txt"}, ctx)).splitlines()
    assert out[0] == "long.txt (1200 lines), lines 1-500:"
    assert out[-1] == "[... more lines follow; read again with start_line=501]"


async def test_search_files(ctx, ws, tree):
    (ws / "link").symlink_to(tree)
    (ws / "src" / "secretlink.txt").symlink_to(tree / "secret.txt")
    out = await ok("search_files", {"query": "Hello"}, ctx)
    assert out.splitlines() == ["README.md:2: Say Hello.", "src/main.py:4: print('Hello')"]
    out = await ok("search_files", {"query": r"hel+o", "regex": True, "glob": "*.py"}, ctx)
    assert out == "src/pkg/util.py:2: return 'hello'"
    out = await ok("search_files", {"query": "def ", "path": "src/pkg"}, ctx)
    assert out == "src/pkg/util.py:1: def helper():"
    out = await ok("search_files", {"query": "def", "path": "src/main.py"}, ctx)
    assert out == "src/main.py:3: def main():"
    out = await ok("search_files", {"query": "e", "max_results": 2}, ctx)
    assert len(out.splitlines()) == 3 and "max_results=2" in out
    assert "No matches" in await ok("search_files", {"query": "zebra"}, ctx)
    assert "invalid regular expression" in await err(
        "search_files", {"query": "(", "regex": True}, ctx
    )
    assert "query" in await err("search_files", {"query": ""}, ctx)


async def test_write_file(ctx, ws):
    out = await ok("write_file", {"path": "notes/a/todo.md", "content": "one\ntwo\n"}, ctx)
    assert out == "Wrote notes/a/todo.md (8 bytes, 2 lines)."
    assert (ws / "notes/a/todo.md").read_text() == "one\ntwo\n"
    assert "already exists" in await err(
        "write_file", {"path": "notes/a/todo.md", "content": "x"}, ctx
    )
    assert (ws / "notes/a/todo.md").read_text() == "one\ntwo\n"
    # a retried attempt that finds its own content already written succeeds
    same = await ok("write_file", {"path": "notes/a/todo.md", "content": "one\ntwo\n"}, ctx)
    assert "already has this content" in same
    await ok("write_file", {"path": "notes/a/todo.md", "content": "x", "overwrite": True}, ctx)
    assert (ws / "notes/a/todo.md").read_text() == "x"
    assert "folder" in await err("write_file", {"path": "notes", "content": "x"}, ctx)
    assert "too large" in await err("write_file", {"path": "big", "content": "x" * 1_000_001}, ctx)
    assert not (ws / "big").exists()
    assert "outside" in await err("write_file", {"path": "../escape.txt", "content": "x"}, ctx)
    assert not (ws.parent / "escape.txt").exists()
    assert [p.name for p in (ws / "notes/a").iterdir()] == ["todo.md"]  # no temp files left


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


# --------------------------------------------------------------------------- idempotency


async def test_write_file_retried_call_is_applied_once(ws):
    """The same call invoked twice (as a Temporal retry would) writes once; others still write."""
    call = ToolContext(workspace=ws, run_id="wf-1", call_id="c1", idempotency_key="wf-1/c1")
    args = {"path": "out.txt", "content": "first", "overwrite": True}
    first = await ok("write_file", args, call)
    (ws / "out.txt").write_text("changed by a later call")  # then the first call is retried
    again = await ok("write_file", args, call)
    assert again == first == "Wrote out.txt (5 bytes, 1 lines)."
    assert (ws / "out.txt").read_text() == "changed by a later call"  # not applied a second time
    other = ToolContext(workspace=ws, run_id="wf-1", call_id="c2", idempotency_key="wf-1/c2")
    await ok("write_file", args, other)
    assert (ws / "out.txt").read_text() == "first"
    # a refused attempt records nothing: the retry after the cause is gone applies it
    blocked = ToolContext(workspace=ws, call_id="c3", idempotency_key="wf-1/c3")
    (ws / "dir").write_text("a file where a folder should be")
    assert "in the way" in await err("write_file", {"path": "dir/x", "content": "y"}, blocked)
    (ws / "dir").unlink()
    await ok("write_file", {"path": "dir/x", "content": "y"}, blocked)
    assert (ws / "dir/x").read_text() == "y"


async def test_ledger_is_out_of_the_tools_reach(ws):
    call = ToolContext(workspace=ws, call_id="c1", idempotency_key="wf-1/c1")
    await ok("write_file", {"path": "a.txt", "content": "x"}, call)
    assert (ws / LEDGER_DIR).is_dir()
    assert LEDGER_DIR not in await ok("list_files", {"recursive": True}, call)
    for tool_name, extra in (("read_file", {}), ("write_file", {"content": "x"})):
        msg = await err(tool_name, {"path": f"{LEDGER_DIR}/x.json", **extra}, call)
        assert "reserved" in msg
    assert "reserved" in await err("list_files", {"path": f"sub/../{LEDGER_DIR}"}, call)


def test_run_once_serialises_concurrent_attempts(ws):
    applied = []
    ctx = ToolContext(workspace=ws, idempotency_key="wf/c")

    def effect() -> str:
        applied.append(1)
        return f"applied {len(applied)}"

    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(run_once(ctx, effect))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert applied == [1] and results == ["applied 1"] * 8
    assert run_once(ToolContext(workspace=ws), effect) == "applied 2"  # no key: just runs


_DIE_AFTER_EFFECT = """
import os, sys
from pathlib import Path
from activities.tools import ToolContext, run_once
ws, target = Path(sys.argv[1]), Path(sys.argv[2])
def effect():
    with target.open("a") as fh:
        fh.write("effect\\n")
    os._exit(9)  # the worker dies after the effect, before the ledger entry
run_once(ToolContext(workspace=ws, idempotency_key="wf/c9"), effect, lambda: None)
"""


def test_run_once_asks_the_target_after_an_attempt_died_mid_effect(ws, tmp_path):
    target = tmp_path / "target.txt"
    died = subprocess.run(
        [sys.executable, "-c", _DIE_AFTER_EFFECT, str(ws), str(target)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == 9, died.stderr
    assert target.read_text() == "effect\n"
    ctx = ToolContext(workspace=ws, idempotency_key="wf/c9")
    runs: list[int] = []

    def effect() -> str:
        runs.append(1)
        return "applied again"

    def applied() -> str | None:
        return "applied earlier" if "effect" in target.read_text() else None

    assert run_once(ctx, effect, applied) == "applied earlier"
    assert runs == []  # the target knew the key: not applied twice
    assert run_once(ctx, effect, applied) == "applied earlier"  # now from the ledger
    # without `applied` the documented window stays: the effect runs again
    other = ToolContext(workspace=ws, idempotency_key="wf/c10")
    started = ledger_path(ws, "wf/c10").with_suffix(".started")
    started.parent.mkdir(parents=True, exist_ok=True)
    started.touch()
    assert run_once(other, effect) == "applied again" and runs == [1]


def test_old_ledger_files_are_pruned_and_fresh_ones_kept(ws, monkeypatch):
    from activities.tools import ledger

    ctx = ToolContext(workspace=ws, idempotency_key="wf/old")
    assert run_once(ctx, lambda: "done") == "done"
    folder = ledger_path(ws, "wf/old").parent
    old = sorted(folder.iterdir())
    assert old  # the entry and its lock
    ten_days_ago = time.time() - 10 * 86400
    for f in old:
        os.utime(f, (ten_days_ago, ten_days_ago))
    monkeypatch.setattr(ledger, "_pruned_at", {})  # as if the last pass was long ago
    assert run_once(ToolContext(workspace=ws, idempotency_key="wf/new"), lambda: "new") == "new"
    left = sorted(f.name for f in folder.iterdir())
    assert all(not (folder / f.name).exists() for f in old)
    new_entry = ledger_path(ws, "wf/new")
    assert left == sorted([new_entry.name, new_entry.with_suffix(".lock").name])
    # the old call would now apply again: that is what the retention bounds
    assert run_once(ctx, lambda: "again") == "again"


def test_ledger_retention_comes_from_the_environment(monkeypatch):
    from activities.tools import ledger

    monkeypatch.setenv("AGENT_TOOL_LEDGER_DAYS", "0.5")
    assert ledger.keep_seconds() == 43200
    monkeypatch.setenv("AGENT_TOOL_LEDGER_DAYS", "0")
    with pytest.raises(ValueError, match="AGENT_TOOL_LEDGER_DAYS"):
        ledger.keep_seconds()
    monkeypatch.delenv("AGENT_TOOL_LEDGER_DAYS")
    assert ledger.keep_seconds() == 7 * 86400
