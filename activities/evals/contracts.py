"""Data of evaluations: cases, variants, the scripted approver, scorer settings, run records.

Everything crosses the workflow/activity boundary as JSON (``temporalio.contrib.pydantic``); the
shapes of a case and of the JSON report are pinned in docs/contract.md ("Evaluations and
versions"). Plain pydantic, no I/O: the workflow ``EvalSuite`` imports this module.
"""

from __future__ import annotations

from typing import Any, Literal

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


class RunFacts(BaseModel):
    """What the scorers read of a finished run (taken from its ``RunResult``)."""

    status: str
    output: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    """``{"name", "arguments", "status"}`` of each call, in order."""
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
