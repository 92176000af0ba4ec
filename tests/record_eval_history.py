"""Record the stored history of an evaluation suite: ``python -m tests.record_eval_history``.

Writes ``tests/histories/evals/eval_suite.json``: a suite of two cases (one needing an approval the
scripted approver gives) over two variants, with fixed ids, on the scripted model.
``tests/integration/test_eval_history.py`` replays it with the current ``EvalSuite`` code.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from activities.evals.contracts import Approver, Case, ExpectedCall, SuiteRequest, Variant
from tests.record_histories import _save
from tests.support.harness import Harness
from workers.eval_client import start_suite
from workers.testing.env import start_local_env
from workers.testing.scripted_model import Reply, ScriptedModel, text, tool_call

OUT = Path(__file__).parent / "histories" / "evals" / "eval_suite.json"
SUITE_ID = "hist-eval-suite"


def responder(body: dict) -> Reply:
    """Deploy once then answer; other questions get ``Paris``."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if "deploy" in user:
        done = body["messages"][-1]["role"] == "tool"
        return text("Deployed.") if done else tool_call("deploy", {"target": "staging"})
    return text("Paris.")


async def main() -> None:
    """Run the suite on an in-memory dev server and save its history."""
    env = await start_local_env()
    try:
        with tempfile.TemporaryDirectory(prefix="eval-history-") as tmp:
            agents = {"a": {"tools": ["deploy"]}, "b": {"tools": ["deploy"]}}
            async with Harness(
                env.client, Path(tmp), ScriptedModel(responder=responder), agents=agents
            ) as h:
                h.task_queue = "histories"
                await h.stop_worker()
                await h.start_worker()
                req = SuiteRequest(
                    dataset="history",
                    cases=[
                        Case(id="capital", input="capital of France?", expected="paris"),
                        Case(
                            id="deploy",
                            input="deploy to staging",
                            expected_tool_calls=[
                                ExpectedCall(name="deploy", arguments={"target": "staging"})
                            ],
                        ),
                    ],
                    variants=[Variant(name="a", agent="a"), Variant(name="b", agent="b")],
                    approver=Approver(),
                )
                handle = await start_suite(
                    env.client, req, task_queue=h.task_queue, suite_id=SUITE_ID
                )
                await asyncio.wait_for(handle.result(), 60)
                history = await handle.fetch_history()
                OUT.parent.mkdir(parents=True, exist_ok=True)
                size = _save(OUT, history.to_json())
                print(
                    f"{OUT}: {len(history.events)} events, {size / 1024:.1f} KiB", file=sys.stderr
                )
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
