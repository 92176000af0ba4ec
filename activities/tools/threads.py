"""Sync tools run each in a daemon thread of its own, which a cancelled call leaves behind.

Python cannot stop a thread. A sync tool that never returns (``time.sleep(10**6)``, a read with no
timeout) keeps its thread after Temporal timed the call out and cancelled it. Run in the event
loop's default executor (``asyncio.to_thread``) such a thread held one of its few workers
(``min(32, cpus + 4)``: 6 on 2 cores) for good: after a handful, every later sync tool call, the
payload store and the memory store (which use the same executor) waited forever, and the worker
process could not exit (``asyncio.run`` joins that executor's threads). Here each call gets a new
daemon thread: a stuck one holds nothing another call needs, never delays the process's exit, and
is counted (:func:`left_running`) and logged (``tool_thread_left_running``).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import structlog

from activities.tools.errors import ToolError

log = structlog.get_logger("activities.tools")

__all__ = ["EarlierAttemptRunning", "left_running", "run_in_thread"]

_left: set[threading.Thread] = set()  # threads of cancelled calls, still running
_keys: dict[threading.Thread, str] = {}  # running threads of calls with side effects -> key
_lock = threading.Lock()


class EarlierAttemptRunning(ToolError):
    """An earlier attempt of the same call is still running here: it is not started again."""


def left_running() -> int:
    """How many threads of cancelled sync tool calls are still running in this process."""
    with _lock:
        return len(_left)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the call was cancelled meanwhile: nobody waits for this
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _claim(thread: threading.Thread, key: str, name: str) -> None:
    """Record ``thread`` as running the call ``key`` (if any); refuse a second one of it."""
    if not key:
        return
    with _lock:
        if key in _keys.values():
            raise EarlierAttemptRunning(
                f"{name} was not run again: its earlier attempt timed out but is still running "
                "on this worker, and a tool with side effects must not run twice at once; its "
                "outcome is unknown"
            )
        _keys[thread] = key


async def run_in_thread(
    fn: Callable[..., Any], kwargs: dict[str, Any], name: str, key: str = ""
) -> Any:
    """``fn(**kwargs)`` in a new daemon thread named ``tool-<name>``, with this context's variables.

    Args:
        fn: the tool's function.
        kwargs: its arguments (a dict: a tool may have a parameter called ``name`` or ``key``).
        name: the tool's name (for the thread's name and logs).
        key: the call's idempotency key, for a tool with side effects ("" for none): while an
            earlier attempt of that call is left running here, the call is not started again.

    Returns:
        What ``fn`` returned.

    Raises:
        EarlierAttemptRunning: ``key`` names a call whose earlier attempt is still running here
            (Temporal retried it after a timeout): running it again could apply its effects twice
            at once; the message says so, for the model.
        asyncio.CancelledError: the call was cancelled; the thread is left to finish on its own
            (counted by :func:`left_running` until it does).
        BaseException: whatever ``fn`` raised.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # activity.info(), heartbeats, redaction: as to_thread
    finished = threading.Event()

    def work() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = context.run(fn, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting call
            error = e
        with _lock:
            finished.set()
            _left.discard(thread)
            _keys.pop(thread, None)
        try:
            loop.call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:  # the event loop is closed: nobody waits any more
            pass

    thread = threading.Thread(target=work, name=f"tool-{name}", daemon=True)
    _claim(thread, key, name)
    thread.start()
    try:
        return await future
    except asyncio.CancelledError:
        with _lock:
            if not finished.is_set():
                _left.add(thread)
        if not finished.is_set():
            log.warning("tool_thread_left_running", tool=name, left_running=left_running())
        raise
