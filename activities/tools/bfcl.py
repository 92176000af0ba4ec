"""BFCL's functions as tools: each function of ``evals/bfcl/functions.json`` becomes a tool.

Importing this module (``tool_modules: [activities.tools.bfcl]``, as ``evals/bfcl/agents.yml``
does) registers one tool per function, declared from its doc (description and JSON-Schema
parameters; ``bench/bfcl_dataset.py`` writes the file from the ``bfcl-eval`` package). A call
checks the required arguments, then answers a fixed JSON text saying the call was recorded: BFCL's
functions have no implementation, the evaluation scores the call itself (the run's
``RunResult.tool_calls``). Calls of these tools have no side effects (``risk`` read).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, create_model

from activities.tools.registry import REGISTRY, ToolDef

FUNCTIONS = Path(__file__).resolve().parent / "data" / "bfcl_functions.json"
"""The function docs, package data (in the repository a link to the checked-in
``evals/bfcl/functions.json``, written by ``python -m bench.bfcl_dataset``), so the module works
the same installed from the wheel."""


def _recorder(name: str):
    def call(**arguments: Any) -> str:
        given = {k: v for k, v in arguments.items() if v is not None}
        return json.dumps(
            {
                "status": "ok",
                "function": name,
                "arguments": given,
                "note": "the call was recorded; answer the user in one sentence",
            }
        )

    call.__name__ = call.__qualname__ = f"bfcl_{name}"
    return call


def tool_def(fn: dict[str, Any]) -> ToolDef:
    """The tool of one function doc ``{"name", "description", "parameters"}``.

    Arguments are checked for presence only (required ones must be given; values of any JSON
    type are passed on), so a wrongly typed argument reaches the recorded call and its score.
    The model is offered ``description`` and ``parameters`` exactly as the doc has them, keys in
    the same order (they are BFCL's own OpenAI tool: ``bench/bfcl_dataset.py``), so a run's
    request carries the bytes a raw request does (``bench/bfcl_raw.py``).
    """
    params = fn["parameters"]
    required = set(params.get("required") or [])
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    for i, pname in enumerate(params.get("properties") or {}):
        fname = f"a{i}"
        names[pname] = fname
        default = ... if pname in required else None
        fields[fname] = (Any, Field(default, alias=pname))
    model = create_model(
        f"Args_{fn['name']}", __config__=ConfigDict(populate_by_name=True), **fields
    )
    return ToolDef(
        name=fn["name"],
        description=fn.get("description", ""),
        parameters=params if "properties" in params else {**params, "properties": {}},
        fn=_recorder(fn["name"]),
        args_model=model,
        field_names=names,
        timeout_seconds=10.0,
        max_attempts=2,
        risk="read",
    )


def register_all(path: Path = FUNCTIONS) -> list[str]:
    """Register every function of ``path`` as a tool; returns their names.

    Raises:
        FileNotFoundError: ``path`` is missing; the message names it and how to write it.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"BFCL's function docs are missing: {path} (write them with "
            "`python -m bench.bfcl_dataset` in the repository)"
        ) from e
    docs = json.loads(text)
    return [REGISTRY.register(tool_def(fn)).name for fn in docs]


NAMES = register_all()
"""The tool names this module registered."""
