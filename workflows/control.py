"""People's controls of a run: owner of the run state's ``control`` part.

The only module that changes :class:`workflows.run_parts.Control` (``RunData.control``: the
messages sent and not yet taken, the pause, the interrupt); the signal and update handlers
(:mod:`workflows.handlers`), the loop (:mod:`workflows.agent_run`) and the guardrails call the
functions here. Pure: no command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workflows.models import RunData
    from workflows.signals import InterruptSignal, MessageSignal


def interrupt(s: RunData, sig: InterruptSignal) -> bool:
    """Take the interrupt ``sig``; False when the run was interrupted already (nothing changes)."""
    if s.control.interrupt is not None:
        return False
    s.control.interrupt = sig
    return True


def pause(s: RunData) -> None:
    """Hold the run before its next step (a pause signal, a budget or a guardrail's block)."""
    s.control.paused = True


def resume(s: RunData) -> None:
    """Let the run go on."""
    s.control.paused = False


def add_message(s: RunData, message: MessageSignal) -> None:
    """A message for the transcript, taken before the next model step."""
    s.control.inbox.append(message)


def next_message(s: RunData) -> MessageSignal | None:
    """The oldest message not yet taken (removed from the inbox), or None."""
    return s.control.inbox.pop(0) if s.control.inbox else None
