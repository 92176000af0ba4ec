"""The figures of ``make chaos`` (bench/chaos.py), read from the runs, the journal and the files.

* runs completed: runs whose result has status ``completed``.
* approvals lost: approvals (or rejections) the server acknowledged that the finished run does
  not list in ``RunResult.decisions``.
* calls run without approval: ``chaos_effect`` executions (journal) or ``ok`` tool calls (run
  result) of a call that was not approved.
* client tool results lost: runs that completed although their client tool call (``chaos_ask``)
  did not end ``ok`` with the driver's answer.
* duplicated side effects: idempotency keys with more than one ``effect`` line in the journal;
  ``attempts`` lines show how often Temporal ran a call more than once (at least once).
* completed runs without their sandbox file: the run's answer does not quote the file its first
  ``run_python`` call wrote and its last one read back (:func:`sandbox_note`).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any


def sandbox_note(i: int) -> str:
    """What run ``i``'s sandboxed call writes to its file and the run's answer quotes."""
    return f"run {i} file {i * 2}"


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of the chaos journal (none if it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def _history_failures(handle: Any) -> list[str]:
    """``WorkflowTaskFailed`` messages of a run's history (distinct, first 3)."""
    msgs: list[str] = []
    try:
        async for ev in handle.fetch_history_events():
            if ev.HasField("workflow_task_failed_event_attributes"):
                a = ev.workflow_task_failed_event_attributes
                m = f"event {ev.event_id}: {a.failure.message}"[:400]
                if not any(m.split(": ", 1)[1] == x.split(": ", 1)[1] for x in msgs):
                    msgs.append(m)
    except Exception as e:  # noqa: BLE001 - report what we can
        msgs.append(f"history unavailable: {type(e).__name__}: {e}")
    return msgs[:3]


async def _outcome(client: Any, wid: str) -> dict[str, Any]:
    from temporalio.client import WorkflowExecutionStatus

    from workers import client as api

    h = api.handle(client, wid)
    desc = await h.describe()
    out: dict[str, Any] = {"wid": wid, "execution": desc.status.name if desc.status else "?"}
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        res = await h.result()
        out.update(status=res.status, error=res.error, decisions=res.decisions,
                   tool_calls=res.tool_calls, output=res.output)  # fmt: skip
    elif desc.status == WorkflowExecutionStatus.RUNNING:
        out["workflow_task_failures"] = await _history_failures(h)
    return out


def _decisions_check(
    decisions: dict[tuple[str, str], dict[str, Any]],
    outcomes: dict[str, dict[str, Any]],
    effects: Counter[str],
) -> tuple[list[str], list[str]]:
    """(acknowledged decisions missing from their run's result, calls run without approval).

    A call counts as approved when the driver approved it, or when its run recorded the judge's
    approval (``Decision.via == "judge"``, principal ``judge:<model>``).
    """
    approved = {f"{w}/{c}" for (w, c), d in decisions.items() if d["decision"] == "approve"}
    approved |= {
        f"{o['wid']}/{x.tool_call_id}"
        for o in outcomes.values()
        for x in o.get("decisions") or []
        if x.via == "judge" and x.decision == "approve" and x.principal_id.startswith("judge:")
    }
    lost, unapproved = [], [k for k in effects if k not in approved]
    for (wid, cid), d in decisions.items():
        o = outcomes[wid]
        if not d.get("ever_acked") or "decisions" not in o:
            continue
        if not any(x.tool_call_id == cid and x.decision == d["decision"] for x in o["decisions"]):
            lost.append(f"{wid}/{cid} ({d['decision']} via {d['via']})")
    for o in outcomes.values():
        for tc in o.get("tool_calls") or []:
            key = f"{o['wid']}/{tc.id}"
            if tc.status == "ok" and tc.policy == "approve" and key not in approved:
                unapproved.append(key)
    return lost, unapproved


def _judge_decisions(outcomes: dict[str, dict[str, Any]]) -> dict[str, int]:
    """The judge's decisions of every run, by decision (approve / reject)."""
    return dict(
        Counter(
            x.decision
            for o in outcomes.values()
            for x in o.get("decisions") or []
            if x.via == "judge"
        )
    )


async def collect(
    client: Any, index: dict[str, int], approver: Any, journal: Path, fleet: Any
) -> dict[str, Any]:
    """Every figure of the report (a JSON-able dict; ``ok`` when nothing was lost or doubled)."""
    outcomes = {wid: await _outcome(client, wid) for wid in index}
    statuses = Counter(o.get("status") or o["execution"] for o in outcomes.values())
    lines = read_journal(journal)
    effects = Counter(x["key"] for x in lines if x["kind"] == "effect")
    attempts = Counter(x["key"] for x in lines if x["kind"] == "attempt")
    lost, unapproved = _decisions_check(approver.decisions, outcomes, effects)
    ws = Path(fleet.worker_args["spec_file"]).parent / "ws"
    missing_files = [
        w for w, i in index.items()
        if outcomes[w].get("status") == "completed" and not (ws / f"out/{i}.txt").is_file()
    ]  # fmt: skip
    missing_sandbox = [
        w for w, i in index.items()
        if outcomes[w].get("status") == "completed"
        and sandbox_note(i) not in str(outcomes[w].get("output") or "")
    ]  # fmt: skip
    stuck = {w: o for w, o in outcomes.items() if o["execution"] == "RUNNING"}
    client_lost = _client_check(approver, outcomes)
    report = {
        "runs": len(index),
        "completed": statuses.get("completed", 0),
        "statuses": dict(statuses),
        "approvals_sent": len(approver.decisions),
        "decisions_resent": sum(d["sends"] - 1 for d in approver.decisions.values()),
        "approvals_lost": sorted(lost),
        "calls_run_without_approval": sorted(set(unapproved)),
        "client_tool_results": len(approver.answered),
        "judge_decisions": _judge_decisions(outcomes),
        "client_tool_results_lost": client_lost,
        "duplicated_side_effects": sorted(k for k, n in effects.items() if n > 1),
        "side_effects": sum(effects.values()),
        "calls_attempted_more_than_once": sum(1 for n in attempts.values() if n > 1),
        "completed_runs_missing_their_file": missing_files,
        "completed_runs_missing_their_sandbox_file": missing_sandbox,
        "stuck_runs": {w: o.get("workflow_task_failures", []) for w, o in stuck.items()},
        "failed_runs": {
            w: o.get("error")
            for w, o in outcomes.items()
            if o.get("status") not in (None, "completed")
        },  # fmt: skip
        "worker_kills": fleet.worker_kills,
        "server_kills": fleet.server_kills,
        "worker_exits": fleet.worker_exits,
        "client_errors": dict(approver.errors),
        "runs_awaiting_approval_without_AgentStatus": sorted(approver.invisible),
    }
    report["ok"] = (
        report["completed"] == report["runs"]
        and not lost
        and not report["calls_run_without_approval"]
        and not report["duplicated_side_effects"]
        and not missing_files
        and not missing_sandbox
        and not client_lost
    )
    return report


def _client_check(approver: Any, outcomes: dict[str, dict[str, Any]]) -> list[str]:
    """Completed runs that asked the client whose ``chaos_ask`` did not end ``ok`` with the answer.

    The answer is checked by its length (``ToolCallRecord.result_chars``).
    """
    lost = []
    for wid in sorted(approver.asking):
        o = outcomes[wid]
        if o.get("status") != "completed":
            continue  # counted as not completed already
        asks = [tc for tc in o.get("tool_calls") or [] if tc.name == "chaos_ask"]
        want = len(f"answer {approver.index[wid]}")  # bench.chaos.client_answer
        if not asks or any(tc.status != "ok" or tc.result_chars != want for tc in asks):
            lost.append(f"{wid}: {[tc.status for tc in asks]}")
    return lost


async def memory_check(url: str, report: dict[str, Any], deadline: float) -> dict[str, Any]:
    """Memory under chaos: every completed run's fact written once by consolidation, none lost.

    Waits (at most 300 s, and not past ``deadline``) until the consolidation workflow has written
    one item per completed run, then counts: ``memory_facts`` (distinct runs with their fact),
    ``memory_duplicates`` (facts stored more than once) and ``memory_missing`` (completed runs
    without their fact). Updates ``report["ok"]``.
    """
    from activities.memory import Namespace, open_store

    store = open_store(url)
    ns = Namespace(tenant_id="default", scope="user:chaos")
    want = report["completed"]
    stop = min(time.monotonic() + 300, deadline)
    items: list[Any] = []
    while time.monotonic() < stop:
        items = await asyncio.to_thread(store.list, ns, False, 100_000)
        if len({i.text for i in items if "remembers fact" in i.text}) >= want:
            break
        await asyncio.sleep(2.0)
    texts = Counter(i.text for i in items if "remembers fact" in i.text)
    runs = {m.group(1) for t in texts if (m := re.search(r"chaos run (\d+)", t))}
    out = {
        "memory_facts_expected": want,
        "memory_facts": len(runs),
        "memory_duplicates": sorted(t for t, n in texts.items() if n > 1),
        "memory_missing": max(0, want - len(runs)),
    }
    out["ok"] = bool(report["ok"] and not out["memory_duplicates"] and len(runs) >= want)
    return out


def print_report(r: dict[str, Any]) -> None:
    """Print the report for a person."""
    p = print
    p("\n== chaos report ==")
    p(f"runs completed:              {r['completed']} / {r['runs']}  {r['statuses']}")
    p(f"approvals lost:              {len(r['approvals_lost'])} (of {r['approvals_sent']} "
      f"decisions; {r['decisions_resent']} re-sent after no acknowledgement)")  # fmt: skip
    p(f"calls run without approval:  {len(r['calls_run_without_approval'])}")
    p(f"client tool results lost:    {len(r['client_tool_results_lost'])} "
      f"(of {r['client_tool_results']} results the runs took)")  # fmt: skip
    p(f"the judge's decisions:       {r.get('judge_decisions') or 'none'} (runs of chaos_judged)")
    p(f"duplicated side effects:     {len(r['duplicated_side_effects'])} "
      f"(of {r['side_effects']} effects; {r['calls_attempted_more_than_once']} calls were "
      f"attempted more than once)")  # fmt: skip
    if "memory_facts" in r:
        p(f"memory (consolidation):      {r['memory_facts']} of {r['memory_facts_expected']} "
          f"runs' facts written, {len(r['memory_duplicates'])} written twice")  # fmt: skip
    drain = r.get("drain_seconds")
    p(f"drain time:                  {drain if drain is not None else 'not drained'} s after "
      f"the last fault; wall {r.get('wall_seconds')} s")  # fmt: skip
    p(f"faults:                      {r['worker_kills']} worker SIGKILLs, "
      f"{r['server_kills']} dev-server SIGKILL+restarts; {r['worker_exits']} workers exited "
      f"by themselves (server down at start) and were restarted")  # fmt: skip
    if r["completed_runs_missing_their_file"]:
        p(f"completed runs without their written file: {r['completed_runs_missing_their_file']}")
    if r.get("completed_runs_missing_their_sandbox_file"):
        p(f"completed runs whose answer lacks their sandbox file: "
          f"{r['completed_runs_missing_their_sandbox_file'][:10]}")  # fmt: skip
    th = r.get("two_hosts")
    if th:
        p(f"two hosts:                   {th['payload_objects']} payloads and {th['file_objects']} "
          f"sandbox files in s3://{th['bucket']}; files in the hosts' local stores: "
          f"{th['files_in_local_stores']}")  # fmt: skip
    for label in ("approvals_lost", "calls_run_without_approval", "duplicated_side_effects",
                  "client_tool_results_lost"):  # fmt: skip
        for item in r[label][:10]:
            p(f"  {label}: {item}")
    if r["failed_runs"]:
        p("runs that ended but not completed:")
        for w, err in list(r["failed_runs"].items())[:10]:
            p(f"  {w}: {err}")
    if r["stuck_runs"]:
        p(f"runs still open ({len(r['stuck_runs'])}):")
        for w, errs in r["stuck_runs"].items():
            p(f"  {w}: {'; '.join(errs) or 'no WorkflowTaskFailed in its history'}")
    if r["runs_awaiting_approval_without_AgentStatus"]:
        p(f"runs found awaiting approval by the sweep, not (yet) by the AgentStatus listing "
          f"(visibility lag, or no search attributes): "
          f"{len(r['runs_awaiting_approval_without_AgentStatus'])}")  # fmt: skip
    if r["client_errors"]:
        p(f"client errors while faults ran (retried): {r['client_errors']}")
    p("OK" if r["ok"] else "NOT OK")
