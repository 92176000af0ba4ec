"""Merging a run's step items and live items into one ordered stream (``workers.live_reader``).

:class:`Merge` is the reader's state, without I/O: step items (from the live channels or the
stream, any order, duplicates allowed) are given in offset order; a model step's live text deltas
are given as they come and its recorded ``text_delta`` gives only what they had not; a held
call's live ``tool_finished`` is given at once and the workflow's own for that call is skipped.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Merge"]


class Merge:
    """The reader's state: step items in offset order, live text de-duplicated per step."""

    def __init__(self, from_offset: int, skip_chars: int) -> None:
        self.next = from_offset
        self.pending: dict[int, dict[str, Any]] = {}
        self.open_turn: int | None = -1 if skip_chars > 0 else None  # -1: the step resumed in
        self.sent = "" if skip_chars == 0 else None  # the live text given (None: only its length)
        self.sent_len = skip_chars
        self.attempt = 0
        self.early: list[dict[str, Any]] = []  # live deltas before their model_started
        self.tools_given: dict[str, bool] = {}  # call id -> its tool_finished was given live
        self.finished = False
        self.step_at = 0.0  # monotonic time of the last step item received

    def step(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """Take a step item (any order, duplicates allowed); returns what to yield, in order."""
        self.step_at = time.monotonic()
        off = int(item["offset"])
        if off < self.next or off in self.pending:
            return []
        self.pending[off] = item
        out: list[dict[str, Any]] = []
        while self.next in self.pending and not self.finished:
            out.extend(self._deliver(self.pending.pop(self.next)))
            self.next += 1
        return out

    def _deliver(self, it: dict[str, Any]) -> list[dict[str, Any]]:
        kind, turn = it.get("type"), it.get("turn")
        if kind == "run_finished":
            self.finished = True
        if kind == "model_started":
            self.open_turn, self.sent, self.sent_len, self.attempt = turn, "", 0, 0
            early = [d for d in self.early if d.get("turn") == turn]
            self.early = []
            out: list[dict[str, Any]] = [it]
            for d in early:
                out.extend(self.live(d, queued=False))
            return out
        if kind == "model_retry":
            self.sent, self.sent_len = "", 0
            return [it]
        if kind == "text_delta" and turn is not None and self.open_turn in (turn, -1):
            return self._recorded_text(it)
        if kind == "model_finished":
            self.open_turn, self.sent, self.sent_len = None, "", 0
        if kind == "tool_finished" and isinstance(call := it.get("tool_call_id"), str):
            if self.tools_given.setdefault(call, False):
                return []  # given live before the step's text (a held call's)
        return [it]

    def _recorded_text(self, it: dict[str, Any]) -> list[dict[str, Any]]:
        """The step's recorded text: only what the live deltas did not give."""
        full = str(it.get("delta") or "")
        given = self.sent_len
        self.open_turn = it.get("turn")
        if given == 0:
            self.sent, self.sent_len = full, len(full)
            return [it]
        if (self.sent is None or full.startswith(self.sent)) and len(full) >= given:
            rest = full[given:]
            self.sent, self.sent_len = full, len(full)
            return [{**it, "delta": rest}]  # even empty: every offset is given
        retry = {
            "type": "model_retry",
            "turn": it.get("turn"),
            "at": it.get("at"),
            "attempt": self.attempt,
            "error": "the live text differed from the recorded reply",
            "offset": it["offset"],
        }
        self.sent, self.sent_len = full, len(full)
        return [retry, it]

    def live(self, d: dict[str, Any], queued: bool = True) -> list[dict[str, Any]]:
        """Take a live delta, live ``model_retry`` or live ``tool_finished``; returns what to yield.

        A live ``tool_finished`` (a held call's result, from the model step that ran it,
        ``activities.streaming.hand_live``) is given at once; the workflow's own for that call
        is then not given (its offset is skipped).
        """
        if d.get("type") == "tool_finished":
            call = d.get("tool_call_id")
            if not isinstance(call, str) or call in self.tools_given:
                return []  # given already, live or recorded
            self.tools_given[call] = True
            return [{**d, "offset": self.next - 1, "live": True}]
        turn = d.get("turn")
        if self.open_turn == -1 and turn is not None:
            self.open_turn = turn  # resumed within this step
        if turn != self.open_turn:
            if queued and len(self.early) < 10_000:
                self.early.append(d)
            return []
        attempt = int(d.get("attempt") or 1)
        base = {"offset": self.next - 1, "live": True}
        if d.get("type") == "model_retry":
            if attempt <= self.attempt:
                return []
            self.attempt, self.sent, self.sent_len = attempt, "", 0
            return [{**d, **base}]
        out: list[dict[str, Any]] = []
        if attempt > max(self.attempt, 1) and self.sent_len:
            out.append(
                {
                    "type": "model_retry",
                    "turn": turn,
                    "at": d.get("at"),
                    "attempt": attempt,
                    "error": "the model step was retried",
                    **base,
                }
            )
            self.sent, self.sent_len = "", 0
        self.attempt = max(self.attempt, attempt)
        text, pos = str(d.get("delta") or ""), int(d.get("pos") or 0)
        if pos > self.sent_len or pos + len(text) <= self.sent_len:
            return out  # a piece missed (the recorded text gives it) or one given already
        piece = text[self.sent_len - pos :]
        if self.sent is not None:
            self.sent += piece
        self.sent_len += len(piece)
        out.append({**d, "delta": piece, "chars": self.sent_len, **base})
        return out
