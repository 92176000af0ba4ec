"""See, audit, replay and fork runs, from their Temporal event histories.

A run's history is the authoritative record of what happened: every model step and tool call is
an activity (inputs and results as JSON payloads), every signal and accepted update is an event.
This package reads it without running any workflow code, one job a module:

* ``_fetch``: :func:`fetch_history` / :func:`fetch_chain`, the history of a run's latest
  execution or of every execution of its continue-as-new chain (oldest first);
  :func:`load_history_file`, a history saved as JSON.
* ``_payloads``: :func:`inline_payloads` resolves external-storage references and applies a
  payload codec with the client's data converter (the worker's, see
  ``workers/payloads/converter.py``), so that every payload reads as the worker wrote it.
* ``_audit`` (with ``_walk``, ``_activities``, ``_people``, ``_lifecycle`` and ``_rules``, the
  workflow's rules): :func:`audit` builds a typed timeline (:class:`Audit`, entries in
  ``_entries``) of model steps, tool calls, decisions, other signals and the outcome
  (``agentctl audit RUN_ID [--json]``); :func:`audit_run` fetches and audits.
* ``_render``: :func:`render_audit_text` prints an audit.
* ``_capture``: :func:`capture` / :func:`capture_run` turn a finished run into an evaluation
  case with its recorded tool calls (``agentctl eval capture RUN_ID``).
* ``_actions``: :func:`billable_actions`, the Temporal Cloud actions a history shows, by kind
  (in every audit as ``Audit.actions``).
* ``_replay``: :func:`replay` / :func:`replay_file` replay recorded histories with the *current*
  workflow code (``temporalio.worker.Replayer``) to find nondeterministic changes before they
  break runs in flight (``agentctl replay RUN_ID`` / ``--file PATH``).
* ``_fork``: :func:`fork` starts a new run seeded with the transcript a run's model saw at step
  K, optionally with an edited user message or another model (``agentctl fork RUN_ID --turn
  K``); :func:`lineage` walks a fork back to its root.
"""

from workers.history import _entries
from workers.history._actions import billable_actions
from workers.history._audit import audit, audit_run
from workers.history._capture import CaptureError, capture, capture_run
from workers.history._entries import *  # noqa: F403 - the audit's data, listed in its __all__
from workers.history._fetch import (
    MAX_CHAIN,
    fetch_chain,
    fetch_history,
    load_history_file,
)
from workers.history._fork import ForkError, fork, fork_points, lineage
from workers.history._payloads import inline_payloads
from workers.history._render import render_audit_text
from workers.history._replay import ReplayReport, replay, replay_file, replay_histories

__all__ = [
    "MAX_CHAIN",
    "CaptureError",
    "ForkError",
    "ReplayReport",
    "audit",
    "audit_run",
    "billable_actions",
    "capture",
    "capture_run",
    "fetch_chain",
    "fetch_history",
    "fork",
    "fork_points",
    "inline_payloads",
    "lineage",
    "load_history_file",
    "render_audit_text",
    "replay",
    "replay_file",
    "replay_histories",
]
__all__ += _entries.__all__
