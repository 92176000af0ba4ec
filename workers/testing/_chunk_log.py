"""When a scripted model wrote each streamed text chunk (``ScriptedModel.chunk_log``).

``make bench`` measures the delay from the model server writing a chunk to a watcher holding it
(bench/stream_cost.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class ChunkLog:
    """Thread-safe record of ``(completion number, time.monotonic() once written, text)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[tuple[int, float, str]] = []

    def hook(self, completion: int) -> Callable[[dict[str, Any]], None]:
        """The ``on_sent`` callback of completion number ``completion`` (counted from 1)."""

        def sent(chunk: dict[str, Any]) -> None:
            choices = chunk.get("choices") or []
            text = (choices[0].get("delta") or {}).get("content") if choices else None
            if text:
                with self._lock:
                    self._entries.append((completion, time.monotonic(), text))

        return sent

    def entries(self) -> list[tuple[int, float, str]]:
        """Every streamed text chunk so far, in the order written."""
        with self._lock:
            return list(self._entries)
