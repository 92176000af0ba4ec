"""Tools used only by the tests: slow, counting, failing. Loaded with AGENT_TOOL_MODULES."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from activities.tools import ToolContext, ToolError, tool


def _journal(ctx: ToolContext, event: dict) -> None:
    """Append one JSON line to $TEST_TOOL_JOURNAL (where tests read what really ran)."""
    path = os.environ.get("TEST_TOOL_JOURNAL") or str(ctx.workspace / ".journal.jsonl")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(event) + "\n")


@tool(timeout_seconds=60)
async def slow_echo(text: str, seconds: float, ctx: ToolContext) -> str:
    """Wait, then echo the text.

    Args:
        text: what to echo.
        seconds: how long to wait first.
    """
    start = time.time()
    _journal(
        ctx,
        {"tool": "slow_echo", "text": text, "call_id": ctx.call_id, "phase": "start", "t": start},
    )
    await asyncio.sleep(seconds)
    end = time.time()
    _journal(
        ctx, {"tool": "slow_echo", "text": text, "call_id": ctx.call_id, "phase": "end", "t": end}
    )
    return f"echo: {text}"


@tool
def record(label: str, ctx: ToolContext) -> str:
    """Record that this call ran.

    Args:
        label: a label to record.
    """
    _journal(ctx, {"tool": "record", "label": label, "call_id": ctx.call_id, "t": time.time()})
    return f"recorded {label}"


@tool
def fail_business(reason: str) -> str:
    """Always refuse.

    Args:
        reason: the refusal text.
    """
    raise ToolError(f"refused: {reason}")


@tool(risk="write")
def deploy(target: str, ctx: ToolContext) -> str:
    """Pretend to deploy (needs approval by default: risk write).

    Args:
        target: where to deploy.
    """
    _journal(ctx, {"tool": "deploy", "target": target, "call_id": ctx.call_id, "t": time.time()})
    return f"deployed to {target}"


@tool
def echo_secret(ctx: ToolContext) -> str:
    """Return the value of $TEST_SECRET_TOKEN (to check redaction)."""
    return "token is " + os.environ.get("TEST_SECRET_TOKEN", "")


def journal_events(path: str | Path) -> list[dict]:
    """Read the journal written by these tools."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


@tool
def where(label: str, ctx: ToolContext) -> str:
    """Say which process and task queue ran this call (journaled too).

    Args:
        label: a label to record.
    """
    from temporalio import activity

    queue = activity.info().task_queue if activity.in_activity() else ""
    _journal(ctx, {"tool": "where", "label": label, "pid": os.getpid(), "task_queue": queue})
    return f"pid={os.getpid()} queue={queue}"


def _model_key() -> str:
    return os.environ.get("OPENAI_API_KEY", "")


@tool(max_attempts=2)
def leak_in_exception() -> str:
    """Fail with a plain exception whose message holds $OPENAI_API_KEY (redaction tests)."""
    raise RuntimeError(f"upstream refused key {_model_key()}")


@tool(max_attempts=3)
def fails_once(label: str, ctx: ToolContext) -> str:
    """Fail the first attempt of each call with a plain exception, then succeed (journaled).

    Args:
        label: a label to record.
    """
    path = Path(os.environ.get("TEST_TOOL_JOURNAL") or str(ctx.workspace / ".journal.jsonl"))
    tried = [e for e in journal_events(path) if e.get("call_id") == ctx.call_id]
    _journal(ctx, {"tool": "fails_once", "label": label, "call_id": ctx.call_id, "t": time.time()})
    if not tried:
        raise ConnectionError("the first attempt fails")
    return f"{label} on attempt {len(tried) + 1}"


@tool(max_attempts=2)
def leak_in_cause() -> str:
    """Fail with an exception whose cause's message holds $OPENAI_API_KEY (redaction tests)."""
    try:
        raise ValueError(f"inner detail: key={_model_key()}")
    except ValueError as e:
        raise ConnectionError("the upstream call failed") from e


@tool
def secret_at(position: int, total: int) -> str:
    """Return ``total`` characters with $OPENAI_API_KEY starting at ``position`` (redaction tests).

    Args:
        position: where the key starts.
        total: length of the text.
    """
    key = _model_key()
    return ("x" * position + key + "y" * total)[:total]


@tool
def big_output(chars: int) -> str:
    """Return ``chars`` characters of text (oversized-output tests).

    Args:
        chars: how many characters.
    """
    return ("0123456789abcdef" * (chars // 16 + 1))[:chars]


@tool(timeout_seconds=1, max_attempts=1)
async def sleepy(seconds: float) -> str:
    """Sleep longer than its one-second start-to-close timeout allows (one attempt).

    Args:
        seconds: how long to sleep.
    """
    await asyncio.sleep(seconds)
    return "woke up"


@tool
def echo_env(name: str) -> str:
    """Return the value of the environment variable ``name`` (redaction tests).

    Args:
        name: the variable.
    """
    return f"{name} is " + os.environ.get(name, "")


@tool(max_attempts=3)
def odd_result(kind: str, ctx: ToolContext) -> object:
    """Return a result that is hard to send (journaled, so tests count the runs).

    Args:
        kind: ``surrogate`` (a lone UTF-16 surrogate), ``deep`` (a dict nested 100000 deep),
            ``cycle`` (a list that holds itself) or ``bytes`` (bytes that are not UTF-8).
    """
    _journal(ctx, {"tool": "odd_result", "kind": kind, "call_id": ctx.call_id})
    if kind == "surrogate":
        return "half \udc80 a pair"
    if kind == "bytes":
        return b"\xff\xfe ok \xc3\x28"
    if kind == "cycle":
        loop: list[object] = []
        loop.append(loop)
        return loop
    deep: dict[str, object] = {}
    for _ in range(100_000):
        deep = {"a": deep}
    return deep


@tool(timeout_seconds=1, max_attempts=1)
def hang_forever(n: int, ctx: ToolContext) -> str:
    """Block its thread for an hour (far past its one-second timeout; journaled when it starts).

    Args:
        n: a number to tell the calls apart.
    """
    _journal(ctx, {"tool": "hang_forever", "n": n, "call_id": ctx.call_id})
    time.sleep(3600)
    return "woke up"


@tool(timeout_seconds=1, max_attempts=1)
async def ignore_cancel(n: int, ctx: ToolContext) -> str:
    """Sleep for good, swallowing every cancellation (journaled when it starts).

    Args:
        n: a number to tell the calls apart.
    """
    _journal(ctx, {"tool": "ignore_cancel", "n": n, "call_id": ctx.call_id})
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass


@tool(risk="write", timeout_seconds=1, max_attempts=2)
def slow_write(label: str, ctx: ToolContext) -> str:
    """Pretend to write for 4 s, past its one-second timeout (journaled at start and end).

    Args:
        label: a label to record.
    """
    _journal(ctx, {"tool": "slow_write", "label": label, "phase": "start", "t": time.time()})
    time.sleep(4)
    _journal(ctx, {"tool": "slow_write", "label": label, "phase": "end", "t": time.time()})
    return f"wrote {label}"


# ---------------------------------------------------------------- a guardrail of one's own


from activities.guardrails import Finding, GuardrailContext, guardrail  # noqa: E402


@guardrail(action="flag")
def no_competitor(text: str, ctx: GuardrailContext) -> Finding | None:
    """Trips on the name of a competitor, Globex (a test of ``@guardrail``)."""
    i = text.find("Globex")
    if i < 0:
        return None
    return Finding(f"names a competitor ({ctx.stage}, Globex)", spans=[(i, i + 6)])


# ---------------------------------------------------------------- tools finished by a callback


async def _hand_to(service: str, job: str, ctx: ToolContext) -> None:
    """POST ``{"job", "callback"}`` to the outside service, then finish later (callback)."""
    import aiohttp
    from temporalio import activity

    url = ctx.callback_url()
    async with aiohttp.ClientSession() as http:
        r = await http.post(service, json={"job": job, "callback": url, "call_id": ctx.call_id})
        if r.status != 202:
            raise ToolError(f"the service refused the job: {r.status}")
    activity.raise_complete_async()


@tool(callback=True, timeout_seconds=30, max_attempts=1)
async def outside_job(service: str, job: str, ctx: ToolContext) -> str:
    """Hand a job to an outside service, which calls back with the result.

    Args:
        service: the service's URL.
        job: what to do.
    """
    await _hand_to(service, job, ctx)
    return "never"  # raise_complete_async() does not return


@tool(callback=True, timeout_seconds=2, max_attempts=1)
async def outside_job_short(service: str, job: str, ctx: ToolContext) -> str:
    """``outside_job`` with a two-second timeout.

    Args:
        service: the service's URL.
        job: what to do.
    """
    await _hand_to(service, job, ctx)
    return "never"
