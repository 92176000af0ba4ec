"""An asyncio event loop in a daemon thread: what the in-process test servers run on.

A server started this way answers from sync tests, async tests on any loop and other processes
alike; stopping it runs a cleanup coroutine on its loop, then stops and joins the thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any


class LoopThread:
    """One event loop serving in one daemon thread.

    Args:
        label: names the thread and the errors (e.g. ``ScriptedModel``).
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True between a successful :meth:`start` and :meth:`stop`."""
        return self.thread is not None

    def start(
        self, setup: Callable[[], Coroutine[Any, Any, None]], name: str, timeout: float
    ) -> None:
        """Run ``setup()`` on a new loop in a new thread, then keep the loop running.

        Returns once ``setup`` finished.

        Raises:
            RuntimeError: already running, ``setup`` raised (chained as the cause), or it did
                not finish within ``timeout`` seconds.
        """
        if self.thread is not None:
            raise RuntimeError(f"{self.label} is already running")
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(setup())
            except BaseException as exc:  # handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                try:
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    loop.close()

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"{self.label} did not start within {timeout} s")
        if failure:
            thread.join()
            raise RuntimeError(f"{self.label} failed to start: {failure[0]}") from failure[0]
        self.loop, self.thread = loop, thread

    def stop(self, cleanup: Callable[[], Coroutine[Any, Any, None]] | None, timeout: float) -> None:
        """Run ``cleanup()`` on the loop (best effort), stop the loop and join the thread.

        Idempotent; the thread may be started again afterwards.
        """
        thread, loop = self.thread, self.loop
        if thread is None or loop is None:
            return
        try:
            if cleanup is not None:
                fut = asyncio.run_coroutine_threadsafe(cleanup(), loop)
                try:
                    fut.result(timeout)
                except Exception:  # best effort: the loop is stopped below anyway
                    fut.cancel()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        finally:
            self.thread = self.loop = None
