"""What the run console's security tests share: the token they serve with, a run held for approval."""

from __future__ import annotations

from workers.testing.scripted_model import ScriptedModel, text, tool_call

TOKEN = "security-test-token"
"""The console token the security tests serve with (``Authenticator(token=TOKEN)``)."""


def pending_write(h_model_answer: str = "done") -> ScriptedModel:
    """A model that asks for ``write_file owned.txt`` (held for approval), then answers."""
    return ScriptedModel(
        [tool_call("write_file", {"path": "owned.txt", "content": "x"}), text(h_model_answer)]
    )
