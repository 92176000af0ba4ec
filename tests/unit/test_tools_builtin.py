"""The built-in tools: the calculator and the workspace file tools (activities/tools/builtin.py)."""

import math

import pytest

from activities.tools import (
    ToolError,
    resolve_in_workspace,
)
from tests.support.tool_calls import err, ok

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
