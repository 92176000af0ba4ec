"""``agentctl`` as a user runs it: a subprocess, exit statuses, one clear line on errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.support.cli import agentctl, agentctl_env
from tests.support.harness import Harness, until_state
from tests.support.people import GATED, deployed
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows.models import RunResult

ROOT = Path(__file__).resolve().parents[2]


async def test_unreachable_server_is_exit_3_with_one_line():
    r = await agentctl("status", "run-x", env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert r.returncode == 3
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) <= 2 and "cannot reach the Temporal server at 127.0.0.1:1" in r.stderr
    assert "Traceback" not in r.stderr


BAD_SETTINGS = [
    pytest.param(
        {"TEMPORAL_ADDRESS": "::::nonsense"},
        ["TEMPORAL_ADDRESS", "'::::nonsense'", "host:port"],
        id="address",
    ),
    pytest.param(
        {"AGENT_HEARTBEAT_TIMEOUT": "-x"},
        ["AGENT_HEARTBEAT_TIMEOUT='-x'", "valid number"],
        id="heartbeat",
    ),
    pytest.param(
        {"AGENT_PAYLOAD_STORE": "ftp"},
        ["AGENT_PAYLOAD_STORE='ftp'", "'local', 's3' or 'none'"],
        id="payload-store",
    ),
    pytest.param(
        {"AGENT_WORKFLOW_SANDBOX": "maybe"},
        ["AGENT_WORKFLOW_SANDBOX='maybe'", "valid boolean"],
        id="sandbox",
    ),
    pytest.param(
        {"AGENT_PAYLOAD_THRESHOLD_BYTES": "-1"},
        ["AGENT_PAYLOAD_THRESHOLD_BYTES='-1'", "greater than or equal to 0"],
        id="threshold",
    ),
    pytest.param(
        {"AGENT_ENCRYPTION_KEYS": "/no/such/keyfile"},
        ["AGENT_ENCRYPTION_KEYS", "/no/such/keyfile", "does not exist"],
        id="keys-missing-file",
    ),
    pytest.param(
        {"AGENT_ENCRYPTION_KEYS": "garbage!!"},
        ["AGENT_ENCRYPTION_KEYS line 1: expected key_id:base64key"],
        id="keys-garbage",
    ),
]


def _bad_env(tmp_path: Path, bad: dict[str, str]) -> dict[str, str]:
    # an address nothing answers at: a command that got past its settings would exit 3, not 2
    base = {
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "AGENT_STATE_DIR": str(tmp_path / "state"),
        "AGENT_ENCRYPTION_KEYS": "off",
    }
    return {**base, **bad}


@pytest.mark.parametrize(("bad", "named"), BAD_SETTINGS)
async def test_a_bad_setting_is_exit_2_with_one_line_naming_it(
    tmp_path: Path, bad: dict[str, str], named: list[str]
):
    r = await agentctl("status", "run-x", env=_bad_env(tmp_path, bad))
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    missing = [want for want in named if want not in r.stderr]
    assert not missing, r.stderr
    assert "Traceback" not in r.stderr


async def test_every_invalid_variable_is_named_on_its_own_line(tmp_path: Path):
    bad = {"AGENT_HEARTBEAT_TIMEOUT": "-x", "AGENT_PAYLOAD_STORE": "ftp"}
    r = await agentctl("list", env=_bad_env(tmp_path, bad))
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2, r.stderr
    assert "AGENT_HEARTBEAT_TIMEOUT='-x'" in lines[0] and "AGENT_PAYLOAD_STORE='ftp'" in lines[1]
    assert "errors.pydantic.dev" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["worker"],
        ["serve", "--port", "1"],
        ["decision-key"],
        ["memory", "list", "--principal", "p"],
        ["dev-server", "--config", "/no/such/temporal-dev.yml", "--background"],
        ["replay", "--file", "tests/histories/streamed.json"],
        ["audit", "--file", "tests/histories/streamed.json"],
    ],
    ids=lambda args: args[0],
)
async def test_commands_that_read_settings_themselves_exit_2_on_a_bad_one(
    tmp_path: Path, args: list[str]
):
    r = await agentctl(*args, env=_bad_env(tmp_path, {"AGENT_HEARTBEAT_TIMEOUT": "-x"}))
    assert r.returncode == 2, r.stderr
    assert "AGENT_HEARTBEAT_TIMEOUT='-x'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "state" / "decision-key").exists()  # nothing made with bad settings


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"TEMPORAL_ADDRESS": "::::nonsense"}, "TEMPORAL_ADDRESS"),
        ({"AGENT_ENCRYPTION_KEYS": "/no/such/keyfile"}, "does not exist"),
    ],
    ids=["address", "keys"],
)
async def test_the_worker_reports_a_bad_connection_setting_as_one_json_line(
    tmp_path: Path, bad: dict[str, str], named: str
):
    r = await agentctl("worker", env=_bad_env(tmp_path, bad))
    assert r.returncode == 2, r.stderr
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    event = json.loads(line)
    assert event["event"] == "worker_failed" and named in event["error"]
    assert "exception" not in event and "Traceback" not in r.stderr


async def test_usage_error_is_exit_2():
    r = await agentctl("approve")
    assert r.returncode == 2
    r2 = await agentctl("run", "x", "--mode", "nonsense")
    assert r2.returncode == 2


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--tenant", "t" * 600], "tenant_id"),
        (["--max-seconds", "1e300"], "limits.max_seconds"),
    ],
    ids=["tenant-600", "max-seconds-1e300"],
)
async def test_a_request_the_server_could_not_hold_is_exit_2_before_connecting(
    flags: list[str], named: str
):
    r = await agentctl("run", "x", *flags, env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert r.returncode == 2, r.stderr
    assert f"error: {named}:" in r.stderr and "Traceback" not in r.stderr


async def test_run_json_prints_only_the_result_and_exit_codes(
    client: Client, tmp_path: Path, dev_server_address: str
):
    model = ScriptedModel(
        scripts={
            "[ok]": [tool_call("record", {"label": "x"}), text("fine")],
            "[limit]": [tool_call("record", {"label": str(i)}) for i in range(5)],
        }
    )
    async with Harness(client, tmp_path, model) as h:
        ok = await agentctl("run", "[ok] do it", "--json", env=agentctl_env(h, dev_server_address))
        limited = await agentctl(
            "run",
            "[limit] go",
            "--json",
            "--max-turns",
            "2",
            env=agentctl_env(h, dev_server_address),
        )
    assert ok.returncode == 0, ok.stderr
    res = RunResult.model_validate_json(ok.stdout)
    assert res.status == "completed" and res.output == "fine"
    assert len(ok.stdout.strip().splitlines()) == 1
    assert limited.returncode == 1
    assert json.loads(limited.stdout)["status"] == "max_turns"


async def test_detach_status_approve_and_result(
    client: Client, tmp_path: Path, dev_server_address: str
):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("deployed")])
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        env = agentctl_env(h, dev_server_address)
        started = await agentctl("run", "deploy please", "--detach", env=env)
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.strip()
        await until_state(
            client.get_workflow_handle(run_id), lambda s: s.status == "awaiting_approval"
        )
        st = await agentctl("status", run_id, "--json", env=env)
        assert json.loads(st.stdout)["pending_approvals"][0]["name"] == "deploy"
        denied = await agentctl("approve", run_id, "--principal", "mallory", env=env)
        assert denied.returncode == 1 and "mallory" in denied.stderr
        bad_args = await agentctl("approve", run_id, "--args", "{nope", env=env)
        assert bad_args.returncode == 2
        approved = await agentctl(
            "approve", run_id, "--principal", "alice", "--args", '{"target": "staging"}', env=env
        )
        assert approved.returncode == 0, approved.stderr
        final = await agentctl("result", run_id, "--json", env=env)
    assert final.returncode == 0
    [call] = json.loads(final.stdout)["tool_calls"]
    # what the model asked, and what the person's edit ran (issue #40)
    assert call["arguments"] == {"target": "prod"}
    assert call["run_arguments"] == {"target": "staging"}
    assert deployed(h) == ["staging"]


async def test_unknown_run_is_a_clear_error(client: Client, dev_server_address: str):
    r = await agentctl("status", "run-does-not-exist", env={"TEMPORAL_ADDRESS": dev_server_address})
    assert r.returncode == 1
    assert "run-does-not-exist" in r.stderr or "no such run" in r.stderr
    assert "Traceback" not in r.stderr


async def test_run_follow_shows_progress(client: Client, tmp_path: Path, dev_server_address: str):
    model = ScriptedModel([tool_call("slow_echo", {"text": "hi", "seconds": 1}), text("all good")])
    async with Harness(client, tmp_path, model) as h:
        r = await agentctl("run", "echo", "--follow", env=agentctl_env(h, dev_server_address))
    assert r.returncode == 0, r.stderr
    assert "tool slow_echo" in r.stdout
    assert "completed" in r.stdout and "all good" in r.stdout
    assert "Web UI: http://127.0.0.1:8233/namespaces/default/workflows/run-" in r.stdout


async def test_follow_prints_text_tools_and_the_approval_command(
    client: Client, tmp_path: Path, dev_server_address: str
):
    model = ScriptedModel(
        [
            tool_call("deploy", {"target": "staging"}, content="Deploying to staging now."),
            text("Deployed; all good."),
        ],
        chunk_chars=3,
    )
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        env = agentctl_env(h, dev_server_address)
        handle = await h.start("deploy it")
        follower = asyncio.ensure_future(agentctl("follow", handle.id, "-p", "alice", env=env))
        st = await until_state(handle, lambda s: s.status == "awaiting_approval")
        call_id = st.pending_approvals[0].tool_call_id
        await asyncio.sleep(0.5)
        await rc.decide(client, handle.id, call_id, "approve", "alice")
        r = await follower
        as_json = await agentctl("follow", handle.id, "--json", env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Deploying to staging now." in out and "Deployed; all good." in out
    assert f"approve with: agentctl approve {handle.id} {call_id} -p alice" in out
    assert "tool deploy" in out and "-> ok" in out
    assert out.index("Deploying to staging now.") < out.index("approve with:")
    assert out.index("approve by alice") < out.index("Deployed; all good.")
    assert "run finished: completed" in out
    lines = [json.loads(ln) for ln in as_json.stdout.splitlines()]
    assert lines[0]["type"] == "run_started" and lines[-1]["type"] == "run_finished"
    assert [ln["offset"] for ln in lines] == list(range(len(lines)))
