"""Compaction planning (workflows/compaction.py): thresholds, what is always kept, units, and a
property loop over random transcripts."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from tests.support.transcripts import Msg, asst, calls, plan_for, result, sys_, user
from workflows.compaction import (
    SUMMARY_PREFIX,
    plan_compaction,
    transcript_units,
)

# --- thresholds -----------------------------------------------------------------------------


def test_no_plan_at_or_under_threshold() -> None:
    msgs = [sys_(), user("task"), asst("a"), user("more")]
    toks = [100, 100, 100, 100]
    # usable = 1000 - 200 = 800; budget = 0.5 * 800 = 400; total = 400 + tools 0
    args: dict[str, Any] = dict(
        tools_tokens=0, context_window=1000, output_reserve=200, threshold=0.5
    )
    assert plan_compaction(msgs, toks, **args) is None
    assert plan_compaction(msgs, [100, 100, 100, 99], **args) is None
    # one more token, or tools counted, tips it over
    assert plan_compaction(msgs, [100, 100, 100, 101], **args) is not None
    assert plan_compaction(msgs, toks, **{**args, "tools_tokens": 1}) is not None


def test_budget_and_target_figures() -> None:
    msgs = [sys_(), user("task")] + [asst(f"a{i}") for i in range(10)] + [user("now")]
    toks = [50] * len(msgs)
    plan = plan_compaction(
        msgs, toks, tools_tokens=30, context_window=1000, output_reserve=200, threshold=0.8
    )
    assert plan is not None
    assert plan.budget == 640 and plan.target == 480
    assert plan.tokens_before == 50 * 13 + 30
    assert plan.tokens_after == 50 * len(plan.keep) + 30
    assert plan.tokens_after <= plan.target and plan.fits
    # oldest dropped first: assistants a0.. a3 go (4 * 50 = 200 -> 480)
    assert plan.dropped == [2, 3, 4, 5]


@pytest.mark.parametrize(
    "kw",
    [
        dict(threshold=0.0),
        dict(threshold=1.5),
        dict(target_ratio=0.0),
        dict(output_reserve=1000),
        dict(tools_tokens=-1),
    ],
)
def test_invalid_arguments(kw: dict[str, Any]) -> None:
    args: dict[str, Any] = dict(
        tools_tokens=0, context_window=1000, output_reserve=0, threshold=0.8
    )
    args.update(kw)
    with pytest.raises(ValueError):
        plan_compaction([user("x")], [10], **args)


def test_length_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="2 token counts for 1 messages"):
        plan_for([user("x")], [1, 2], 100)


# --- what is always kept --------------------------------------------------------------------


def test_system_prompt_and_task_always_kept() -> None:
    msgs = [sys_("a"), sys_("b"), user("THE TASK")]
    msgs += [asst(f"step {i}") for i in range(8)] + [user("latest")]
    toks = [400, 300, 500] + [100] * 8 + [10]
    plan = plan_for(msgs, toks, 1500)
    assert plan is not None
    assert plan.keep[:3] == [0, 1, 2]
    assert 11 in plan.keep
    assert set(plan.dropped) <= set(range(3, 11))
    assert plan.fits


def test_most_recent_tool_unit_kept_even_if_huge() -> None:
    msgs = [sys_(), user("task"), asst("thinking"), calls("a", "b"), result("a"), result("b")]
    toks = [10, 10, 10, 10, 500, 500]
    plan = plan_for(msgs, toks, 900)
    assert plan is not None
    assert plan.keep == [0, 1, 3, 4, 5]
    assert plan.dropped == [2]
    assert not plan.fits and plan.tokens_after == 1030


def test_latest_user_request_kept() -> None:
    msgs = [sys_(), user("task"), asst("done"), user("NEW QUESTION")]
    msgs += [calls("x"), result("x", "big"), calls("y"), result("y")]
    toks = [10, 10, 100, 10, 100, 300, 10, 10]
    plan = plan_for(msgs, toks, 300)
    assert plan is not None
    assert 3 in plan.keep  # the current request survives
    assert plan.dropped == [2, 4, 5]
    assert plan.tokens_after == 50 and plan.fits


def test_unfit_plan_drops_everything_unpinned() -> None:
    msgs = [sys_(), user("task"), asst("1"), calls("c"), result("c"), asst("2"), user("now")]
    toks = [900, 900, 10, 10, 10, 10, 10]
    plan = plan_for(msgs, toks, 1000)
    assert plan is not None and not plan.fits
    assert plan.keep == [0, 1, 6]
    assert plan.dropped == [2, 3, 4, 5]
    assert plan.tokens_after == 1810 > plan.budget


def test_summary_reserve_counted() -> None:
    msgs = [sys_(), user("task")] + [asst(str(i)) for i in range(6)] + [user("now")]
    toks = [10] * 9
    without = plan_for(msgs, toks, 80, target_ratio=1.0)
    with_reserve = plan_for(msgs, toks, 80, target_ratio=1.0, summary_reserve=20)
    assert without is not None and with_reserve is not None
    assert without.tokens_after == 80 and len(without.dropped) == 1
    assert with_reserve.tokens_after == 80 and len(with_reserve.dropped) == 3


def test_previous_summary_is_not_pinned_as_latest_request() -> None:
    msgs = [sys_(), user("task"), user(SUMMARY_PREFIX + "old stuff"), asst("a"), calls("c")]
    msgs.append(result("c"))
    toks = [10, 10, 100, 100, 10, 10]
    plan = plan_for(msgs, toks, 100)
    assert plan is not None
    assert plan.dropped == [2, 3]


def test_plan_is_deterministic() -> None:
    msgs, toks = random_transcript(random.Random(7))
    a = plan_for(msgs, toks, 1000, threshold=0.5)
    b = plan_for(copy.deepcopy(msgs), list(toks), 1000, threshold=0.5)
    assert a is not None and b is not None and a.model_dump() == b.model_dump()


# --- units ----------------------------------------------------------------------------------


def test_units_group_calls_with_results() -> None:
    msgs = [
        sys_(),  # 0
        user("task"),  # 1
        calls("a", "b"),  # 2
        result("b"),  # 3 (out of order)
        user("interjection"),  # 4
        {"role": "tool", "content": "no id"},  # 5 orphan: follows no tool-call unit
        result("a"),  # 6 (not adjacent, matched by id)
        calls("z"),  # 7
        {"role": "tool", "content": "id missing"},  # 8 joins the call right before it
        {"role": "tool", "tool_call_id": "unknown"},  # 9 likewise
    ]
    assert transcript_units(msgs) == [[0], [1], [2, 3, 6], [4], [5], [7, 8, 9]]


def test_non_adjacent_result_keeps_its_call() -> None:
    msgs = [sys_(), user("task"), asst("x"), calls("a"), user("wait"), result("a")]
    toks = [10, 10, 100, 10, 10, 10]
    plan = plan_for(msgs, toks, 70)
    assert plan is not None
    assert plan.keep == [0, 1, 3, 4, 5]


# --- the property loop ----------------------------------------------------------------------


def random_transcript(rng: random.Random) -> tuple[list[Msg], list[int]]:
    msgs: list[Msg] = [sys_(f"system {i}") for i in range(rng.randint(0, 2))]
    msgs.append(user("task"))
    n_calls = 0
    for _ in range(rng.randint(0, 14)):
        kind = rng.choice(["user", "assistant", "tools", "tools", "tools"])
        if kind == "user":
            text = SUMMARY_PREFIX + "earlier" if rng.random() < 0.1 else f"user {len(msgs)}"
            msgs.append(user(text))
        elif kind == "assistant":
            msgs.append(asst(f"assistant {len(msgs)}"))
        else:
            ids = [f"call_{n_calls + j}" for j in range(rng.randint(1, 3))]
            n_calls += len(ids)
            msgs.append(calls(*ids))
            results = [result(i) for i in ids]
            if rng.random() < 0.3:
                rng.shuffle(results)
            if rng.random() < 0.1:
                msgs.append(user("interjection between call and result"))
            msgs.extend(results)
    toks = [rng.randint(1, 400) for _ in msgs]
    return msgs, toks


def _start(msgs: list[Msg], i: int) -> int:
    """Index of the message that opens i's unit (a tool result's assistant call)."""
    if msgs[i]["role"] == "tool":
        for j in range(i - 1, -1, -1):
            ids = [c["id"] for c in msgs[j].get("tool_calls") or []]
            if msgs[i]["tool_call_id"] in ids:
                return j
    return i


def _required(msgs: list[Msg]) -> set[int]:
    """Pinned messages computed independently: head, task, latest request, last unit."""
    req: set[int] = set()
    i = 0
    while i < len(msgs) and msgs[i]["role"] == "system":
        req.add(i)
        i += 1
    users = [k for k, m in enumerate(msgs) if m["role"] == "user"]
    requests = [k for k in users if not m_is_summary(msgs[k])]
    req |= {users[0], requests[-1], _start(msgs, len(msgs) - 1)}
    # close over pairing: a required call keeps all its results
    for k in list(req):
        if msgs[k].get("tool_calls"):
            ids = {c["id"] for c in msgs[k]["tool_calls"]}
            req |= {j for j, m in enumerate(msgs) if m.get("tool_call_id") in ids}
    return req


def m_is_summary(m: Msg) -> bool:
    return isinstance(m.get("content"), str) and m["content"].startswith(SUMMARY_PREFIX)


def test_property_random_transcripts() -> None:
    outcomes = {"none": 0, "fits": 0, "unfit": 0, "dropped": 0}
    for seed in range(600):
        rng = random.Random(seed)
        msgs, toks = random_transcript(rng)
        tools_tokens = rng.randint(0, 300)
        reserve = rng.randint(0, 500)
        window = rng.randint(reserve + 300, reserve + 5000)
        threshold = rng.choice([0.5, 0.8, 1.0])
        plan = plan_compaction(msgs, toks, tools_tokens, window, reserve, threshold)
        budget = int(threshold * (window - reserve))
        total = sum(toks) + tools_tokens
        if plan is None:
            assert total <= budget, seed
            outcomes["none"] += 1
            continue
        assert total > budget, seed
        assert plan.budget == budget and plan.tokens_before == total

        # a partition of the indices, both ascending
        assert plan.keep == sorted(plan.keep) and plan.dropped == sorted(plan.dropped)
        assert sorted(plan.keep + plan.dropped) == list(range(len(msgs))), seed
        kept = set(plan.keep)

        # pinned messages kept
        required = _required(msgs)
        assert required <= kept, seed
        assert len(msgs) - 1 in kept

        # tool calls and results never separated
        kept_call_ids = {c["id"] for i in kept for c in msgs[i].get("tool_calls") or []}
        kept_result_ids = {msgs[i]["tool_call_id"] for i in kept if msgs[i]["role"] == "tool"}
        assert kept_result_ids == kept_call_ids, seed

        # token figures
        assert plan.tokens_after == sum(toks[i] for i in kept) + tools_tokens, seed
        assert plan.fits == (plan.tokens_after <= budget)
        min_tokens = sum(toks[i] for i in required) + tools_tokens
        if min_tokens <= budget:
            assert plan.fits and plan.tokens_after <= budget, seed
        else:
            assert not plan.fits and kept == required, seed

        # oldest first, and no more than needed
        if plan.dropped:
            outcomes["dropped"] += 1
            starts_dropped = {_start(msgs, i) for i in plan.dropped}
            optional_kept = [_start(msgs, i) for i in kept - required]
            if optional_kept:
                assert max(starts_dropped) < min(optional_kept), seed
                last = max(starts_dropped)
                last_unit = [i for i in plan.dropped if _start(msgs, i) == last]
                assert plan.tokens_after + sum(toks[i] for i in last_unit) > plan.target, seed
        outcomes["fits" if plan.fits else "unfit"] += 1

    # the loop exercised every branch
    assert min(outcomes.values()) >= 20, outcomes
