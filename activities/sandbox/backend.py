"""What runs model-written code: the :class:`SandboxBackend` protocol and its result.

A backend runs one ``argv`` in an isolated place with a work folder, a wall-clock limit and
resource limits, and reports what happened as data (:class:`SandboxResult`): a non-zero exit, a
timeout or running out of memory are results the model reads, never exceptions. Only a failure of
the sandbox itself (bubblewrap missing, the work folder not writable) raises
:class:`SandboxUnavailable`, which the tool activity lets Temporal retry. Bubblewrap is the one
backend built (:mod:`activities.sandbox.bwrap`); gVisor, a microVM or a hosted sandbox (E2B,
Daytona) would implement the same protocol without touching the workflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

STREAM_CAP = 64 * 1024
"""Bytes kept of each of stdout and stderr (the rest is dropped, ``truncated`` set)."""


class SandboxUnavailable(RuntimeError):
    """The sandbox itself could not run (an infrastructure error: retried, not a tool result)."""


@dataclass
class Limits:
    """Per-call limits. Times in seconds, sizes in bytes."""

    timeout_s: float = 10.0
    memory_bytes: int = 512 * 1024 * 1024
    cpu_s: int = 30
    file_bytes: int = 16 * 1024 * 1024
    open_files: int = 256
    processes: int = 64
    tmp_bytes: int = 64 * 1024 * 1024
    """Size of each in-memory file system the program may write: ``/tmp`` and ``/dev/shm``."""
    work_bytes: int = 256 * 1024 * 1024
    """The work folder: its files' sizes summed over their names (a hard link counts in full)."""
    work_entries: int = 1000
    """The work folder: files, folders and links in it."""


@dataclass
class SandboxResult:
    """What one run did.

    ``files``: ``{"name", "size", "sha256"}`` of the files in the work folder afterwards (names
    relative to it).
    """

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    duration_ms: float
    timed_out: bool
    oom: bool
    files: list[dict[str, object]] = field(default_factory=list[dict[str, object]])


class SandboxBackend(Protocol):
    """Runs ``argv`` with ``workdir`` as its only writable folder (``/work`` inside)."""

    def run(
        self, argv: list[str], workdir: Path, limits: Limits, stdin: bytes = b""
    ) -> SandboxResult:
        """Run to completion or to the limits; raises :class:`SandboxUnavailable` only."""
        ...
