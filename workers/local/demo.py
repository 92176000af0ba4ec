"""``make demo``: a real agent, on the real local model, with real tools, inside a real Temporal server.

Steps: copy a few of the Python standard library's own source files into the demo workspace
(real data none of us wrote), start the Temporal dev server (temporal-dev.yml), the codec server,
the local model server (llama.cpp from the xllamacpp wheel on AVX2 x86-64 and arm64; built for
this CPU on first use elsewhere) and a worker, then

1. ask the default agent a two-part question about one of those files that needs two tool calls
   (its length from ``read_file``, where a function is defined from ``search_files``), print the
   answer, the tool calls, the tokens and the Web UI address, and check both numbers against the
   file itself;
2. ask it to write a note, which the policy holds for a person's approval; show how to approve
   from ``agentctl``, the ``temporal`` CLI and the Web UI, then approve with ``agentctl``, and
   check that the note was written.

``python -m workers.local.demo --check`` (``make demo-check``) exits 1 when any step fails, a wrong
answer included; plain ``make demo`` exits 1 only when a server could not be started or the first
run did not complete. The servers keep running for inspection; ``make stop`` ends them.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.rule import Rule

from workers import client as rc
from workers.config import IN_CHECKOUT, PROJECT_ROOT, load_settings
from workers.local import procs
from workers.local.demo_memory import memory_across_runs
from workflows.models import RunRequest, RunResult

console = Console()

STDLIB_FILES = ["textwrap.py", "shlex.py", "fnmatch.py", "glob.py", "csv.py", "json"]
QUESTION_FILE = "textwrap.py"
QUESTION_FUNCTION = "dedent"
QUESTION = (
    f"How many lines does {QUESTION_FILE} have, and on which line is the function "
    f"{QUESTION_FUNCTION} defined? Read the first 3 lines of {QUESTION_FILE} with read_file (the "
    "header of its output gives the total number of lines), and use search_files with the query "
    f'"def {QUESTION_FUNCTION}" to find the line.'
)
NOTE_PATH = "notes/textwrap.md"
NOTE_REQUEST = (
    "Write a one-sentence note saying what the module textwrap.py is for to the file "
    f"{NOTE_PATH} (use write_file)."
)
PRINCIPAL = "demo-user"


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


def expected_answer(ws: Path) -> tuple[int, int]:
    """``(lines in the file, line where the function is defined)``, read from the file itself."""
    text = (ws / QUESTION_FILE).read_text(encoding="utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == QUESTION_FUNCTION:
            return len(text.splitlines()), node.lineno
    raise LookupError(f"{QUESTION_FUNCTION} is not defined in {QUESTION_FILE}")


_CLAUSE_END = re.compile(r"[.;,!?](?:\s|$)|\n|\band\b|\bwhile\b")


def check_answer(answer: str, ws: Path) -> tuple[bool, str]:
    """Whether the answer gives both numbers, each where it belongs.

    The answer is cut into clauses (at sentence punctuation, "and", "while"). The line count must
    stand in a clause that does not speak of the function (its name or "defined"), and the
    definition's line in one that does, neither with the other number: an answer that swaps or
    merges the two numbers fails.
    """
    total, line = expected_answer(ws)
    clauses = [c for c in _CLAUSE_END.split(answer or "") if c.strip()]

    def numbers(clause: str) -> set[int]:
        return {int(n) for n in re.findall(r"\b\d+\b", clause)}

    def about_function(clause: str) -> bool:
        return QUESTION_FUNCTION in clause or "defined" in clause.lower()

    has_total = any(
        total in numbers(c) and line not in numbers(c) and not about_function(c) for c in clauses
    )
    has_line = any(
        line in numbers(c) and total not in numbers(c) and about_function(c) for c in clauses
    )
    verdict = (
        f"expected {total} lines ({'found' if has_total else 'MISSING'}) and {QUESTION_FUNCTION} "
        f"defined on line {line} ({'found' if has_line else 'MISSING'})"
    )
    return has_total and has_line, verdict


def step(title: str) -> None:
    """Print a section rule."""
    console.print(Rule(f"[bold]{title}"))


def say(text: str) -> None:
    """Print plain text (no markup, no highlighting)."""
    console.print(text, markup=False, highlight=False)


def agentctl(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real ``agentctl`` command, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args], capture_output=True, text=True, timeout=120
    )


@dataclass
class Outcome:
    """What the demo saw: failures (empty when all went well) and when the first answer came."""

    started: float = field(default_factory=time.monotonic)
    failures: list[str] = field(default_factory=list)
    first_answer_after: float | None = None

    def fail(self, what: str) -> None:
        """Record a failed step and print it."""
        self.failures.append(what)
        console.print(f"[red]failed:[/red] {what}", highlight=False)


async def _start_step(client, title: str, request: str, agent: str = "default") -> Any:
    """Print the step's title and request, start the run as the demo's principal; its handle."""
    from workers.cli.base import web_ui_url

    step(title)
    say(f"Request: {request}")
    h = await rc.start_run(client, RunRequest(agent=agent, input=request, principal_id=PRINCIPAL))
    say(f"run {h.id}  Web UI: {web_ui_url(h.id)}")
    return h


async def ask_question(client, ws: Path, outcome: Outcome) -> RunResult:
    """Run 1: the question; prints the result and checks the answer against the files."""
    from workers.cli.base import _follow, _print_result

    h = await _start_step(client, "1. A question that needs the tools", QUESTION)
    res: RunResult = await _follow(client, h.id, PRINCIPAL, interactive=False)
    outcome.first_answer_after = time.monotonic() - outcome.started
    _print_result(res, False, h.id)
    ok_calls = [c for c in res.tool_calls if c.status == "ok"]
    correct, verdict = check_answer(res.output or "", ws)
    good = res.status == "completed" and correct and len(ok_calls) >= 2
    console.print(
        f"\n[bold]check:[/bold] {len(ok_calls)} successful tool calls; {verdict} -> "
        + ("[green]correct[/green]" if good else "[red]WRONG[/red]"),
        highlight=False,
    )
    say(f"first answer {outcome.first_answer_after:.1f}s after the demo started")
    if res.status != "completed":
        outcome.fail(f"run 1 ended {res.status}: {res.error or res.stopped_reason}")
    elif not good:
        outcome.fail(f"run 1 answered wrongly: {verdict}; {len(ok_calls)} successful tool calls")
    return res


def _show_how_to_approve(run_id: str, call_id: str) -> None:
    from workers.cli.base import web_ui_url

    say("Approve it any of three ways:")
    say(f"  agentctl approve {run_id} {call_id} --principal {PRINCIPAL}")
    say(
        f"  temporal workflow signal --workflow-id {run_id} --name approve "
        f'--input \'{{"tool_call_id": "{call_id}", "principal_id": "{PRINCIPAL}"}}\''
    )
    say(f"  Web UI: {web_ui_url(run_id)} -> Send Signal 'approve' with the same input")


def _console_login() -> tuple[str, str | None]:
    """The run console's URL with its token (``?token=``), and the token (None: no console)."""
    from workers.config import load_settings
    from workers.console.auth import read_token

    tok = read_token(load_settings().state_dir) if procs.running("console") else None
    return (f"{procs.CONSOLE_URL}?token={tok}" if tok else procs.CONSOLE_URL), tok


async def _approve(run_id: str, call_id: str, outcome: Outcome) -> None:
    """Approve as a person in the run console would: its HTTP API, with the console's token.

    With no console running, approves with ``agentctl``.
    """
    import aiohttp

    _, tok = _console_login()
    if tok is None:
        say("The demo approves now with agentctl (no run console is running):")
        out = await asyncio.to_thread(
            agentctl, "approve", run_id, call_id, "--principal", PRINCIPAL
        )
        say(f"  $ agentctl approve ... -> exit {out.returncode}: {out.stdout.strip()}")
        if out.returncode != 0:
            outcome.fail(f"agentctl approve exited {out.returncode}")
        return
    say("The demo approves now through the run console, authenticated by its token:")
    url = f"{procs.CONSOLE_URL}runs/{run_id}/approve"
    async with aiohttp.ClientSession() as http:
        r = await http.post(
            url, json={"tool_call_id": call_id}, headers={"Authorization": f"Bearer {tok}"}
        )
        body = await r.text()
    say(f"  POST {url} -> HTTP {r.status}: {body[:200]}")
    if r.status != 200:
        outcome.fail(f"the console refused the approval: HTTP {r.status} {body[:200]}")


async def write_with_approval(client, ws: Path, outcome: Outcome) -> None:
    """Run 2: a write held for approval, approved in the run console; checks the note exists."""
    from workers.cli.base import _print_result

    h = await _start_step(client, "2. A write that waits for a person's approval", NOTE_REQUEST)
    try:
        st = await rc.wait_for_state(
            client,
            h.id,
            lambda s: s.status == "awaiting_approval" or s.status in ("completed", "failed"),
            timeout=240,
        )
    except TimeoutError as e:
        outcome.fail(str(e))
        st = None
    if st is None or not st.pending_approvals:
        outcome.fail("run 2 never asked for approval of write_file")
    else:
        p = st.pending_approvals[0]
        console.print(
            f"[yellow]waiting for approval:[/yellow] {p.name} {p.arguments} (call {p.tool_call_id})",
            highlight=False,
        )
        _show_how_to_approve(h.id, p.tool_call_id)
        await _approve(h.id, p.tool_call_id, outcome)
    res = await asyncio.wait_for(rc.result(client, h.id), timeout=300)
    _print_result(res, False, h.id)
    note = ws / NOTE_PATH
    if note.exists():
        say(f"\n{note.relative_to(ws.parent)} now says:")
        say(note.read_text(encoding="utf-8"))
    if res.status != "completed":
        outcome.fail(f"run 2 ended {res.status}: {res.error or res.stopped_reason}")
    elif not note.is_file() or not note.read_text(encoding="utf-8").strip():
        outcome.fail(f"run 2 completed but {NOTE_PATH} was not written")


async def demo_runs(ws: Path, outcome: Outcome) -> RunResult:
    """The three demo steps; failures go to ``outcome``; returns the first run's result."""
    from workers.cli.base import web_ui_url

    client = await rc.connect()
    try:
        first = await ask_question(client, ws, outcome)
        await write_with_approval(client, ws, outcome)
        await memory_across_runs(client, outcome, _start_step)
        step("Done")
        say(
            "The servers keep running: browse the runs at "
            f"{web_ui_url('').rsplit('/', 1)[0]}\n"
            f"Watch and approve runs live in the run console: {_console_login()[0]}\n"
            'Try: .venv/bin/agentctl run "How many functions does shlex.py define?" --follow\n'
            "Stop everything with: make stop"
        )
        return first
    finally:
        del client
        gc.collect()


def start_servers(ws: Path) -> bool:
    """Dev server, codec server, model server and worker; False (after printing why) on failure."""
    from workers.local.dev_server import find_dev_config, run_dev_server
    from workers.local.model.process import host_port_from_env, is_ready
    from workers.local.model.server import run_model_server

    step("Temporal dev server (temporal-dev.yml)")
    # the checkout's file; installed, <AGENT_HOME>/temporal-dev.yml (written from the package)
    config = PROJECT_ROOT / "temporal-dev.yml" if IN_CHECKOUT else find_dev_config()
    state = load_settings().state_dir
    if config is None:
        return False
    if run_dev_server(config, foreground=False, out=sys.stdout, state_dir=state) != 0:
        return False
    say(_encryption_on(Path(state)))
    codec = _start_codec_server()
    if codec:
        say(codec)
    step(
        "Local model (Qwen2.5-Coder-1.5B-Instruct, from PyPI, checked against the upstream sha256)"
    )
    host, port = host_port_from_env()
    if is_ready(host, port):
        say(f"a model server already answers at {host}:{port}; using it")
    elif (
        run_model_server(
            foreground=False,
            pid_file=procs.pid_file("model-server"),
            log_path=procs.log_file("model-server"),
            out=sys.stdout,
        )
        != 0
    ):
        return False
    step("Worker")
    try:
        procs.start_worker()
    except RuntimeError as e:
        console.print(f"[red]error:[/red] {e}")
        return False
    try:
        say(procs.start_console())
    except RuntimeError as e:
        say(f"run console not started: {e}")
    say(f"workspace: {ws} (copied from the Python standard library)")
    return True


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``make demo`` / ``make demo-check`` (``--check``); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m workers.local.demo")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when any step fails or an answer is wrong"
    )
    args = parser.parse_args(argv)
    outcome = Outcome()
    ws = prepare_workspace(Path(load_settings().state_dir) / "workspace")
    if not start_servers(ws):
        outcome.fail("a server could not be started")
        return 1
    first = asyncio.run(demo_runs(ws, outcome))
    if args.check:
        if outcome.failures:
            say("demo-check: FAIL: " + "; ".join(outcome.failures))
            return 1
        say(
            f"demo-check: PASS (correct answer after {outcome.first_answer_after:.1f}s; note approved; fact recalled from memory)"
        )
        return 0
    return 0 if first.status == "completed" else 1


def _encryption_on(state: Path) -> str:
    """Turn payload encryption on for this state folder; returns a status line.

    Creates ``<state>/encryption-keys`` (one fresh AES-256 key, mode 0600) unless
    ``AGENT_ENCRYPTION_KEYS`` says otherwise; every process reading this state folder then
    encrypts (:func:`workers.config.load_settings`). Processes started before the key existed
    are restarted so they encrypt and decrypt too.
    """
    from workers.config import ENCRYPTION_KEY_FILE
    from workers.payloads.encryption import load_or_create_key_file

    if os.environ.get("AGENT_ENCRYPTION_KEYS", "").strip():
        return "payload encryption as AGENT_ENCRYPTION_KEYS says"
    path, created = load_or_create_key_file(state / ENCRYPTION_KEY_FILE)
    if created:
        for name in ("worker", "codec-server", "console"):
            if procs.running(name):
                procs.stop(name)
    return (
        f"payloads encrypted at rest (AES-256-GCM, key in {path}, mode 0600); the Web UI "
        "decrypts them through the codec server once you open the console URL below and tick "
        "'Include cross-origin credentials' in the Web UI's Codec Server settings"
    )


def _start_codec_server() -> str | None:
    """Start the codec server (for the Web UI) if this build has one; returns a status line."""
    try:
        from workers.payloads import codec_server  # noqa: F401
    except ImportError:
        return None
    try:
        return procs.start_codec_server()
    except (AttributeError, RuntimeError) as e:
        return f"codec server not started: {e}"


if __name__ == "__main__":
    raise SystemExit(main())
