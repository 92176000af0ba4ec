"""The live reader's merge (workers/live_merge.py) and the live channel's tokens (activities/live.py)."""

from __future__ import annotations

import time
from typing import Any

from activities.live import sign_token, verify_token
from workers.live_merge import Merge


def step(offset: int, type: str, turn: int = 1, **kw: Any) -> dict[str, Any]:
    return {"type": type, "turn": turn, "offset": offset, **kw}


def live(delta: str, pos: int, turn: int = 1, attempt: int = 1) -> dict[str, Any]:
    return {
        "type": "text_delta",
        "turn": turn,
        "delta": delta,
        "pos": pos,
        "attempt": attempt,
        "live": True,
    }


def text_of(events: list[dict[str, Any]]) -> str:
    out = ""
    for e in events:
        if e["type"] == "model_retry":
            out = ""
        elif e["type"] == "text_delta":
            out += e["delta"]
    return out


def test_live_deltas_then_the_recorded_text_give_the_reply_once():
    m = Merge(0, 0)
    out = m.step(step(0, "model_started"))
    out += m.live(live("Hel", 0)) + m.live(live("lo ", 3))
    out += m.live(live("lo ", 3))  # the same piece again (a reconnection's backlog)
    out += m.step(step(1, "text_delta", delta="Hello world"))
    out += m.step(step(2, "model_finished"))
    assert text_of(out) == "Hello world"
    assert [e["type"] for e in out if not e.get("live")] == [
        "model_started",
        "text_delta",
        "model_finished",
    ]
    assert [e["offset"] for e in out] == [0, 0, 0, 1, 2]
    assert [e.get("chars") for e in out if e.get("live")] == [3, 6]


def test_items_out_of_order_wait_for_the_missing_offset():
    m = Merge(0, 0)
    assert m.step(step(1, "status", status="running")) == []
    assert m.pending
    out = m.step(step(0, "run_started"))
    assert [e["offset"] for e in out] == [0, 1] and not m.pending
    assert m.step(step(0, "run_started")) == []  # a duplicate


def test_recorded_text_that_differs_voids_the_live_text_first():
    m = Merge(0, 0)
    out = m.step(step(0, "model_started")) + m.live(live("Hi th", 0))
    out += m.step(step(1, "text_delta", delta="Hello"))
    assert [e["type"] for e in out] == ["model_started", "text_delta", "model_retry", "text_delta"]
    assert text_of(out) == "Hello"


def test_a_later_attempt_voids_the_earlier_attempts_text():
    m = Merge(0, 0)
    out = m.step(step(0, "model_started")) + m.live(live("Par", 0))
    out += m.live(live("Whole", 0, attempt=2))
    assert [e["type"] for e in out] == ["model_started", "text_delta", "model_retry", "text_delta"]
    assert text_of(out) == "Whole"


def test_deltas_before_their_model_started_wait_for_it():
    m = Merge(0, 0)
    assert m.live(live("Early", 0, turn=2)) == []
    out = m.step(step(0, "model_started", turn=2))
    assert [e["type"] for e in out] == ["model_started", "text_delta"]


def test_resume_within_a_step_skips_the_characters_already_given():
    m = Merge(5, 4)  # the reader had offset 4 and 4 characters of the step's text
    out = m.live(live("Hello", 0)) + m.step(step(5, "text_delta", delta="Hello world"))
    assert text_of(out) == "o world"


def test_tokens_are_for_one_run_and_expire():
    secret = b"s3cret"
    tok = sign_token(secret, "run-1")
    assert verify_token(secret, tok, "run-1")
    assert not verify_token(secret, tok, "run-2")
    assert not verify_token(b"other", tok, "run-1")
    assert not verify_token(secret, tok[:-2] + "xx", "run-1")
    assert not verify_token(secret, sign_token(secret, "run-1", ttl_seconds=-1), "run-1")
    assert not verify_token(secret, "v1.notanumber.x", "run-1")
    assert int(tok.split(".")[1]) > time.time()


async def test_broker_takes_items_from_other_threads_and_replays_them_to_a_late_reader():
    import asyncio
    import threading

    from activities.live import LiveBroker

    b = LiveBroker()
    b.step("r", 0, {"type": "ignored"})  # not bound yet: nothing is kept
    b.bind(asyncio.get_running_loop())
    try:

        def workflow_thread() -> None:
            b.step("r", 0, {"type": "run_started"})
            b.step("r", 1, {"type": "model_started"})
            b.step("r", 1, {"type": "model_started"})  # a retried task hands it again
            b.delta("r", {"type": "text_delta", "turn": 1, "delta": "Hi", "pos": 0})

        t = threading.Thread(target=workflow_thread)
        t.start()
        t.join()
        await asyncio.sleep(0.05)
        assert not b.watched("r")
        items = b.subscribe("r", 1)
        assert await anext(items) == {"hello": True, "first": 0, "end": 2}
        got = [await anext(items), await anext(items)]
        assert b.watched("r")
        assert [(g["type"], g.get("offset"), g.get("live")) for g in got] == [
            ("model_started", 1, None),
            ("text_delta", None, True),
        ]
        b.step("r", 2, {"type": "model_finished"})
        assert (await anext(items))["offset"] == 2
        await items.aclose()
        assert not b.watched("r")
    finally:
        b.bind(None)


def finished(call: str, **kw: Any) -> dict[str, Any]:
    return {"type": "tool_finished", "turn": 2, "tool_call_id": call, "result": "42", **kw}


def test_a_held_calls_result_given_live_is_not_given_again_by_the_workflow():
    m = Merge(0, 0)
    out = m.step(step(0, "model_started", turn=2))
    out += m.live(finished("c1", live=True))
    out += m.live(finished("c1", live=True))  # the step's retry handed it again
    out += m.live(live("42", 0, turn=2))
    out += m.step(step(1, "tool_finished", turn=2, tool_call_id="c1", result="42"))
    out += m.step(step(2, "text_delta", turn=2, delta="42"))
    assert [(e["type"], bool(e.get("live"))) for e in out] == [
        ("model_started", False),
        ("tool_finished", True),
        ("text_delta", True),
        ("text_delta", False),
    ]
    assert out[1]["offset"] == 0 and m.next == 3  # the skipped offset is passed over


def test_a_result_the_workflow_gave_first_is_not_given_again_live():
    m = Merge(0, 0)
    out = m.step(step(0, "tool_finished", turn=2, tool_call_id="c1", result="42"))
    out += m.live(finished("c1", live=True))  # a slower channel's copy
    out += m.live(finished("c2", live=True))
    assert [(e["tool_call_id"], bool(e.get("live"))) for e in out] == [("c1", False), ("c2", True)]
