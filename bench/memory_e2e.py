"""Scenario ``memory_e2e``: how many BFCL v4 memory questions the local model answers, with memory and without.

``python -m bench.run --only memory_e2e [--quick | --extended]``. End to end through the runtime:
each question is an ``AgentRun`` (one model step, no tools) on an in-memory dev server with an
in-process worker, on the model server at ``OPENAI_BASE_URL`` (the local one by default:
``agentctl model-server --background``). Two agents with the same system prompt:

* ``with_memory``: ``memory: {read: [user]}``, so the model step's activity retrieves the top 8
  items of ``user:<principal>`` (hybrid BM25 + wordllama, within ``max_tokens: 800``) and gives
  them to the model as one block, as any run with memory does;
* ``without_memory``: no ``memory:``.

The store is the SQLite backend, loaded before the runs with what the user said in the set's
earlier chats (its ``memory_prereq_conversation`` files), cut into chunks of up to three
sentences, one principal per BFCL scenario (tenant ``bench``). A question counts as answered when
one of its ground-truth strings is in the run's final answer (case-insensitive), the rule
``bench/memory.py`` uses for retrieval hits. Questions: the first ``--per`` of each of the five
scenarios (4 with ``--quick``, 10 by default, all 155 with ``--extended``); two runs at once.
Without a reachable model server the scenario says so and measures nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from temporalio.client import Client

from bench.evals import model_reachable
from bench.infra import dev_server, workdir
from bench.memory import _data, _lines, load_bfcl_chats

console = Console()
PROMPT = (
    "You are a personal assistant. Answer the user's question in one short sentence. "
    "If you were given memory about the user, use it; if you do not know, say so."
)


def questions(per_scenario: int | None) -> list[dict[str, Any]]:
    """The BFCL v4 memory questions to ask, ``per_scenario`` of each scenario (None: all)."""
    d = _data()
    truth = {x["id"]: x["ground_truth"] for x in _lines(d / "possible_answer/BFCL_v4_memory.json")}
    seen: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for q in _lines(d / "BFCL_v4_memory.json"):
        sc = str(q["scenario"])
        if per_scenario is not None and seen.get(sc, 0) >= per_scenario:
            continue
        seen[sc] = seen.get(sc, 0) + 1
        out.append(
            {
                "id": q["id"],
                "scenario": sc,
                "question": q["question"][0][0]["content"],
                "answers": [str(a) for a in truth.get(q["id"], [])],
            }
        )
    return out


def load_store(db: Path) -> int:
    """Put the earlier chats' user turns into the store at ``db``; returns the item count."""
    from activities.memory import WordLlamaEmbedder
    from activities.memory.sqlite_store import SqliteMemoryStore

    store = SqliteMemoryStore(db, WordLlamaEmbedder())
    n = load_bfcl_chats(store)
    store.close()
    return n


def answered(output: str | None, answers: list[str]) -> bool:
    """Whether one ground-truth string is in ``output`` (case-insensitive)."""
    text = (output or "").lower()
    return any(a.lower() in text for a in answers if a)


def spec_yaml(model: str, workspace: Path) -> str:
    """The two agents: the same prompt and model, one reading ``user`` memory."""
    base = {"model": model, "system_prompt": PROMPT, "tools": [], "workspace": str(workspace)}
    return yaml.safe_dump(
        {
            "agents": {
                "with_memory": base | {"memory": {"read": ["user"]}},
                "without_memory": dict(base),
            }
        }
    )


async def scenario_memory_e2e(opts: Any) -> dict[str, Any]:
    """Ask each question twice (with and without memory); returns the shares and per-run rows."""
    from workers.config import Settings, load_settings
    from workers.worker import build_workers

    base = load_settings()
    model = model_reachable(base.openai_base_url)
    if model is None:
        msg = f"no model server at {base.openai_base_url}: start one (agentctl model-server --background)"
        console.print(f"[yellow]memory_e2e skipped:[/] {msg}")
        return {"skipped": msg}
    per = None if getattr(opts, "extended", False) else (4 if opts.quick else 10)
    qs = questions(per)
    rows: list[dict[str, Any]] = []
    with workdir("memory-e2e") as d, tempfile.TemporaryDirectory() as ws:
        db = d / "memory.db"
        items = load_store(db)
        spec = d / "agents.yml"
        spec.write_text(spec_yaml(model, Path(ws)))
        async with dev_server(d) as srv:
            settings = Settings(
                openai_base_url=base.openai_base_url,
                openai_api_key=base.openai_api_key,
                spec_file=str(spec),
                task_queue=f"bench-mem-e2e-{uuid.uuid4().hex[:6]}",
                default_model=model,
                state_dir=str(d / "state"),
                memory_url=f"sqlite://{db}",
            )
            gate = asyncio.Semaphore(2)
            t0 = time.monotonic()
            async with contextlib.AsyncExitStack() as stack:
                for w in build_workers(srv.client, settings):
                    await stack.enter_async_context(w)
                await asyncio.gather(
                    *(
                        _ask(srv.client, settings.task_queue, gate, q, a, rows)
                        for q in qs
                        for a in ("with_memory", "without_memory")
                    )
                )
            wall = time.monotonic() - t0
    out: dict[str, Any] = {"model": model, "questions": len(qs), "items": items}
    for agent in ("with_memory", "without_memory"):
        out[agent] = _agent_figures([r for r in rows if r["agent"] == agent])
    out["wall_s"] = round(wall, 1)
    out["runs"] = sorted(rows, key=lambda r: (r["id"], r["agent"]))
    console.print(
        f"memory_e2e ({model}, {len(qs)} questions): with memory "
        f"{out['with_memory']['correct']}/{len(qs)} = {out['with_memory']['share']:.2f}, "
        f"without {out['without_memory']['correct']}/{len(qs)} = "
        f"{out['without_memory']['share']:.2f}; {out['wall_s']} s",
        highlight=False,
    )
    return out


async def _ask(
    client: Client,
    task_queue: str,
    gate: asyncio.Semaphore,
    q: dict[str, Any],
    agent: str,
    rows: list[dict[str, Any]],
) -> None:
    """Ask question ``q`` of ``agent`` (one run, once ``gate`` lets it); its row goes to ``rows``.

    The row: status, whether the answer is right, the memory items the model step was given, total
    tokens and the run's seconds.
    """
    from workers import client as rc
    from workflows.models import RunRequest

    async with gate:
        t0 = time.monotonic()
        h = await rc.start_run(
            client,
            RunRequest(
                input=q["question"],
                agent=agent,
                tenant_id="bench",
                principal_id=q["scenario"],
            ),
            task_queue=task_queue,
        )
        res = await asyncio.wait_for(h.result(), 600)
        st = await rc.state(client, h.id)  # what the last model step was given
        rows.append(
            {
                "id": q["id"],
                "agent": agent,
                "status": res.status,
                "correct": answered(res.output, q["answers"]),
                "memory_items": len(st.memory),
                "tokens": res.usage.total_tokens,
                "seconds": round(time.monotonic() - t0, 1),
            }
        )


def _agent_figures(mine: list[dict[str, Any]]) -> dict[str, Any]:
    """One agent's answers right (count and share), mean tokens per run, runs completed."""
    return {
        "correct": sum(r["correct"] for r in mine),
        "share": round(sum(r["correct"] for r in mine) / max(1, len(mine)), 3),
        "tokens_per_run": round(sum(r["tokens"] for r in mine) / max(1, len(mine))),
        "completed": sum(r["status"] == "completed" for r in mine),
    }
