"""``@guardrail`` functions of one's own, registered like ``@tool`` functions (in tool modules).

A guardrail is a (sync or async) function of the text and, optionally, a
:class:`GuardrailContext`; it returns None (or False) when the text passes, and otherwise a
:class:`Finding`, a string (the detail) or True::

    @guardrail(action="block")
    def no_competitor_names(text: str, ctx: GuardrailContext) -> Finding | None:
        i = text.find("Globex")
        return Finding("names a competitor", spans=[(i, i + 6)]) if i >= 0 else None

The module is imported by the worker like a tool module (``tool_modules:`` of the spec file or
``AGENT_TOOL_MODULES``); a spec names the guardrail by its name under ``guardrails:``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from activities.guardrail_models import BUILTIN_GUARDRAILS, GuardrailAction, GuardrailStage

__all__ = ["GUARDRAILS", "Finding", "GuardrailContext", "GuardrailDef", "guardrail"]


@dataclass(frozen=True)
class Finding:
    """What a guardrail found: a detail for people and, for ``redact``, where it is.

    ``detail`` must not repeat the text found (it goes into the event stream and the audit; a
    secret of the run in it is redacted all the same). ``spans`` are ``(start, end)`` character
    offsets into the text checked; ``redact`` replaces them, or the whole text when there are none.
    """

    detail: str
    spans: list[tuple[int, int]] = field(default_factory=list[tuple[int, int]])


@dataclass(frozen=True)
class GuardrailContext:
    """Where the text checked comes from (given to a guardrail that takes a second parameter)."""

    stage: GuardrailStage
    run_id: str = ""
    turn: int = 0
    tenant_id: str = "default"
    tool: str | None = None
    """The tool whose result is checked (stage ``tool_results``)."""


@dataclass(frozen=True)
class GuardrailDef:
    """A registered guardrail: its name, function and default action."""

    name: str
    fn: Callable[..., Any]
    action: GuardrailAction = "block"
    takes_context: bool = False
    is_async: bool = False


class GuardrailRegistry:
    """Guardrails by name (the built-in names are taken)."""

    def __init__(self) -> None:
        self._defs: dict[str, GuardrailDef] = {}

    def register(self, d: GuardrailDef) -> GuardrailDef:
        """Add ``d``; the same function again (a module re-import) replaces it.

        Raises:
            ValueError: the name is built in, or taken by another function.
        """
        if d.name in BUILTIN_GUARDRAILS:
            raise ValueError(f"guardrail name {d.name!r} is built in; choose another")
        old = self._defs.get(d.name)
        if old is not None and _qualname(old.fn) != _qualname(d.fn):
            raise ValueError(
                f"guardrail {d.name!r} is already registered by {_qualname(old.fn)}; "
                f"cannot register {_qualname(d.fn)} under the same name"
            )
        self._defs[d.name] = d
        return d

    def get(self, name: str) -> GuardrailDef | None:
        """The guardrail called ``name``, or None."""
        return self._defs.get(name)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._defs)


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


GUARDRAILS = GuardrailRegistry()
"""The worker's guardrails: ``@guardrail`` registers here."""


def guardrail(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    action: GuardrailAction = "block",
    registry: GuardrailRegistry | None = None,
) -> Any:
    """Make a function a guardrail and register it; usable bare or with options.

    Args:
        fn: the function (used bare): ``(text)`` or ``(text, ctx)``.
        name: the name specs use; the function's name when omitted (1-64 of ``[A-Za-z0-9_-]``).
        action: the action when a spec entry names none.
        registry: where to register; :data:`GUARDRAILS` when omitted.

    Raises:
        TypeError: the name is not valid, or the function takes no or more than two parameters.
        ValueError: the name is built in or taken.
    """

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        gname = name or f.__name__
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", gname):
            raise TypeError(f"guardrail name {gname!r} must be 1-64 of [A-Za-z0-9_-]")
        params = list(inspect.signature(f).parameters)
        if not 1 <= len(params) <= 2:
            raise TypeError(f"guardrail {gname}: takes (text) or (text, ctx), not {params}")
        d = GuardrailDef(
            name=gname,
            fn=f,
            action=action,
            takes_context=len(params) == 2,
            is_async=inspect.iscoroutinefunction(f),
        )
        (registry or GUARDRAILS).register(d)
        f.__guardrail__ = d
        return f

    return decorate(fn) if fn is not None else decorate
