"""``make chaos``: many runs with approvals while workers and the dev server are SIGKILLed.

``python -m bench.chaos [--quick] [--two-hosts] [--runs N] [--kill-every S] [--deadline S] [--port P]``

It starts, by itself and on non-default ports, a dev server on a SQLite file
(``temporal server start-dev --db-filename``), the scripted model server (real HTTP,
:mod:`workers.testing.scripted_model`) and two worker processes. Each run takes 5 model steps:
``write_file`` (needs approval), ``chaos_effect`` (a side effect that needs approval, uses
``ToolContext.idempotency_key`` and journals each execution, :mod:`bench.chaos_tools`),
``calculator``, ``chaos_effect`` again, then a final answer; every third run also calls the
client tool ``chaos_ask`` (the driver answers it with update ``tool_result``, as it answers
approvals; its wait crosses the kills); every fourth run is of agent ``chaos_judged``, whose
judge (``policy.judge``, the scripted model) approves its ``write_file`` calls and escalates its
effects to the driver (:func:`judge_reply`). Approvals are decided through the
``decide`` update for even runs and the ``approve``/``reject`` signals for odd ones; every fifth
run has its first ``chaos_effect`` rejected. The sandboxed ``run_python`` call writes a file that a
later ``run_python`` call of the run reads back (the run's files travel through the payload
store), and the final answer quotes it. Meanwhile one of the two workers is SIGKILLed every
``--kill-every`` seconds (and restarted), and the dev server is SIGKILLed and restarted on its
SQLite file when a third and two thirds of the runs have closed.

``--two-hosts``: the two workers are two hosts, sharing no folder (:mod:`bench.chaos_hosts`):
each its own ``AGENT_HOME``, memory on PostgreSQL (the ``pgserver`` wheel), payloads and the
sandbox's files in an S3 API (moto's server). The report adds what the bucket holds and what the
hosts' local stores hold (nothing, or the report is not OK).

It prints runs completed / total, approvals lost, calls run without approval, duplicated side
effects (journal entries per idempotency key above one), drain time, and every run still open at
the end with the ``WorkflowTaskFailed`` errors of its history. Everything is bounded by
``--deadline``; every process started is stopped by pid on the way out, on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench.chaos_agents import MODEL_SECONDS, judge_reply, judged, write_spec
from bench.chaos_hosts import start_two_hosts, use_bucket_here
from bench.chaos_procs import Fleet
from bench.chaos_report import collect, memory_check, print_report, sandbox_note
from workers.testing.scripted_model import Reply, ScriptedModel, text, tool_call

_RUN = re.compile(r"chaos run (\d+)")

FACT = "chaos run {i} remembers fact {i}"
"""What the consolidation of run ``i`` extracts (one fact per run; make chaos counts them)."""


def _extraction(msgs: list[dict[str, Any]]) -> Reply | None:
    """The consolidation workflow's extraction request: one fact for the run it is about."""
    if not msgs or "You keep long-term memory" not in str(msgs[0].get("content") or ""):
        return None
    user = str(msgs[-1].get("content") or "")
    found = _RUN.search(user.split("CONVERSATION:", 1)[-1])
    facts = [{"text": FACT.format(i=found.group(1)), "replaces": None}] if found else []
    return text(json.dumps({"facts": facts}))  # at once: 200 of them are extracted one by one


def responder(request: dict[str, Any]) -> Reply:
    """The model of one chaos run: 7 tool turns then an answer, from the tool messages so far.

    Turn 4 is a Code Mode script whose one tool call (an effect) waits for approval inside the
    script; turn 5 runs Python in the bubblewrap sandbox, writing a file that turn 7 reads back
    (often on the other worker, or host); the answer quotes it.
    """
    msgs = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    extraction = _extraction(msgs)
    if extraction is not None:
        return extraction
    verdict = judge_reply(msgs)
    if verdict is not None:
        return verdict
    first = next((m for m in msgs if m.get("role") == "user"), {})
    found = _RUN.search(str(first.get("content") or ""))
    i = int(found.group(1)) if found else -1
    done = sum(1 for m in msgs if m.get("role") == "tool")
    steps = [
        ("write_file", {"path": f"out/{i}.txt", "content": f"run {i}\n", "overwrite": True}),
        ("chaos_effect", {"label": f"{i}-a"}),
        ("calculator", {"expression": f"{i} + 1"}),
        *([("chaos_ask", {"question": f"run {i}?"})] if asks_client(i) else []),
        ("run_code", {"script": f'await chaos_effect(label="{i}-c")'}),
        ("run_python", {"code": f"open('r{i}.txt', 'w').write({sandbox_note(i)!r})"}),
        ("chaos_effect", {"label": f"{i}-b"}),
        ("run_python", {"code": f"print(open('r{i}.txt').read())", "files": [f"r{i}.txt"]}),
    ]
    if done < len(steps):
        return tool_call(*steps[done]).with_delay(MODEL_SECONDS)
    last = next((m for m in reversed(msgs) if m.get("role") == "tool"), {})
    try:  # the file read back, as the sandbox printed it
        quoted = str(json.loads(str(last.get("content") or "")).get("stdout", "")).strip()
    except (ValueError, AttributeError):
        quoted = "(no file)"
    return text(f"chaos run {i} done: {quoted}").with_delay(MODEL_SECONDS)


def asks_client(index: int) -> bool:
    """Whether run ``index`` calls the client tool ``chaos_ask`` (every third run)."""
    return index % 3 == 1


def client_answer(index: int) -> str:
    """What the chaos driver answers run ``index``'s ``chaos_ask`` with."""
    return f"answer {index}"


def rejects(index: int, name: str, arguments: Any) -> bool:
    """Whether the chaos driver rejects this call: the first effect of every fifth run."""
    label = arguments.get("label") if isinstance(arguments, dict) else None
    return name == "chaos_effect" and index % 5 == 4 and label == f"{index}-a"


class Approver:
    """Finds runs awaiting approval (visibility) and decides their calls; records every decision.

    ``decisions[(workflow id, call id)]`` holds ``decision``, ``via`` (``update``/``signal``),
    ``acked`` (the server accepted it) and ``sends``. It also answers the client tool calls of
    the runs that make one (``asks_client``; a run waiting for a client does not show in
    visibility, so those runs are asked every second until answered): ``answered`` holds
    ``(workflow id, call id)`` of each ``tool_result`` the run took.
    """

    def __init__(self, client: Any, task_queue: str, index: dict[str, int]) -> None:
        self.client = client
        self.task_queue = task_queue
        self.index = index
        self.decisions: dict[tuple[str, str], dict[str, Any]] = {}
        self.errors: Counter[str] = Counter()
        self.invisible: set[str] = set()
        self.answered: set[tuple[str, str]] = set()
        self.asking = {w for w, i in index.items() if asks_client(i)}
        self._sem = asyncio.Semaphore(8)

    async def loop(self) -> None:
        """Poll every second until cancelled; every 15 s also sweep every open run.

        The sweep finds runs waiting for approval that visibility does not show as such (a run
        started without its search attributes never sets ``AgentStatus``); they are counted in
        ``invisible``.
        """
        running = (
            f"TaskQueue = '{self.task_queue}' AND WorkflowType = 'AgentRun' "
            "AND ExecutionStatus = 'Running'"
        )
        awaiting = f"{running} AND AgentStatus = 'awaiting_approval'"
        tick = 0
        while True:
            try:
                seen = {wf.id async for wf in self.client.list_workflows(awaiting, page_size=500)}
                done = {w for w, _ in self.answered}
                await asyncio.gather(*(self._one(wid) for wid in seen | (self.asking - done)))
                if tick % 15 == 14:
                    rest = [wf.id async for wf in self.client.list_workflows(running)]
                    found = await asyncio.gather(*(self._one(w) for w in rest if w not in seen))
                    self.invisible.update(w for w, f in zip(rest, found, strict=False) if f)
            except Exception as e:  # noqa: BLE001 - the server may be down: try again
                self.errors[type(e).__name__] += 1
            tick += 1
            await asyncio.sleep(1.0)

    async def _one(self, wid: str) -> bool:
        """Decide the run's pending calls; True when it had any."""
        from workers import client as api

        async with self._sem:
            try:
                st = await api.handle(self.client, wid).query("state", rpc_timeout=_td(5))
            except Exception as e:  # noqa: BLE001 - worker or server down
                self.errors[f"query {type(e).__name__}"] += 1
                return False
            pending = st.get("pending_approvals") or [] if isinstance(st, dict) else []
            for p in pending:
                await self._decide(wid, p)
            for c in st.get("pending_client_tools") or [] if isinstance(st, dict) else []:
                await self._answer(wid, c["tool_call_id"])
            return bool(pending)

    async def _answer(self, wid: str, cid: str) -> None:
        """Send the client tool's result; a refusal saying it has one already counts as taken."""
        from workers import client as api
        from workflows.models import ToolResultUpdate

        upd = ToolResultUpdate(
            tool_call_id=cid, content=client_answer(self.index[wid]), principal_id="chaos"
        )
        try:
            await api.tool_result(self.client, wid, upd)
            self.answered.add((wid, cid))
        except Exception as e:  # noqa: BLE001 - unacknowledged: sent again next round
            if "already has its result" in str(getattr(e, "cause", None) or e):
                self.answered.add((wid, cid))
            else:
                self.errors[f"tool_result {type(e).__name__}"] += 1

    async def _decide(self, wid: str, pending: dict[str, Any]) -> None:
        from workers import client as api
        from workflows.models import ApproveSignal, RejectSignal

        i = self.index[wid]
        cid = pending["tool_call_id"]
        rec = self.decisions.get((wid, cid))
        if rec and rec["acked"] and time.monotonic() - rec["t"] < 30:
            return  # decided; the run has not moved on yet
        reject = rejects(i, pending.get("name", ""), pending.get("arguments"))
        via = "update" if i % 2 == 0 else "signal"
        rec = rec or {"decision": "reject" if reject else "approve", "via": via, "sends": 0}
        rec.update(acked=False, t=time.monotonic(), sends=rec["sends"] + 1)
        self.decisions[(wid, cid)] = rec
        try:
            if via == "update":
                await api.decide(
                    self.client, wid, cid, rec["decision"], "chaos", reason="chaos rejects"
                )
            elif reject:
                await api.reject_signal(
                    self.client, wid, RejectSignal(tool_call_id=cid, principal_id="chaos")
                )
            else:
                await api.approve_signal(
                    self.client, wid, ApproveSignal(tool_call_id=cid, principal_id="chaos")
                )
            rec["acked"] = rec["ever_acked"] = True
        except Exception as e:  # noqa: BLE001 - unacknowledged: sent again next round
            self.errors[f"{via} {type(e).__name__}"] += 1


def _td(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


async def _count(client: Any, query: str) -> int | None:
    try:
        return (await client.count_workflows(query)).count
    except Exception:  # noqa: BLE001 - server down
        return None


async def _faults(fleet: Fleet, client: Any, tq: str, runs: int, every: float) -> None:
    """Kill a worker every ``every`` s; kill the server at 1/3 and 2/3 of the runs closed.

    Also a supervisor: a worker that exited by itself (it cannot start while the server is
    down: ``ServerUnreachable``) is started again within a second, as systemd would.
    """
    thresholds = [runs / 3, 2 * runs / 3]
    n = 0
    next_kill = time.monotonic() + every
    while True:
        await asyncio.sleep(1.0)
        for k, w in enumerate(fleet.workers):
            if w.proc.poll() is not None:
                fleet.worker_exits += 1
                fleet.spawn_worker(k)
        if time.monotonic() < next_kill:
            continue
        next_kill = time.monotonic() + every
        runs_of = f"TaskQueue = '{tq}' AND WorkflowType = 'AgentRun'"  # not consolidation
        closed = await _count(client, f"{runs_of} AND ExecutionStatus != 'Running'")
        if thresholds and closed is not None and closed >= thresholds[0]:
            thresholds.pop(0)
            print(f"  [{time.strftime('%H:%M:%S')}] SIGKILL dev server ({closed} closed)")
            await fleet.kill_server()
            continue
        await fleet.kill_worker(n % len(fleet.workers))
        n += 1


async def _progress(client: Any, tq: str, runs: int, deadline: float) -> tuple[bool, float]:
    """Wait until every run has closed or the deadline; returns (all closed, monotonic time)."""
    last = None
    while time.monotonic() < deadline:
        runs_of = f"TaskQueue = '{tq}' AND WorkflowType = 'AgentRun'"  # not consolidation
        running = await _count(client, f"{runs_of} AND ExecutionStatus = 'Running'")
        total = await _count(client, runs_of)
        if running == 0 and total is not None and total >= runs:
            return True, time.monotonic()
        if running is not None and running != last:
            print(f"  [{time.strftime('%H:%M:%S')}] {running} running")
            last = running
        await asyncio.sleep(1.0)
    return False, time.monotonic()


async def _start_runs(client: Any, tq: str, index: dict[str, int], rate: float) -> None:
    """Start the runs of ``index`` at ``rate`` per second (retrying while the server is down)."""
    from workers.client import start_run
    from workflows.models import RunRequest

    for wid, i in index.items():
        agent = "chaos_judged" if judged(i) else "chaos"
        req = RunRequest(agent=agent, input=f"chaos run {i}", principal_id="chaos")
        while True:
            try:
                await start_run(client, req, task_queue=tq, workflow_id=wid)
                break
            except Exception as e:  # noqa: BLE001 - server restarting; same id, so no duplicate
                if type(e).__name__ == "WorkflowAlreadyStartedError":
                    break
                await asyncio.sleep(1.0)
        await asyncio.sleep(1.0 / rate)


async def _two_host_figures(hosts: Any, report: dict[str, Any]) -> None:
    """Add the shared stores' figures; not ok when a file stayed in a host's local store."""
    report.update(await asyncio.to_thread(hosts.figures))
    th = report["two_hosts"]
    report["ok"] = bool(report["ok"] and not any(th["files_in_local_stores"].values())
                        and th["payload_objects"] and th["file_objects"])  # fmt: skip


async def chaos(args: argparse.Namespace, workdir: Path, fleet: Fleet) -> dict[str, Any]:
    """One chaos session; returns the report (see :func:`bench.chaos_report.collect`)."""
    from workers.client import connect
    from workers.config import Settings

    deadline = time.monotonic() + args.deadline
    journal = workdir / "journal.jsonl"
    os.environ["CHAOS_JOURNAL"] = str(journal)
    hosts = await start_two_hosts(workdir) if args.two_hosts else None
    memory_url = hosts.memory_url if hosts else f"sqlite://{workdir / 'memory.db'}"
    os.environ["AGENT_MEMORY_URL"] = memory_url
    os.environ["AGENT_STATE_DIR"] = str(workdir / "state")  # two hosts: each its own (worker_env)
    model = ScriptedModel(responder=responder).start()
    try:
        await fleet.start_server()
        tq = f"chaos-{uuid.uuid4().hex[:6]}"
        fleet.worker_args = dict(task_queue=tq, model_url=model.base_url,
                                 spec_file=write_spec(workdir))  # fmt: skip
        if hosts:
            fleet.worker_env = [hosts.worker_env(k) for k in range(2)]
            use_bucket_here(hosts)
            print(f"two hosts: {', '.join(str(h) for h in hosts.homes)}; memory on PostgreSQL, "
                  f"payloads and files in s3://{hosts.bucket} ({hosts.s3.url})")  # fmt: skip
        for k in range(2):
            fleet.spawn_worker(k)
        for w in fleet.workers:
            await w.wait_ready(90)
        settings = (hosts.client_settings(fleet.address, tq) if hosts
                    else Settings(temporal_address=fleet.address, task_queue=tq))  # fmt: skip
        client = await connect(settings)
        t0 = time.monotonic()
        suffix = uuid.uuid4().hex[:6]
        index = {f"chaos-{suffix}-{i}": i for i in range(args.runs)}
        print(f"starting {args.runs} runs on {tq} at {args.rate}/s; a worker SIGKILL every {args.kill_every} s")  # fmt: skip
        approver = Approver(client, tq, index)
        tasks = [asyncio.ensure_future(_start_runs(client, tq, index, args.rate)),
                 asyncio.ensure_future(approver.loop()),
                 asyncio.ensure_future(_faults(fleet, client, tq, args.runs, args.kill_every))]  # fmt: skip
        try:
            all_closed, t_end = await _progress(client, tq, args.runs, deadline - 60)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        report = await collect(client, index, approver, journal, fleet)
        report.update(await memory_check(memory_url, report, deadline))
        if hosts:
            await _two_host_figures(hosts, report)
        report.update(
            all_closed=all_closed,
            wall_seconds=round(t_end - t0, 1),
            drain_seconds=round(max(0.0, t_end - fleet.last_fault), 1) if all_closed else None,
            workdir=str(workdir),
        )
        return report
    finally:
        model.stop()
        if hosts:
            fleet.stop_all()  # the workers first: they use the stores
            await asyncio.to_thread(hosts.stop)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (also read from ``CHAOS_ARGS`` by ``make chaos``)."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=(__doc__ or "").split("\n")[0]
    )
    ap.add_argument("--runs", type=int, default=None, help="runs (default 200; --quick: 30)")
    ap.add_argument("--quick", action="store_true", help="30 runs")
    ap.add_argument("--two-hosts", action="store_true",
                    help="two hosts: each worker its own AGENT_HOME; memory on PostgreSQL "
                         "(pgserver), payloads and sandbox files in S3 (moto's server)")  # fmt: skip
    ap.add_argument("--rate", type=float, default=1.0, help="runs started per second")
    ap.add_argument("--kill-every", type=float, default=4.0, help="seconds between worker kills")
    ap.add_argument("--deadline", type=float, default=None,
                    help="hard limit in seconds (default 1800; --quick: 600)")  # fmt: skip
    ap.add_argument("--port", type=int, default=17233, help="dev server gRPC port")
    ap.add_argument("--ui-port", type=int, default=18233, help="dev server UI port (headless)")
    ap.add_argument("--json", type=Path, default=None, help="also write the report here")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, SQLite)")
    args = ap.parse_args(argv)
    args.runs = args.runs or (30 if args.quick else 200)
    args.deadline = args.deadline or (600.0 if args.quick else 1800.0)
    return args


def _quiet_client_retries() -> None:
    """Keep the SDK core's retry warnings (expected while the server is down) off the report."""
    from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

    quiet = LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=quiet)))


def main(argv: list[str] | None = None) -> int:
    """Run one chaos session; exit 0 when every run completed with nothing lost or duplicated."""
    args = parse_args(argv)
    _quiet_client_retries()
    workdir = Path(tempfile.mkdtemp(prefix="chaos-"))
    fleet = Fleet(workdir, port=args.port, ui_port=args.ui_port)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    report: dict[str, Any] | None = None
    try:
        report = asyncio.run(asyncio.wait_for(chaos(args, workdir, fleet), args.deadline))
    except (KeyboardInterrupt, TimeoutError) as e:
        print(f"chaos stopped early: {type(e).__name__}", file=sys.stderr)
    finally:
        fleet.stop_all()
    if report is None:
        print(f"logs kept in {workdir}", file=sys.stderr)
        return 2
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    ok = report["ok"]
    if ok and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"logs kept in {workdir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
