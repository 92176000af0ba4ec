"""One way to record, find and stop the background processes ``make`` starts (psutil).

The dev server, the model server, the codec server and the worker each leave a pid file; this
module writes and reads them, and stops what they name. A pid file holds the pid on its first
line (so ``kill $(head -1 FILE)`` works) and optionally a marker on the second: a piece of the
process's command line, e.g. ``workers.cli``; callers may also pass the marker when they stop
(``start-dev`` for the dev server, ``llama-server`` for the model server).

A recorded pid is only signalled while a process with that pid is alive, its command line
contains the marker, and it started before the pid file was written: a pid the system has since
given to another program (which started later) is never touched.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from activities.private_files import private_file

_START_TIME_SLACK = 1.0
"""Seconds two readings of a process's start time may differ by (psutil rounds per platform)."""


@dataclass(frozen=True)
class PidRecord:
    """What a pid file says: the pid, a command-line marker ("" if none) and when it was written.

    ``written_at`` is the file's modification time (seconds since the epoch; 0 when unknown).
    """

    pid: int
    marker: str = ""
    written_at: float = 0.0


def write_pid_file(path: str | os.PathLike[str], pid: int, marker: str = "") -> PidRecord:
    """Record ``pid`` (and ``marker``, if any, on a second line) in ``path``; folders are created."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"{pid}\n{marker}\n" if marker else f"{pid}\n", encoding="utf-8")
    return PidRecord(pid, marker, p.stat().st_mtime)


def read_pid_file(path: str | os.PathLike[str]) -> PidRecord | None:
    """The record in ``path``, or None when there is no file or it does not start with a pid."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
        pid = int(lines[0].strip())
        written_at = p.stat().st_mtime
    except (OSError, ValueError, IndexError):
        return None
    marker = lines[1].strip() if len(lines) > 1 else ""
    return PidRecord(pid, marker, written_at)


def find(record: PidRecord | None, marker: str | None = None) -> psutil.Process | None:
    """The live process ``record`` names, or None (gone, a zombie, or a different program now).

    Args:
        record: from :func:`read_pid_file` (None gives None).
        marker: a command-line piece to require when the record has none (older pid files).
    """
    if record is None or record.pid <= 0:
        return None
    try:
        proc = psutil.Process(record.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(record.pid)
            return None
        if record.written_at and proc.create_time() > record.written_at + _START_TIME_SLACK:
            return None  # started after the file was written: the pid was reused
        want = record.marker or marker
        if want and want not in " ".join(proc.cmdline()):
            return None
        return proc
    except psutil.Error:  # gone, or not ours to look at
        return None


def running(path: str | os.PathLike[str], marker: str | None = None) -> int | None:
    """The pid recorded in ``path`` if that process is still alive and the same program."""
    proc = find(read_pid_file(path), marker)
    return proc.pid if proc else None


def spawn(
    args: list[str],
    log_path: str | os.PathLike[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    detach: bool = True,
    umask: int = -1,
) -> subprocess.Popen[bytes]:
    """Start ``args`` with stdin closed and stdout and stderr appended to ``log_path``.

    Args:
        args: the command line.
        log_path: file the output is appended to (must be writable; its folder must exist).
        cwd: working folder of the process (default: this process's).
        env: its environment (default: this process's).
        detach: give it its own session (process group on Windows) so it outlives the caller.
        umask: its umask (-1: this process's), e.g. ``PRIVATE_UMASK`` for files of its owner only.

    Raises:
        OSError: the program cannot be started or the log opened.
    """
    creationflags = 0  # Popen's defaults: 0 and no new session
    if detach and os.name == "nt":  # pragma: no cover - not exercised here
        creationflags = subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.DETACHED_PROCESS
    private_file(log_path)  # a log may carry what runs did: owner only
    with open(log_path, "ab") as log_fh:
        return subprocess.Popen(  # noqa: S603
            args,
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            creationflags=creationflags,
            start_new_session=detach and os.name != "nt",
            umask=umask,
        )


def terminate(proc: psutil.Process | subprocess.Popen, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; True if it was running.

    A ``Popen`` of ours is also reaped, so no zombie is left behind.
    """
    if isinstance(proc, subprocess.Popen):
        if proc.poll() is not None:
            return False
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        return True
    try:
        proc.terminate()
        try:
            proc.wait(timeout)
        except psutil.TimeoutExpired:
            proc.kill()
            proc.wait(5.0)
    except psutil.NoSuchProcess:
        pass
    _reap(proc.pid)
    return True


def stop(path: str | os.PathLike[str], timeout: float = 10.0, marker: str | None = None) -> bool:
    """Stop the process recorded in ``path`` (see :func:`find`) and remove the file.

    Returns:
        True if a running process was stopped; False if none was (no file, gone, or its pid now
        belongs to another program, which is left alone).
    """
    proc = find(read_pid_file(path), marker)
    stopped = terminate(proc, timeout) if proc is not None else False
    Path(path).unlink(missing_ok=True)
    return stopped


def log_tail(path: str | os.PathLike[str] | None, lines: int = 30, title: bool = True) -> str:
    """The last ``lines`` lines of a log file ("" when there is none), for error messages."""
    if path is None:
        return ""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    body = "\n".join(text[-lines:])
    return f"\n--- last lines of {path} ---\n{body}" if title else body


def _reap(pid: int) -> None:
    """Collect the exit status of our own exited child, if it is one."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
