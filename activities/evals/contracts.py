"""Data of evaluations: cases, variants, the scripted approver, scorer settings, run records.

Everything crosses the workflow/activity boundary as JSON (``temporalio.contrib.pydantic``); the
shapes of a case and of the JSON report are pinned in docs/contract.md ("Evaluations and
versions"). Plain pydantic, no I/O: the workflow ``EvalSuite`` imports this module.
"""

from __future__ import annotations

import json
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

EVAL_SCORE = "eval.score"
"""Activity name: the deterministic scorers over one finished run."""
EVAL_JUDGE = "eval.judge"
"""Activity name: the LLM judge of one finished run (calls an OpenAI-compatible model)."""
SUITE_WORKFLOW = "EvalSuite"
"""Workflow name of an evaluation suite."""
EVAL_QUEUE_SUFFIX = ".eval"
"""A suite's child runs go to ``<task queue>.eval`` unless the request names a queue."""
LOW_PRIORITY = 5
"""Temporal priority key of evaluation runs (1 highest .. 5 lowest; runs default to 3)."""


class ExpectedCall(BaseModel):
    """A tool call a case expects: a tool name and the arguments that must match.

    An argument's expected value is either a literal (compared for equality; ``3`` equals
    ``3.0``) or ``{"one_of": [v1, v2, ...], "optional": bool}``: any listed value passes, and an
    ``optional`` argument may also be left out (BFCL's convention, where ``""`` marks it).
    """

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


ANSWERED_STATUSES = ("ok", "error")
"""Statuses of recorded calls that ran and returned: a replay answers calls from these only."""


def comparable_arguments(arguments: Any) -> Any:
    """Arguments as a replay compares them: a JSON object without its null values, else the text.

    A dict (or JSON text of an object) loses its ``null`` entries (an optional parameter left
    out and one sent as null are the same call); other text is compared stripped, as written.
    """
    value = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments or "{}")
        except ValueError:
            return arguments.strip()
    if isinstance(value, dict):
        return {k: v for k, v in cast("dict[str, Any]", value).items() if v is not None}
    return arguments.strip() if isinstance(arguments, str) else value


class RecordedCall(BaseModel):
    """One tool call of a captured run, as the model asked for it, and what the model was told.

    ``arguments`` are the model's (parsed; its raw text when not a JSON object);
    ``run_arguments`` those the tool ran with where they differ (validated, or a person's edit).
    ``status`` is the call's ``ToolCallRecord.status``; ``result`` the tool message the model
    was given, for the calls that ran and returned (``ok``, ``error``), else empty.
    """

    id: str = ""
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    run_arguments: dict[str, Any] | None = None
    status: str = "ok"
    result: str = ""
    turn: int = 0

    @property
    def answered(self) -> bool:
        """Whether the call ran and returned, so a replay may answer from it."""
        return self.status in ANSWERED_STATUSES

    def matches(self, name: str, arguments: Any) -> bool:
        """Same tool, same arguments (:func:`comparable_arguments`)."""
        return self.name == name and comparable_arguments(self.arguments) == comparable_arguments(
            arguments
        )

    def shown(self) -> str:
        """``name(arguments)`` as the report shows it."""
        args = self.arguments
        text = args if isinstance(args, str) else json.dumps(args, sort_keys=True)
        return f"{self.name}({text[:120]})"


class Recording(BaseModel):
    """The tool calls of a real run, captured from its history (``agentctl eval capture``).

    A replay (``RunRequest.recorded_tools``, ``agentctl eval run --replay-tools``) answers each
    tool call from the first unused recorded call of the same tool with the same arguments
    (:meth:`RecordedCall.matches`; a used one when every match was used: the same call, the same
    answer); a call none matches is a tool error, or runs live when ``unmatched`` is ``live``.
    ``calls`` are every call the model asked for, in order (denied and rejected ones included:
    the trajectory a replay is compared with).
    """

    run_id: str = ""
    agent: str = ""
    spec_hash: str = ""
    model: str | None = None
    calls: list[RecordedCall] = Field(default_factory=list[RecordedCall])
    unmatched: Literal["error", "live"] = "error"

    def match(self, name: str, arguments: Any, used: list[int]) -> int | None:
        """Index of the recorded call that answers a call of ``name`` with ``arguments``.

        The first answerable match not in ``used``, else the last answerable match, else None.
        """
        hits = [i for i, c in enumerate(self.calls) if c.answered and c.matches(name, arguments)]
        fresh = [i for i in hits if i not in used]
        if fresh:
            return fresh[0]
        return hits[-1] if hits else None


class Case(BaseModel):
    """One case of a dataset (one line of a JSONL file).

    ``metadata`` is free-form; the runtime reads ``metadata.tools`` (restrict the agent's tools
    to these names for this case), ``metadata.match`` (``exact``/``contains``/``regex``, overrides
    the dataset's) and ``metadata.trajectory`` (a list of tool names).
    """

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=200)
    input: str
    expected: str | None = None
    expected_tool_calls: list[ExpectedCall] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    recording: Recording | None = None
    """The run a captured case came from: its tool calls and their results (``agentctl eval
    capture``); ``--replay-tools`` answers the case's tool calls from it."""


class ApproverRule(BaseModel):
    """A rule of the scripted approver: calls of tools matching ``tool`` (fnmatch) get ``decision``."""

    tool: str = "*"
    decision: Literal["approve", "reject"] = "approve"
    reason: str = "rejected by the dataset's approver"


class Approver(BaseModel):
    """The scripted approver a dataset names: first matching rule wins, else ``default``.

    ``principal_id`` is who decides; it must be one of the agent's approvers when its policy
    lists any.
    """

    principal_id: str = "eval-approver"
    rules: list[ApproverRule] = Field(default_factory=list[ApproverRule])
    default: Literal["approve", "reject"] = "approve"

    def decide(self, tool: str) -> ApproverRule:
        """The rule for a call of ``tool`` (a synthetic one holding ``default`` if none matches)."""
        from fnmatch import fnmatchcase

        for rule in self.rules:
            if fnmatchcase(tool, rule.tool):
                return rule
        return ApproverRule(tool=tool, decision=self.default)


class JudgeConfig(BaseModel):
    """An LLM judge: any OpenAI-compatible model asked whether the answer meets ``rubric``.

    ``base_url`` None: the worker's ``OPENAI_BASE_URL``; ``api_key_env`` names the environment
    variable holding the key on the worker (None: the worker's ``OPENAI_API_KEY``).
    """

    model: str
    rubric: str = "The answer is correct and complete given the expected answer."
    base_url: str | None = None
    api_key_env: str | None = None
    max_tokens: int = Field(default=200, ge=1)


class ScorerConfig(BaseModel):
    """Which scorers a suite applies, and their thresholds (None: not a pass/fail criterion).

    * ``match``: how ``expected`` is compared with the output (case-insensitive unless
      ``case_sensitive``; whitespace collapsed).
    * ``tool_calls_ordered``: expected calls must appear in order; ``allow_extra_calls``: other
      calls may come too.
    * ``trajectory``: compare the run's tool names with ``metadata.trajectory`` (or the expected
      calls' names): ``exact``, ``in_order`` (a subsequence) or ``any_order`` (a multiset subset).
    * ``max_tokens`` (total tokens), ``max_cost_usd`` (US dollars), ``max_latency_ms``
      (milliseconds of workflow time): a run over the limit fails that scorer.
    """

    match: Literal["exact", "contains", "regex"] = "contains"
    case_sensitive: bool = False
    tool_calls_ordered: bool = True
    allow_extra_calls: bool = False
    trajectory: Literal["exact", "in_order", "any_order"] | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_latency_ms: float | None = None
    judge: JudgeConfig | None = None


class Variant(BaseModel):
    """One arm of a comparison: an agent spec and an optional model override."""

    name: str = Field(min_length=1, max_length=100)
    agent: str
    model: str | None = None


class SuiteRequest(BaseModel):
    """Input of ``EvalSuite``.

    Child runs get workflow ids ``<suite id>.<case id>.<variant>.<repeat>``, run on
    ``task_queue`` (None: ``<the suite's queue>.eval``) with priority key ``priority_key`` and the
    suite's tenant as fairness key; at most ``max_concurrency`` run at once.
    """

    dataset: str = "dataset"
    cases: list[Case]
    variants: list[Variant] = Field(min_length=1)
    repeat: int = Field(default=1, ge=1, le=100)
    approver: Approver = Field(default_factory=Approver)
    scorers: ScorerConfig = Field(default_factory=ScorerConfig)
    task_queue: str | None = None
    tenant_id: str = "eval"
    principal_id: str = "eval"
    spec_file: str | None = None
    max_concurrency: int = Field(default=4, ge=1, le=500)
    priority_key: int = Field(default=LOW_PRIORITY, ge=1, le=5)
    max_turns: int | None = Field(default=None, ge=1)
    replay_tools: bool = False
    """Answer every run's tool calls from its case's ``recording`` (``--replay-tools``): no tool
    runs, except unmatched calls of a recording whose ``unmatched`` is ``live``; a case without
    a recording gets an empty one (each call a tool error). The scripted approver decides a
    call the recording shows decided (ran: approve; ``rejected``: reject) as it was."""


class RunFacts(BaseModel):
    """What the scorers read of a finished run (taken from its ``RunResult``)."""

    status: str
    output: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    """``{"name", "arguments", "status", "turn"}`` of each call, in order (``arguments`` as the
    model sent them in runs since patch ``model-arguments``); ``run_arguments`` and
    ``recorded`` where the record has them (``ToolCallRecord``)."""
    total_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    error: str | None = None


class ScoreInput(BaseModel):
    """Input of ``eval.score`` and ``eval.judge``: the case, the run, the scorer settings."""

    case: Case
    run: RunFacts
    config: ScorerConfig = Field(default_factory=ScorerConfig)


class Score(BaseModel):
    """One scorer's verdict: ``passed`` None for a plain measurement; ``value`` its number."""

    name: str
    passed: bool | None = None
    value: float | None = None
    detail: str = ""
    prompt: str | None = None
    """The judge's prompt, recorded (LLM judge only)."""
    answer: str | None = None
    """The judge's answer, recorded (LLM judge only)."""


class RunRecord(BaseModel):
    """One finished (case, variant, repeat): its run, status, scores and costs.

    ``passed`` is true when the run completed and every pass/fail score passed.
    """

    case_id: str
    variant: str
    repeat: int
    run_id: str
    status: str
    passed: bool = False
    scores: list[Score] = Field(default_factory=list[Score])
    tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    tool_calls: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    output: str | None = None
    error: str | None = None


class SuiteProgress(BaseModel):
    """Result of ``EvalSuite`` and of its ``progress`` query."""

    suite_id: str
    dataset: str
    variants: list[Variant]
    repeat: int
    total: int
    records: list[RunRecord] = Field(default_factory=list[RunRecord])
    done: bool = False
    decisions: int = 0
    """Approvals the scripted approver answered."""
