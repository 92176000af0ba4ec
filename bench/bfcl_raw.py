"""The raw path of the BFCL comparison: each case straight to the model server, no runtime.

One chat-completions request per case with the OpenAI SDK: the agent's system prompt and the
case's question as messages, the case's functions as tools (``evals/bfcl/functions.json``: BFCL's
own OpenAI tools, ``bench/bfcl_dataset.py``) in the case's order, the agent's temperature and
``max_output_tokens``. The reply's first tool call is scored with the scorer an evaluation run
gets (:func:`activities.evals.scorers.score_run` with the dataset's ``ScorerConfig``), as a run
whose only call it is: what the model asked, the same test the runtime path
(``bench/bfcl_gap.py``) passes or fails on.

:func:`raw_request` is also what ``tests/integration/test_bfcl_raw.py`` holds the runtime's first
model request to: the same messages, tools (names, descriptions, schemas, key order),
temperature and ``max_tokens``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from activities.evals.contracts import Case, RunFacts, Score, ScorerConfig
from activities.evals.scorers import passed, score_run

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ROOT / "evals" / "bfcl" / "functions.json"
AGENTS = ROOT / "evals" / "bfcl" / "agents.yml"
DEFAULT_TEMPERATURE = 0.2
DEFAULT_MAX_TOKENS = 1024
"""An agent's ``temperature`` and ``max_output_tokens`` when its spec leaves them out
(``activities/spec_agent.py``)."""


def load_functions(path: Path = FUNCTIONS) -> dict[str, dict[str, Any]]:
    """Tool name -> ``{"name", "description", "parameters"}`` of every function in ``path``."""
    docs = json.loads(path.read_text(encoding="utf-8"))
    return {f["name"]: {k: f[k] for k in ("name", "description", "parameters")} for f in docs}


def agent_settings(agent: str, path: Path = AGENTS) -> dict[str, Any]:
    """``{"system_prompt", "temperature", "max_tokens"}`` of ``agent`` in the spec file ``path``.

    Raises:
        KeyError: the file has no such agent.
    """
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))["agents"][agent]
    return {
        "system_prompt": spec["system_prompt"],
        "temperature": spec.get("temperature", DEFAULT_TEMPERATURE),
        "max_tokens": spec.get("max_output_tokens", DEFAULT_MAX_TOKENS),
    }


def raw_request(
    case: Case, settings: dict[str, Any], functions: dict[str, dict[str, Any]], model: str
) -> dict[str, Any]:
    """The chat-completions body the raw path sends for ``case``.

    ``settings`` from :func:`agent_settings`; ``functions`` from :func:`load_functions`.

    Raises:
        KeyError: the case offers a function ``functions`` lacks.
    """
    names = [str(n) for n in case.metadata.get("tools") or []]
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": settings["system_prompt"]},
            {"role": "user", "content": case.input},
        ],
        "temperature": settings["temperature"],
        "max_tokens": settings["max_tokens"],
    }
    if names:
        body["tools"] = [{"type": "function", "function": functions[n]} for n in names]
    return body


@dataclass
class RawResult:
    """One case on the raw path: whether it passed, the scores, the first call (or why none).

    ``calls`` counts the reply's tool calls: only the first is scored (a server that lets a
    model write several in one reply gives the raw path a chance the runtime, which records
    every call, does not get; llama.cpp answers such a reply with HTTP 500).
    """

    case_id: str
    category: str
    passed: bool
    scores: list[Score] = field(default_factory=list[Score])
    call: dict[str, Any] | None = None
    error: str | None = None
    latency_ms: float = 0.0
    tokens: int = 0
    calls: int = 0


def first_call_facts(completion: Any) -> RunFacts:
    """A reply as the scorers read a run: its first tool call only (name and arguments text)."""
    message = completion.choices[0].message
    calls = message.tool_calls or []
    usage = completion.usage
    return RunFacts(
        status="completed",
        output=message.content,
        tool_calls=[
            {"name": c.function.name, "arguments": c.function.arguments, "status": "ok"}
            for c in calls[:1]
        ],
        total_tokens=usage.total_tokens if usage is not None else 0,
    )


async def run_raw(
    cases: list[Case],
    base_url: str,
    api_key: str,
    model: str,
    agent: str = "bfcl",
    scorers: ScorerConfig | None = None,
    concurrency: int = 4,
    agents_file: Path = AGENTS,
    functions_file: Path = FUNCTIONS,
) -> list[RawResult]:
    """Send every case once (``concurrency`` at a time); returns the results in case order.

    A request the server refuses (an HTTP error: llama.cpp answers 500 when the model writes a
    call it cannot parse) is a failed case with the error, as BFCL counts it; nothing is retried.
    """
    import time

    import openai

    cfg = scorers or ScorerConfig()
    settings = agent_settings(agent, agents_file)
    functions = load_functions(functions_file)
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=600)
    gate = asyncio.Semaphore(concurrency)

    async def one(case: Case) -> RawResult:
        category = str(case.metadata.get("category", ""))
        body = raw_request(case, settings, functions, model)
        async with gate:
            t0 = time.perf_counter()
            try:
                completion = await client.chat.completions.create(**body)
            except openai.APIError as e:
                return RawResult(case.id, category, False, error=f"{type(e).__name__}: {e}")
            ms = (time.perf_counter() - t0) * 1000
        facts = first_call_facts(completion)
        made = len(completion.choices[0].message.tool_calls or [])
        facts.latency_ms = ms
        scores = score_run(case, facts, cfg)
        return RawResult(
            case.id,
            category,
            passed(facts.status, scores),
            scores,
            facts.tool_calls[0] if facts.tool_calls else None,
            latency_ms=round(ms, 1),
            tokens=facts.total_tokens,
            calls=made,
        )

    try:
        return list(await asyncio.gather(*(one(c) for c in cases)))
    finally:
        await client.close()
