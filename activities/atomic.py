"""Atomic file writes: a temporary file in the same folder, optionally ``fsync``, ``os.replace``.

A reader sees the old file or the whole new one, never a part; a failed write leaves no
temporary file behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(
    path: Path, data: bytes, *, prefix: str = ".tmp-", suffix: str = "", fsync: bool = True
) -> None:
    """Write ``data`` to ``path`` atomically (its folder must exist).

    Args:
        path: the file to create or replace.
        data: its whole new content.
        prefix: name prefix of the temporary file (e.g. ``.tmp-``).
        suffix: name suffix of the temporary file.
        fsync: flush the data to disk before the rename (survives a power cut).

    Raises:
        OSError: the folder is not writable, the disk is full, ...
    """
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
