"""An evaluation suite's cases, agents and the scripted responder answering them."""

from __future__ import annotations

from typing import Any

from activities.evals.contracts import Case, ExpectedCall
from workers.testing.scripted_model import text, tool_call


def user_text(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def system_text(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"]


def responder(body: dict[str, Any]):
    """Variant "careful" answers right; "sloppy" gets the capital wrong. Tool cases call once."""
    user, careful = user_text(body), "careful" in system_text(body)
    after_tool = body["messages"][-1]["role"] == "tool"
    if "[calc]" in user:
        return (
            text("The sum is 5.") if after_tool else tool_call("calculator", {"expression": "2+3"})
        )
    if "[deploy]" in user:
        if not after_tool:
            return tool_call("deploy", {"target": "staging"})
        rejected = "reject" in str(body["messages"][-1]["content"]).lower()
        return text("Not deployed: rejected." if rejected else "Deployed.")
    if "[capital]" in user:
        return text("Paris is the capital." if careful else "It is Lyon.")
    return text("ok")


CASES = [
    Case(id="capital", input="[capital] Capital of France?", expected="paris"),
    Case(
        id="calc",
        input="[calc] add 2 and 3",
        expected_tool_calls=[ExpectedCall(name="calculator", arguments={"expression": "2+3"})],
        metadata={"tools": ["calculator"]},
    ),
    Case(
        id="deploy",
        input="[deploy] ship it",
        expected="^deployed",
        metadata={"match": "regex"},
        expected_tool_calls=[ExpectedCall(name="deploy", arguments={"target": "staging"})],
    ),
]


AGENTS = {
    "careful": {"system_prompt": "You are careful."},
    "sloppy": {"system_prompt": "You are quick."},
}
