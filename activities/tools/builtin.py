"""Built-in tools: a safe calculator and workspace file tools, registered into ``REGISTRY``.

The file tools are confined to ``ctx.workspace`` by :func:`resolve_in_workspace`: paths are
relative to the workspace root, and nothing outside it (``..``, absolute paths, symlinks that
point out) is ever read, listed or written. Paths in outputs are relative to the workspace.
"""

from __future__ import annotations

import ast
import fnmatch
import math
import operator
import os
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Annotated, Any

from pydantic import Field

from activities.patterns import PatternError, re2_escape, re2_searcher
from activities.tools import beneath
from activities.tools.ledger import LEDGER_DIR, run_once
from activities.tools.registry import ToolContext, ToolError, tool

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 10_000
MAX_INT_BITS = 10_000  # about 3,000 decimal digits
MAX_READ_BYTES = 5_000_000
MAX_READ_LINES = 500
MAX_SEARCH_FILE_BYTES = 2_000_000
MAX_LINE_CHARS = 300
MAX_WRITE_BYTES = 1_000_000
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", LEDGER_DIR})


# --------------------------------------------------------------------------- calculator

_BINOPS: dict[type[ast.operator], Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,  # pyright: ignore[reportUnknownMemberType] - typeshed leaves its operands untyped
    ast.FloorDiv: operator.floordiv,  # pyright: ignore[reportUnknownMemberType] - typeshed leaves its operands untyped
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Any] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Any] = {
    "abs": abs, "round": round, "min": min, "max": max,
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log10": math.log10, "log2": math.log2,
    "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "asin": math.asin, "acos": math.acos, "atan": math.atan,
    "degrees": math.degrees, "radians": math.radians, "floor": math.floor, "ceil": math.ceil,
}  # fmt: skip
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _check_size(value: float) -> float:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError("the result is too large (more than about 3000 digits)")
    return value


def _power(base: float, exponent: float) -> float:
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent {exponent} is too large (at most {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        if abs(base).bit_length() * exponent > MAX_INT_BITS + 64:
            raise ToolError("the result is too large (more than about 3000 digits)")
    return _check_size(base**exponent)


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ToolError(f"only numbers are allowed, not {node.value!r}")
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if isinstance(node.op, ast.BitXor):
            raise ToolError("'^' is not supported: write powers as a ** b")
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise ToolError(f"operator {type(node.op).__name__} is not supported")
        return _check_size(op(left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ToolError(f"unknown name {node.id!r}; constants: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            raise ToolError("only plain function calls like sqrt(x) are allowed (no math.sqrt)")
        fn = _FUNCTIONS.get(node.func.id)
        if fn is None:
            raise ToolError(
                f"unknown function {node.func.id!r}; functions: {', '.join(_FUNCTIONS)}"
            )
        if node.keywords:
            raise ToolError("keyword arguments are not allowed")
        return _check_size(fn(*[_eval(a) for a in node.args]))
    if isinstance(node, ast.Attribute):
        raise ToolError("attribute access (a.b) is not allowed")
    raise ToolError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def _format_number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.15g}"


@tool(local=True)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Supports + - * / // % ** and parentheses, the functions sqrt, log, log10, log2, exp, sin,
    cos, tan, asin, acos, atan, degrees, radians, floor, ceil, abs, round, min, max, and the
    constants pi, e, tau. Angles are in radians.

    Args:
        expression: the expression, e.g. "(2 + 3) * sqrt(16) / 4".
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is too long (at most {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ToolError(f"invalid expression: {e.msg}") from None
    try:
        return _format_number(_eval(tree))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large") from None
    except (ValueError, TypeError) as e:
        raise ToolError(f"math error: {e}") from None
    except RecursionError:
        raise ToolError("the expression is nested too deeply") from None


# --------------------------------------------------------------------------- workspace


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """Resolve a workspace-relative path to an absolute path inside the workspace.

    Args:
        workspace: the workspace root.
        path: a path relative to the root (``""`` and ``"."`` mean the root).

    Returns:
        The absolute path with symlinks resolved; it need not exist.

    Raises:
        ToolError: the path is absolute, climbs out with ``..``, goes through a symlink
            that points outside the workspace, or into the tool ledger (``.tool-ledger``).
    """
    root = Path(workspace).resolve()
    text = (path or ".").strip() or "."
    if "\x00" in text:
        raise ToolError("the path contains a NUL character")
    if os.path.isabs(text) or text.startswith("~"):
        raise ToolError(
            f"absolute paths are not allowed: {path!r}. Use a path relative to the workspace "
            f"root, e.g. 'src/main.py' or '.'"
        )
    lexical = Path(os.path.normpath(root / text))
    if not lexical.is_relative_to(root):
        raise ToolError(f"the path {path!r} is outside the workspace ('..' leads out of it)")
    try:
        resolved = lexical.resolve()
    except (OSError, RuntimeError) as e:
        raise ToolError(f"cannot resolve the path {path!r}: {e}") from None
    if not resolved.is_relative_to(root):
        raise ToolError(f"the path {path!r} leads through a symlink to outside the workspace")
    rel = resolved.relative_to(root)
    if rel.parts and rel.parts[0] == LEDGER_DIR:
        raise ToolError(f"the path {path!r} is reserved for the runtime ({LEDGER_DIR})")
    return resolved


def _rel(ctx: ToolContext, p: Path) -> str:
    rel = p.relative_to(ctx.workspace).as_posix()
    return rel or "."


def _matches(name: str, rel: str, pattern: str) -> bool:
    return fnmatch.fnmatch(rel if "/" in pattern else name, pattern)


def _walk(ctx: ToolContext, top: Path, recursive: bool) -> Iterator[tuple[PurePath, bool]]:
    """``(path relative to the workspace, is a folder)`` under ``top``, sorted, skipping SKIP_DIRS.

    Folders are opened without following symlinks (:mod:`activities.tools.beneath`, and
    ``os.fwalk``, which does not descend into a symlink even if one is swapped in while it walks).
    """
    base = top.relative_to(ctx.workspace)
    if not recursive:
        for name, is_dir in beneath.list_names(ctx.workspace, base):
            if name not in SKIP_DIRS:
                yield base / name, is_dir
        return
    with beneath.folder(ctx.workspace, base) as fd:
        for dirpath, dirnames, filenames, _ in os.fwalk(".", dir_fd=fd):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            here = base / dirpath
            entries = [(n, True) for n in dirnames] + [(n, False) for n in filenames]
            for n, is_dir in sorted(entries):
                yield here / n, is_dir


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def _inside(ctx: ToolContext, p: Path) -> Path | None:
    """``p`` with its symlinks resolved, if that is a file inside the workspace (not the ledger)."""
    try:
        real = p.resolve()
    except (OSError, RuntimeError):
        return None
    if not real.is_relative_to(ctx.workspace) or not real.is_file():
        return None
    parts = real.relative_to(ctx.workspace).parts
    return None if parts and parts[0] == LEDGER_DIR else real


def _existing(ctx: ToolContext, path: str) -> Path:
    target = resolve_in_workspace(ctx.workspace, path)
    if not target.exists():
        raise ToolError(f"{path!r} does not exist. Use list_files to see what exists.")
    return target


@tool(local=True)
def list_files(
    ctx: ToolContext,
    path: str = ".",
    pattern: str = "*",
    recursive: bool = False,
    max_entries: Annotated[int, Field(ge=1, le=5000)] = 200,
) -> str:
    """List files and folders in the workspace. Folders end with "/".

    Args:
        ctx: the call's context (injected, not sent by the model).
        path: folder to list, relative to the workspace root.
        pattern: only names matching this glob, e.g. "*.py".
        recursive: also list inside subfolders.
        max_entries: list at most this many entries.
    """
    top = _existing(ctx, path)
    if not top.is_dir():
        raise ToolError(f"{path!r} is a file, not a folder. Use read_file to read it.")
    lines: list[str] = []
    more = 0
    try:
        for entry, is_dir in _walk(ctx, top, recursive):
            rel = entry.as_posix()
            if not _matches(entry.name, rel, pattern):
                continue
            if len(lines) >= max_entries:
                more += 1
                continue
            lines.append(rel + "/" if is_dir else rel)
    except PermissionError:
        raise ToolError(f"permission denied while listing {path!r}") from None
    if not lines:
        return f"No entries matching {pattern!r} in {_rel(ctx, top)!r}."
    if more:
        lines.append(f"[... {more} more entries not shown; use pattern or a subfolder path]")
    return "\n".join(lines)


@tool(local=True)
def read_file(
    ctx: ToolContext,
    path: str,
    start_line: Annotated[int, Field(ge=1)] = 1,
    end_line: Annotated[int, Field(ge=1)] | None = None,
) -> str:
    """Read a text file of the workspace, with line numbers.

    Args:
        ctx: the call's context (injected, not sent by the model).
        path: file to read, relative to the workspace root, e.g. "src/main.py".
        start_line: first line to show (1 is the first line).
        end_line: last line to show (included). If omitted, up to 500 lines are shown.
    """
    target = resolve_in_workspace(ctx.workspace, path)
    if not target.is_file():
        kind = "a folder, not a file" if target.is_dir() else "not found"
        raise ToolError(f"{path!r} is {kind}. Use list_files to see what exists.")
    try:
        data = beneath.read_limited(
            ctx.workspace, target.relative_to(ctx.workspace), MAX_READ_BYTES
        )
    except PermissionError:
        raise ToolError(f"permission denied: cannot read {path!r}") from None
    if _is_binary(data[:8192]):
        raise ToolError(f"{path!r} is a binary file; only text files can be read")
    lines = data.decode("utf-8", errors="replace").splitlines()
    total, rel = len(lines), _rel(ctx, target)
    if total == 0:
        return f"{rel}: empty file (0 lines)"
    if start_line > total:
        raise ToolError(f"start_line {start_line} is past the end of {rel!r} ({total} lines)")
    if end_line is not None and end_line < start_line:
        raise ToolError(f"end_line {end_line} is before start_line {start_line}")
    last = min(total, end_line or start_line + MAX_READ_LINES - 1, start_line + MAX_READ_LINES - 1)
    width = max(4, len(str(last)))
    header = f"{rel} ({total} lines), lines {start_line}-{last}:"
    body = [f"{n:>{width}}| {lines[n - 1]}" for n in range(start_line, last + 1)]
    if last < total and (end_line is None or end_line > last):
        body.append(f"[... more lines follow; read again with start_line={last + 1}]")
    return "\n".join([header, *body])


def _search_file(ctx: ToolContext, file: Path, match: Any, limit: int) -> Iterator[tuple[int, str]]:
    """Up to ``limit`` matching ``(line number, stripped line)`` of a text file; none if binary.

    Raises:
        ToolError: the file is over MAX_SEARCH_FILE_BYTES, or its path changed into a symlink.
    """
    data = beneath.read_limited(
        ctx.workspace, file.relative_to(ctx.workspace), MAX_SEARCH_FILE_BYTES
    )
    if _is_binary(data[:8192]):
        return
    found = 0
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if match(line):
            yield number, line.strip()[:MAX_LINE_CHARS]
            found += 1
            if found >= limit:
                return


@tool(local=True)
def search_files(
    ctx: ToolContext,
    query: Annotated[str, Field(min_length=1)],
    path: str = ".",
    glob: str = "*",
    regex: bool = False,
    max_results: Annotated[int, Field(ge=1, le=1000)] = 50,
) -> str:
    """Search the text of workspace files. Returns lines as "path:line: text".

    Args:
        ctx: the call's context (injected, not sent by the model).
        query: text to find (case-sensitive), or a regular expression if regex is true.
        path: file or folder to search in, relative to the workspace root.
        glob: only files whose name matches this glob, e.g. "*.py".
        regex: treat query as a regular expression (RE2 syntax: no backreferences or lookaround).
        max_results: stop after this many matching lines.
    """
    try:
        match = re2_searcher(query if regex else re2_escape(query))
    except PatternError as e:
        raise ToolError(f"invalid regular expression {query!r} (RE2 syntax): {e}") from None
    top = _existing(ctx, path)
    if top.is_file():
        files: Iterator[PurePath] = iter([top.relative_to(ctx.workspace)])
    else:
        files = (rel for rel, is_dir in _walk(ctx, top, True) if not is_dir)
    results: list[str] = []
    for count, rel in enumerate(files):
        if count % 200 == 0:
            ctx.heartbeat()
        real = _inside(ctx, ctx.workspace / rel)
        if not _matches(rel.name, rel.as_posix(), glob) or real is None:
            continue
        try:
            found = list(_search_file(ctx, real, match, max_results - len(results)))
        except (ToolError, PermissionError, FileNotFoundError):
            continue  # too large, unreadable, deleted or replaced by a symlink while searching
        results.extend(f"{rel.as_posix()}:{number}: {line}" for number, line in found)
        if len(results) >= max_results:
            results.append(f"[stopped at max_results={max_results}; there may be more]")
            return "\n".join(results)
    if not results:
        return f"No matches for {query!r} in {_rel(ctx, top)!r} (files matching {glob!r})."
    return "\n".join(results)


@tool(risk="write")
def write_file(ctx: ToolContext, path: str, content: str, overwrite: bool = False) -> str:
    """Write a text file in the workspace. Creates missing folders.

    Args:
        ctx: the call's context (injected, not sent by the model).
        path: file to write, relative to the workspace root, e.g. "notes/todo.md".
        content: the full text of the file.
        overwrite: replace the file if it already exists.
    """
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolError(f"content is too large ({len(data)} bytes; at most {MAX_WRITE_BYTES})")
    target = resolve_in_workspace(ctx.workspace, path)
    # Applied once per ctx.idempotency_key: a retried attempt returns the first one's result
    # instead of writing again (over a file that a later call may have changed meanwhile).
    return run_once(ctx, lambda: _write(ctx, path, target, data, overwrite))


def _content(ctx: ToolContext, target: Path) -> bytes | None:
    try:
        return beneath.read_limited(
            ctx.workspace, target.relative_to(ctx.workspace), MAX_WRITE_BYTES
        )
    except (ToolError, OSError):
        return None


def _write(ctx: ToolContext, path: str, target: Path, data: bytes, overwrite: bool) -> str:
    rel = _rel(ctx, target)
    if rel == "." or target.is_dir():
        raise ToolError(f"{path!r} is a folder; give a file path")
    if target.exists() and not overwrite:
        if target.is_file() and _content(ctx, target) == data:  # a retried attempt wrote it
            return f"{rel} already has this content ({len(data)} bytes)"
        raise ToolError(f"{rel!r} already exists. Set overwrite to true to replace it.")
    try:
        beneath.write_replacing(ctx.workspace, target.relative_to(ctx.workspace), data)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"cannot create the folders of {rel!r}: a file is in the way") from None
    text = data.decode("utf-8")
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return f"Wrote {rel} ({len(data)} bytes, {lines} lines)."
