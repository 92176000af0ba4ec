"""Decisions that cannot be forged from a bare Temporal client: with
``policy.require_signed_decisions`` only a signature from a pinned key decides (issue #18)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, WorkflowUpdateFailedError

from activities.signing import decision_message, public_key_text, sign_decision
from tests.support.harness import Harness, until_state
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows.models import ApproveSignal

KEY = Ed25519PrivateKey.generate()
OTHER = Ed25519PrivateKey.generate()


def signed_policy() -> dict:
    return {
        "policy": {
            "require_signed_decisions": True,
            "decision_keys": [public_key_text(KEY)],
            "tools": {"write_file": {"action": "approve"}},
        }
    }


async def test_unsigned_forged_and_tampered_decisions_are_refused_signed_ones_decide(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(
        [tool_call("write_file", {"path": "a.txt", "content": "ok"}), text("written")]
    )
    async with Harness(client, tmp_path, model, agents={"default": signed_policy()}) as h:
        handle = await h.start("write it", principal_id="alice")
        st = await until_state(handle, lambda s: s.pending_approvals)
        call = st.pending_approvals[0].tool_call_id

        # a bare client's update: no signature
        with pytest.raises(WorkflowUpdateFailedError) as e:
            await rc.decide(client, handle.id, call, "approve", "alice", signer=None)
        assert "no signature" in str(e.value.cause)
        # a key the run did not pin
        with pytest.raises(WorkflowUpdateFailedError) as e:
            await rc.decide(client, handle.id, call, "approve", "alice", signer=OTHER)
        assert "does not verify" in str(e.value.cause)
        # signed for other arguments than the ones sent
        at = datetime.now(UTC).isoformat()
        sig = sign_decision(
            KEY, decision_message(handle.id, call, "approve", {"path": "a.txt"}, "alice", at)
        )
        evil_args = {"path": "../../etc/cron.d/x", "content": "owned"}
        await rc.approve_signal(
            client,
            handle.id,
            ApproveSignal(
                tool_call_id=call,
                principal_id="alice",
                arguments=evil_args,
                signature=sig,
                signed_at=at,
            ),
        )
        # an unsigned signal, and a signature of another principal's decision
        await rc.approve_signal(
            client, handle.id, ApproveSignal(tool_call_id=call, principal_id="bob")
        )
        st = await until_state(handle, lambda s: len(s.ignored_signals) >= 2)
        reasons = [i.reason for i in st.ignored_signals]
        assert any("does not verify" in r for r in reasons), reasons
        assert any("no signature" in r for r in reasons), reasons
        assert st.pending_approvals and not st.decisions

        res = await rc.decide(client, handle.id, call, "approve", "alice", signer=KEY)
        assert res.decision == "approve"
        result = await handle.result()
    assert result.status == "completed"
    assert (h.workspace / "a.txt").read_text() == "ok"
    assert not (tmp_path / "etc").exists()
    hist = (await handle.fetch_history()).to_json_dict()
    types = [e["eventType"] for e in hist["events"]]
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types
    assert json.dumps(hist).count("EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED") == 1


def test_a_spec_requiring_signatures_needs_valid_keys():
    from activities.spec import Policy

    with pytest.raises(ValueError, match="decision_keys"):
        Policy(require_signed_decisions=True)
    with pytest.raises(ValueError, match="32 bytes|base64"):
        Policy(decision_keys=["aGVsbG8="])
    assert Policy(require_signed_decisions=True, decision_keys=[public_key_text(KEY)])


async def test_roles_from_the_identity_decide_role_approvers_and_are_covered_by_the_signature(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """``approvers: [role:reviewer]`` with nobody listed in ``policy.roles``: a decision whose
    roles (the console's identity claims) name ``reviewer`` decides; without the role it is
    refused; a signature made without the role does not cover a role added afterwards."""
    from aiohttp import ClientSession

    from workers import decision_keys
    from workers.console.auth import Authenticator
    from workers.console.serve import start_server

    monkeypatch.setenv("AGENT_STATE_DIR", str(tmp_path / "state"))
    console_key = decision_keys.load_or_create(tmp_path / "state")  # what the console signs with
    policy = signed_policy()
    policy["policy"]["decision_keys"].append(public_key_text(console_key))
    policy["policy"]["tools"]["write_file"]["approvers"] = ["role:reviewer"]
    model = ScriptedModel(
        [tool_call("write_file", {"path": "r.txt", "content": "ok"}), text("written")]
    )
    async with Harness(client, tmp_path, model, agents={"default": policy}) as h:
        handle = await h.start("write it", principal_id="alice")
        st = await until_state(handle, lambda s: s.pending_approvals)
        call = st.pending_approvals[0].tool_call_id
        assert st.pending_approvals[0].approvers == ["role:reviewer"]

        # signed, but without the role: refused
        with pytest.raises(WorkflowUpdateFailedError) as e:
            await rc.decide(client, handle.id, call, "approve", "dave", signer=KEY)
        assert "not among the approvers" in str(e.value.cause)
        # a role added to a decision signed without it: the signature does not cover it
        at = datetime.now(UTC).isoformat()
        sig = sign_decision(KEY, decision_message(handle.id, call, "approve", None, "dave", at))
        await rc.approve_signal(
            client,
            handle.id,
            ApproveSignal(
                tool_call_id=call,
                principal_id="dave",
                roles=["reviewer"],
                signature=sig,
                signed_at=at,
            ),
        )
        st = await until_state(handle, lambda s: s.ignored_signals)
        assert "does not verify" in st.ignored_signals[0].reason
        assert st.pending_approvals and not st.decisions

        # through the console: the role comes from the identity (a trusted proxy's groups) and
        # the console signs it with the decision
        proxy = Authenticator(mode="proxy", trusted_proxies=frozenset({"127.0.0.1"}))
        runner, url = await start_server(client, "127.0.0.1", 0, lambda r: r, h.task_queue, proxy)
        erin = {"X-Forwarded-User": "erin", "X-Forwarded-Groups": "tenant:default"}
        dave = {"X-Forwarded-User": "dave", "X-Forwarded-Groups": "tenant:default,role:reviewer"}
        try:
            async with ClientSession() as http:
                r = await http.post(
                    f"{url}/runs/{handle.id}/approve", json={"tool_call_id": call}, headers=erin
                )
                assert r.status >= 400 and "not among the approvers" in await r.text()
                r = await http.post(
                    f"{url}/runs/{handle.id}/approve", json={"tool_call_id": call}, headers=dave
                )
                assert r.status == 200, await r.text()
        finally:
            await runner.cleanup()
        result = await handle.result()
        assert result.status == "completed"
        assert [(d.principal_id, d.decision) for d in result.decisions] == [("dave", "approve")]
        assert (h.workspace / "r.txt").read_text() == "ok"
