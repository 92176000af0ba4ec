"""Applying a tool's side effect once per tool call, however often Temporal retries the call.

Temporal runs activities at least once: a worker killed after a tool wrote a file but before it
reported back makes Temporal run the call again, on another worker. A tool with side effects reads
:attr:`ToolContext.idempotency_key <activities.tools.registry.ToolContext.idempotency_key>`
(``<workflow id>/<tool_call_id>``, the same for every attempt of one call, across worker crashes
and continue-as-new) and wraps its effect in :func:`run_once`::

    @tool(risk="write")
    def send_invoice(customer: str, ctx: ToolContext) -> str:
        return run_once(ctx, lambda: billing.send(customer))

The ledger is a folder :data:`LEDGER_DIR` at the workspace root that the workspace tools refuse
to read, list or write (``resolve_in_workspace``). Each applied call leaves one small JSON file
there holding the result to return to a later attempt, and a lock file. Files older than
``AGENT_TOOL_LEDGER_DAYS`` days (default :data:`KEEP_DAYS`) are removed, at most once an hour per
ledger, by the worker that writes an entry: a call retried after that long would apply again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import structlog

from activities.atomic import write_atomic

LEDGER_DIR = ".tool-ledger"
"""Folder at the workspace root holding one entry per applied tool call (hidden from tools)."""


KEEP_DAYS = 7.0
"""Days a ledger file is kept (``AGENT_TOOL_LEDGER_DAYS`` overrides); longer than any run's
tool-call retries are expected to go on."""
PRUNE_EVERY_SECONDS = 3600.0
_pruned_at: dict[Path, float] = {}


def keep_seconds() -> float:
    """How long ledger files are kept, in seconds (``AGENT_TOOL_LEDGER_DAYS``, else 7 days).

    Raises:
        ValueError: ``AGENT_TOOL_LEDGER_DAYS`` is set but not a positive number.
    """
    raw = os.environ.get("AGENT_TOOL_LEDGER_DAYS")
    days = KEEP_DAYS if raw is None or raw.strip() == "" else float(raw)
    if not days > 0:
        raise ValueError(f"AGENT_TOOL_LEDGER_DAYS must be a positive number of days, got {raw!r}")
    return days * 86400


def prune(folder: Path, older_than: float, now: float | None = None) -> int:
    """Remove the files of ``folder`` older than ``older_than`` seconds; returns how many went.

    Age is ``now`` (default: the current time, seconds since the epoch) minus the file's
    modification time. A missing folder removes nothing.
    """
    now = time.time() if now is None else now
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for f in Path(folder).iterdir():
            with contextlib.suppress(OSError):
                if f.is_file() and now - f.stat().st_mtime > older_than:
                    f.unlink()
                    removed += 1
    return removed


def _prune_now_and_then(folder: Path) -> None:
    """Prune ``folder`` unless done in the last hour; never fails the call that applied."""
    now = time.monotonic()
    if now - _pruned_at.get(folder, -PRUNE_EVERY_SECONDS) < PRUNE_EVERY_SECONDS:
        return
    _pruned_at[folder] = now
    try:
        prune(folder, keep_seconds())
    except ValueError as e:  # a bad AGENT_TOOL_LEDGER_DAYS: keep everything, say so
        structlog.get_logger("activities.tools.ledger").warning("ledger_not_pruned", error=str(e))


def ledger_path(workspace: Path, key: str) -> Path:
    """The ledger entry of one idempotency key (``<workspace>/.tool-ledger/<sha256>.json``)."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return Path(workspace) / LEDGER_DIR / f"{digest}.json"


def _read(entry: Path, key: str) -> str | None:
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fields = cast("dict[str, Any]", data) if isinstance(data, dict) else None
    if fields is not None and fields.get("key") == key and isinstance(fields.get("result"), str):
        return fields["result"]
    return None


def _write(entry: Path, key: str, result: str) -> None:
    data = json.dumps({"key": key, "result": result}).encode("utf-8")
    write_atomic(entry, data, prefix=".entry.", suffix=".tmp")


def run_once(
    ctx: Any, effect: Callable[[], str], applied: Callable[[], str | None] | None = None
) -> str:
    """Apply ``effect`` once per ``ctx.idempotency_key``; a later attempt gets the first result.

    Attempts of the same call are serialised by a lock on the entry (``flock``), so two attempts
    running at once (a slow attempt timed out and retried elsewhere on the same machine) do not
    both apply it. A :class:`~activities.tools.registry.ToolError` or any other exception raised
    by ``effect`` records nothing: the next attempt tries again. A crash after the effect and
    before the entry is written leaves a window where the effect runs again, so an effect should
    also be safe to repeat where it can be (``write_file`` writes the same bytes). A tool that can
    ask its target whether the effect happened closes that window with ``applied``: an attempt
    marks the call as started before the effect, and a later attempt that finds the mark without
    an entry asks ``applied()`` before applying it again.

    Args:
        ctx: the call's :class:`~activities.tools.registry.ToolContext` (``workspace`` and
            ``idempotency_key``). Without a key (a tool called outside an activity) ``effect``
            simply runs.
        effect: applies the side effect and returns the tool's result text.
        applied: optional; called only after an attempt died between the effect and the entry:
            the result text if the effect did happen (the target knows the key), else None.

    Returns:
        The result text of the attempt that applied the effect.

    Raises:
        Exception: whatever ``effect`` raised.
    """
    key = getattr(ctx, "idempotency_key", "")
    if not key:
        return effect()
    entry = ledger_path(ctx.workspace, key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            done = _read(entry, key)
            if done is not None:
                return done
            started = entry.with_suffix(".started")
            if applied is not None:
                earlier = applied() if started.exists() else None
                if earlier is not None:  # an attempt died after the effect, before the entry
                    _write(entry, key, earlier)
                    return earlier
                started.touch()
            result = effect()
            _write(entry, key, result)
            started.unlink(missing_ok=True)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    _prune_now_and_then(entry.parent)
    return result
