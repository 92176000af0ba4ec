"""The bubblewrap sandbox backend (Debian's ``bubblewrap``; facts measured in docs/sandbox.md).

Each run is ``bwrap`` started **as uid/gid 65534 outside too** (so RLIMIT_NPROC counts, and a
process that escaped every namespace would still be ``nobody``), with:

* ``--unshare-all``: new user, PID, IPC, UTS, cgroup and network namespaces (the network namespace
  has only a down loopback: no DNS, no TCP to the host's ports);
* a read-only view of ``/usr`` (the system's Python 3 and its standard library, the only
  interpreter and packages inside) with ``/bin``, ``/lib``, ``/lib64`` as links into it, fresh
  ``/proc``, ``/dev`` and ``/tmp``; no ``/etc``, no ``/home``, no ``/root``, no state folder;
* the call's work folder bound read-write at ``/work`` (its current directory), nothing else
  writable but ``/tmp`` and ``/dev/shm``, in-memory and 64 MiB each; the root and ``/dev`` are
  read-only (in-memory file systems count against no rlimit);
* ``--clearenv`` then only ``PATH``, ``HOME=/work``, ``LANG``: no API keys, no Temporal settings;
* ``--die-with-parent --new-session``; a seccomp filter (:mod:`activities.sandbox.seccomp`);
* rlimits: address space, CPU seconds, file size, open files, processes; and, where the cgroup v1
  ``pids`` and ``memory`` hierarchies are writable (they are on this machine), a cgroup per call
  with ``pids.max`` and ``memory.limit_in_bytes``. Where they are not, only the rlimits hold;
* a wall-clock limit: the whole process group is killed at ``timeout_s``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import IO

from activities.sandbox.backend import (
    STREAM_CAP,
    Limits,
    SandboxResult,
    SandboxUnavailable,
)
from activities.sandbox.seccomp import filter_bpf
from activities.sandbox.workdir import listing, over

NOBODY = 65534
CGROUP_ROOT = Path("/sys/fs/cgroup")


CALLS_ROOT = Path("/tmp/agent-sandbox")
"""Parent of every call's work folder: bubblewrap runs as ``nobody``, which must be able to
reach the folder, so it lives under ``/tmp`` in a root-owned folder of mode 0711 (traversable,
not listable); each work folder is random, owned by ``nobody``, mode 0700."""


def new_workdir() -> Path:
    """A fresh, empty work folder under :data:`CALLS_ROOT`.

    Raises:
        SandboxUnavailable: the root exists but is not this process's own with mode 0711 (someone
            else may have made it: it is not used).
    """
    CALLS_ROOT.mkdir(mode=0o711, exist_ok=True)
    st = CALLS_ROOT.lstat()
    if st.st_uid != os.getuid() or (st.st_mode & 0o7777) != 0o711 or CALLS_ROOT.is_symlink():
        raise SandboxUnavailable(
            f"{CALLS_ROOT} is not owned by uid {os.getuid()} with mode 0711: not using it"
        )
    path = CALLS_ROOT / uuid.uuid4().hex
    path.mkdir(mode=0o700)
    return path


def _cgroup(controller: str, name: str) -> Path | None:
    base = CGROUP_ROOT / controller
    if not (base / "cgroup.procs").exists():
        return None
    path = base / "agent-sandbox" / name
    try:
        path.mkdir(parents=True, exist_ok=True)
        return path
    except OSError:
        return None


def _cgroups(limits: Limits) -> list[Path]:
    """Per-call cgroups with their limits set (empty where cgroups are not writable)."""
    name = uuid.uuid4().hex[:12]
    out: list[Path] = []
    pids = _cgroup("pids", name)
    if pids is not None:
        (pids / "pids.max").write_text(str(limits.processes))
        out.append(pids)
    mem = _cgroup("memory", name)
    if mem is not None:
        try:
            (mem / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            out.append(mem)
        except OSError:
            mem.rmdir()
    return out


def _kill_cgroups(groups: list[Path]) -> None:
    for g in groups:
        for _ in range(50):
            try:
                pids = [int(x) for x in (g / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        try:
            g.rmdir()
        except OSError:
            pass


def bwrap_argv(workdir: Path, seccomp_fd: int, tmp_bytes: int = Limits.tmp_bytes) -> list[str]:
    """The bubblewrap arguments before the program (see the module docstring).

    In-memory file systems are charged to no rlimit (only to a memory cgroup, where there is
    one), so ``/tmp`` and ``/dev/shm`` get ``tmp_bytes`` each, and the root and ``/dev`` (bwrap's
    own tmpfs mounts, writable by the program otherwise) are made read-only last.
    """
    exe = shutil.which("bwrap")
    if exe is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    args = [
        exe, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(tmp_bytes), "--tmpfs", "/dev/shm",
        "--size", str(tmp_bytes), "--tmpfs", "/tmp",
        "--bind", str(workdir), "/work", "--chdir", "/work",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/work",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--seccomp", str(seccomp_fd),
        "--remount-ro", "/dev", "--remount-ro", "/",
    ]  # fmt: skip
    return args


def _preexec(limits: Limits, groups: list[Path]):  # noqa: ANN202 - a preexec_fn
    import resource

    def setup() -> None:
        for g in groups:  # join the call's cgroups before anything can fork
            (g / "cgroup.procs").write_text(str(os.getpid()))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    return setup


def _drain(fd: int, kept: bytearray) -> None:
    """Read ``fd`` to its end, keeping its first ``STREAM_CAP + 1`` bytes, dropping the rest."""
    while chunk := os.read(fd, 1 << 16):
        if len(kept) <= STREAM_CAP:
            kept += chunk[: STREAM_CAP + 1 - len(kept)]


def _feed(stream: IO[bytes], data: bytes) -> None:
    """Write ``data`` to the program's stdin and close it (a program that exits unread: given up)."""
    with contextlib.suppress(OSError):  # BrokenPipeError among them
        stream.write(data)
    with contextlib.suppress(OSError):
        stream.close()


def _cap(data: bytes) -> tuple[str, bool]:
    return data[:STREAM_CAP].decode(errors="replace"), len(data) > STREAM_CAP


WATCH_S = 0.1
"""Seconds between two looks at the work folder while the program runs."""


def _over_note(limits: Limits) -> str:
    return (
        f"the program was stopped: its work folder went over {limits.work_bytes // 2**20} MiB "
        f"or {limits.work_entries} entries"
    )


def _noted(stderr: str, notes: list[str]) -> str:
    """``stderr`` and then one ``[sandbox] ...`` line per note (what the model should know)."""
    lines = "".join(f"[sandbox] {n}\n" for n in notes)
    return stderr + ("\n" if stderr and not stderr.endswith("\n") and lines else "") + lines


def _wait(
    proc: subprocess.Popen[bytes], stdin: bytes, workdir: Path, limits: Limits, groups: list[Path]
) -> tuple[bytes, bytes, str | None]:
    """Feed stdin, wait for the program: ``(stdout, stderr, why stopped)``.

    ``why stopped`` is ``None`` when the program ended by itself, else ``"timeout"`` or
    ``"work"`` (its work folder over the limits, looked at every :data:`WATCH_S`), and the whole
    process group and cgroups were killed. Each stream keeps its first ``STREAM_CAP + 1`` bytes
    and drops the rest as it arrives, so a program printing without end costs the worker nothing
    (``communicate`` kept it all: 4 s of ``print`` in a loop held 4.6 GB).
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    threads = [
        threading.Thread(target=_drain, args=(proc.stdout.fileno(), out), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr.fileno(), err), daemon=True),
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True),
    ]
    for t in threads:
        t.start()
    why = _watch(proc, workdir, limits)
    if why is not None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_cgroups(groups)
        proc.wait()
    for t, stream in zip(threads, (proc.stdout, proc.stderr), strict=False):
        t.join(timeout=5)  # the pipes end when the last process holding them has died
        if not t.is_alive():
            stream.close()
    return bytes(out), bytes(err), why


def _watch(proc: subprocess.Popen[bytes], workdir: Path, limits: Limits) -> str | None:
    """Wait for the program's end: None; or why it must be stopped (``timeout``, ``work``)."""
    deadline = time.monotonic() + limits.timeout_s
    while True:
        try:
            proc.wait(timeout=max(0.0, min(WATCH_S, deadline - time.monotonic())))
            return None
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() >= deadline:
            return "timeout"
        if over(workdir, limits):
            return "work"


class BubblewrapBackend:
    """:class:`~activities.sandbox.backend.SandboxBackend` on bubblewrap (see the module doc)."""

    def run(
        self, argv: list[str], workdir: Path, limits: Limits, stdin: bytes = b""
    ) -> SandboxResult:
        """Run ``argv`` in the sandbox with ``workdir`` at ``/work``."""
        os.chown(workdir, NOBODY, NOBODY)
        r, w = os.pipe()
        try:
            os.write(w, filter_bpf())
        finally:
            os.close(w)
        groups = _cgroups(limits)
        started = time.perf_counter()
        try:
            proc = subprocess.Popen(
                [*bwrap_argv(workdir, r, limits.tmp_bytes), *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(r,),
                preexec_fn=_preexec(limits, groups),
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin"},
            )
        except OSError as e:
            _kill_cgroups(groups)
            raise SandboxUnavailable(f"cannot start bubblewrap: {e}") from None
        finally:
            os.close(r)
        out, err, stopped = _wait(proc, stdin, workdir, limits, groups)
        oom = self._oom(groups, err)
        _kill_cgroups(groups)
        if proc.returncode == 1 and err.startswith(b"bwrap:"):
            raise SandboxUnavailable(f"bubblewrap failed: {err[:500].decode(errors='replace')}")
        files, notes = listing(workdir, limits)
        if stopped == "work":
            notes.insert(0, _over_note(limits))
        stdout, t1 = _cap(out)
        stderr, t2 = _cap(err)
        return SandboxResult(
            exit_code=proc.returncode,
            stdout=stdout,
            stderr=_noted(stderr, notes),
            truncated=t1 or t2,
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
            timed_out=stopped == "timeout",
            oom=oom,
            files=files,
        )

    @staticmethod
    def _oom(groups: list[Path], err: bytes) -> bool:
        for g in groups:
            f = g / "memory.failcnt"
            try:
                if f.exists() and int(f.read_text() or 0) > 0:
                    return True
            except (OSError, ValueError):
                pass
        return b"MemoryError" in err or b"Cannot allocate memory" in err
