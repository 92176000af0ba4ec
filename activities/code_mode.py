"""Code Mode: one tool whose argument is a Python script over the agent's own tools.

The model writes ``script``; the script calls the tools the spec lists (``code_mode.tools``) as
``async`` functions and ``await``s them, alone or gathered (``await asyncio.gather(a(), b())``).
It runs in Monty (``pydantic-monty``: Pydantic's Rust interpreter of a Python subset), **inside
bubblewrap**: the Monty worker process runs as ``nobody`` with every namespace unshared (no
network), a read-only ``/usr``, the seccomp filter of :mod:`activities.sandbox.seccomp`, a cleared
environment and rlimits. The interpreter alone is never the boundary.

The workflow steps the script (workflows/code_mode.py); this module is the activity that runs
one step, :meth:`CodeRunner.code_step` (``code.step``):

* first step: start the script; later steps: load the snapshot the previous step returned and
  resume it with the results of the calls it asked for;
* run until every task of the script waits on tool calls (a *batch*: one call, or all the calls a
  ``gather`` started), or the script ends;
* return the batch and a snapshot (``dump()`` of the paused interpreter, base64), or the script's
  value and what it printed.

Each tool call of a batch is then an ordinary tool call of the run (policy, approval, events,
audit; one ``tool.invoke`` each), dispatched concurrently. The snapshot travels in the history, so
a step resumes on any worker after a crash, and replay reads recorded results instead of running
the script again. The script's clock and its ``random`` seed come from the workflow; sleeps take
no time; OS access (files, environment, subprocesses, imports beyond Monty's own modules) is
refused. A tool the spec does not list raises ``NameError`` inside the script.

Sources: Temporal's agent harness "Code Mode" (a script over the agent's tools in Monty, each host
call a durable activity); pydantic-monty's README (snapshots, ``FutureSnapshot`` for gathered
calls, resource limits, ``os_policy``).
"""

from __future__ import annotations

import base64
import json
import keyword
import os
import shutil
import stat
import tempfile
import threading
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contracts import (
    CODE_STEP,
    CodeStepInput,
    CodeStepOutput,
    HostCall,
    ToolInfo,
)
from activities.extras import missing_extra

if TYPE_CHECKING:
    from pydantic_monty import OSPolicy, ResourceLimits

STDOUT_CAP = 16_000
"""Characters of ``print()`` output kept per script (the rest is cut, marked ``truncated``)."""
WORKER_ADDRESS_SPACE_KB = 1024 * 1024
"""``ulimit -v`` of the Monty worker process (1 GiB; the interpreter's own heap limit is lower)."""
WORKER_CPU_SECONDS = 60
"""``ulimit -t`` of the Monty worker process (a fresh process per step)."""
TMP_BYTES = 16 * 1024 * 1024
"""Size of the Monty worker's in-memory ``/tmp`` (16 MiB; Monty itself opens no file)."""

_JSON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
}


def _py_type(schema: dict[str, Any]) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        names = [_JSON_TYPES.get(x, "object") for x in cast("list[Any]", t) if x != "null"]
        return " | ".join(names or ["object"]) + (" | None" if "null" in t else "")
    return _JSON_TYPES.get(str(t), "object")


def tool_stub(info: ToolInfo) -> str:
    """A typed ``async def`` stub of one tool, keyword-only, from its JSON schema.

    Example: ``async def read_file(*, path: str, start_line: int = ...) -> str: "Read a file"``.
    """
    props: dict[str, Any] = info.parameters.get("properties") or {}
    required = set(info.parameters.get("required") or [])
    params: list[str] = []
    for name in sorted(props, key=lambda n: (n not in required, list(props).index(n))):
        if not name.isidentifier() or keyword.iskeyword(name):
            continue
        hint = _py_type(props[name] if isinstance(props[name], dict) else {})
        params.append(f"{name}: {hint}" if name in required else f"{name}: {hint} = ...")
    sig = f"*, {', '.join(params)}" if params else ""
    doc = " ".join(info.description.split())[:200].replace('"', "'")
    return f'async def {info.name}({sig}) -> str:\n    "{doc}"'


def code_tool(name: str, tools: list[ToolInfo], max_calls: int) -> ToolInfo:
    """The Code Mode tool offered to the model: its description carries the typed stubs."""
    stubs = "\n".join(tool_stub(t) for t in tools)
    return ToolInfo(
        name=name,
        description=(
            "Run a Python script (a subset of Python: no files, no network, no imports but "
            "asyncio, json, re, math and similar) that calls these tools as async functions; "
            "await each call, or gather several to run them at once. Every tool returns a "
            f"string. At most {max_calls} tool calls per script. The script's last expression "
            "is its result; print() output is returned too.\n" + stubs
        ),
        parameters={
            "type": "object",
            "properties": {
                "script": {
                    "type": "string",
                    "description": "Python code, e.g. a, b = await asyncio.gather("
                    "read_file(path='x'), read_file(path='y'))\\nlen(a) + len(b)",
                }
            },
            "required": ["script"],
        },
        timeout_seconds=30.0,
        max_attempts=3,
        risk="read",
        kind="code",
    )


# --------------------------------------------------------------------------- the sandboxed worker

_wrapper_lock = threading.Lock()
_wrappers: dict[str, Path] = {}


def _monty_binary() -> Path:
    from pydantic_monty._binary import find_monty_binary

    return Path(find_monty_binary()).resolve()


def _reachable_copy(binary: Path) -> Path:
    """A copy of ``binary`` that ``nobody`` can reach: bwrap runs as uid 65534 and must open it.

    The virtual environment may sit under a folder of mode 0700 (a CI clone in a private temporary
    folder); the copy goes to ``/tmp/agent-sandbox/code-mode/monty-<sha256 prefix>`` (the
    sandbox's own root, checked by :func:`activities.sandbox.bwrap.new_workdir`), mode 0755.
    """
    import hashlib

    from activities.sandbox.bwrap import CALLS_ROOT, new_workdir

    shutil.rmtree(new_workdir(), ignore_errors=True)  # creates and checks CALLS_ROOT
    data = binary.read_bytes()
    folder = CALLS_ROOT / "code-mode"
    folder.mkdir(mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)
    target = folder / f"monty-{hashlib.sha256(data).hexdigest()[:16]}"
    if not target.exists():
        tmp = folder / f".{target.name}.{os.getpid()}"
        tmp.write_bytes(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    return target


def sandboxed_worker(folder: Path | None = None) -> Path:
    """A launcher (``sh``) that runs Monty's worker binary inside bubblewrap as ``nobody``.

    Written once per process into ``folder`` (default: a private temporary folder): the seccomp
    filter (``filter.bpf``) and ``monty-bwrap``, which ``exec``s ``setpriv`` (uid/gid 65534, no
    groups) -> ``bwrap --unshare-all --clearenv`` with ``/usr`` read-only, the binary bound
    read-only at ``/monty``, a fresh ``/tmp`` of :data:`TMP_BYTES`, the root and ``/dev``
    read-only (in-memory file systems count against no rlimit), ``--seccomp`` -> ``/monty "$@"``.

    Raises:
        activities.sandbox.SandboxUnavailable: bubblewrap or setpriv is missing.
    """
    from activities.sandbox import SandboxUnavailable
    from activities.sandbox.seccomp import filter_bpf

    key = str(folder or "")
    with _wrapper_lock:
        if key in _wrappers and _wrappers[key].exists():
            return _wrappers[key]
        bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
        if bwrap is None or setpriv is None:
            raise SandboxUnavailable(
                "Code Mode runs Monty in bubblewrap: apt-get install bubblewrap util-linux"
            )
        base = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="agent-code-mode-"))
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o755)
        bpf = base / "filter.bpf"
        bpf.write_bytes(filter_bpf())
        os.chmod(bpf, 0o644)
        monty = _reachable_copy(_monty_binary())
        script = base / "monty-bwrap"
        script.write_text(
            "#!/bin/sh\nset -e\n"
            f"ulimit -v {WORKER_ADDRESS_SPACE_KB}\nulimit -t {WORKER_CPU_SECONDS}\nulimit -c 0\n"
            f"exec 3<'{bpf}'\n"
            f"exec '{setpriv}' --reuid=65534 --regid=65534 --clear-groups -- '{bwrap}' "
            "--unshare-all --die-with-parent --new-session --clearenv "
            "--ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 "
            f"--symlink usr/bin /bin --proc /proc --dev /dev --size {TMP_BYTES} --tmpfs /tmp "
            f"--ro-bind '{monty}' /monty --chdir /tmp --seccomp 3 "
            '--remount-ro /dev --remount-ro / /monty "$@"\n'
        )
        script.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        _wrappers[key] = script
        return script


# --------------------------------------------------------------------------- one step


def _exception(e: BaseException) -> str:
    display = getattr(e, "display", None)
    if callable(display):
        try:
            return str(display(format="type-msg"))
        except Exception:  # noqa: BLE001 - fall back to str()
            pass
    return f"{type(e).__name__}: {e}"


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _limits(inp: CodeStepInput) -> ResourceLimits:
    """Monty's limits of one step: ``inp.step_seconds`` per feed and turn, its memory cap."""
    return {
        "max_feed_duration_secs": inp.step_seconds,
        "max_turn_duration_secs": inp.step_seconds,
        "max_memory": inp.max_memory_bytes,
        "max_suspensions": 10_000,
    }


def _os_policy(inp: CodeStepInput) -> OSPolicy:
    """The script's OS: the workflow's clock (``inp.now``) and seed; sleeps take no time."""
    return {
        "datetime": datetime.fromisoformat(inp.now),
        "sleep": "zero",
        "random_start": {"seed": inp.seed},
    }


def _resume_results(inp: CodeStepInput) -> dict[int, Any]:
    """``inp.results`` as Monty's resume argument: call id -> return value, or exception."""
    return {
        r.call_id: (
            {"return_value": r.value}
            if r.error is None
            else {"exc_type": r.exc_type, "message": r.error}
        )
        for r in inp.results
    }


class CodeRunner:
    """The ``code.step`` activity (one per worker); ``folder`` holds the sandbox launcher."""

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder

    @activity.defn(name=CODE_STEP)
    async def code_step(self, inp: CodeStepInput) -> CodeStepOutput:
        """Run the script up to its next batch of tool calls, or its end.

        From its start (``snapshot`` None), or from ``snapshot`` resumed with ``results``.
        A script error (syntax, an exception, a time or memory limit) is a result
        (``status="error"``), never an activity failure.

        Raises:
            ApplicationError: ``SandboxUnavailable`` (retryable: bubblewrap missing on this
                worker), ``CodeSnapshotInvalid`` (non-retryable: the snapshot cannot be loaded)
                or ``MissingExtra`` (non-retryable: pydantic-monty, the extra ``code-mode``, is
                not installed on this worker).
        """
        try:
            from pydantic_monty import AsyncMonty, CollectString
        except ModuleNotFoundError as e:  # the optional extra `code-mode`
            err = missing_extra("code-mode", "Code Mode", e)
            raise ApplicationError(str(err), type="MissingExtra", non_retryable=True) from None

        from activities.sandbox import SandboxUnavailable

        try:
            binary = sandboxed_worker(self._folder)
        except SandboxUnavailable as e:
            raise ApplicationError(str(e), type="SandboxUnavailable") from None
        out = CollectString()
        limits, policy = _limits(inp), _os_policy(inp)
        async with AsyncMonty(binary_path=binary, request_timeout=inp.step_seconds + 10) as pool:
            async with pool.checkout(
                script_name="script.py",
                limits=limits,
                os_policy=policy,
            ) as session:
                try:
                    return await self._drive(await self._begin(session, inp, out), inp, out)
                except ApplicationError:
                    raise
                except Exception as e:  # noqa: BLE001 - the script's own error: a result
                    return CodeStepOutput(
                        status="error", error=_exception(e), **_printed(out.output)
                    )

    @staticmethod
    async def _begin(session: Any, inp: CodeStepInput, out: Any) -> Any:
        """The interpreter's first state of this step: the script started, or resumed.

        ``inp.snapshot`` None: ``inp.script`` fed to ``session``; otherwise the snapshot loaded
        and resumed with ``inp.results``. ``out`` collects what the script prints. The script's
        own errors propagate as they are (``step`` makes them a result).

        Raises:
            ApplicationError: ``CodeSnapshotInvalid`` (non-retryable) when the snapshot cannot
                be loaded.
        """
        if inp.snapshot is None:
            return await session.feed_start(inp.script, print_callback=out)
        try:
            loaded: Any = await session.load_snapshot(
                base64.b64decode(inp.snapshot), print_callback=out
            )
        except Exception as e:  # noqa: BLE001 - a snapshot we did not write
            raise ApplicationError(
                f"the script's snapshot cannot be loaded: {e}",
                type="CodeSnapshotInvalid",
                non_retryable=True,
            ) from None
        return await loaded.resume(_resume_results(inp))

    @staticmethod
    async def _drive(snap: Any, inp: CodeStepInput, out: Any) -> CodeStepOutput:
        """Answer what the script asks until it waits on tool calls only, or ends."""
        from pydantic_monty import (
            AsyncFunctionSnapshot,
            AsyncFutureSnapshot,
            AsyncNameLookupSnapshot,
            MontyComplete,
        )

        batch: list[HostCall] = []
        while True:
            if isinstance(snap, MontyComplete):
                return CodeStepOutput(
                    status="done", value=_jsonable(snap.output), **_printed(out.output)
                )
            if isinstance(snap, AsyncNameLookupSnapshot):
                snap = await snap.resume()  # an undefined name: NameError in the script
            elif isinstance(snap, AsyncFunctionSnapshot):
                snap = await CodeRunner._answer(snap, inp, batch)
            elif isinstance(snap, AsyncFutureSnapshot):
                pending = set(snap.pending_call_ids)
                asked = [c for c in batch if c.call_id in pending]
                blob = base64.b64encode(snap.dump()).decode()
                return CodeStepOutput(
                    status="calls", calls=asked, snapshot=blob, **_printed(out.output)
                )
            else:  # pragma: no cover - a snapshot kind this version does not know
                raise ApplicationError(f"unexpected interpreter state {type(snap).__name__}")

    @staticmethod
    async def _answer(snap: Any, inp: CodeStepInput, batch: list[HostCall]) -> Any:
        name = str(snap.function_name)
        if snap.is_os_function:
            return await snap.resume(
                {"exc_type": "PermissionError", "message": f"{name}: no OS access in Code Mode"}
            )
        if name not in inp.tools:
            return await snap.resume(
                {
                    "exc_type": "NameError",
                    "message": f"{name!r} is not a tool this script may call "
                    f"(allowed: {', '.join(inp.tools) or 'none'})",
                }
            )
        if snap.args:
            return await snap.resume(
                {"exc_type": "TypeError", "message": f"{name}() takes keyword arguments only"}
            )
        batch.append(HostCall(call_id=snap.call_id, name=name, arguments=dict(snap.kwargs)))
        return await snap.resume({"future": ...})


def _printed(text: str) -> dict[str, Any]:
    return {"stdout": text[:STDOUT_CAP], "truncated": len(text) > STDOUT_CAP}
