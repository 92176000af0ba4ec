"""Build the checked-in BFCL subset: ``python -m bench.bfcl_dataset [--per-category N]``.

Source: the ``bfcl-eval`` package (Berkeley Function Calling Leaderboard v4, Apache-2.0; install
it with ``pip install --no-deps bfcl-eval``: only its data files are read). From the categories
``simple_python`` and ``multiple`` it takes every ``len/N``-th case (deterministic) and writes:

* ``evals/bfcl/cases.jsonl``: a dataset header, then one case per line: the user's question as
  ``input``, the first acceptable call of the ground truth as ``expected_tool_calls`` (every
  acceptable value of an argument as ``one_of``; BFCL's ``""`` = may be left out, ``optional``),
  and ``metadata`` ``{category, bfcl_id, tools}``: the functions that case offers.
* ``evals/bfcl/functions.json``: each function's doc as an OpenAI tool (BFCL's types mapped to
  JSON Schema: dict -> object, float -> number, tuple -> array, any -> no type). Names become
  ``[A-Za-z0-9_-]`` (``math.factorial`` -> ``math_factorial``, as BFCL does for OpenAI models);
  a name two cases declare differently gets a ``_2`` suffix in the second.

* ``evals/bfcl/agents.yml``: two agents over all those tools with two prompts (``bfcl``, careful;
  ``bfcl-terse``, one line), so two variants compare prompts.

``activities/tools/bfcl.py`` declares the functions as tools that record their calls.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "evals" / "bfcl"
CATEGORIES = ("simple_python", "multiple")
TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def json_schema(p: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema as JSON Schema (recursively); drops BFCL's ``optional`` key."""
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


def build(per_category: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(cases, functions)`` of the subset."""
    functions: dict[str, dict[str, Any]] = {}
    cases = []
    for category in CATEGORIES:
        qs, truth = _read(category)
        step = max(len(qs) // per_category, 1)
        for q in qs[::step][:per_category]:
            renamed = {}
            for f in q["function"]:
                doc = {
                    "description": f.get("description", ""),
                    "parameters": json_schema(f["parameters"]),
                }
                name = tool_name(f["name"])
                while name in functions and {k: functions[name][k] for k in doc} != doc:
                    name = f"{name}_2"
                functions[name] = {"name": name, "bfcl_name": f["name"], **doc}
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

    agent = {"tools": names, "workspace": ".", "limits": {"max_turns": 3, "max_seconds": 300}}
    body = {
        "tool_modules": ["activities.tools.bfcl"],
        "agents": {n: {"system_prompt": p, **agent} for n, p in PROMPTS.items()},
    }
    return AGENTS_HEADER + yaml.safe_dump(body, sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    """Write ``evals/bfcl/cases.jsonl`` and ``functions.json``; prints what it wrote."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--per-category", type=int, default=15, help="cases per category (15)")
    args = ap.parse_args(argv)
    cases, functions = build(args.per_category)
    OUT.mkdir(parents=True, exist_ok=True)
    header = {"dataset": {"name": "bfcl-v4-subset", "scorers": {"tool_calls_ordered": True}}}
    lines = [json.dumps(header)] + [json.dumps(c) for c in cases]
    (OUT / "cases.jsonl").write_text("\n".join(lines) + "\n")
    (OUT / "functions.json").write_text(json.dumps(functions, indent=1) + "\n")
    (OUT / "agents.yml").write_text(agents_yaml([f["name"] for f in functions]))
    print(f"{len(cases)} cases, {len(functions)} functions -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
