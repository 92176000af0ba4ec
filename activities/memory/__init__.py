"""Long-term memory of agents: items in namespaces, hybrid retrieval, a store behind a protocol.

See docs/memory.md. ``open_store()`` gives the store ``AGENT_MEMORY_URL`` names (SQLite by
default: ``sqlite:///<AGENT_STATE_DIR>/memory.db``).
"""

from __future__ import annotations

from activities.memory.embed import Embedder, OpenAIEmbedder, WordLlamaEmbedder
from activities.memory.items import Hit, MemoryItem, MemoryStore, Namespace, Provenance, scope
from activities.memory.store_url import open_store

__all__ = [
    "Embedder",
    "Hit",
    "MemoryItem",
    "MemoryStore",
    "Namespace",
    "OpenAIEmbedder",
    "Provenance",
    "WordLlamaEmbedder",
    "open_store",
    "scope",
]
