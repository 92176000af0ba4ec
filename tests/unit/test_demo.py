"""The demo's own check of the model's answer, against a real standard-library file."""

from __future__ import annotations

import pytest

from workers.local import demo


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return demo.prepare_workspace(tmp_path_factory.mktemp("demo") / "workspace")


def test_workspace_holds_the_stdlib_files(ws):
    assert sorted(p.name for p in ws.iterdir()) == sorted(demo.STDLIB_FILES)
    assert (ws / "json" / "__init__.py").is_file()


def test_expected_answer_is_read_from_the_file(ws):
    total, line = demo.expected_answer(ws)
    lines = (ws / "textwrap.py").read_text().splitlines()
    assert total == len(lines)
    assert lines[line - 1].startswith("def dedent(")


def test_check_answer_accepts_right_numbers_in_their_places(ws):
    total, line = demo.expected_answer(ws)
    for answer in (
        f"The textwrap.py file has {total} lines, and the function dedent is defined on line {line}.",
        f"textwrap.py has {total} lines. dedent is defined on line {line}.",
        f"textwrap.py: {total} lines; dedent: line {line}",
        f"The function `dedent` is defined on line {line} of textwrap.py, which has {total} lines.",
    ):
        ok, verdict = demo.check_answer(answer, ws)
        assert ok, (answer, verdict)


def test_check_answer_refuses_missing_swapped_or_merged_numbers(ws):
    total, line = demo.expected_answer(ws)
    for answer in (
        f"The function dedent is defined on line {line} of textwrap.py.",  # half an answer
        f"textwrap.py has {line} lines and dedent is defined on line {total}.",  # swapped
        f"dedent is defined on line {line} of {total}",  # both in one clause
        f"textwrap.py has {total + 1} lines and dedent is defined on line {line}.",
        "",
    ):
        ok, verdict = demo.check_answer(answer, ws)
        assert not ok, (answer, verdict)
