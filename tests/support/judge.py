"""A scripted model server answering the agent from one script and its judge from another."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from workers.testing.scripted_model import Reply, ScriptedModel, text

JUDGE_MODEL = "judge-m"


def verdict(v: str, reason: str = "by the rubric") -> Reply:
    """The judge's JSON answer."""
    return text(json.dumps({"verdict": v, "reason": reason}))


class AgentAndJudge:
    """Replies for requests of model :data:`JUDGE_MODEL` from ``judge``, others from ``agent``.

    ``judge`` is a script, or a function of the judge's request body. ``judge_requests`` keeps
    the judge's request bodies (what it was shown).
    """

    def __init__(
        self,
        agent: Iterable[Reply | str],
        judge: Iterable[Reply | str] | Callable[[dict[str, Any]], Reply | str],
    ) -> None:
        self._agent = deque(agent)
        self._judge_fn = judge if callable(judge) else None
        self._judge = deque(() if callable(judge) else judge)
        self._lock = threading.Lock()
        self.judge_requests: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        with self._lock:
            if body.get("model") == JUDGE_MODEL:
                self.judge_requests.append(body)
                return self._judge_fn(body) if self._judge_fn else self._judge.popleft()
            return self._agent.popleft()

    def server(self) -> ScriptedModel:
        return ScriptedModel(responder=self)


def judged(rubric: str = "Approve writes under notes/; reject anything else.", **kw: Any) -> dict:
    """An agent whose ``write_file`` and ``deploy`` calls ask, with a judge."""
    return {
        "policy": {
            "tools": {"write_file": {"action": "approve"}, "deploy": {"action": "approve"}},
            "judge": {"model": JUDGE_MODEL, "rubric": rubric, **kw},
        }
    }
