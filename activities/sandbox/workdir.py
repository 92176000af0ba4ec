"""What the worker reads of a call's work folder: its usage while the program runs, its files after.

The work folder lives on the worker's disk and the program writes it as it likes: many files,
deep trees, hard links (one file under many names, each of which the worker would read and keep
in full), names that are not UTF-8. So both walks here are bounded by :class:`Limits`:

* :func:`usage` (polled while the program runs): the sizes of its regular files summed over
  names, and its entries; the backend stops the program when either goes over ``work_bytes`` or
  ``work_entries``;
* :func:`listing` (after the program ended, no process of it left): the regular files in name
  order, ``{"name", "size", "sha256"}``, as long as their sizes summed stay within ``work_bytes``
  and their number within ``work_entries``; symbolic links are never followed, and a name that is
  not UTF-8 is not listed. What was left out is said in notes the model reads.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from activities.sandbox.backend import Limits

MIB = 1024 * 1024


def _entries(workdir: Path, cap: int) -> list[tuple[str, os.stat_result]]:
    """``(name relative to workdir, lstat)`` of at most ``cap + 1`` entries, in name order."""
    out: list[tuple[str, os.stat_result]] = []
    stack = [""]
    while stack and len(out) <= cap:
        rel = stack.pop()
        try:
            names = sorted(os.listdir(workdir / rel if rel else workdir))
        except OSError:
            continue
        subdirs: list[str] = []
        for name in names:
            child = f"{rel}/{name}" if rel else name
            try:
                st = os.lstat(workdir / child)
            except OSError:
                continue  # removed meanwhile (the program still runs)
            out.append((child, st))
            if stat.S_ISDIR(st.st_mode):
                subdirs.append(child)
            if len(out) > cap:
                break
        stack.extend(reversed(subdirs))
    return out


def usage(workdir: Path, limits: Limits) -> tuple[int, int]:
    """``(bytes, entries)`` of the work folder; counting stops past ``limits.work_entries``."""
    found = _entries(workdir, limits.work_entries)
    return sum(st.st_size for _, st in found if stat.S_ISREG(st.st_mode)), len(found)


def over(workdir: Path, limits: Limits) -> bool:
    """Whether the work folder holds more than ``work_bytes`` or ``work_entries``."""
    size, entries = usage(workdir, limits)
    return size > limits.work_bytes or entries > limits.work_entries


def _utf8(name: str) -> bool:
    try:
        name.encode()
        return True
    except UnicodeEncodeError:  # bytes that are not UTF-8 (surrogate escapes)
        return False


def listing(workdir: Path, limits: Limits) -> tuple[list[dict[str, object]], list[str]]:
    """``(files, notes)``: the files kept of the work folder and what was left out, and why."""
    found = _entries(workdir, limits.work_entries)
    files: list[dict[str, object]] = []
    total, bad_names, left_out = 0, 0, 0
    for name, st in found[: limits.work_entries]:
        if not stat.S_ISREG(st.st_mode):
            continue
        if not _utf8(name):
            bad_names += 1
            continue
        if total + st.st_size > limits.work_bytes:
            left_out += 1
            continue
        with open(workdir / name, "rb", opener=_no_follow) as f:
            data = f.read(limits.work_bytes - total + 1)
        total += len(data)
        files.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    notes: list[str] = []
    if len(found) > limits.work_entries:
        notes.append(f"only the first {limits.work_entries} entries of the work folder were read")
    if left_out:
        notes.append(
            f"{left_out} file(s) not kept: the kept files may add up to "
            f"{limits.work_bytes // MIB} MiB (a hard link counts as a file)"
        )
    if bad_names:
        notes.append(f"{bad_names} file(s) not kept: their names are not UTF-8")
    return files, notes


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)
