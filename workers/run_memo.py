"""The memo a run started by :func:`workers.client.start_run` carries: what it was asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workflows.models import RunRequest

MEMO_REQUEST = "request"
"""Memo key a run started by :func:`start_run` carries: ``{"input": <the request, at most
:data:`MEMO_INPUT_CHARS` characters>, "mode": "task" | "chat"}``, what listings (the console's run
list) show of what the run was asked. Encoded by the client's data converter (encrypted under
``AGENT_PAYLOAD_KEYS``, as every payload); the workflow never reads it."""
MEMO_INPUT_CHARS = 300
"""Characters of the request kept in the memo (the run's input keeps all of it)."""


def request_memo(req: RunRequest) -> dict[str, str]:
    """The :data:`MEMO_REQUEST` memo of ``req``: its input cut to :data:`MEMO_INPUT_CHARS`."""
    text = req.input
    if len(text) > MEMO_INPUT_CHARS:
        text = text[: MEMO_INPUT_CHARS - 1] + "…"
    return {"input": text, "mode": req.mode}
