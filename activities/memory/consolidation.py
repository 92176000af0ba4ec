"""Background consolidation: what a finished run taught, extracted into memory items.

Two activities (workers/worker.py registers them):

* ``memory.handoff`` (a local activity of ``AgentRun`` at the end of a run whose spec writes
  memory): keeps the run's transcript among the pending runs (idempotent per run: a SQLite file in
  the worker's state folder, or with a PostgreSQL store its table ``memory_pending``, which every
  worker on every host reads) and
  signal-with-starts the one :class:`workflows.memory_consolidation.MemoryConsolidation` workflow
  of (tenant, principal), which debounces. The run's result waits only for this local activity.
* ``memory.consolidate``: for each pending run, asks the model (any OpenAI-compatible endpoint)
  for facts worth remembering as JSON, and writes them **add-only** with provenance: a fact that
  replaces an existing one supersedes it (``valid_to``, ``superseded_by``), nothing is deleted.
  An empty or degenerate extraction writes nothing (mastra PR #22074 lost all memory to an empty
  reflection); text of the system prompt is never stored as a fact (mem0 #2736); secrets are
  redacted before anything is stored; writes are idempotent per (run, fact index), so a worker
  killed mid-way writes no item twice and loses none (the pending row goes only after all writes).
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, Field
from temporalio import activity

from activities.memory.items import (
    MemoryItem,
    Namespace,
    Provenance,
    ScopeKind,
    scope,
    storable,
)
from activities.memory.store_url import default_store
from activities.private_files import private_file
from activities.redaction import redactor_for

HANDOFF = "memory.handoff"
CONSOLIDATE = "memory.consolidate"
CONSOLIDATION_WORKFLOW = "MemoryConsolidation"
MAX_FACTS = 8
MAX_TRANSCRIPT_CHARS = 24_000
EXTRACT_PROMPT = (
    "You keep long-term memory for an assistant. From the conversation below, list at most "
    f"{MAX_FACTS} durable facts about the user, their workspace or their preferences that would "
    "help in later conversations (not what the assistant did, not instructions to the assistant). "
    'If a fact replaces one of the EXISTING facts, give that fact\'s id in "replaces". Answer with '
    'JSON only: {"facts": [{"text": "...", "replaces": null}]} - an empty list when nothing is '
    "worth keeping."
)


class HandoffInput(BaseModel):
    """Input of ``memory.handoff``: the finished run and where its facts go."""

    run_id: str
    tenant_id: str
    principal_id: str
    agent: str
    model: str
    scopes: list[str]
    """Scopes the spec writes (``user:<p>``, ``agent:<a>``, ``thread:<id>``)."""
    system_prompt: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    debounce_seconds: float = 5.0


class ConsolidateInput(BaseModel):
    """Input of ``memory.consolidate``: the pending runs of one (tenant, principal)."""

    tenant_id: str
    principal_id: str
    run_ids: list[str]


def workflow_id(tenant_id: str, principal_id: str) -> str:
    """The consolidation workflow of (tenant, principal); ids are quoted so none can collide."""
    return "memory-" + json.dumps([tenant_id, principal_id], separators=(",", ":"))


class Pending:
    """Transcripts waiting for consolidation, in a SQLite file beside the store (one row a run)."""

    def __init__(self, path: Path) -> None:
        private_file(path, sqlite=True)  # transcripts: owner only
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS pending (run_id TEXT PRIMARY KEY, tenant TEXT, body TEXT)"
        )

    def add(self, inp: HandoffInput) -> None:
        """Keep ``inp`` (a second add of the same run changes nothing)."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO pending VALUES (?, ?, ?)",
                (inp.run_id, inp.tenant_id, inp.model_dump_json()),
            )

    def get(self, tenant_id: str, run_id: str) -> HandoffInput | None:
        """The pending run of that tenant, or None (done already)."""
        with self._lock:
            row = self._db.execute(
                "SELECT body FROM pending WHERE run_id = ? AND tenant = ?", (run_id, tenant_id)
            ).fetchone()
        return HandoffInput.model_validate_json(row[0]) if row else None

    def done(self, run_id: str) -> None:
        """Forget a consolidated run."""
        with self._lock:
            self._db.execute("DELETE FROM pending WHERE run_id = ?", (run_id,))


class SharedPending:
    """:class:`Pending` in the memory store's PostgreSQL, for workers on many hosts.

    ``memory.handoff`` runs on the worker of the run's last workflow task and
    ``memory.consolidate`` on any worker of the queue: with a pending file in each worker's state
    folder, a run handed off on one host and consolidated on another found nothing to extract and
    its facts were lost. The table is opened on first use (a worker starts while the database is
    still coming up). Same methods as :class:`Pending`.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._pg: Any = None
        self._lock = threading.Lock()

    def _table(self) -> Any:
        with self._lock:
            if self._pg is None:
                from activities.memory.pg_store import PostgresPending

                self._pg = PostgresPending(self._url)
            return self._pg

    def add(self, inp: HandoffInput) -> None:
        """Keep ``inp`` (a second add of the same run changes nothing)."""
        self._table().add(inp)

    def get(self, tenant_id: str, run_id: str) -> HandoffInput | None:
        """The pending run of that tenant, or None (done already)."""
        body = self._table().get(tenant_id, run_id)
        return HandoffInput.model_validate_json(body) if body else None

    def done(self, run_id: str) -> None:
        """Forget a consolidated run."""
        self._table().done(run_id)


def pending_for(state_dir: str, memory_url: str | None) -> Pending | SharedPending:
    """Where transcripts wait: the PostgreSQL store's table, else ``<state_dir>/memory-pending.db``."""
    if memory_url and urlsplit(memory_url).scheme in ("postgresql", "postgres"):
        return SharedPending(memory_url)
    return Pending(Path(state_dir).expanduser() / "memory-pending.db")


def _get(obj: object, key: str) -> Any:
    """``obj.get(key)`` when ``obj`` is a dict (parsed JSON), else None."""
    return cast("dict[str, Any]", obj).get(key) if isinstance(obj, dict) else None


def _facts(answer: str) -> list[dict[str, Any]]:
    """The ``facts`` of the model's JSON answer; [] for anything else (degenerate output)."""
    m = re.search(r"\{.*\}", answer, re.S)
    try:
        data = json.loads(m.group(0)) if m else None
    except ValueError:
        return []
    facts = _get(data, "facts")
    if not isinstance(facts, list):
        return []
    out: list[dict[str, Any]] = []
    for f in cast("list[Any]", facts)[:MAX_FACTS]:
        text = f if isinstance(f, str) else _get(f, "text")  # a string, or a {"text": ...} object
        if isinstance(text, str) and 8 <= len(text.strip()) <= 500 and storable(text):
            out.append(
                {
                    "text": text.strip(),
                    "replaces": _get(f, "replaces"),
                }
            )
    return out


def _transcript(messages: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role in ("user", "assistant") and isinstance(content, str) and content.strip():
            lines.append(f"{role}: {content.strip()}")
    return "\n".join(lines)[-MAX_TRANSCRIPT_CHARS:]


def _from_prompt(text: str, system_prompt: str) -> bool:
    """Whether ``text`` repeats the system prompt (never stored as a fact)."""
    a = re.sub(r"\W+", " ", text.lower()).strip()
    b = re.sub(r"\W+", " ", system_prompt.lower()).strip()
    return bool(a) and bool(b) and (a in b or (len(b) > 20 and b in a))


class MemoryActivities:
    """The consolidation activities of one worker (endpoint of the extraction model)."""

    def __init__(
        self, base_url: str, api_key: str, state_dir: str, memory_url: str | None = None
    ) -> None:
        # memory_url: the store (AGENT_MEMORY_URL); a PostgreSQL one keeps the pending runs
        # there too (SharedPending), else they wait in state_dir
        import openai  # here, not at the top: workflows/ import this module's names

        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        self._pending = pending_for(state_dir, memory_url)

    @activity.defn(name=HANDOFF)
    async def handoff(self, inp: HandoffInput) -> str:
        """Keep the transcript; signal-with-start the (tenant, principal) consolidation workflow."""
        await asyncio.to_thread(self._pending.add, inp)
        wid = workflow_id(inp.tenant_id, inp.principal_id)
        await activity.client().start_workflow(
            CONSOLIDATION_WORKFLOW,
            args=[inp.tenant_id, inp.principal_id, inp.debounce_seconds],
            id=wid,
            task_queue=activity.info().task_queue,
            start_signal="run_finished",
            start_signal_args=[inp.run_id],
        )
        return wid

    @activity.defn(name=CONSOLIDATE)
    async def consolidate(self, inp: ConsolidateInput) -> int:
        """Extract and write the facts of each pending run; returns how many items were written."""
        written = 0
        for run_id in inp.run_ids:
            run = await asyncio.to_thread(self._pending.get, inp.tenant_id, run_id)
            if run is None:
                continue  # done by an earlier attempt
            written += await self._one(run)
            await asyncio.to_thread(self._pending.done, run_id)
            activity.heartbeat(run_id)
        return written

    async def _one(self, run: HandoffInput) -> int:
        store = default_store()
        spaces = [Namespace(tenant_id=run.tenant_id, scope=s) for s in run.scopes]
        existing = [i for ns in spaces for i in await asyncio.to_thread(store.list, ns)]
        listing = "\n".join(f"[{i.id}] {i.text}" for i in existing) or "(none)"
        talk = _transcript(run.messages)
        if not talk:
            return 0
        resp = await self._client.chat.completions.create(
            model=run.model,
            temperature=0,
            messages=[
                {"role": "system", "content": EXTRACT_PROMPT},
                {"role": "user", "content": f"EXISTING:\n{listing}\n\nCONVERSATION:\n{talk}"},
            ],
        )
        answer = resp.choices[0].message.content or "" if resp.choices else ""
        redactor = redactor_for()
        target = spaces[0]
        written = 0
        for n, fact in enumerate(_facts(answer)):
            text = redactor.redact(fact["text"])
            if _from_prompt(text, run.system_prompt) or "[REDACTED]" in text:
                continue
            item = MemoryItem(
                namespace=target,
                text=text,
                provenance=Provenance(run_id=run.run_id, source="consolidation"),
                idempotency_key=f"{run.run_id}/consolidation/{n}",
            )
            old = fact.get("replaces")
            try:
                if not isinstance(old, str):
                    raise KeyError(old)
                await asyncio.to_thread(store.supersede, old, item)
            except KeyError:  # nothing to replace, or replaced by an earlier attempt
                await asyncio.to_thread(store.put, item)  # idempotent by key
            written += 1
        return written


def scopes_for(kinds: Sequence[ScopeKind], principal_id: str, agent: str, run_id: str) -> list[str]:
    """The scopes of ``kinds`` for a run (``user`` first: the consolidation target)."""
    ids = {"user": principal_id, "agent": agent, "thread": run_id}
    order = sorted(kinds, key=["user", "agent", "thread"].index)
    return [scope(k, ids[k]) for k in order]
