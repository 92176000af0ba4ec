"""Tool schemas from type hints and docstrings (activities/tools/schema.py, docstrings.py)."""

import pytest

from activities.contracts import ToolInfo
from activities.tools import (
    REGISTRY,
    ToolContext,
    ToolRegistry,
    UnknownToolError,
    parse_docstring,
    tool,
)

# --------------------------------------------------------------------------- helpers


def _keys(node, found=None):
    """All dict keys of a JSON value, except property names under ``properties``."""
    found = set() if found is None else found
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "properties":
                for sub in v.values():
                    _keys(sub, found)
            else:
                found.add(k)
                _keys(v, found)
    elif isinstance(node, list):
        for x in node:
            _keys(x, found)
    return found


# --------------------------------------------------------------------------- schemas


def test_schema_from_hints_and_docstring(reg):
    @tool(registry=reg, timeout_seconds=5, max_attempts=2, risk="write")
    def greet(
        ctx: ToolContext, name: str, times: int = 1, title: str | None = None, loud: bool = False
    ) -> str:
        """Greet someone by name.

        Says hello, possibly several
        times.

        Args:
            ctx: injected.
            name: who to greet.
            times (int): how many times,
                at least one.
            title: an optional title.

        Returns:
            The greeting.
        """
        return "hi"

    info = reg.info("greet")
    assert isinstance(info, ToolInfo)
    assert info.description == "Greet someone by name.\n\nSays hello, possibly several times."
    assert (info.timeout_seconds, info.max_attempts, info.risk) == (5, 2, "write")
    params = info.parameters
    assert params["type"] == "object"
    assert params["additionalProperties"] is False
    assert list(params["properties"]) == ["name", "times", "title", "loud"]
    assert params["required"] == ["name"]
    assert params["properties"]["name"] == {"type": "string", "description": "who to greet."}
    assert params["properties"]["times"]["description"] == "how many times, at least one."
    assert params["properties"]["times"]["default"] == 1
    # Optional collapses to its type; a property literally named "title" survives title-stripping.
    assert params["properties"]["title"] == {"type": "string", "description": "an optional title."}
    assert "description" not in params["properties"]["loud"]
    assert "title" not in _keys(params)
    assert "ctx" not in params["properties"]
    assert greet(None, "x") == "hi"  # the decorated function stays callable
    assert greet.__tool__.context_param == "ctx"


def test_bare_decorator_registers_in_default_registry_and_defaults():
    info = REGISTRY.info("calculator")
    assert (info.timeout_seconds, info.max_attempts, info.risk) == (30.0, 3, "read")
    assert REGISTRY.info("write_file").risk == "write"
    assert {"calculator", "list_files", "read_file", "search_files", "write_file"} <= set(
        REGISTRY.names()
    )
    for name in REGISTRY.names():
        schema = REGISTRY.info(name).openai_schema()
        assert schema["function"]["description"]
        assert "title" not in _keys(schema["function"]["parameters"])
        for prop in schema["function"]["parameters"]["properties"].values():
            assert prop.get("description"), (name, prop)


def test_parse_docstring_sections():
    desc, args = parse_docstring(
        """Do a thing.

        Args:
            a: first.
            b (list[int]): second,
                continued.

        Raises:
            ToolError: never.
        """
    )
    assert desc == "Do a thing."
    assert args == {"a": "first.", "b": "second, continued."}


def test_tool_definition_errors(reg):
    def untyped(x):
        """No hints."""

    with pytest.raises(TypeError, match="needs a type hint"):
        reg.register(untyped)

    def star(*args: int) -> None:
        """Varargs."""

    with pytest.raises(TypeError, match="plain keyword"):
        reg.register(star)

    def a(x: int) -> int:
        """A."""
        return x

    def b(x: int) -> int:
        """B."""
        return x

    reg.register(tool(a, name="same", registry=ToolRegistry()))
    with pytest.raises(ValueError, match="already registered"):
        reg.register(tool(b, name="same", registry=ToolRegistry()))
    reg.register(a)  # re-registering the same function is allowed
    assert reg.names() == ["same"]


def test_infos_unknown_names(reg):
    @tool(registry=reg)
    def alpha() -> str:
        """Alpha."""
        return "a"

    assert [i.name for i in reg.infos(["alpha"])] == ["alpha"]
    with pytest.raises(UnknownToolError, match=r"nope, zap.*Available tools: alpha"):
        reg.infos(["alpha", "nope", "zap"])
    with pytest.raises(UnknownToolError):
        reg.info("nope")
