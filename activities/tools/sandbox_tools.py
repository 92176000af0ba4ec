"""Built-in tools ``run_python`` and ``run_command``: code run in the bubblewrap sandbox.

Each call gets a fresh work folder (``/work`` inside), into which ``files`` are copied first: a
name is looked up among the files earlier calls of the same run produced, then in the workspace
(read-only copy; the workspace itself is never mounted). Afterwards every file in the work folder
is kept for the run's later calls and listed in the result as ``{"name", "size", "sha256"}``.

The files a call writes go into the **payload store** (the worker's ``AGENT_PAYLOAD_DIR``, through
:class:`activities.storage.LocalStorageDriver`, or with ``AGENT_PAYLOAD_STORE=s3`` the bucket,
through :class:`activities.s3_files.S3FileStore`; encrypted with the worker's payload codec when
``AGENT_ENCRYPTION_KEYS`` is set), and the outcome names them (``ToolOutcome.files``: name ->
key). The run records the keys and hands them to its later sandboxed calls
(``InvokeToolInput.run_files``), so a later call finds them on any worker that shares the store.
Without a configured store they are kept on this worker's disk instead.
The result is JSON ``{"exit_code", "stdout", "stderr", "truncated", "duration_ms", "timed_out",
"oom", "files"}`` (docs/contract.md, "Code"): a failing program is a result the model reads, never
an activity failure; only a sandbox that cannot start raises (Temporal retries that).

``run_command`` is an ``exec`` tool: under the default ``by_risk`` policy it waits for a person's
approval. ``run_python`` is offered as ``read``: it can neither reach the network nor write
anywhere but its own work folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
from pathlib import Path, PurePath
from typing import Any

from temporalio.api.common.v1 import Payload

from activities import metrics
from activities.sandbox import BubblewrapBackend, Limits, SandboxBackend
from activities.sandbox.bwrap import new_workdir
from activities.storage import PayloadIntegrityError, PayloadNotFoundError, PayloadStoreError
from activities.tools import beneath
from activities.tools.builtin import resolve_in_workspace
from activities.tools.registry import ToolContext, ToolError, tool

MAX_TIMEOUT_S = 120.0
MAX_KEPT_FILES = 100
"""Files of one call kept for the run's later calls, at most (their keys travel in the call's
result: 30,000 tiny files made it larger than Temporal takes, and the call ran three times)."""
MAX_KEPT_BYTES = 64 * 2**20
"""Bytes of one call's files kept for the run's later calls, at most."""
BACKEND: SandboxBackend = BubblewrapBackend()
_root: list[Path] = []
_store: list[Any] = []  # [LocalStorageDriver-like (put_bytes/get_bytes), codec or None]


def configure(root: str | Path, store: Any = None, codec: Any = None) -> None:
    """Where the runs' files live (the worker calls it).

    Args:
        root: the worker's own copy (``<state>/sandbox``).
        store: the payload store (``put_bytes(data) -> key``, ``get_bytes(key) -> data``), or None.
        codec: encrypts what goes into the store (``encrypt(Payload)``/``decrypt(Payload)``), or
            None.
    """
    _root[:] = [Path(root).expanduser().resolve()]
    _store[:] = [store, codec] if store is not None else []


def _put(name: str, data: bytes) -> str | None:
    """Keep ``data`` in the payload store; its key (None without a store)."""
    if not _store:
        return None
    store, codec = _store
    payload = Payload(metadata={"encoding": b"binary/plain", "name": name.encode()}, data=data)
    if codec is not None:
        payload = codec.encrypt(payload)
    return str(store.put_bytes(payload.SerializeToString()))


def _get(key: str) -> bytes:
    """The file kept under ``key``.

    Raises:
        ToolError: no store here, or the key cannot be read (missing, tampered, wrong key).
        activities.storage.PayloadStoreError: the store could not be reached or read (S3 down, a
            disk error): raised, so Temporal retries the call.
    """
    if not _store:
        raise ToolError("this worker has no payload store to read the run's files from")
    store, codec = _store
    try:
        payload = Payload()
        payload.ParseFromString(store.get_bytes(key))
        if codec is not None:
            payload = codec.decrypt(payload)
    except (PayloadNotFoundError, PayloadIntegrityError) as e:  # the model is told
        raise ToolError(f"the run's file {key} cannot be read: {e}") from None
    except (PayloadStoreError, ImportError):
        raise  # the store, not the file: retried
    except Exception as e:  # noqa: BLE001 - undecryptable, not a payload: the model is told
        raise ToolError(f"the run's file {key} cannot be read: {e}") from None
    return bytes(payload.data)


def _base() -> Path:
    base = _root[0] if _root else Path(tempfile.gettempdir()) / "agent-sandbox"
    base.mkdir(parents=True, exist_ok=True, mode=0o711)
    return base


def _run_store(ctx: ToolContext) -> Path:
    key = hashlib.sha256(f"{ctx.tenant_id}\0{ctx.run_id}".encode()).hexdigest()[:32]
    path = _base() / "runs" / key
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _utf8(what: str, *texts: str) -> None:
    """Raises :class:`ToolError` when a text holds a lone surrogate (JSON's escapes allow one)."""
    for t in texts:
        try:
            t.encode()
        except UnicodeEncodeError:
            raise ToolError(f"{what} is not valid Unicode text (a lone surrogate?)") from None


def _copy_in(ctx: ToolContext, names: list[str], work: Path) -> None:
    for name in names:
        try:
            _copy_one(ctx, name, work)
        except OSError as e:  # a name too long for the file system, a folder named like a file
            raise ToolError(f"file {name[:100]!r}: {e.strerror}") from None


def _copy_one(ctx: ToolContext, name: str, work: Path) -> None:
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ToolError(f"file {name!r}: give a relative name without '..'")
    dest = work / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    key = ctx.run_files.get(rel.as_posix())
    if key is not None and _store:  # an earlier call's output, from the payload store
        dest.write_bytes(_get(key))
        return
    src = _run_store(ctx) / rel
    if src.is_file() and not src.is_symlink():  # an earlier call's output, on this worker
        shutil.copyfile(src, dest)
        return
    target = resolve_in_workspace(ctx.workspace, name)
    if not target.is_file():
        raise ToolError(f"file {name!r} is neither an earlier call's output nor in the workspace")
    # opened beneath the workspace: a symlink swapped in since the check is not followed out
    with beneath.open_file(ctx.workspace, target.relative_to(ctx.workspace)) as fsrc:
        with open(dest, "wb") as fdst:
            shutil.copyfileobj(fsrc, fdst)


def _keep_out(
    ctx: ToolContext, work: Path, listed: list[dict[str, object]]
) -> tuple[set[str], dict[str, Any] | None]:
    """Keep the files the backend listed for the run's later calls (in name order, within limits).

    The backend lists regular files only, within its own limits (:mod:`activities.sandbox.workdir`);
    of those, at most :data:`MAX_KEPT_FILES` files and :data:`MAX_KEPT_BYTES` bytes are kept.

    Returns:
        The names kept, and None when that is every listed file, else ``{"files", "bytes",
        "why"}`` of those that were not.
    """
    store = _run_store(ctx)
    kept: set[str] = set()
    kept_bytes = dropped_files = dropped_bytes = 0
    for f in listed:
        name, size = str(f["name"]), int(str(f["size"]))
        if len(kept) >= MAX_KEPT_FILES or kept_bytes + size > MAX_KEPT_BYTES:
            dropped_files, dropped_bytes = dropped_files + 1, dropped_bytes + size
            continue
        kept.add(name)
        kept_bytes += size
        with beneath.open_file(work, PurePath(name)) as fh:  # no symlink on the way, a regular file
            data = fh.read(size + 1)
        key = _put(name, data)
        if key is not None:  # in the payload store: the run hands the key to later calls
            ctx.new_files[name] = key
            continue
        dest = store / name  # no store configured: this worker's disk only
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    if not dropped_files:
        return kept, None
    why = (
        f"a call keeps at most {MAX_KEPT_FILES} files and {MAX_KEPT_BYTES // 2**20} MiB for later "
        "calls (in name order); the others are not in files and later calls cannot use them"
    )
    return kept, {"files": dropped_files, "bytes": dropped_bytes, "why": why}


def _run(
    ctx: ToolContext, tool: str, argv: list[str], stdin: str, files: list[str], timeout_s: float
) -> str:
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ToolError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}]")
    _utf8("the program or its arguments", *argv)
    _utf8("stdin", stdin)
    _utf8("a file name", *files)
    work = new_workdir()
    try:
        _copy_in(ctx, files, work)
        ctx.heartbeat("sandbox starting")
        result = BACKEND.run(argv, work, Limits(timeout_s=timeout_s), stdin.encode())
        metrics.sandbox_run(ctx.tenant_id, tool, result)
        kept, not_kept = _keep_out(ctx, work, result.files)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = dataclasses.asdict(result)
    if not_kept is not None:  # only what was kept is listed (thousands of files: megabytes)
        out["files"] = [f for f in out["files"] if f["name"] in kept]
        out["not_kept"] = not_kept
    return json.dumps(out)


@tool(sandboxed=True, timeout_seconds=150)
def run_python(
    ctx: ToolContext, code: str, files: list[str] | None = None, timeout_s: float = 10.0
) -> str:
    """Run a Python 3 program in a sandbox (no network; only its work folder is writable).

    Args:
        ctx: the call's context (injected, not sent by the model).
        code: the program (standard library only).
        files: names of files to copy into its work folder first (outputs of earlier calls of
            this run, or workspace files).
        timeout_s: wall-clock seconds before it is killed (at most 120).
    """
    if not code.strip():
        raise ToolError("code is empty")
    return _run(ctx, "run_python", ["python3", "-I", "-c", code], "", files or [], timeout_s)


@tool(risk="exec", sandboxed=True, timeout_seconds=150)
def run_command(
    ctx: ToolContext, argv: list[str], stdin: str | None = None, timeout_s: float = 10.0
) -> str:
    """Run a command in a sandbox (no network; only its work folder is writable).

    Args:
        ctx: the call's context (injected, not sent by the model).
        argv: the program and its arguments, e.g. ["wc", "-l", "data.txt"].
        stdin: text given on standard input.
        timeout_s: wall-clock seconds before it is killed (at most 120).
    """
    if not argv or not all(
        isinstance(a, str) and a  # pyright: ignore[reportUnnecessaryIsInstance] - model-sent JSON
        for a in argv
    ):
        raise ToolError("argv must be a non-empty list of strings")
    return _run(ctx, "run_command", argv, stdin or "", [], timeout_s)
