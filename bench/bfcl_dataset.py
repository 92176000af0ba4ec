"""Build the checked-in BFCL subset: ``python -m bench.bfcl_dataset [--per-category N]``.

Source: the ``bfcl-eval`` package (Berkeley Function Calling Leaderboard v4, Apache-2.0; install
it with ``pip install --no-deps bfcl-eval``: only its data files are read). From each category it
takes every ``len/N``-th case (deterministic) and writes:

* ``evals/bfcl/cases.jsonl``: ``simple_python`` and ``multiple``;
  ``evals/bfcl/live_multiple.jsonl``: ``live_multiple`` (cases whose question carries a system
  message of its own are left out: the agent's prompt is the system message). Each file is a
  dataset header, then one case per line: the user's question as ``input``, the first acceptable
  call of the ground truth as ``expected_tool_calls`` (every acceptable value of an argument as
  ``one_of``; BFCL's ``""`` = may be left out, ``optional``), and ``metadata``
  ``{category, bfcl_id, tools}``: the functions that case offers, in BFCL's order.
* ``evals/bfcl/functions.json``: each function as BFCL itself offers it to an OpenAI
  chat-completions model (:func:`openai_function`: its ``convert_to_tool`` with
  ``GORILLA_TO_OPENAPI`` after its Python-language hint), so a run offers the model exactly the
  tool the leaderboard does. Names become ``[A-Za-z0-9_-]`` (``math.factorial`` ->
  ``math_factorial``, as BFCL does); a name two cases declare differently gets a ``_2`` suffix
  in the later one.
* ``evals/bfcl/agents.yml``: two agents over all those tools with two prompts (``bfcl``, careful;
  ``bfcl-terse``, one line), temperature 0, so two variants compare prompts.

``activities/tools/bfcl.py`` declares the functions as tools that record their calls.
"""

from __future__ import annotations

import argparse
import copy
import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "evals" / "bfcl"
FILES = {"cases.jsonl": ("simple_python", "multiple"), "live_multiple.jsonl": ("live_multiple",)}
"""Which categories each dataset file holds (``cases.jsonl`` as it always did)."""
CATEGORIES = tuple(c for cats in FILES.values() for c in cats)
TYPES = {"dict": "object", "float": "number", "tuple": "array"}
GORILLA_TO_OPENAPI = {
    **{t: t for t in ("integer", "number", "string", "boolean", "array", "object")},
    **{"float": "number", "bool": "boolean", "list": "array", "dict": "object", "tuple": "array"},
    **{"any": "string", "byte": "integer", "short": "integer", "long": "integer"},
    **{"double": "number", "char": "string", "ArrayList": "array", "Array": "array"},
    "HashMap": "object",
}
"""BFCL's type names -> JSON Schema's (``bfcl_eval/constants/type_mappings.py``)."""
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
"""What BFCL appends to every function's description in its Python categories."""


def _cast(properties: dict[str, Any]) -> dict[str, Any]:
    """BFCL's ``_cast_to_openai_type``, in place; returns ``properties``.

    Types are mapped (unknown or missing: string); a float also gets ``format: float`` and
    " This is a float type value." in its description; nested objects' properties and array
    items (two levels) are mapped the same way.
    """
    for value in properties.values():
        kind = value.get("type")
        if kind is None:
            value["type"] = "string"
        else:
            if kind == "float":
                value["format"] = "float"
                value["description"] = value.get("description", "") + " This is a float type value."
            value["type"] = GORILLA_TO_OPENAPI.get(kind, "string")
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast(value["properties"])
            elif "items" in value:
                items = value["items"]
                items["type"] = GORILLA_TO_OPENAPI[items["type"]]
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = GORILLA_TO_OPENAPI[items["items"]["type"]]
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast(items["properties"])
    return properties


def openai_function(f: dict[str, Any]) -> dict[str, Any]:
    """One BFCL function doc as BFCL offers it to an OpenAI chat-completions model.

    Returns ``{"name", "description", "parameters"}`` (BFCL's Python categories); the doc given
    is left as it was.

    What ``bfcl_eval`` does (``utils._func_doc_language_specific_pre_processing``, then
    ``model_handler.utils.convert_to_tool`` with ``GORILLA_TO_OPENAPI``): the description gets
    :data:`PYTHON_HINT`; ``parameters.type`` becomes ``object``; properties are cast
    (:func:`_cast`); every other key (``required``, ``default``, ``enum``, BFCL's ``optional``)
    is kept where it is. The name is :func:`tool_name`'s.
    """
    doc = copy.deepcopy(f)
    params = doc["parameters"]
    params["type"] = "object"
    params["properties"] = _cast(params.get("properties", {}))
    return {
        "name": tool_name(doc["name"]),
        "description": doc.get("description", "") + PYTHON_HINT,
        "parameters": params,
    }


def json_schema(p: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema as plain JSON Schema (recursively; BFCL's ``optional`` dropped).

    The conversion this module used before it sent BFCL's own (:func:`openai_function`).
    """
    out: dict[str, Any] = {}
    for k, v in p.items():
        if k == "type":
            if v != "any":
                out["type"] = TYPES.get(v, v)
        elif k == "properties":
            out["properties"] = {n: json_schema(s) for n, s in v.items()}
        elif k == "items":
            out["items"] = json_schema(v)
        elif k != "optional":
            out[k] = v
    return out


def tool_name(name: str) -> str:
    """BFCL's function name as a tool name: every character outside ``[A-Za-z0-9_-]`` -> ``_``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]


def expected_args(truth: dict[str, list[Any]]) -> dict[str, Any]:
    """Ground-truth values -> literal or ``{"one_of": [...], "optional": bool}``."""
    out: dict[str, Any] = {}
    for k, values in truth.items():
        optional = "" in values
        vals = [v for v in values if v != ""]
        if not vals:
            continue  # only "": any value or none; not checked
        out[k] = (
            vals[0] if len(vals) == 1 and not optional else {"one_of": vals, "optional": optional}
        )
    return out


def _read(category: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    data = importlib.resources.files("bfcl_eval") / "data"
    qs = [
        json.loads(x)
        for x in (data / f"BFCL_v4_{category}.json").read_text().splitlines()
        if x.strip()
    ]
    answers = (data / "possible_answer" / f"BFCL_v4_{category}.json").read_text().splitlines()
    truth = {a["id"]: a["ground_truth"] for a in map(json.loads, filter(str.strip, answers))}
    return qs, truth


def build(
    per_category: int, categories: tuple[str, ...] = CATEGORIES
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(cases, functions)`` of the subset: cases of ``categories`` in that order."""
    functions: dict[str, dict[str, Any]] = {}
    cases = []
    for category in categories:
        qs, truth = _read(category)
        qs = [q for q in qs if len(q["question"]) == 1 and len(q["question"][0]) == 1]
        step = max(len(qs) // per_category, 1)
        for q in qs[::step][:per_category]:
            renamed = {}
            for f in q["function"]:
                doc = openai_function(f)
                name = doc["name"]
                while name in functions and {
                    k: functions[name][k] for k in ("description", "parameters")
                } != {k: doc[k] for k in ("description", "parameters")}:
                    name = f"{name}_2"
                functions[name] = {**doc, "name": name, "bfcl_name": f["name"]}
                renamed[f["name"]] = name
            (call,) = truth[q["id"]][0].items() if len(truth[q["id"]]) == 1 else (None,)
            if call is None:
                continue  # several calls expected: not in these categories
            cases.append(
                {
                    "id": q["id"],
                    "input": q["question"][0][-1]["content"],
                    "expected_tool_calls": [
                        {"name": renamed[call[0]], "arguments": expected_args(call[1])}
                    ],
                    "metadata": {
                        "category": category,
                        "bfcl_id": q["id"],
                        "tools": list(renamed.values()),
                    },
                }
            )
    return cases, sorted(functions.values(), key=lambda f: f["name"])


PROMPTS = {
    "bfcl": (
        "You are a helpful assistant that calls functions. When a function can answer the user's "
        "request, call it with arguments taken from the request; use the exact values the user "
        "gave and leave out optional arguments the user did not mention. After the function's "
        "result, answer in one short sentence."
    ),
    "bfcl-terse": "You are an assistant. Use the functions when useful.",
}
AGENTS_HEADER = """\
# Written by `python -m bench.bfcl_dataset` (do not edit): two prompts over the same tools, so
# `agentctl eval run evals/bfcl/cases.jsonl --agent bfcl --agent bfcl-terse` compares prompts.
# Each case offers only its own functions (its metadata.tools). Serve it with a worker started
# with AGENT_SPEC_FILE=evals/bfcl/agents.yml (docs/evaluations.md).
"""


def agents_yaml(names: list[str]) -> str:
    """The agents file: :data:`PROMPTS` over the tools ``names``, three turns at most."""
    import yaml

    agent = {
        "tools": names,
        "workspace": ".",
        "temperature": 0,
        "limits": {"max_turns": 3, "max_seconds": 300},
    }
    body = {
        "tool_modules": ["activities.tools.bfcl"],
        "agents": {n: {"system_prompt": p, **agent} for n, p in PROMPTS.items()},
    }
    return AGENTS_HEADER + yaml.safe_dump(body, sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    """Write the dataset files, ``functions.json`` and ``agents.yml``; prints what it wrote."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--per-category", type=int, default=15, help="cases per category (15)")
    args = ap.parse_args(argv)
    cases, functions = build(args.per_category)
    OUT.mkdir(parents=True, exist_ok=True)
    for file, cats in FILES.items():
        name = "bfcl-v4-subset" if file == "cases.jsonl" else f"bfcl-v4-{cats[0]}"
        header = {"dataset": {"name": name, "scorers": {"tool_calls_ordered": True}}}
        mine = [c for c in cases if c["metadata"]["category"] in cats]
        lines = [json.dumps(header)] + [json.dumps(c) for c in mine]
        (OUT / file).write_text("\n".join(lines) + "\n")
    (OUT / "functions.json").write_text(json.dumps(functions, indent=1) + "\n")
    (OUT / "agents.yml").write_text(agents_yaml([f["name"] for f in functions]))
    print(f"{len(cases)} cases, {len(functions)} functions -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
