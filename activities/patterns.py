r"""RE2, the engine of the tool policy's patterns (``arg_matches``, ``arg_not_matches``).

RE2 (Google's, through the ``google-re2`` binding, module ``re2``) matches in time linear in the
text: no pattern can backtrack for hours holding the GIL, as ``^(a+)+$`` does under Python's
``re`` against ``"a" * 40 + "!"``. The price: no backreferences (``(a)\1``) and no lookaround
(``(?=x)``, ``(?!x)``, ``(?<=x)``). Used where a spec is loaded (:mod:`activities.spec_policy`,
which rejects what RE2 cannot compile) and in the workflow (:mod:`workflows.policy`, pure: RE2's
matching is deterministic). Compiled patterns are cached by the ``re2`` module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import re2 as _re2_module  # pyright: ignore[reportMissingTypeStubs] - google-re2 ships no stubs

__all__ = ["PatternError", "re2_escape", "re2_found", "re2_problem", "re2_searcher"]

_RE2: Any = _re2_module  # untyped: every use goes through the typed functions below


class PatternError(ValueError):
    """RE2 cannot compile a pattern; the message is RE2's reason (``missing ): (x``)."""


def _compiled(pattern: str) -> Any:
    options = _RE2.Options()
    options.log_errors = False  # the error is raised here; no absl line on the worker's stderr
    try:
        return _RE2.compile(pattern, options)
    except _RE2.error as e:
        detail: Any = e.args[0] if e.args else "invalid pattern"
        text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
        raise PatternError(text) from None


def re2_problem(pattern: str) -> str | None:
    """Why RE2 cannot compile ``pattern`` (RE2's message), or None when it can."""
    try:
        _compiled(pattern)
    except PatternError as e:
        return str(e)
    return None


def re2_found(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (RE2 syntax) occurs anywhere in ``text`` (a search, not a full match).

    Raises:
        PatternError: RE2 cannot compile ``pattern`` (a backreference, a lookaround, bad syntax).
    """
    return _compiled(pattern).search(text) is not None


def re2_searcher(pattern: str) -> Callable[[str], bool]:
    """A function telling whether ``pattern`` (RE2 syntax) occurs in a text, compiled once.

    Used where one pattern is tried on many texts (``search_files``, line by line).

    Raises:
        PatternError: RE2 cannot compile ``pattern``.
    """
    search = _compiled(pattern).search
    return lambda text: search(text) is not None


def re2_escape(text: str) -> str:
    """``text`` as an RE2 pattern matching it literally (``re2.escape``)."""
    return str(_RE2.escape(text))
