"""A tool's definition (:class:`ToolDef`): the function, its argument model and JSON schema.

Built from a type-hinted function with a Google-style docstring (:meth:`ToolDef.from_function`);
a parameter annotated :class:`~activities.tools.context.ToolContext` is injected, not part of the
schema. :mod:`activities.tools.registry` re-exports every name.
"""

from __future__ import annotations

import copy
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from activities.contracts import ToolInfo
from activities.tools.context import ToolContext
from activities.tools.docstrings import parse_docstring
from activities.tools.schema import build_arguments

__all__ = ["Risk", "ToolDef"]

Risk = Literal["read", "write", "exec", "network"]


def _is_context(annotation: Any) -> bool:
    return annotation is ToolContext or (
        typing.get_origin(annotation) is typing.Annotated
        and typing.get_args(annotation)[0] is ToolContext
    )


def _signature_fields(
    fn: Callable[..., Any], tool_name: str, hints: dict[str, Any], arg_docs: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """Pydantic fields of ``fn``'s parameters, parameter -> field names, the context parameter.

    Raises:
        TypeError: a parameter has no type hint or is ``*args``/``**kwargs``/positional-only.
    """
    fields: dict[str, Any] = {}
    field_names: dict[str, str] = {}
    context_param: str | None = None
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise TypeError(f"tool {tool_name}: parameter {p.name!r} must be a plain keyword")
        annotation = hints.get(p.name, p.annotation)
        if _is_context(annotation):
            context_param = p.name
            continue
        if annotation is inspect.Parameter.empty:
            raise TypeError(f"tool {tool_name}: parameter {p.name!r} needs a type hint")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fname = p.name
        if p.name.startswith("_") or hasattr(BaseModel, p.name):
            fname = f"arg_{p.name.lstrip('_')}"
        field_names[p.name] = fname
        info = Field(default, alias=p.name, description=arg_docs.get(p.name) or None)
        fields[fname] = (annotation, info)
    return fields, field_names, context_param


@dataclass(frozen=True)
class ToolDef:
    """A registered tool: the function, its argument model and JSON schema, how to run it.

    ``parameters`` is the OpenAI function-parameters schema; ``args_model`` validates arguments;
    ``context_param`` is the name of the injected :class:`ToolContext` parameter, if any.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    args_model: type[BaseModel]
    context_param: str | None = None
    timeout_seconds: float = 30.0
    max_attempts: int = 3
    risk: Risk = "read"
    sandboxed: bool = False
    """Runs in the OS sandbox (activities/sandbox): an ``exec`` tool then asks for approval
    by default instead of needing an explicit policy entry."""
    local: bool = False
    """Runs as a local activity by default (short, read-only, deterministic input: no server
    round trip of its own; docs/throughput.md). A spec's ``tools`` entry may override it."""
    callback: bool = False
    """May finish later through a callback URL (``ToolContext.callback_url``): its activity has
    no heartbeat timeout, only ``timeout_seconds`` (docs/tools.md)."""
    is_async: bool = False
    # parameter name -> pydantic field name (differs when the name would shadow BaseModel's API)
    field_names: dict[str, str] = field(default_factory=dict[str, str])

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        timeout_seconds: float = 30.0,
        max_attempts: int = 3,
        risk: Risk = "read",
        sandboxed: bool = False,
        local: bool = False,
        callback: bool = False,
    ) -> ToolDef:
        """Build a tool from a type-hinted function with a Google-style docstring.

        Raises:
            TypeError: a parameter has no type hint, is ``*args``/``**kwargs``/positional-only,
                or its hint cannot be turned into a JSON schema.
        """
        tool_name = name or fn.__name__
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
            raise TypeError(f"tool name {tool_name!r} must be 1-64 of [A-Za-z0-9_-]")
        if timeout_seconds <= 0 or max_attempts < 1:
            raise TypeError(f"tool {tool_name}: timeout_seconds must be > 0, max_attempts >= 1")
        if callback and local:
            raise TypeError(f"tool {tool_name}: a callback tool cannot run as a local activity")
        description, arg_docs = parse_docstring(inspect.getdoc(fn))
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as e:  # NameError for hints that only exist under TYPE_CHECKING, ...
            raise TypeError(f"tool {tool_name}: cannot resolve type hints: {e}") from e
        fields, field_names, context_param = _signature_fields(fn, tool_name, hints, arg_docs)
        model, schema = build_arguments(tool_name, fields)
        return cls(
            name=tool_name,
            description=description,
            parameters=schema,
            fn=fn,
            args_model=model,
            context_param=context_param,
            timeout_seconds=timeout_seconds,
            max_attempts=max_attempts,
            risk=risk,
            sandboxed=sandboxed,
            local=local,
            callback=callback,
            is_async=inspect.iscoroutinefunction(fn),
            field_names=field_names,
        )

    def info(self) -> ToolInfo:
        """The tool as the workflow pins it (schema, timeout, attempts, risk)."""
        return ToolInfo(
            name=self.name,
            description=self.description,
            parameters=copy.deepcopy(self.parameters),
            timeout_seconds=self.timeout_seconds,
            max_attempts=self.max_attempts,
            risk=self.risk,
            sandboxed=self.sandboxed,
            local=self.local,
            callback=self.callback,
        )

    def parameter_summary(self) -> str:
        """``path (string, required), start_line (integer)``: the parameters for error messages."""
        required = set(self.parameters.get("required", []))
        parts: list[str] = []
        for pname, prop in self.parameters.get("properties", {}).items():
            kind = prop.get("type") or "any"
            parts.append(f"{pname} ({kind}{', required' if pname in required else ''})")
        return ", ".join(parts) or "none"
