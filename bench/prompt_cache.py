"""Scenario ``prompt_cache``: the prompt time of later model steps, with and without the cache.

Issue #40 part 3: the server's prompt cache against none.

``python -m bench.run --only prompt_cache [--quick]``. On the model server at ``OPENAI_BASE_URL``
(the local one by default: ``agentctl model-server --background``). Each conversation is the one
a run of the built-in ``default`` agent sends (its system prompt and its tools' schemas, as
``model.complete`` sends them) for a question answered in three steps: the question, then a
``read_file`` call and its result (about 6 KB of a Python file, as the textwrap question of
issue #35 reads), then a ``search_files`` call and its result. Step k's request is step k-1's
messages unchanged plus what happened since: what the runtime sends (byte-stable beginning, see
``tests/integration/test_prompt_cache.py``). Every request asks for one token (``max_tokens: 1``),
so the time measured is prefill alone, read from llama.cpp's reply ``timings`` (``prompt_ms``,
``prompt_n``; ``cache_n``: tokens reused from the slot's cache).

Two passes over the same conversations: ``cache_prompt: true`` (llama.cpp's default, what every
run gets) and ``cache_prompt: false`` (each step processes its whole prompt). Conversations differ
in their question (a fresh first prefix each time), 3 of them (2 with ``--quick``). Without a
reachable model server the scenario says so and measures nothing; an endpoint that reports no
``timings`` gives its ``usage.prompt_tokens_details.cached_tokens`` and wall time instead.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.common import Options
from bench.evals import model_reachable

SOURCE = Path(__file__).resolve().parents[1] / "activities" / "model.py"
QUESTIONS = [
    "How many lines does activities/model.py have? Read the file.",
    "Which class in activities/model.py calls the model server? Read the file.",
    "What does activities/model.py import from openai? Read the file.",
]


def _agent_prompt() -> tuple[str, list[dict[str, Any]]]:
    """The built-in default agent's system prompt and its tools' OpenAI schemas."""
    from activities.spec_pinning import resolve_agent
    from activities.tools import REGISTRY, load_tool_modules
    from workers.config import Settings
    from workers.worker import tool_modules_for

    settings = Settings()
    load_tool_modules(tool_modules_for(settings))
    spec = resolve_agent(settings.spec_file, "default", settings.default_model)
    names = [t if isinstance(t, str) else t.name for t in spec.tools]
    infos = REGISTRY.infos([n for n in names if n in REGISTRY])
    return spec.system_prompt or "", [i.openai_schema() for i in infos]


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def conversation(system: str, question: str) -> list[list[dict[str, Any]]]:
    """The messages of steps 1, 2 and 3 of one run (each a prefix of the next)."""
    text = SOURCE.read_text()[:6000]
    step1 = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    step2 = [
        *step1,
        _call("call_1", "read_file", {"path": "activities/model.py"}),
        {"role": "tool", "tool_call_id": "call_1", "content": text},
    ]
    found = "\n".join(f"activities/model.py:{i}: import" for i in range(1, 40))
    step3 = [
        *step2,
        _call("call_2", "search_files", {"pattern": "import"}),
        {"role": "tool", "tool_call_id": "call_2", "content": found},
    ]
    return [step1, step2, step3]


def _post(base_url: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    req = urllib.request.Request(  # noqa: S310 - the configured model server
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer local"},
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:  # noqa: S310
        out = json.loads(r.read())
    return out, (time.perf_counter() - t0) * 1000


def _step(
    base_url: str, model: str, messages: list[dict[str, Any]], tools: list[Any], cache: bool
) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": messages,
        "tools": tools,
        "max_tokens": 1,
        "temperature": 0,
        "cache_prompt": cache,
    }
    out, wall_ms = _post(base_url, body)
    timings = out.get("timings") or {}
    usage = out.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return {
        "prompt_tokens": usage.get("prompt_tokens"),
        "prompt_ms": timings.get("prompt_ms", wall_ms),
        "processed": timings.get("prompt_n"),
        "cached": timings.get("cache_n", details.get("cached_tokens", 0)),
        "wall_ms": round(wall_ms, 1),
    }


def _measure(base_url: str, model: str, opts: Options) -> dict[str, Any]:
    system, tools = _agent_prompt()
    n = 2 if opts.quick else 3
    out: dict[str, Any] = {"conversations": n, "with_cache": [], "without_cache": []}
    for cache, key in ((False, "without_cache"), (True, "with_cache")):
        for q in QUESTIONS[:n]:
            for k, messages in enumerate(conversation(system, f"{q} ({key})")):
                r = _step(base_url, model, messages, tools, cache)
                r["step"] = k + 1
                out[key].append(r)
                opts.log(f"prompt_cache {key} step {k + 1}: {r}")
    for key in ("with_cache", "without_cache"):
        later = [r["prompt_ms"] for r in out[key] if r["step"] > 1]
        out[f"{key}_later_steps_prompt_ms_median"] = round(statistics.median(later), 1)
        out[f"{key}_later_steps_cached_share"] = round(
            sum(r["cached"] or 0 for r in out[key] if r["step"] > 1)
            / max(1, sum(r["prompt_tokens"] or 0 for r in out[key] if r["step"] > 1)),
            3,
        )
    w = out["with_cache_later_steps_prompt_ms_median"]
    wo = out["without_cache_later_steps_prompt_ms_median"]
    out["speedup"] = round(wo / w, 2) if w else None
    return out


async def scenario_prompt_cache(opts: Options) -> dict[str, Any]:
    """Measure (see the module docstring); ``{"skipped": why}`` without a model server."""
    from workers.config import Settings

    settings = Settings()
    base_url = settings.openai_base_url
    model = model_reachable(base_url)
    if model is None:
        return {"skipped": f"no model server at {base_url} (agentctl model-server --background)"}
    return await asyncio.to_thread(_measure, base_url, model, opts)


def table_prompt_cache(r: dict[str, Any]) -> Table:
    """Median prompt (prefill) milliseconds of steps 2 and 3, with and without the cache."""
    t = Table(
        "pass",
        "later steps: prompt ms (median)",
        "cached share of their prompt",
        title=f"prompt_cache: {r.get('conversations')} conversations of 3 steps; "
        f"{r.get('skipped', '')}speed-up {r.get('speedup')}x",
    )
    for key in ("without_cache", "with_cache"):
        if f"{key}_later_steps_prompt_ms_median" in r:
            t.add_row(
                key.replace("_", " "),
                f"{r[f'{key}_later_steps_prompt_ms_median']:.0f}",
                f"{r[f'{key}_later_steps_cached_share']:.0%}",
            )
    return t
