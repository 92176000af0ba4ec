"""Scorers: pure functions from a case and a finished run to :class:`Score` values.

Each returns one :class:`~activities.evals.contracts.Score`; :func:`score_run` applies the ones
the case and the settings call for. The activity ``eval.score`` (:mod:`activities.evals.activity`)
and ``agentctl eval report --rescore`` both call :func:`score_run`, so a rescore gives what the
suite gave for the same inputs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, cast

from activities.evals.contracts import (
    Case,
    ExpectedCall,
    Recording,
    RunFacts,
    Score,
    ScorerConfig,
)

_SPACE = re.compile(r"\s+")


def _norm(text: str, case_sensitive: bool) -> str:
    text = _SPACE.sub(" ", text).strip()
    return text if case_sensitive else text.casefold()


def output_match(case: Case, run: RunFacts, cfg: ScorerConfig) -> Score:
    """``exact``, ``contains`` or ``regex`` of ``case.expected`` against the output.

    The mode is ``case.metadata["match"]`` when given, else ``cfg.match``. A regex that does not
    compile fails the score with the error as detail (it never raises).
    """
    mode = case.metadata.get("match") or cfg.match
    expected, output = case.expected or "", run.output or ""
    if mode == "regex":
        flags = 0 if cfg.case_sensitive else re.IGNORECASE
        try:
            ok = re.search(expected, output, flags | re.DOTALL) is not None
        except re.error as e:
            return Score(name="output.regex", passed=False, detail=f"bad regex: {e}")
    else:
        exp, out = _norm(expected, cfg.case_sensitive), _norm(output, cfg.case_sensitive)
        ok = exp == out if mode == "exact" else exp in out
    return Score(name=f"output.{mode}", passed=ok, value=1.0 if ok else 0.0)


def _parsed(arguments: Any) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return cast("dict[str, Any]", arguments)
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return None
        return cast("dict[str, Any]", value) if isinstance(value, dict) else None
    return None


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual or expected == actual and type(expected) is type(actual)
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return float(expected) == float(actual)
    if isinstance(expected, str) and isinstance(actual, str):
        return expected.strip() == actual.strip()
    if isinstance(expected, list) and isinstance(actual, list):
        exp_items, act_items = cast("list[Any]", expected), cast("list[Any]", actual)
        return len(exp_items) == len(act_items) and all(map(_same, exp_items, act_items))
    if isinstance(expected, dict) and isinstance(actual, dict):
        exp_map, act_map = cast("dict[Any, Any]", expected), cast("dict[Any, Any]", actual)
        return exp_map.keys() == act_map.keys() and all(
            _same(v, act_map[k]) for k, v in exp_map.items()
        )
    return bool(expected == actual)


def arguments_match(expected: dict[str, Any], actual: Any) -> tuple[bool, str]:
    """Whether ``actual`` (a dict or JSON text) matches ``expected`` (see ExpectedCall); and why not.

    An argument whose value is null counts as not given (a tool's recorded arguments list its
    unset optional parameters as null).
    """
    args = _parsed(actual)
    if args is None:
        return False, "arguments are not a JSON object"
    args = {k: v for k, v in args.items() if v is not None}
    for key, want in expected.items():
        spec = cast("dict[str, Any]", want) if isinstance(want, dict) and "one_of" in want else None
        if key not in args:
            if spec is not None and spec.get("optional"):
                continue
            return False, f"argument {key} missing"
        options: list[Any] = spec["one_of"] if spec is not None else [want]
        if not any(_same(o, args[key]) for o in options):
            return False, f"argument {key}={json.dumps(args[key])} not in {json.dumps(options)}"
    extra = sorted(set(args) - set(expected))
    if extra:
        return False, f"unexpected argument(s) {', '.join(extra)}"
    return True, ""


def _call_matches(exp: ExpectedCall, call: dict[str, Any]) -> tuple[bool, str]:
    if call.get("name") != exp.name:
        return False, f"called {call.get('name')}, expected {exp.name}"
    return arguments_match(exp.arguments, call.get("arguments"))


def tool_calls_match(case: Case, run: RunFacts, cfg: ScorerConfig) -> Score:
    """The expected calls (name and arguments) against the run's calls.

    Ordered: the expected calls must match the run's calls in that order (a subsequence when
    ``allow_extra_calls``, else exactly). Unordered: each expected call must match a distinct
    run call. Calls that failed for bad arguments still count as made (BFCL scores the call).
    """
    expected = case.expected_tool_calls or []
    calls = list(run.tool_calls)
    if not cfg.allow_extra_calls and len(calls) != len(expected):
        return Score(
            name="tool_calls",
            passed=False,
            value=0.0,
            detail=f"{len(calls)} call(s), expected {len(expected)}",
        )
    why = ""
    if cfg.tool_calls_ordered:
        pos = 0
        for exp in expected:
            while pos < len(calls):
                ok, why = _call_matches(exp, calls[pos])
                pos += 1
                if ok:
                    break
            else:
                return Score(name="tool_calls", passed=False, value=0.0, detail=why or "missing")
    else:
        free = list(range(len(calls)))
        for exp in expected:
            hit = next((i for i in free if _call_matches(exp, calls[i])[0]), None)
            if hit is None:
                return Score(
                    name="tool_calls", passed=False, value=0.0, detail=f"no call matches {exp.name}"
                )
            free.remove(hit)
    return Score(name="tool_calls", passed=True, value=1.0)


def trajectory_match(case: Case, run: RunFacts, cfg: ScorerConfig) -> Score:
    """The run's tool names against ``metadata.trajectory`` (or the expected calls' names)."""
    listed = case.metadata.get("trajectory")
    want: list[Any] = (
        cast("list[Any]", listed)
        if isinstance(listed, list)
        else [c.name for c in case.expected_tool_calls or []]
    )
    got = [str(c.get("name")) for c in run.tool_calls]
    mode = cfg.trajectory or "exact"
    if mode == "exact":
        ok = got == want
    elif mode == "in_order":
        it = iter(got)
        ok = all(any(g == w for g in it) for w in want)
    else:
        ok = not (Counter(want) - Counter(got))
    return Score(
        name=f"trajectory.{mode}",
        passed=ok,
        value=1.0 if ok else 0.0,
        detail="" if ok else f"got {got}, expected {want}",
    )


def _call_text(call: dict[str, Any]) -> str:
    args = call.get("arguments")
    text = args if isinstance(args, str) else json.dumps(args, sort_keys=True)
    return f"{call.get('name')}({text[:120]})"


def left_recording(recording: Recording, run: RunFacts) -> str | None:
    """Where the run's tool calls leave the recorded run's, in words; None when they follow it.

    Call k of the run is compared with recorded call k (tool and arguments,
    :meth:`RecordedCall.matches`): the first that differs, a run that stops early or goes on.
    """
    got, want = run.tool_calls, recording.calls
    for k, (g, w) in enumerate(zip(got, want, strict=False), start=1):
        if not w.matches(str(g.get("name")), g.get("arguments")):
            return (
                f"left the recording at call {k} (turn {g.get('turn', '?')}): "
                f"{_call_text(g)}, recorded {w.shown()}"
            )
    if len(got) < len(want):
        return (
            f"left the recording after call {len(got)}: stopped, recorded "
            f"{want[len(got)].shown()} next"
        )
    if len(got) > len(want):
        g = got[len(want)]
        return (
            f"left the recording at call {len(want) + 1} (turn {g.get('turn', '?')}): "
            f"{_call_text(g)}, recorded none"
        )
    return None


def recording_match(case: Case, run: RunFacts) -> Score:
    """The run's tool calls against the case's recorded ones (``recording``), in order.

    Passes when the run made the same calls (tools and arguments) in the same order; ``value``
    is the fraction of the recorded calls it followed before leaving; ``detail`` says where it
    left (:func:`left_recording`) and how many calls the recording did not answer.
    """
    assert case.recording is not None
    where = left_recording(case.recording, run)
    want = len(case.recording.calls)
    followed = 0
    for g, w in zip(run.tool_calls, case.recording.calls, strict=False):
        if not w.matches(str(g.get("name")), g.get("arguments")):
            break
        followed += 1
    unmatched = sum(1 for c in run.tool_calls if c.get("recorded") == "unmatched")
    detail = where or ""
    if unmatched:
        detail += f"{'; ' if detail else ''}{unmatched} call(s) the recording did not answer"
    return Score(
        name="recording",
        passed=where is None,
        value=followed / want if want else float(where is None),
        detail=detail,
    )


def _limit(name: str, value: float, limit: float | None) -> Score:
    return Score(name=name, value=value, passed=None if limit is None else value <= limit)


def score_run(case: Case, run: RunFacts, cfg: ScorerConfig) -> list[Score]:
    """Every deterministic score of one run: output, tool calls, trajectory, tokens, cost, latency.

    Output is scored when the case has ``expected``; tool calls when it has
    ``expected_tool_calls``; trajectory when ``cfg.trajectory`` is set; the recorded run's
    calls (:func:`recording_match`) when the case has a ``recording``. Tokens, cost and
    latency are always measured, and pass/fail only with a limit in ``cfg``.
    """
    scores: list[Score] = []
    if case.expected is not None:
        scores.append(output_match(case, run, cfg))
    if case.expected_tool_calls is not None:
        scores.append(tool_calls_match(case, run, cfg))
    if cfg.trajectory is not None:
        scores.append(trajectory_match(case, run, cfg))
    if case.recording is not None:
        scores.append(recording_match(case, run))
    scores.append(_limit("tokens", float(run.total_tokens), cfg.max_tokens))
    scores.append(_limit("cost_usd", run.cost_usd, cfg.max_cost_usd))
    scores.append(_limit("latency_ms", run.latency_ms, cfg.max_latency_ms))
    return scores


def passed(status: str, scores: list[Score]) -> bool:
    """A run passes when it completed and no pass/fail score failed."""
    return status == "completed" and all(s.passed is not False for s in scores)
