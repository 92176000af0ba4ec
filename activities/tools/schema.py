"""JSON schemas of tool arguments: a pydantic model built from a function's fields, cleaned.

The schema is the OpenAI function-parameters shape: ``{"type": "object", "properties": {...},
"required": [...]}`` without pydantic's ``title`` keys, optional parameters as their plain type.
"""

from __future__ import annotations

from typing import Any, cast

from pydantic import BaseModel, ConfigDict, create_model

_KEEP_AS_IS = {"default", "examples", "enum", "const"}


def _clean_schema(node: Any) -> Any:
    """Drop pydantic's ``title`` keys everywhere except where they are property names."""
    if isinstance(node, list):
        return [_clean_schema(x) for x in cast("list[Any]", node)]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in cast("dict[str, Any]", node).items():
        if key == "title":
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {
                name: _clean_schema(sub) for name, sub in cast("dict[Any, Any]", value).items()
            }
        elif key in _KEEP_AS_IS:
            out[key] = value
        else:
            out[key] = _clean_schema(value)
    return out


def _simplify_optionals(schema: dict[str, Any]) -> None:
    """``anyOf: [X, null]`` of an optional parameter becomes ``X`` (omitting it means null)."""
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        any_of = prop.get("anyOf")
        if name in required or not isinstance(any_of, list):
            continue
        options = cast("list[Any]", any_of)
        if len(options) != 2:
            continue
        others = [s for s in options if s != {"type": "null"}]
        if len(others) != 1:
            continue
        del prop["anyOf"]
        merged: dict[str, Any] = {**others[0], **prop}
        if "default" in merged and merged["default"] is None:
            del merged["default"]
        prop.clear()
        prop.update(merged)


def _key_order(key: str) -> int:
    """Sort key of a property's keys: ``type`` and ``description`` first, the rest as they came."""
    return {"type": 0, "description": 1}.get(key, 2)


def build_arguments(
    tool_name: str, fields: dict[str, Any]
) -> tuple[type[BaseModel], dict[str, Any]]:
    """The argument model of tool ``tool_name`` and its OpenAI parameters schema.

    Args:
        tool_name: the tool's name (names the model).
        fields: pydantic field name -> ``(annotation, FieldInfo)``, as ``create_model`` takes them.

    Raises:
        TypeError: a field's annotation cannot be turned into a JSON schema.
    """
    try:
        model = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid", protected_namespaces=()),
            **fields,
        )
        schema = _clean_schema(model.model_json_schema(by_alias=True))
    except Exception as e:
        raise TypeError(f"tool {tool_name}: cannot build the argument schema: {e}") from e
    _simplify_optionals(schema)
    schema = {
        "type": "object",
        "properties": {
            p: {k: prop[k] for k in sorted(prop, key=_key_order)}
            for p, prop in schema.get("properties", {}).items()
        },
        "required": schema.get("required", []),
        **{k: v for k, v in schema.items() if k not in ("type", "properties", "required")},
    }
    return model, schema
