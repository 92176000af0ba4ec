"""One SQLite memory file written by several worker processes at once (a machine's workers share
the embedded store): every put lands, none fails on a lock, identical text is stored once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import json, sys, time
from activities.memory import MemoryItem, Namespace, WordLlamaEmbedder
from activities.memory.sqlite_store import SqliteMemoryStore
path, who, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = SqliteMemoryStore(path, WordLlamaEmbedder())
ns = Namespace(tenant_id="t", scope="user:shared")
while time.time() < start:
    time.sleep(0.001)
out = []
for i in range(40):
    same = store.put(MemoryItem(namespace=ns, text=f"the shared fact number {i}"))
    own = store.put(MemoryItem(namespace=ns, text=f"a fact only {who} knows, number {i}"))
    out.append([same.id, own.id])
print(json.dumps(out))
"""


def test_four_processes_put_into_one_file_and_identical_text_is_stored_once(tmp_path: Path):
    import time

    db = tmp_path / "memory.db"
    start = time.time() + 3.0  # all four load the embedder first, then write together
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), f"w{k}", str(start)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(4)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out))
    # each shared fact has one id, whichever process stored it first
    for i in range(40):
        assert len({r[i][0] for r in results}) == 1, f"fact {i} stored more than once"
    own = {r[i][1] for r in results for i in range(40)}
    assert len(own) == 160  # every process's own facts, all of them
    from activities.memory import Namespace, WordLlamaEmbedder
    from activities.memory.sqlite_store import SqliteMemoryStore

    store = SqliteMemoryStore(db, WordLlamaEmbedder())
    hits = store.search(
        [Namespace(tenant_id="t", scope="user:shared")], "shared fact number 7", limit=50
    )
    texts = [h.item.text for h in hits]
    assert texts.count("the shared fact number 7") == 1
