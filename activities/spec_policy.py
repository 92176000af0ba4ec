"""The tool policy of an agent spec: who may run which tool, on which arguments, with whose approval.

``policy:`` of an agent (docs/agents-tools-policy.md); :mod:`activities.spec` re-exports every name.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from activities.patterns import re2_problem
from activities.signing import parse_public_key

__all__ = [
    "CHECK_PATTERNS",
    "JUDGE_PREFIX",
    "ArgCondition",
    "CedarPolicy",
    "JudgeSettings",
    "Policy",
    "PolicyAction",
    "PolicyRule",
    "ToolPolicy",
    "pattern_problem",
]

PolicyAction = Literal["allow", "deny", "approve"]

CHECK_PATTERNS = "check_patterns"
"""Key of the pydantic validation context under which :class:`ArgCondition` checks its patterns
(``model_validate(body, context={CHECK_PATTERNS: True})``): set where a spec is read from its file
(:func:`activities.spec_pinning.resolve_agent`). A pinned spec decoded in a workflow (the recorded
``spec.resolve`` result, a continue-as-new carry) is not checked again: a run pinned before the
check existed must still replay, and the policy denies a call whose rule it cannot evaluate."""


def pattern_problem(pattern: str) -> str | None:
    r"""Why RE2 (the engine of policy patterns, :mod:`activities.patterns`) cannot compile ``pattern``.

    None when it can. RE2 runs in time linear in the text and so has no backreferences
    (``(a)\1``) and no lookaround (``(?=...)``, ``(?!...)``, ``(?<=...)``): RE2 reports those like
    syntax errors.
    """
    return re2_problem(pattern)


class ArgCondition(BaseModel):
    """A condition over a tool call's arguments and the run's identity. All given fields must hold."""

    model_config = ConfigDict(extra="forbid")

    path_prefix: str | None = Field(
        default=None, description="argument `path` starts with this (workspace-relative)"
    )
    arg_matches: dict[str, str] | None = Field(
        default=None,
        description="argument name -> regular expression (RE2 syntax: linear time, no "
        "backreferences or lookaround) found anywhere in the argument's text (a search)",
    )
    arg_not_matches: dict[str, str] | None = Field(
        default=None,
        description="argument name -> regular expression (RE2 syntax) not found in the "
        "argument's text",
    )
    tenant_in: list[str] | None = Field(
        default=None, description="the run's tenant is one of these"
    )
    principal_in: list[str] | None = Field(
        default=None, description="the run's principal is one of these"
    )

    @field_validator("arg_matches", "arg_not_matches")
    @classmethod
    def _re2_patterns(cls, value: Any, info: ValidationInfo) -> Any:
        """Every pattern compiles with RE2, when the spec is read from its file.

        Only under the validation context :data:`CHECK_PATTERNS` (see there why).

        Raises:
            ValueError: names the argument and the pattern, and RE2's reason.
        """
        context: Any = info.context
        if not value or not isinstance(context, dict):
            return value
        if not cast("dict[str, Any]", context).get(CHECK_PATTERNS):
            return value
        problems: list[str] = []
        for name, pattern in value.items():
            why = pattern_problem(pattern)
            if why is not None:
                problems.append(f"argument {name!r}: pattern {pattern!r} is not RE2 syntax ({why})")
        if problems:
            raise ValueError(
                "; ".join(problems) + ". Policy patterns are RE2 (linear time: no "
                "backreferences, no lookaround)"
            )
        return value


class PolicyRule(BaseModel):
    """``when`` holds -> ``action``. Rules are tried in order; the first that holds decides."""

    model_config = ConfigDict(extra="forbid")

    when: ArgCondition = Field(description="the condition (ArgCondition below)")
    action: PolicyAction = Field(description="allow, deny or approve when it holds")
    reason: str | None = Field(default=None, description="shown with the decision")


class ToolPolicy(BaseModel):
    """Policy of one tool: its default action, rules over arguments, who may approve."""

    model_config = ConfigDict(extra="forbid")

    action: PolicyAction | None = Field(
        default=None, description="action when no rule holds (none: the policy's default)"
    )
    rules: list[PolicyRule] = Field(
        default_factory=list[PolicyRule], description="tried in order; the first that holds decides"
    )
    approvers: list[str] | None = Field(
        default=None, description="who may approve this tool's calls (replaces the policy's)"
    )
    reason: str | None = Field(default=None, description="shown with the decision")


JUDGE_PREFIX = "judge:"
"""Principals whose id starts so are the runtime's judge (``judge:<model>``): no client may send a
decision in such a name (workflows/approvals.py refuses it)."""


class CedarPolicy(BaseModel):
    """``policy.cedar``: a file of Cedar policies over tool calls (docs/policy.md).

    Written as the file's path (relative to the spec file); the runtime reads it when the spec is
    resolved and pins its text and the schema it was validated against into the run.
    """

    model_config = ConfigDict(extra="forbid")

    file: str = Field(description="the Cedar policy file (relative to the spec file)")
    policies: str | None = Field(
        default=None, description="set by the runtime: the file's text, pinned at run start"
    )
    cedar_schema: str | None = Field(
        default=None,
        description="set by the runtime: the Cedar schema (JSON) the policies were validated "
        "against, pinned at run start",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_path(cls, value: Any) -> Any:
        """``cedar: FILE`` is ``cedar: {file: FILE}``."""
        return {"file": value} if isinstance(value, str) else value


class JudgeSettings(BaseModel):
    """``policy.judge``: a model that decides calls the policy would ask a person about.

    It answers approve, reject or escalate (to a person) with a reason; one that fails, times out
    or answers anything else escalates (docs/policy.md).
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="the judge's model (on the worker's model endpoint)")
    rubric: str = Field(
        min_length=1, description="what the judge approves, rejects and escalates, in words"
    )
    timeout_seconds: float = Field(
        default=60,
        gt=0,
        le=3600,
        description="the judge's call ends within this; then it escalates",
    )
    max_tokens: int = Field(default=200, ge=16, le=4096, description="tokens of its answer at most")
    tool_results: int = Field(
        default=3,
        ge=0,
        le=20,
        description="the run's last tool results shown to the judge (as untrusted data)",
    )
    response_format: Literal["json_schema", "none"] = Field(
        default="json_schema",
        description="json_schema: the endpoint is asked to constrain the answer to the verdict's "
        "JSON schema (OpenAI structured outputs, llama.cpp grammars); none: only the prompt asks "
        "(for endpoints without it). The answer is parsed strictly either way",
    )


class Policy(BaseModel):
    """Tool policy of an agent.

    ``default`` applies to tools without an entry: ``by_risk`` means read tools are allowed, write
    tools and sandboxed exec tools (``run_command``) need approval, and other exec tools and
    network tools are denied (give them an entry). ``approvers`` lists principals (``alice``) or roles
    (``role:reviewer``) that may decide approvals; an empty list means any principal may decide.
    A tool's own ``approvers`` replaces this list for that tool.
    ``approval_timeout_seconds`` is a durable timer; when it fires the pending call is settled by
    ``on_approval_timeout``.
    """

    model_config = ConfigDict(extra="forbid")

    default: PolicyAction | Literal["by_risk"] = Field(
        default="by_risk",
        description="action for tools without an entry (by_risk: by the tool's risk: read "
        "allowed; write and sandboxed exec, e.g. run_command, need approval; other exec and "
        "network denied)",
    )
    tools: dict[str, ToolPolicy] = Field(
        default_factory=dict, description="tool name -> its policy"
    )
    approvers: list[str] = Field(
        default_factory=list, description="principals or role:NAME that may decide (empty: anyone)"
    )
    roles: dict[str, list[str]] = Field(
        default_factory=dict, description="role name -> principals holding it"
    )
    approval_timeout_seconds: float = Field(
        default=86_400, gt=0, description="a pending approval waits this long (a durable timer)"
    )
    on_approval_timeout: Literal["reject", "fail"] = Field(
        default="reject", description="then the call is rejected or the run fails"
    )
    require_signed_decisions: bool = Field(
        default=False,
        description="approve/reject/decide must carry an Ed25519 signature verified against "
        "decision_keys (activities/signing.py); unsigned or badly signed ones are refused",
    )
    decision_keys: list[str] = Field(
        default_factory=list,
        description="base64 raw Ed25519 public keys whose signatures decisions may carry "
        "(`agentctl decision-key` prints the local one); pinned at run start",
    )
    cedar: CedarPolicy | None = Field(
        default=None,
        description="a file of Cedar policies deciding tool calls before the rules above "
        "(docs/policy.md); a file that does not parse or validate makes the spec invalid",
    )
    judge: JudgeSettings | None = Field(
        default=None,
        description="a model deciding the calls the policy asks about (approve, reject or "
        "escalate to a person; docs/policy.md)",
    )

    @model_validator(mode="after")
    def _keys_when_required(self) -> Policy:
        """Signed decisions need at least one valid key."""
        for k in self.decision_keys:
            parse_public_key(k)
        if self.require_signed_decisions and not self.decision_keys:
            raise ValueError("policy.require_signed_decisions needs policy.decision_keys")
        return self
