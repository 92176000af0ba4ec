"""The test suite's house rules: no test module imports another, and none is over 400 lines.

Helpers shared by several test modules live in ``tests/support/`` (docs/testing.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def _test_modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def _imported_modules(path: Path) -> list[str]:
    """Every module an ``import`` or ``from ... import`` in ``path`` names (anywhere in the file)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the test module's package
                base = path.relative_to(TESTS.parent).with_suffix("").parts[: -node.level]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            names.append(mod)
            names += [f"{mod}.{a.name}" for a in node.names]  # from tests.x import test_y
    return names


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:])


def test_there_are_test_modules_to_check() -> None:
    assert len(_test_modules()) > 50


def test_no_test_module_imports_another() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)} imports {name}"
        for path in _test_modules()
        for name in _imported_modules(path)
        if _is_test_module(name)
    ]
    assert offenders == [], "move shared helpers to tests/support/:\n" + "\n".join(offenders)


def test_no_test_module_is_over_400_lines() -> None:
    long = [
        f"{path.relative_to(TESTS.parent)}: {n} lines"
        for path in _test_modules()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert long == [], (
        f"split these by the module they cover (max {MAX_LINES} lines):\n" + "\n".join(long)
    )


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    sample = TESTS / "unit" / "test_suite_layout.py"
    names = _imported_modules(sample)
    assert "ast" in names and not any(_is_test_module(n) for n in names)
    assert _is_test_module("tests.integration.test_people")
    assert _is_test_module("tests.integration.test_people.GATED")
    assert not _is_test_module("tests.support.people")
    bad = tmp_path / "test_bad.py"
    bad.write_text(
        "from tests.integration.test_people import GATED\n"
        "import tests.security.test_encryption\n"
        "from tests.integration import test_cli\n"
        "def f():\n    from tests.support.cli import agentctl\n"
    )
    found = [n for n in _imported_modules(bad) if _is_test_module(n)]
    assert "tests.integration.test_people" in found
    assert "tests.security.test_encryption" in found
    assert "tests.integration.test_cli" in found
    assert not any(n.startswith("tests.support") for n in found)
