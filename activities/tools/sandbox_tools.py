"""Built-in tools ``run_python`` and ``run_command``: code run in the bubblewrap sandbox.

Each call gets a fresh work folder (``/work`` inside), into which ``files`` are copied first: a
name is looked up among the files earlier calls of the same run produced, then in the workspace
(read-only copy; the workspace itself is never mounted). Afterwards every file in the work folder
is kept for the run's later calls and listed in the result as ``{"name", "size", "sha256"}``.
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
from pathlib import Path

from activities.sandbox import BubblewrapBackend, Limits, SandboxBackend
from activities.sandbox.bwrap import new_workdir
from activities.tools.builtin import resolve_in_workspace
from activities.tools.registry import ToolContext, ToolError, tool

MAX_TIMEOUT_S = 120.0
BACKEND: SandboxBackend = BubblewrapBackend()
_root: list[Path] = []


def configure(root: str | Path) -> None:
    """Where the runs' files live (the worker calls it: ``<state>/sandbox``)."""
    _root[:] = [Path(root).expanduser().resolve()]


def _base() -> Path:
    base = _root[0] if _root else Path(tempfile.gettempdir()) / "agent-sandbox"
    base.mkdir(parents=True, exist_ok=True, mode=0o711)
    return base


def _run_store(ctx: ToolContext) -> Path:
    key = hashlib.sha256(f"{ctx.tenant_id}\0{ctx.run_id}".encode()).hexdigest()[:32]
    path = _base() / "runs" / key
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _copy_in(ctx: ToolContext, names: list[str], work: Path) -> None:
    store = _run_store(ctx)
    for name in names:
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ToolError(f"file {name!r}: give a relative name without '..'")
        src = store / rel
        if not src.is_file() or src.is_symlink():
            src = resolve_in_workspace(ctx.workspace, name)
            if not src.is_file():
                raise ToolError(
                    f"file {name!r} is neither an earlier call's output nor in the workspace"
                )
        dest = work / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def _keep_out(ctx: ToolContext, work: Path) -> None:
    store = _run_store(ctx)
    for p in work.rglob("*"):
        if p.is_file() and not p.is_symlink():
            dest = store / p.relative_to(work)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest)


def _run(ctx: ToolContext, argv: list[str], stdin: str, files: list[str], timeout_s: float) -> str:
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ToolError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}]")
    work = new_workdir()
    try:
        _copy_in(ctx, files, work)
        ctx.heartbeat("sandbox starting")
        result = BACKEND.run(argv, work, Limits(timeout_s=timeout_s), stdin.encode())
        _keep_out(ctx, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return json.dumps(dataclasses.asdict(result))


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
    return _run(ctx, ["python3", "-I", "-c", code], "", files or [], timeout_s)


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
    if not argv or not all(isinstance(a, str) and a for a in argv):
        raise ToolError("argv must be a non-empty list of strings")
    return _run(ctx, argv, stdin or "", [], timeout_s)

