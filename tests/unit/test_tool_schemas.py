"""The built-in tools' OpenAI schemas stay exactly as recorded (descriptions come from docstrings).

``tests/unit/data/builtin_tool_schemas.json`` was written from the registry before the docstring
parser moved to ``docstring-parser``; a change of a built-in tool's docstring or signature that
is meant must rewrite it (the model sees these schemas, and pinned specs store them).
"""

import json
from pathlib import Path

from activities.tools import REGISTRY, parse_docstring

SNAPSHOT = Path(__file__).parent / "data" / "builtin_tool_schemas.json"


def _builtin_schemas() -> dict:
    return {
        name: REGISTRY.info(name).openai_schema()
        for name in REGISTRY.names()
        if REGISTRY.get(name).fn.__module__ == "activities.tools.builtin"
    }


def test_builtin_tool_schemas_match_the_snapshot():
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert _builtin_schemas() == expected


def test_description_paragraphs_lists_and_arguments():
    desc, args = parse_docstring(
        """Read a file of the workspace.

        Lines are numbered from 1 and
        joined when wrapped.

        - a list item
          that wraps
        - another item

        Args:
            path: the file, relative to
                the workspace root.
            start_line (int): first line, 1-based.
            **extra: ignored.

        Returns:
            The text.

        Raises:
            ToolError: no such file.
        """
    )
    assert desc == (
        "Read a file of the workspace.\n\nLines are numbered from 1 and joined when wrapped.\n\n"
        "- a list item\n  that wraps\n- another item"
    )
    assert args == {
        "path": "the file, relative to the workspace root.",
        "start_line": "first line, 1-based.",
        "extra": "ignored.",
    }


def test_no_docstring_and_no_args_section():
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("Just a summary.") == ("Just a summary.", {})


def test_text_after_the_args_block_is_not_taken_for_the_last_argument():
    _, args = parse_docstring(
        """Fork a run.

        Args:
            workflow_id: default ``run-<uuid4>``.

        The new request copies the original's agent.
        """
    )
    assert args == {"workflow_id": "default ``run-<uuid4>``."}


def test_a_section_that_does_not_parse_keeps_the_description():
    desc, args = parse_docstring("Summary line.\n\nArgs:\n    no colon here\n")
    assert (desc, args) == ("Summary line.", {})
