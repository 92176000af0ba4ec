"""The seccomp filter of the sandbox, built with ``pyseccomp`` (ctypes over libseccomp).

Default: allow. Denied with ``EPERM``: every socket (``socket``, ``socketpair`` stays allowed for
pipes between processes), ``ptrace``, ``process_vm_readv``/``writev``, ``mount``/``umount2``/
``pivot_root``/``chroot``, ``bpf``, ``perf_event_open``, ``keyctl``/``add_key``/``request_key``,
``unshare``/``setns``, ``clone3`` (``ENOSYS``, so libc falls back to ``clone``) and ``clone`` with
any namespace flag, ``io_uring_*``, ``userfaultfd``, module loading, ``kexec_*``, ``reboot``,
``swapon``/``swapoff``, ``acct``, ``quotactl``, ``name_to_handle_at``/``open_by_handle_at``;
``memfd_create``, ``memfd_secret`` and ``shmget`` (memory in files or segments that no rlimit
counts: without a memory cgroup they would take the machine's memory past the address-space
limit).
Sources: Docker's default seccomp profile and the notes in docs/sandbox.md.
"""

from __future__ import annotations

import errno
import functools
import tempfile

DENIED = [
    "socket", "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2",
    "pivot_root", "chroot", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "unshare", "setns", "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "name_to_handle_at", "open_by_handle_at",
    "fanotify_init", "lookup_dcookie", "mbind", "move_pages",
    "memfd_create", "memfd_secret", "shmget",
]  # fmt: skip
NAMESPACE_BITS = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (linux/sched.h)."""


@functools.cache
def filter_bpf() -> bytes:
    """The compiled BPF program (cached per process).

    Raises:
        RuntimeError: libseccomp cannot be loaded (Debian's ``libseccomp2``).
    """
    import pyseccomp as sc  # pyright: ignore[reportMissingTypeStubs] - pyseccomp ships no type stubs

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in DENIED:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except (ValueError, OSError):
            continue  # not a syscall on this architecture
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for bit in NAMESPACE_BITS:
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()


def available() -> bool:
    """Whether the filter can be built here."""
    try:
        filter_bpf()
        return True
    except Exception:  # noqa: BLE001 - reported by the caller
        return False
