"""The evaluation activities: ``eval.score`` (deterministic scorers) and ``eval.judge`` (LLM judge).

The judge asks any OpenAI-compatible model whether the run's answer meets the rubric; its prompt
and answer are returned in the :class:`Score`, so the suite's history records both. Errors of the
judge's endpoint follow the model activity's rule: 408/409/429/5xx and connection errors raise
(Temporal retries), other 4xx fail the score without retrying.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING

from temporalio import activity

from activities.evals.contracts import EVAL_JUDGE, EVAL_SCORE, JudgeConfig, Score, ScoreInput
from activities.evals.scorers import score_run
from activities.redaction import redact

if TYPE_CHECKING:  # the model SDK is loaded when the judge is called, not on import
    import openai

JUDGE_SYSTEM = (
    "You grade an AI agent's answer. Reply with PASS or FAIL on the first line, then one short "
    "sentence saying why."
)
_VERDICT = re.compile(r"\b(PASS|FAIL)\b", re.IGNORECASE)


def judge_prompt(inp: ScoreInput, rubric: str) -> str:
    """The user message sent to the judge: task, expected answer (if any), answer, tool calls.

    Without ``expected``, a case's ``metadata.reference`` (text) is given as the reference answer.
    """
    calls = [{"name": c.get("name"), "arguments": c.get("arguments")} for c in inp.run.tool_calls]
    parts = [f"Task:\n{inp.case.input}"]
    reference = inp.case.metadata.get("reference")
    if inp.case.expected is not None:
        parts.append(f"Expected answer:\n{inp.case.expected}")
    elif isinstance(reference, str):  # a captured run's answer (agentctl eval capture)
        parts.append(f"Reference answer (from a recorded run):\n{reference}")
    parts.append(f"Agent's answer:\n{inp.run.output or '(none)'}")
    if calls:
        parts.append(f"Agent's tool calls:\n{json.dumps(calls, default=str)[:4000]}")
    parts.append(f"Rubric: {rubric}")
    return "\n\n".join(parts)


def verdict(answer: str) -> bool | None:
    """PASS -> True, FAIL -> False, whichever comes first in ``answer``; None when neither."""
    m = _VERDICT.search(answer)
    return None if m is None else m.group(1).upper() == "PASS"


class EvalActivities:
    """``eval.score`` and ``eval.judge``; the judge's default endpoint and key are the worker's."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self._base_url = base_url
        self._api_key = api_key

    @activity.defn(name=EVAL_SCORE)
    async def score(self, inp: ScoreInput) -> list[Score]:
        """The deterministic scores of one run (:func:`activities.evals.scorers.score_run`)."""
        return score_run(inp.case, inp.run, inp.config)

    @activity.defn(name=EVAL_JUDGE)
    async def judge(self, inp: ScoreInput) -> Score:
        """Ask the judge model; ``passed`` from its first PASS/FAIL, prompt and answer recorded.

        Raises:
            openai.APIError: a retryable error of the judge's endpoint (Temporal retries).
        """
        cfg = inp.config.judge
        if cfg is None:
            return Score(name="judge", detail="no judge configured")
        import openai

        prompt = judge_prompt(inp, cfg.rubric)
        client = self._client(cfg)
        try:
            reply = await client.chat.completions.create(
                model=cfg.model,
                messages=[
                    {"role": "system", "content": JUDGE_SYSTEM},
                    {"role": "user", "content": prompt},
                ],
                max_tokens=cfg.max_tokens,
                temperature=0,
            )
        except openai.APIStatusError as e:
            if e.status_code in (408, 409, 429) or e.status_code >= 500:
                raise
            return Score(
                name="judge", passed=False, detail=redact(f"judge refused: {e}"), prompt=prompt
            )
        finally:
            await client.close()
        answer = (reply.choices[0].message.content or "").strip() if reply.choices else ""
        ok = verdict(answer)
        return Score(
            name="judge",
            passed=ok,
            value=None if ok is None else float(ok),
            detail="" if ok is not None else "no PASS/FAIL in the judge's answer",
            prompt=prompt,
            answer=redact(answer),
        )

    def _client(self, cfg: JudgeConfig) -> openai.AsyncOpenAI:
        import openai

        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else self._api_key
        return openai.AsyncOpenAI(
            base_url=cfg.base_url or self._base_url,
            api_key=key or "none",
            max_retries=0,
            timeout=120,
        )
