"""The agents of ``make chaos`` (bench/chaos.py): their spec, and the judge's scripted verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from workers.testing.scripted_model import Reply, text

MODEL_SECONDS = 0.5
"""How long the scripted model takes to answer (keeps model steps in flight when a worker dies)."""


def judge_reply(msgs: list[dict[str, Any]]) -> Reply | None:
    """The judge's verdict when ``msgs`` ask the judge: approve ``write_file``, escalate the rest."""
    if not msgs or "security judge" not in str(msgs[0].get("content") or ""):
        return None
    asked = str(msgs[-1].get("content") or "")
    if "tool: write_file" in asked:
        verdict = {"verdict": "approve", "reason": "writing the run's own file is routine"}
    else:
        verdict = {"verdict": "escalate", "reason": "side effects need a person"}
    return text(json.dumps(verdict)).with_delay(MODEL_SECONDS)


def judged(index: int) -> bool:
    """Whether run ``index`` is of agent ``chaos_judged`` (every fourth run)."""
    return index % 4 == 3


def write_spec(workdir: Path) -> Path:
    """The chaos agent's spec (workspace under ``workdir``)."""
    ws = workdir / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    agent = {
        "model": "scripted",
        "system_prompt": "You are the chaos agent.",
        "tools": [
            "write_file",
            "chaos_effect",
            "calculator",
            "run_python",
            {
                "name": "chaos_ask",
                "client": True,
                "description": "Ask the client a question.",
                "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
            },
        ],
        "code_mode": {"tools": ["chaos_effect", "calculator"]},
        # every run hands its transcript to the (tenant, principal) consolidation workflow
        "memory": {"read": ["user"], "write": ["user"], "consolidate_after_seconds": 1},
        "workspace": str(ws),
        "limits": {"max_turns": 12, "max_seconds": 7200},
        "model_timeout_seconds": 10,
    }
    rubric = "Approve writing the run's own files; escalate anything with side effects."
    judge = {"model": "scripted", "rubric": rubric, "timeout_seconds": 30}
    agents = {"chaos": agent, "chaos_judged": {**agent, "policy": {"judge": judge}}}
    body = {"tool_modules": ["bench.chaos_tools"], "agents": agents}
    path = workdir / "agents.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path
