"""People in the loop: a policy with approvers, a denied tool and a gated ``deploy``."""

from __future__ import annotations

from tests.support.harness import Harness
from tests.support.tools import journal_events

GATED = {
    "default": {
        "policy": {
            "approvers": ["alice", "role:ops"],
            "roles": {"ops": ["olga"]},
            "tools": {
                "calculator": {"action": "deny", "reason": "no maths today"},
                "write_file": {
                    "action": "approve",
                    "rules": [{"when": {"path_prefix": "drafts/"}, "action": "allow"}],
                },
            },
        }
    }
}


def deployed(h: Harness) -> list[str]:
    return [e["target"] for e in journal_events(h.journal) if e["tool"] == "deploy"]
