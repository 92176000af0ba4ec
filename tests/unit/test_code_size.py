"""Size discipline of the runtime's code: no module over 500 lines, no function over 60.

Applies to every ``.py`` file under ``workflows/``, ``activities/``, ``workers/`` and, for the
benchmarks, ``bench/``. A function's length is ``end_lineno - lineno + 1`` of its ``def``
(decorators excluded, docstring included); every function and method counts, async and nested
ones on their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("workflows", "activities", "workers", "bench")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
EXCEPTIONS: dict[str, str] = {}
"""Generated or vendored modules exempt from both limits, by path from the project root, with
the reason. None so far."""


def _modules() -> list[Path]:
    return sorted(
        p
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if "__pycache__" not in p.parts and _rel(p) not in EXCEPTIONS
    )


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _long_functions(source: str, filename: str) -> list[tuple[str, int, int]]:
    """``(qualified name, line, length)`` of every function longer than the limit in ``source``."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = (child.end_lineno or child.lineno) - child.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append((name, child.lineno, length))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source, filename=filename), "")
    return found


def test_there_are_modules_to_check() -> None:
    mods = _modules()
    assert len(mods) > 50
    assert {_rel(p).split("/")[0] for p in mods} == set(PACKAGES)


def test_exceptions_name_existing_files_with_a_reason() -> None:
    for path, reason in EXCEPTIONS.items():
        assert (ROOT / path).is_file(), f"{path}: listed as an exception but does not exist"
        assert reason.strip(), f"{path}: give the reason it is exempt"


def test_no_module_is_over_500_lines() -> None:
    long = [
        f"{_rel(p)}: {n} lines"
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert long == [], f"split these by job (max {MAX_MODULE_LINES} lines):\n" + "\n".join(long)


def test_no_function_is_over_60_lines() -> None:
    long = [
        f"{_rel(p)}:{line} {name}: {n} lines"
        for p in _modules()
        for name, line, n in _long_functions(p.read_text(), str(p))
    ]
    assert long == [], (
        f"extract helpers from these (max {MAX_FUNCTION_LINES} lines):\n" + "\n".join(long)
    )


def test_the_check_sees_long_functions_nested_async_and_methods() -> None:
    def body(lines: int, indent: int) -> str:
        return (" " * indent + "x = 1\n") * lines

    over = MAX_FUNCTION_LINES  # body lines: with its def line, one over the limit
    source = (
        "@decorator\n"
        f"def long():\n{body(over, 4)}"
        f"def short():\n{body(1, 4)}"
        f"async def along():\n{body(over, 4)}"
        "class C:\n"
        "    @staticmethod\n"
        f"    def method():\n{body(over, 8)}"
        "def outer():\n"
        f"    def inner():\n{body(over - 1, 8)}"
    )
    found = {name: (line, n) for name, line, n in _long_functions(source, "sample.py")}
    assert found == {
        "long": (2, MAX_FUNCTION_LINES + 1),  # the decorator is not counted
        "along": (65, MAX_FUNCTION_LINES + 1),
        "C.method": (128, MAX_FUNCTION_LINES + 1),
        "outer": (189, MAX_FUNCTION_LINES + 1),  # its nested inner is exactly at the limit
    }
