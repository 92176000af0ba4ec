"""Policy patterns: checked as RE2 when a spec is loaded, matched in linear time, never a crash.

Also the model's arguments nested deeper than the recursion limit: unparseable, not an exception.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from activities.contracts import ToolInfo
from activities.spec import CHECK_PATTERNS, ArgCondition, Policy, SpecError, resolve_agent
from workflows.loop_detection import canonical_arguments, turn_signature
from workflows.plan import PlanInvalid, parse_plan
from workflows.policy import evaluate, parse_arguments, re2_search, re_search

RECORD = ToolInfo(name="record", description="", parameters={}, risk="write")
REDOS = "a" * 40 + "!"
DEEP_LIST = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000


def _checked(when: dict[str, object]) -> ArgCondition:
    return ArgCondition.model_validate(when, context={CHECK_PATTERNS: True})


def _policy(when: dict[str, object], action: str = "deny", default: str = "allow") -> Policy:
    rule = {"when": when, "action": action, "reason": "by the rule"}
    return Policy.model_validate({"tools": {"record": {"action": default, "rules": [rule]}}})


@pytest.mark.parametrize(
    ("pattern", "says"),
    [("(unclosed", "missing )"), (r"(a)\1", "invalid escape"), ("(?=x)", "perl operator")],
)
def test_a_pattern_re2_cannot_compile_is_refused_naming_argument_and_pattern(pattern, says):
    for field in ("arg_matches", "arg_not_matches"):
        with pytest.raises(ValidationError) as err:
            _checked({field: {"label": pattern}})
        text = str(err.value)
        assert field in text and "'label'" in text and repr(pattern) in text
        assert says in text and "RE2" in text


def test_valid_re2_patterns_pass_and_decoding_without_the_context_does_not_check():
    ok = _checked({"arg_matches": {"label": "^(a+)+$", "q": r"(?i)^\s*select\b"}})
    assert ok.arg_matches == {"label": "^(a+)+$", "q": r"(?i)^\s*select\b"}
    # a pinned spec decoded in a workflow is not checked again (runs pinned before must replay)
    old = ArgCondition.model_validate({"arg_matches": {"label": r"(a)\1"}})
    assert old.arg_matches == {"label": r"(a)\1"}


def test_the_spec_file_with_a_bad_pattern_is_invalid_naming_the_field(tmp_path: Path):
    p = tmp_path / "agents.yml"
    p.write_text(
        "agents:\n  a:\n    tools: [calculator]\n    policy:\n      tools:\n        calculator:\n"
        "          rules:\n            - when: {arg_matches: {expression: '(unclosed'}}\n"
        "              action: deny\n"
    )
    with pytest.raises(SpecError) as err:
        resolve_agent(p, "a", "m")
    text = str(err.value)
    assert "agents.a.policy.tools.calculator.rules.0.when.arg_matches" in text
    assert "'(unclosed'" in text and "'expression'" in text


def test_the_redos_argument_gets_its_verdict_under_re2():
    p = _policy({"arg_matches": {"label": "^(a+)+$"}})
    assert evaluate(p, RECORD, "record", {"label": REDOS}, "t", "u").action == "allow"
    assert evaluate(p, RECORD, "record", {"label": "aaaa"}, "t", "u").reason == "by the rule"
    assert evaluate(p, RECORD, "record", '{"label": "aaaa"}', "t", "u").action == "deny"
    assert re2_search("^(a+)+$", "a" * 100_000 + "!") is False


def test_a_broken_pattern_denies_the_call_whatever_the_rule_and_the_engine():
    for search in (re2_search, re_search):
        for field in ("arg_matches", "arg_not_matches"):
            for action in ("allow", "deny", "approve"):
                p = _policy({field: {"label": "(unclosed"}}, action=action, default="allow")
                d = evaluate(p, RECORD, "record", {"label": "x"}, "t", "u", search)
                assert d.action == "deny", (search, field, action)
                assert "rule 1 cannot be evaluated" in d.reason and "(unclosed" in d.reason
    # a pattern Python's re knows but RE2 does not (a spec pinned before the check): denied too
    p = _policy({"arg_matches": {"label": r"(a)\1"}}, action="allow", default="approve")
    assert evaluate(p, RECORD, "record", {"label": "aa"}, "t", "u", re_search).action == "allow"
    assert evaluate(p, RECORD, "record", {"label": "aa"}, "t", "u", re2_search).action == "deny"


def test_engines_differ_where_the_patch_matters():
    # the reason runs before patch policy-re2 keep re: \d also matches non-ASCII digits there
    assert re_search(r"\d", "\u0663") is True
    assert re2_search(r"\d", "\u0663") is False


def test_arguments_nested_5000_deep_are_unparseable_not_an_error():
    assert parse_arguments(DEEP_LIST) is None
    assert parse_arguments(DEEP_OBJECT) is None
    assert canonical_arguments(DEEP_OBJECT) == DEEP_OBJECT
    assert canonical_arguments(" " + DEEP_LIST) == DEEP_LIST
    assert turn_signature([("record", DEEP_LIST)]) == (("record", DEEP_LIST),)
    # the policy treats them as unparseable too: a rule over an argument does not hold
    p = _policy({"arg_matches": {"label": "a"}})
    assert evaluate(p, RECORD, "record", DEEP_OBJECT, "t", "u").action == "allow"


def test_a_plan_nested_5000_deep_is_invalid_for_the_model_to_fix():
    with pytest.raises(PlanInvalid, match="nested too deeply"):
        parse_plan(DEEP_OBJECT, agents=[], tools=[], max_steps=5)
