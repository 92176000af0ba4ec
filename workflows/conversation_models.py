"""The public data of update ``add_message``: a conversation's next message, answered.

Names and shapes are pinned by ``docs/contract.md`` (re-exported by :mod:`workflows.models`); the
AG-UI edge (``workers/console/agui.py``) sends it by update-with-start. Signal ``send_message``'s
payload is in :mod:`workflows.signals`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from activities.client_tools import ClientToolDef

__all__ = ["MAX_MESSAGE_ID_CHARS", "AddMessageResult", "AddMessageUpdate"]

MAX_MESSAGE_ID_CHARS = 512
"""Longest ``message_id`` and ``principal_id`` (as ``workflows.models.MAX_NAME_CHARS``)."""


class AddMessageUpdate(BaseModel):
    """Payload of update ``add_message``: a user message, answered once the run holds it.

    ``message_id`` (the front end's id, at most :data:`MAX_MESSAGE_ID_CHARS` characters) equal to the
    run's ``RunRequest.input_id`` is the input itself, sent again by an update-with-start that
    started the run: it is not added twice. ``client_tools`` as for ``send_message``.
    """

    content: str = Field(min_length=1)
    principal_id: str = Field(default="anonymous", max_length=MAX_MESSAGE_ID_CHARS)
    message_id: str | None = Field(default=None, max_length=MAX_MESSAGE_ID_CHARS)
    client_tools: list[ClientToolDef] | None = Field(default=None, max_length=64)


class AddMessageResult(BaseModel):
    """Answer of update ``add_message``.

    ``offset``: the event stream's offset from which this message's events follow (0 when the
    message is the run's input); ``duplicate``: the message was the run's input (not added).
    """

    accepted: bool = True
    duplicate: bool = False
    offset: int = 0
    turn: int = 0
