"""The side-effecting tool of ``make chaos`` (bench/chaos.py), loaded by its workers.

``chaos_effect`` journals every attempt and every applied effect to ``$CHAOS_JOURNAL`` (JSON
lines), applying the effect once per ``ctx.idempotency_key`` through
:func:`activities.tools.ledger.run_once`. The chaos report counts effects per key: more than
one is a duplicated side effect. The tool spends :data:`AFTER_EFFECT_SECONDS` after applying
its effect, so worker kills often land between the effect and the report to Temporal. It passes
``applied`` to ``run_once`` (the journal is the target that knows each key), so an attempt killed
between its effect and the ledger entry is not applied again.
"""

from __future__ import annotations

import json
import os
import time

from activities.tools import ToolContext, run_once, tool

AFTER_EFFECT_SECONDS = 1.0


def _journal(event: dict) -> None:
    path = os.environ.get("CHAOS_JOURNAL")
    if not path:
        return
    line = json.dumps(event) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))  # one write per line: lines from workers never mix
    finally:
        os.close(fd)


def _effect_recorded(key: str) -> bool:
    """Whether the journal holds an applied effect for ``key``."""
    path = os.environ.get("CHAOS_JOURNAL")
    if not path or not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if '"effect"' in line and key in line:
                x = json.loads(line)
                if x.get("kind") == "effect" and x.get("key") == key:
                    return True
    return False


@tool(risk="write", timeout_seconds=10)
def chaos_effect(label: str, ctx: ToolContext) -> str:
    """Apply a pretend side effect (needs approval: risk write), once per tool call.

    Args:
        label: what the effect is about.
        ctx: the call's context (injected, not sent by the model).
    """
    base = {"label": label, "key": ctx.idempotency_key, "pid": os.getpid()}
    _journal({**base, "kind": "attempt", "t": time.time()})

    def effect() -> str:
        _journal({**base, "kind": "effect", "t": time.time()})
        return f"applied {label}"

    def applied() -> str | None:
        # The target (the journal) knows the key: ask it when an attempt died mid-call.
        return f"applied {label}" if _effect_recorded(ctx.idempotency_key) else None

    result = run_once(ctx, effect, applied)
    # The rest of a real tool's work (reading the answer, cleaning up): a worker killed now has
    # applied the effect without reporting it, so Temporal runs the call again.
    time.sleep(AFTER_EFFECT_SECONDS)
    return result
