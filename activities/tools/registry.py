"""The tool registry: ``@tool`` functions, their JSON schemas, and how one call is run.

A tool is a plain (sync or async) function with type hints and a Google-style docstring::

    @tool(risk="write")
    def write_note(text: str, ctx: ToolContext) -> str:
        \"\"\"Save a note.  <- then an ``Args:`` section with ``text: the note's text.``\"\"\"

The docstring's text before ``Args:`` becomes the tool's description, each ``Args:`` entry the
description of its parameter, and the type hints the OpenAI function-parameters schema. A parameter
annotated :class:`ToolContext` (conventionally ``ctx``) is injected by :meth:`ToolRegistry.invoke`
and is not part of the schema.

Errors: a tool raises :class:`ToolError` for anything the model should read and act on (bad path,
file exists, ...). Any other exception is an infrastructure error: it propagates out of
:meth:`ToolRegistry.invoke` so that Temporal retries the activity.

This module is the one to import from; it re-exports the names that live in modules by job:
:mod:`activities.tools.errors` (the errors), :mod:`activities.tools.context` (:class:`ToolContext`)
and :mod:`activities.tools.definition` (:class:`ToolDef`, ``Risk``). It holds the registry itself
(:class:`ToolRegistry`, :data:`REGISTRY`), ``@tool`` and :func:`load_tool_modules`.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Literal, cast

from pydantic import BaseModel, ValidationError

from activities.contracts import ToolInfo, ToolOutcome
from activities.tools import output
from activities.tools.context import ToolContext
from activities.tools.definition import Risk, ToolDef
from activities.tools.errors import (
    ToolArgumentsError,
    ToolError,
    ToolModuleImportError,
    UnknownToolError,
)
from activities.tools.threads import run_in_thread

__all__ = [
    "REGISTRY",
    "Risk",
    "ToolArgumentsError",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolModuleImportError",
    "ToolRegistry",
    "UnknownToolError",
    "load_tool_modules",
    "tool",
]


# --------------------------------------------------------------------------- invocation


def _parse_arguments(tool: ToolDef, arguments: str | dict[str, Any]) -> dict[str, Any]:
    """The model's raw arguments as a dict. Raises ToolArgumentsError with a fix-it message."""
    if isinstance(arguments, dict):
        return arguments
    text = arguments.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
        if isinstance(value, str) and value.strip().startswith("{"):
            value = json.loads(value)  # arguments JSON-encoded twice: accept the inner object
    except json.JSONDecodeError as e:
        raise ToolArgumentsError(
            f"the arguments of {tool.name} are not valid JSON ({e.msg}: line {e.lineno} column "
            f"{e.colno}). Send one valid JSON object, e.g. "
            f"{{{', '.join(f'{json.dumps(p)}: ...' for p in tool.parameters['properties'])}}}. "
            f"Parameters: {tool.parameter_summary()}."
        ) from None
    except RecursionError:
        raise ToolArgumentsError(
            f"the arguments of {tool.name} nest too deeply to read. Send one flat JSON object. "
            f"Parameters: {tool.parameter_summary()}."
        ) from None
    if not isinstance(value, dict):
        raise ToolArgumentsError(
            f"the arguments of {tool.name} must be a JSON object, not {type(value).__name__}. "
            f"Parameters: {tool.parameter_summary()}."
        )
    return cast("dict[str, Any]", value)


def _validate(tool: ToolDef, raw: dict[str, Any]) -> BaseModel:
    try:
        return tool.args_model.model_validate(raw)
    except ValidationError as e:
        problems: list[str] = []
        for err in e.errors(include_url=False):
            loc = ".".join(str(x) for x in err["loc"]) or "(arguments)"
            problems.append(f"- {loc}: {err['msg']}")
        raise ToolArgumentsError(
            f"invalid arguments for {tool.name}:\n"
            + "\n".join(problems)
            + f"\nParameters of {tool.name}: {tool.parameter_summary()}."
        ) from None


async def _call(tool: ToolDef, validated: BaseModel, ctx: ToolContext) -> Any:
    """What ``tool`` returns for ``validated`` arguments, ``ctx`` injected if it takes one.

    An async tool is awaited; a sync one runs in a daemon thread of its own, left behind if the
    call is cancelled (:func:`activities.tools.threads.run_in_thread`); a retried call of a tool
    that is not ``read`` whose earlier attempt is still running here is not started again
    (``EarlierAttemptRunning``, a :class:`ToolError`). Whatever the tool raises
    (:class:`ToolError` or any other exception) propagates.
    """
    kwargs = {p: getattr(validated, f) for p, f in tool.field_names.items()}
    if tool.context_param:
        kwargs[tool.context_param] = ctx
    if tool.is_async:
        return await tool.fn(**kwargs)
    key = ctx.idempotency_key if tool.risk != "read" else ""  # side effects: never twice at once
    return await run_in_thread(tool.fn, kwargs, tool.name, key)


class ToolRegistry:
    """Tools by name. ``invoke`` runs one call and turns business errors into ``ToolOutcome``."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolDef] = {}

    def register(self, fn_or_tool: Callable[..., Any] | ToolDef) -> ToolDef:
        """Register a ``ToolDef``, a ``@tool`` function, or a plain function (default settings).

        Registering the same function again (a module re-import) replaces it.

        Raises:
            ValueError: another function is already registered under that name.
            TypeError: see :meth:`ToolDef.from_function`.
        """
        tool_def = (
            fn_or_tool if isinstance(fn_or_tool, ToolDef) else getattr(fn_or_tool, "__tool__", None)
        )
        if not isinstance(tool_def, ToolDef):
            tool_def = ToolDef.from_function(cast("Callable[..., Any]", fn_or_tool))
        old = self._tools.get(tool_def.name)
        if old is not None and _qualname(old.fn) != _qualname(tool_def.fn):
            raise ValueError(
                f"tool {tool_def.name!r} is already registered by {_qualname(old.fn)}; "
                f"cannot register {_qualname(tool_def.fn)} under the same name"
            )
        self._tools[tool_def.name] = tool_def
        return tool_def

    def get(self, name: str) -> ToolDef:
        """The tool called ``name``.

        Raises:
            UnknownToolError: no such tool; the message lists the available ones.
        """
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(
                f"unknown tool {name!r}. Available tools: {', '.join(self.names()) or 'none'}."
            ) from None

    def names(self) -> list[str]:
        """Names of the registered tools, sorted."""
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def info(self, name: str) -> ToolInfo:
        """The pinned form of one tool. Raises :class:`UnknownToolError`."""
        return self.get(name).info()

    def infos(self, names: list[str]) -> list[ToolInfo]:
        """The pinned form of the named tools, in the given order.

        Raises:
            UnknownToolError: some names are unknown; the message names them and the available.
        """
        unknown = [n for n in names if n not in self._tools]
        if unknown:
            raise UnknownToolError(
                f"unknown tool(s): {', '.join(unknown)}. "
                f"Available tools: {', '.join(self.names()) or 'none'}."
            )
        return [self._tools[n].info() for n in names]

    async def invoke(
        self,
        name: str,
        arguments: str | dict[str, Any],
        ctx: ToolContext,
        max_output_chars: int = 16_000,
    ) -> ToolOutcome:
        """Run one tool call.

        Args:
            name: the tool's name as the model wrote it.
            arguments: the model's raw JSON text, or an already-parsed dict.
            ctx: the call's context; ``ctx.call_id`` becomes the outcome's ``call_id``.
            max_output_chars: content longer than this (characters, > 0) is cut to its head plus
                a note, and the outcome marked ``truncated``. Secrets are redacted first
                (:func:`activities.redaction.redact`), so none is cut in half and leaks in part,
                and lone surrogates become U+FFFD (:func:`activities.tools.output.shape`).

        Returns:
            The outcome: ``ok`` with the tool's output as text
            (:func:`activities.tools.output.to_text`), or ``error`` (unknown tool, malformed or
            invalid arguments, :class:`ToolError`, a result that cannot be turned into text)
            with content ``Error: ...``.
            ``duration_ms`` is the wall time of the whole call in milliseconds.

        Raises:
            Exception: anything other than a :class:`ToolError` raised by the tool (an
                infrastructure error, for Temporal to retry).
        """
        if max_output_chars <= 0:
            raise ValueError("max_output_chars must be positive")
        start = time.perf_counter()
        status: Literal["ok", "error"] = "ok"
        recorded: dict[str, Any] | None = None
        try:
            tool = self.get(name)
            raw = _parse_arguments(tool, arguments)
            recorded = raw
            validated = _validate(tool, raw)
            recorded = validated.model_dump(mode="json", by_alias=True)
            text = output.to_text(await _call(tool, validated, ctx))
        except ToolError as e:
            status, text = "error", f"Error: {e}"
        except output.UnreadableResult as e:
            status, text = "error", f"Error: {name} ran, but {e}"
        content, truncated, full_chars = output.shape(text, max_output_chars)
        return ToolOutcome(
            call_id=ctx.call_id,
            name=name,
            status=status,
            content=content,
            truncated=truncated,
            output_chars=full_chars,
            duration_ms=(time.perf_counter() - start) * 1000.0,
            arguments=recorded,
            files=dict(ctx.new_files) or None,
        )


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


REGISTRY = ToolRegistry()
"""The default registry: ``@tool`` registers here, and the worker serves it."""


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    timeout_seconds: float = 30.0,
    max_attempts: int = 3,
    risk: Risk = "read",
    registry: ToolRegistry | None = None,
    sandboxed: bool = False,
    local: bool = False,
    callback: bool = False,
) -> Any:
    """Make a function a tool and register it (in :data:`REGISTRY` unless ``registry`` is given).

    Usable bare (``@tool``) or with options (``@tool(risk="write")``). The function is returned
    unchanged, with its :class:`ToolDef` as ``fn.__tool__``.

    Args:
        fn: the function (when used bare).
        name: the tool's name; the function's name when omitted.
        timeout_seconds: start-to-close timeout of one attempt, seconds.
        max_attempts: attempts at most for infrastructure errors.
        risk: policy hint: ``read`` tools are allowed by default, others need approval.
        registry: where to register; :data:`REGISTRY` when omitted.
        sandboxed: the tool runs in the OS sandbox (an exec tool then asks for approval).
        local: run as a local activity by default (only for short read-only tools; a spec's
            ``tools`` entry ``{name: N, local: false}`` overrides it).
        callback: the tool may finish later through ``ctx.callback_url()`` and
            ``activity.raise_complete_async()`` (its activity then has no heartbeat timeout;
            docs/tools.md).

    Raises:
        TypeError: the function cannot be a tool (see :meth:`ToolDef.from_function`).
        ValueError: the name is taken by another function.
    """

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        tool_def = ToolDef.from_function(
            f,
            name=name,
            timeout_seconds=timeout_seconds,
            max_attempts=max_attempts,
            risk=risk,
            sandboxed=sandboxed,
            local=local,
            callback=callback,
        )
        (registry or REGISTRY).register(tool_def)
        f.__tool__ = tool_def  # pyright: ignore[reportFunctionMemberAccess] - functions take attributes at run time
        return f

    return decorate(fn) if fn is not None else decorate


def load_tool_modules(modules: Iterable[str] | str) -> list[ModuleType]:
    """Import the modules whose ``@tool`` functions register into :data:`REGISTRY`.

    Args:
        modules: module names (``my_pkg.tools``), or one comma-separated string such as the
            value of ``AGENT_TOOL_MODULES``. Blank names are skipped.

    Returns:
        The imported modules, in order.

    Raises:
        ToolModuleImportError: a module is missing or failed while importing; the message
            names it.
    """
    if isinstance(modules, str):
        modules = modules.split(",")
    loaded: list[ModuleType] = []
    for mod_name in (m.strip() for m in modules):
        if not mod_name:
            continue
        try:
            loaded.append(importlib.import_module(mod_name))
        except Exception as e:
            raise ToolModuleImportError(
                f"cannot import tool module {mod_name!r}: {type(e).__name__}: {e}", name=mod_name
            ) from e
    return loaded
