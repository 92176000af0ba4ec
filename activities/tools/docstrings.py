"""Tool descriptions from Google-style docstrings, parsed by ``docstring-parser``.

:func:`parse_docstring` gives the text a model reads about a tool: the docstring's text before
its first section, with wrapped lines joined, and one description per ``Args:`` entry.
"""

from __future__ import annotations

import inspect
import re

from docstring_parser import Docstring, ParseError
from docstring_parser.google import DEFAULT_SECTIONS, GoogleParser, Section, SectionType

__all__ = ["parse_docstring"]

# Sections that end the description besides the parser's defaults (Args, Returns, Raises, ...).
_EXTRA_SECTIONS = [
    Section(title, "notes", SectionType.SINGULAR)
    for title in ("Note", "Notes", "Warning", "Warnings", "See Also", "Return", "Yield")
]
_PARSER = GoogleParser(sections=[*DEFAULT_SECTIONS, *_EXTRA_SECTIONS])
_BLOCK_START = re.compile(r"\s|[-*] |\d+[.)] ")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into the description and the ``Args:`` descriptions.

    Args:
        doc: the docstring (indented or already cleaned), or ``None``.

    Returns:
        ``(description, {parameter name: description})``. The description is the text before
        the first section header (``Args:``, ``Returns:``, ``Raises:``, ``Note:``, ...) with the
        wrapped lines of each paragraph joined (list items and indented lines stay apart); the
        continuation lines of an argument are joined with spaces, and a leading ``*``/``**`` or
        a ``(type)`` after the name is dropped. A docstring whose sections cannot be parsed
        gives its description and no argument descriptions.
    """
    text = inspect.cleandoc(doc or "")
    try:
        parsed = _PARSER.parse(text)
    except ParseError:
        header = _PARSER.titles_re.search(text)
        parsed = _PARSER.parse(text[: header.start()] if header else text)
    args = {
        p.arg_name.lstrip("*"): " ".join((p.description or "").split())
        for p in parsed.params
        if p.args[0] == "param"
    }
    return _unwrap(_body(parsed)), args


def _body(parsed: Docstring) -> str:
    """The text before the first section: the short description, then the long one."""
    short = parsed.short_description or ""
    if not parsed.long_description:
        return short
    gap = "\n\n" if parsed.blank_after_short_description else "\n"
    return f"{short}{gap}{parsed.long_description}".strip()


def _unwrap(text: str) -> str:
    """Join the wrapped lines of each paragraph; keep list items and indented lines apart."""
    out: list[str] = []
    for line in text.splitlines():
        starts_block = _BLOCK_START.match(line) is not None
        if out and out[-1] and line.strip() and not starts_block:
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line.rstrip())
    return "\n".join(out)
