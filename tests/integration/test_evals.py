"""Evaluation suites on the real dev server: children on the eval queue, scripted approver,
scores, the paired report, and a suite that survives its worker being SIGKILLed."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from activities.evals.contracts import (
    Approver,
    ApproverRule,
    Case,
    SuiteProgress,
    SuiteRequest,
    Variant,
)
from activities.evals.report import build_report
from tests.support.evals import AGENTS, CASES, responder, system_text, user_text
from tests.support.harness import Harness, through_a_worker_crash
from workers.eval_client import start_suite
from workers.testing.scripted_model import ScriptedModel, text


async def test_suite_runs_children_on_the_eval_queue_and_reports(client, tmp_path) -> None:
    async with Harness(client, tmp_path, ScriptedModel(responder=responder), agents=AGENTS) as h:
        req = SuiteRequest(
            dataset="unit",
            cases=CASES,
            repeat=2,
            variants=[
                Variant(name="careful", agent="careful"),
                Variant(name="sloppy", agent="sloppy"),
            ],
            approver=Approver(rules=[ApproverRule(tool="deploy", decision="approve")]),
        )
        handle = await start_suite(client, req, task_queue=h.task_queue)
        res: SuiteProgress = await asyncio.wait_for(handle.result(), timeout=120)

        assert res.done and len(res.records) == 12 and res.decisions == 4
        by = {(r.case_id, r.variant, r.repeat): r for r in res.records}
        assert by[("capital", "careful", 0)].passed and not by[("capital", "sloppy", 1)].passed
        assert all(by[("calc", v, r)].passed for v in ("careful", "sloppy") for r in (0, 1))
        deploy = by[("deploy", "sloppy", 0)]
        assert deploy.passed and deploy.tool_calls[0]["status"] == "ok"  # approved by the dataset

        child = client.get_workflow_handle(by[("calc", "careful", 0)].run_id)
        desc = await child.describe()
        assert desc.task_queue == h.task_queue + ".eval"
        assert desc.raw_description.workflow_execution_info.priority.priority_key == 5
        # the case's tools restrict the child's: only calculator was offered to the model
        offered = [
            {t["function"]["name"] for t in r.body.get("tools", [])}
            for r in h.model.requests
            if "[calc]" in user_text(r.body)
        ]
        assert offered and all(o == {"calculator"} for o in offered)

        report = build_report(res)
        assert report["variants"]["careful"]["pass_at_1"] == 1.0
        assert abs(report["variants"]["sloppy"]["pass_at_1"] - 2 / 3) < 1e-9
        cmp = report["comparison"]
        assert cmp["baseline"] == "careful" and abs(cmp["difference"] + 1 / 3) < 1e-9
        assert cmp["discordant"] == {"baseline_only": 2, "candidate_only": 0}
        assert cmp["ci_low"] <= cmp["difference"] <= cmp["ci_high"]
        json.dumps(report)  # the JSON report is plain JSON


async def test_rejecting_approver_and_bad_case_tool_fail_cleanly(client, tmp_path) -> None:
    async with Harness(client, tmp_path, ScriptedModel(responder=responder), agents=AGENTS) as h:
        req = SuiteRequest(
            cases=[CASES[2], Case(id="ghost", input="[capital] x", metadata={"tools": ["nope"]})],
            variants=[Variant(name="careful", agent="careful")],
            approver=Approver(default="reject"),
        )
        res = await asyncio.wait_for(
            (await start_suite(client, req, task_queue=h.task_queue)).result(), timeout=60
        )
        by = {r.case_id: r for r in res.records}
        assert by["deploy"].tool_calls[0]["status"] == "rejected" and not by["deploy"].passed
        assert by["ghost"].status == "failed" and "nope" in (by["ghost"].error or "")


async def test_suite_survives_a_worker_crash_without_rerunning_finished_cases(
    client, tmp_path, dev_server_address
) -> None:
    cases = [Case(id=f"c{i}", input=f"[capital] q{i} [m{i}]", expected="paris") for i in range(6)]
    model = ScriptedModel(responder=lambda b: text("Paris.", delay=1.0))
    async with Harness(client, tmp_path, model, agents=AGENTS, worker=False) as h:
        req = SuiteRequest(
            cases=cases, variants=[Variant(name="careful", agent="careful")], max_concurrency=2
        )
        suite_id = f"eval-{uuid.uuid4()}"
        done_before: list[str] = []

        async def start():
            return await start_suite(client, req, task_queue=h.task_queue, suite_id=suite_id)

        def crash_when() -> bool:
            return len(done_before) >= 2

        async def poll(handle) -> None:
            while len(done_before) < 2:
                try:
                    p = SuiteProgress.model_validate(await handle.query("progress"))
                    done_before[:] = [r.case_id for r in p.records]
                except Exception:  # noqa: BLE001 - before the first workflow task
                    pass
                await asyncio.sleep(0.1)

        async def finish(handle):
            return await asyncio.wait_for(handle.result(), timeout=120)

        async def start_and_poll():
            handle = await start()
            asyncio.ensure_future(poll(handle))
            return handle

        res = await through_a_worker_crash(
            h,
            dev_server_address,
            tmp_path / "worker.log",
            start_and_poll,
            crash_when,
            finish,
            crash_timeout=60,
        )
        assert res.done and sorted(r.case_id for r in res.records) == sorted(c.id for c in cases)
        assert all(r.passed for r in res.records)
        for case_id in done_before:  # finished before the crash: its model was asked once
            marker = f"[m{case_id[1:]}]"
            asked = [r for r in h.model.requests if marker in user_text(r.body)]
            assert len(asked) == 1, (case_id, len(asked))
        history = await client.get_workflow_handle(suite_id).fetch_history()
        started = [
            e
            for e in history.events
            if e.HasField("start_child_workflow_execution_initiated_event_attributes")
        ]
        assert len(started) == len(cases)


async def test_agentctl_eval_run_and_report_with_rescore(
    client, tmp_path, dev_server_address
) -> None:
    from tests.support.cli import agentctl, agentctl_env

    async with Harness(client, tmp_path, ScriptedModel(responder=responder), agents=AGENTS) as h:
        data = tmp_path / "cases.jsonl"
        lines = [{"dataset": {"name": "cli", "approver": {"default": "approve"}}}]
        lines += [c.model_dump(exclude_none=True) for c in CASES[:2]]
        data.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        env = agentctl_env(h, dev_server_address)
        r = await agentctl(
            "eval",
            "run",
            str(data),
            "--agent",
            "careful",
            "--agent",
            "sloppy",
            "--suite-id",
            "eval-cli-1",
            "--json",
            env=env,
        )
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        assert rep["runs"] == 4 and rep["variants"]["careful"]["pass_at_1"] == 1.0
        assert (
            rep["variants"]["sloppy"]["pass_at_1"] == 0.5
            and rep["comparison"]["difference"] == -0.5
        )
        asked = h.model.count
        # new expectations: Lyon is now right; rescoring reads the stored runs, asks no model
        changed = tmp_path / "v2.jsonl"
        case = CASES[0].model_copy(update={"expected": "lyon"})
        changed.write_text(json.dumps(case.model_dump(exclude_none=True)) + "\n")
        r = await agentctl(
            "eval",
            "report",
            "eval-cli-1",
            "--rescore",
            "--dataset",
            str(changed),
            "--json",
            env=env,
        )
        assert r.returncode == 0, r.stderr
        rescored = json.loads(r.stdout)
        assert rescored["variants"]["sloppy"]["cases"]["capital"]["passed"] == 1
        assert rescored["variants"]["careful"]["cases"]["capital"]["passed"] == 0
        assert h.model.count == asked
        table = await agentctl("eval", "report", "eval-cli-1", env=env)
        assert table.returncode == 0 and "pass@1" in table.stdout and "McNemar" in table.stdout
        bad = await agentctl("eval", "run", str(tmp_path / "missing.jsonl"), env=env)
        assert bad.returncode == 2 and "cannot read" in bad.stderr


async def test_llm_judge_scores_with_its_prompt_and_answer_recorded(client, tmp_path) -> None:
    from activities.evals.activity import JUDGE_SYSTEM
    from activities.evals.contracts import JudgeConfig, ScorerConfig

    def judge_or_agent(body: dict[str, Any]):
        if system_text(body) == JUDGE_SYSTEM:
            verdict = "PASS" if "Paris" in user_text(body) else "FAIL"
            return text(f"{verdict}\nbecause the answer says so")
        return responder(body)

    async with Harness(
        client, tmp_path, ScriptedModel(responder=judge_or_agent), agents=AGENTS
    ) as h:
        req = SuiteRequest(
            cases=[CASES[0]],
            variants=[
                Variant(name="careful", agent="careful"),
                Variant(name="sloppy", agent="sloppy"),
            ],
            scorers=ScorerConfig(judge=JudgeConfig(model="scripted", rubric="names the capital")),
        )
        res = await asyncio.wait_for(
            (await start_suite(client, req, task_queue=h.task_queue)).result(), 60
        )
        judged = {r.variant: next(s for s in r.scores if s.name == "judge") for r in res.records}
        assert judged["careful"].passed is True and judged["sloppy"].passed is False
        assert "Paris is the capital." in (judged["careful"].prompt or "")
        assert "names the capital" in (judged["careful"].prompt or "")
        assert (judged["sloppy"].answer or "").startswith("FAIL")
