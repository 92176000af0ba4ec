"""A prompt cache as an OpenAI-compatible endpoint keeps one, for the scripted model."""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any


class PrefixCache:
    """A prompt cache as an endpoint keeps one, for :class:`ScriptedModel` ``prompt_cache=True``.

    Cached: the longest leading run of messages (equal as JSON) an earlier request
    began with (OpenAI's prompt caching and llama.cpp's ``cache_prompt`` both reuse a prefix).
    Remembers the last 256 prompts; thread-safe.
    """

    def __init__(self) -> None:
        self._seen: deque[list[str]] = deque(maxlen=256)
        self._lock = threading.Lock()

    def cached_messages(self, messages: list[Any]) -> int:
        """How many leading ``messages`` are cached; then remember them."""
        keys = [json.dumps(m, sort_keys=True) for m in messages]
        best = 0
        with self._lock:
            for seen in self._seen:
                same = 0
                for a, b in zip(seen, keys, strict=False):
                    if a != b:
                        break
                    same += 1
                best = max(best, same)
            self._seen.append(keys)
        return best
