"""Open, read, list and write beneath the workspace, following no symlink on the way.

:func:`activities.tools.builtin.resolve_in_workspace` checks a path once, with its symlinks
resolved. Anything that can write the workspace while a tool runs (another call of the same
turn, an MCP server, a second run sharing the folder) could put a symlink where a checked
folder was, between that check and the open, and the open would follow it out. So the file
tools open what the check resolved one component at a time from the workspace's root, each
with ``O_NOFOLLOW`` relative to the folder opened before it (``openat``). A component that has
become a symlink fails to open; whatever is opened is inside the workspace when it is opened.
This is what Linux's ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` does in one call;
Python does not expose ``openat2`` (``os`` module, 3.11), and these calls are its portable form.

Paths given here are relative to the root and already resolved (no ``..``, no symlink), as
``resolve_in_workspace`` returns them.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import BinaryIO

from activities.tools.registry import ToolError

__all__ = ["folder", "list_names", "open_file", "read_limited", "write_replacing"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO put where a file was returns at once instead of waiting for a writer.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _changed(rel: PurePath) -> ToolError:
    return ToolError(
        f"{rel.as_posix()!r} now goes through a symlink (made while the tool ran); "
        f"nothing was read or written"
    )


def _blocked(fd: int, part: str, rel: PurePath) -> ToolError:
    """Why the folder ``part`` inside ``fd`` did not open: a symlink, or a file in the way."""
    try:
        is_link = stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        is_link = False
    if is_link:
        return _changed(rel)
    return ToolError(
        f"{part!r} in {rel.as_posix()!r} is a file, not a folder: a file is in the way"
    )


@contextmanager
def folder(root: Path, rel: PurePath, *, create: bool = False) -> Generator[int]:
    """A file descriptor of the folder ``root/rel``, opened without following any symlink.

    Args:
        root: the workspace root (absolute, resolved).
        rel: the folder, relative to ``root`` (``PurePath(".")`` or ``PurePath()`` is the root).
        create: create missing folders on the way (mode 0o777 less the umask).

    Yields:
        An ``O_DIRECTORY`` descriptor, closed when the block ends.

    Raises:
        ToolError: a component is a symlink or a file, or (without ``create``) is missing.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in rel.parts:
            inner = _subfolder(fd, part, rel, create)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def _subfolder(fd: int, part: str, rel: PurePath, create: bool) -> int:
    """A descriptor of the folder ``part`` inside the folder ``fd``, not through a symlink."""
    try:
        if create:
            try:
                os.mkdir(part, dir_fd=fd)
            except FileExistsError:
                pass
        nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        raise ToolError(f"{rel.as_posix()!r} does not exist") from None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _blocked(fd, part, rel) from None
        raise
    return nxt


def read_limited(root: Path, rel: PurePath, limit: int) -> bytes:
    """The bytes of the regular file ``root/rel``, at most ``limit`` of them.

    Args:
        root: the workspace root (absolute, resolved).
        rel: the file, relative to ``root``.
        limit: the most bytes to read (bytes); a longer file is refused, not cut.

    Raises:
        ToolError: the file is missing, is not a regular file (a folder, a FIFO, a device),
            is longer than ``limit`` (even if it grew after it was measured), or a component
            of its path is a symlink now.
        PermissionError: the file cannot be read.
    """
    with open_file(root, rel) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        size = max(size, len(data))
        raise ToolError(
            f"{rel.as_posix()!r} is too large to read (at least {size} bytes; at most {limit})"
        )
    return data


def open_file(root: Path, rel: PurePath) -> BinaryIO:
    """The regular file ``root/rel``, open for reading, reached without following a symlink.

    Raises:
        ToolError: the file is missing, is not a regular file (a folder, a FIFO, a device), or a
            component of its path is a symlink now.
        PermissionError: the file cannot be read.
    """
    with folder(root, rel.parent) as dfd:
        try:
            fd = os.open(rel.name, _READ_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            raise ToolError(f"{rel.as_posix()!r} does not exist") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _changed(rel) from None
            raise
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise ToolError(f"{rel.as_posix()!r} is not a regular file")
    return fh


def list_names(root: Path, rel: PurePath) -> list[tuple[str, bool]]:
    """The entries of the folder ``root/rel``: ``(name, is a folder)``, sorted by name.

    A symlink is listed as what it points to is, without being followed out of the folder.

    Raises:
        ToolError: a component of ``rel`` is a symlink or a file, or is missing.
    """
    with folder(root, rel) as dfd:
        names = sorted(os.listdir(dfd))
        return [(n, _is_dir(n, dfd)) for n in names]


def _is_dir(name: str, dfd: int) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dfd).st_mode)
    except OSError:  # a dangling symlink, or removed since listed
        return False


def write_replacing(root: Path, rel: PurePath, data: bytes) -> None:
    """Write ``data`` as the file ``root/rel`` atomically, creating missing folders.

    A temporary file is created in the same folder (``O_EXCL | O_NOFOLLOW``) and renamed over
    the target relative to that folder's descriptor, so readers see the old file or the whole
    new one, and a symlink swapped in anywhere on the path is neither followed nor written
    through.

    Raises:
        ToolError: a component of the path is a symlink or a file where a folder should be.
        OSError: the disk is full, the folder is not writable, ...
    """
    with folder(root, rel.parent, create=True) as dfd:
        tmp = f".{rel.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, _NEW_FLAGS, 0o666, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, rel.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
