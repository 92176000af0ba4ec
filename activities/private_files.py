"""Files only their owner may read: logs, the memory store, the local Temporal database.

Files the runtime writes beside its secrets (``<AGENT_STATE_DIR>``) hold what people told their
runs (memory), what runs did (logs) and their histories; another local user must not read them.
:func:`private_file` creates a file with mode 0600, or tightens an existing one, before anything
opens it. SQLite creates its ``-wal``, ``-shm`` and ``-journal`` files with the mode of the
database file (sqlite.org/tempfiles.html, "unix VFS": the same permissions as the database), and
those that already exist are tightened here too.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE = 0o600
"""Mode of every file :func:`private_file` prepares: read and write for the owner only."""
PRIVATE_DIR = 0o700
"""Mode of every folder :func:`private_dir` prepares."""
PRIVATE_UMASK = 0o077
"""The umask of a process whose files are its owner's only (the local Temporal server's database)."""
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its parents) and set its mode to 0700; returns it.

    Raises:
        OSError: the folder cannot be created or its mode changed (not its owner).
    """
    p = Path(path).expanduser()
    p.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    os.chmod(p, PRIVATE_DIR)
    return p


def private_file(path: str | os.PathLike[str], *, sqlite: bool = False) -> Path:
    """Create ``path`` empty with mode 0600 if missing, else set its mode to 0600; returns it.

    Its folder is created (mode left as it is). ``sqlite``: also tighten the database's side files
    that exist.

    Raises:
        OSError: the file cannot be created or its mode changed (not its owner).
    """
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE))
    os.chmod(p, PRIVATE_FILE)
    if sqlite:
        for suffix in _SQLITE_SIDE_FILES:
            side = p.with_name(p.name + suffix)
            if side.exists():
                os.chmod(side, PRIVATE_FILE)
    return p
