"""The log of what people did to memory: ``<AGENT_STATE_DIR>/memory-audit.jsonl``.

One JSON line per edit or delete: ``{"event": "memory_<action>", "at": <unix seconds>, "by":
<who>, "tenant_id", "item": <the item as it was>, ...}``. Written by ``agentctl memory`` (``by``:
the local user) and the run console (``by``: the authenticated principal).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from activities.memory import MemoryItem


def record(
    state_dir: str | Path, action: str, tenant: str, item: MemoryItem, by: str, **extra: Any
) -> None:
    """Append one entry (see the module docstring).

    Raises:
        OSError: the state folder cannot be written.
    """
    path = Path(state_dir).expanduser() / "memory-audit.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "event": f"memory_{action}",
        "at": time.time(),
        "by": by,
        "tenant_id": tenant,
        "item": item.model_dump(mode="json"),
        **extra,
    }
    with path.open("a") as f:
        f.write(json.dumps(entry) + "\n")
