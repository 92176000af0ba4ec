"""Which behaviour a run takes: every version decision of ``AgentRun`` in one place.

Runs in flight replay the code of the worker that picks them up, so each change to the commands
a run issues is taken only by the runs that recorded it. Two mechanisms record it, and only this
module asks either; the loop and its steps read the named capabilities below.

* **The revision**: ``spec.resolve`` echoes :data:`WORKFLOW_REV` into the pinned spec
  (``PinnedSpec.workflow_rev``; 0 in runs recorded before it existed). A value in history that
  costs a run nothing, for changes every new run takes from its start. Runs started before
  :data:`PATCH_V4` pin revision 3.
* **Patches** (``workflow.patched``): each id costs a run that asks it a marker and an upsert of
  ``TemporalChangeVersion`` (two events and a visibility write), so most are asked only where
  their branch is first needed (a reply that repeats a call id, the first policy pattern
  matched, ...), and a run that never gets there records nothing.

Old branches stay until no stored history needs them: tests/histories/README.md gives each one's
date, and a patch whose old branch is gone is deprecated here (``workflow.deprecate_patch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from temporalio import workflow

if TYPE_CHECKING:
    from activities.spec import PinnedSpec

WORKFLOW_REV = 6
"""Revision of this code's behaviour, pinned by each run at its start.

Revision 3 takes no decision that changes commands from a ``workflow.now()`` difference, and
refuses decisions for approval requests not yet in history. Revision 4 (with patch
:data:`PATCH_V4`) runs tools marked ``local`` as local activities and upserts search attributes
only when what they show changed (docs/throughput.md). Revision 5 takes the deadline without a
timer where a timeout does its work (``RunContext.with_deadline``). Revision 6 acts on the
spec's guardrails: the user's messages go through local activity ``guardrail.check``, and a
``block`` ends the run (``guardrail``) or pauses it (docs/guardrails.md)."""

PATCH_V2 = "agent-run-v2"
"""The second workflow version (one deadline timer per run, throttled search-attribute refreshes,
continue-as-new at the spec's own thresholds, AgentStatus after a chat message, compaction
counting only new messages). Deprecated: every run takes these paths, histories recorded with the
marker replay, those recorded before it (v1) no longer do (tests/histories/README.md)."""
PATCH_V4 = "agent-run-v4"
"""Revision 4: ``spec.resolve`` runs as a local activity and the run pins :data:`WORKFLOW_REV`
(before it, the run pins 3 and ``spec.resolve`` is an activity)."""
PATCH_TOOLS_IN_STEP = "tools-in-model-step"
"""Runs started from it hold allowed local tools' calls for the next model step."""
PATCH_MEMORY = "memory-consolidation"
"""The memory handoff at the end of a run whose spec writes memory."""
PATCH_UNIQUE_CALL_IDS = "unique-call-ids"
"""A tool call id the model repeats (in a reply, or from an earlier turn) is renamed
(``workflows.turn.unique_call_ids``); before it, a reused id found the earlier call's verdict
(an approval bypass). Asked only when a reply repeats an id, in the task that brings the model
step's result, before any local activity of that task."""
PATCH_POLICY_RE2 = "policy-re2"
"""The policy's patterns are matched with RE2 (linear time); before it, with ``re``. Asked at the
first pattern matched."""
PATCH_RACE_WAITS = "race-person-waits"
"""A race whose work waited for a person (Code Mode) re-arms the deadline instead of ending."""
PATCH_SHOWN_STATUS = "parent-status-from-children"
"""A parent upserts ``AgentStatus`` when its children's approvals change the status people see."""
PATCH_CLIENT_TOOLS = "client-tools"
"""Calls of tools the client runs wait (durably) for update ``tool_result``
(workflows/client_tools.py). Asked when a turn's calls name a client tool, before any of them is
scheduled; a run that never calls one records nothing."""
PATCH_MODEL_ARGUMENTS = "model-arguments"
"""``ToolCallRecord.arguments`` (the result, the state, the events, the Web UI) keep the
arguments as the model sent them; those the tool ran with (validated, or edited by a person)
go to ``ToolCallRecord.run_arguments`` where they differ (issue #40). Before it, ``arguments``
were replaced by the tool's validated ones. Asked at the start of a run, beside
:data:`PATCH_TOOLS_IN_STEP` (no action of its own); ``RunData.model_arguments`` carries the
answer through continue-as-new, so a run keeps one recording."""
PATCH_POLICY_JUDGE = "policy-judge"
"""The judge (``policy.judge``) decides calls the policy asks about before a person is asked.
Asked at the first call a run's judge would decide (only runs whose spec has a judge)."""


class Versions:
    """The version decisions of one run, read by name.

    A new run takes every patch and pins :data:`WORKFLOW_REV`, so for it every capability asked
    here is on (True); the False branches are for runs recorded earlier, whose stored histories
    (tests/histories/) replay them. Capabilities of the pinned revision are properties (pure
    reads, False until ``spec.resolve`` has pinned the spec); those of a patch are methods,
    because asking one records the patch's marker in the history the first time.

    Args:
        pinned: gives the run's pinned spec (None before ``spec.resolve`` answered: every
            revision capability is then off, as for a run recorded before revisions existed).
    """

    def __init__(self, pinned: Callable[[], PinnedSpec | None]) -> None:
        self._pinned = pinned

    # ------------------------------------------------------------ at the start of a run

    @staticmethod
    def at_start() -> tuple[bool, bool, bool]:
        """Asked once, first thing in a new run (not one continued as new).

        Returns ``(tools_in_step, spec_resolve_local, model_arguments)``: whether the run holds
        local tools' calls for the next model step (:data:`PATCH_TOOLS_IN_STEP`, asked before the
        spec's local activity: a marker after one in the same workflow task fails replay),
        whether ``spec.resolve`` runs as a local activity pinning :data:`WORKFLOW_REV`
        (:data:`PATCH_V4`) and whether tool call records keep the model's arguments
        (:data:`PATCH_MODEL_ARGUMENTS`).
        """
        tools_in_step = workflow.patched(PATCH_TOOLS_IN_STEP)
        resolve_local = workflow.patched(PATCH_V4)
        return tools_in_step, resolve_local, workflow.patched(PATCH_MODEL_ARGUMENTS)

    @staticmethod
    def rev_to_pin(spec_resolve_local: bool) -> int:
        """The revision a new run pins: :data:`WORKFLOW_REV`, or 3 for a run without :data:`PATCH_V4`.

        (Such runs, recorded before revision 4, resolve their spec in an activity.)
        """
        return WORKFLOW_REV if spec_resolve_local else 3

    @staticmethod
    def deprecated() -> None:
        """The patches every run takes (their old branches are gone); asked by every run."""
        workflow.deprecate_patch(PATCH_V2)

    # ------------------------------------------------------------ by the pinned revision

    def _rev(self) -> int:
        pinned = self._pinned()
        return pinned.workflow_rev if pinned is not None else 0

    @property
    def deadline_by_events(self) -> bool:
        """Revision 3: only events in history (a timer, a timeout) end the run on time.

        The deadline timer is re-armed by the count of waits, not by the seconds waited.
        """
        return self._rev() >= 3

    @property
    def refresh_by_turns(self) -> bool:
        """Revision 3: TotalTokens and CostUsd are refreshed every few turns, not by time."""
        return self._rev() >= 3

    @property
    def park_early_decisions(self) -> bool:
        """Revision 3: a decision for an approval request not yet in history is held, not taken."""
        return self._rev() >= 3

    @property
    def local_tool_activities(self) -> bool:
        """Revision 4: tools marked ``local`` run as local activities."""
        return self._rev() >= 4

    @property
    def upsert_changed_only(self) -> bool:
        """Revision 4: search attributes are upserted only when what they show changed."""
        return self._rev() >= 4

    @property
    def deadline_as_timeout(self) -> bool:
        """Revision 5: the time left is the schedule-to-close of an activity raced with the deadline.

        No timer is started for such an activity.
        """
        return self._rev() >= 5

    @property
    def guardrails(self) -> bool:
        """Revision 6: the spec's guardrails are checked and acted on (workflows/guardrails.py).

        A revision, not a patch: the first command it adds (``guardrail.check`` of the request)
        follows ``spec.resolve``'s local activity in the same workflow task, where a patch marker
        fails replay, and asking a patch before it would cost every run a marker and an upsert.
        Only runs whose pinned spec has ``guardrails:`` take a new command, and no run before
        revision 6 can pin one (``AgentSpec`` refuses unknown fields).
        """
        return self._rev() >= 6

    @property
    def refuse_judge_names(self) -> bool:
        """A client's decision naming a ``judge:`` principal is refused (runs with a judge; rev 6).

        In every run from revision 6 on. Before revision 6 it is decided by the pinned spec (``policy.judge``, which no run before
        it could pin), so it costs no marker; a run without a judge has no decision in a judge's
        name to forge.
        """
        if self._rev() >= 6:
            return True
        pinned = self._pinned()
        return pinned is not None and pinned.spec.policy.judge is not None

    # ------------------------------------------------------------ asked where first needed

    @staticmethod
    def policy_judge() -> bool:
        """:data:`PATCH_POLICY_JUDGE` (asked at the first call the run's judge would decide)."""
        return workflow.patched(PATCH_POLICY_JUDGE)

    @staticmethod
    def unique_call_ids() -> bool:
        """:data:`PATCH_UNIQUE_CALL_IDS` (asked only when a reply repeats a call id)."""
        return workflow.patched(PATCH_UNIQUE_CALL_IDS)

    @staticmethod
    def policy_re2() -> bool:
        """:data:`PATCH_POLICY_RE2` (asked at the first policy pattern matched)."""
        return workflow.patched(PATCH_POLICY_RE2)

    @staticmethod
    def rearm_after_person_waits() -> bool:
        """:data:`PATCH_RACE_WAITS` (asked when a raced step's deadline moved by a wait)."""
        return workflow.patched(PATCH_RACE_WAITS)

    @staticmethod
    def upsert_shown_status() -> bool:
        """:data:`PATCH_SHOWN_STATUS` (asked when a child's approvals changed the shown status)."""
        return workflow.patched(PATCH_SHOWN_STATUS)

    @staticmethod
    def client_tools() -> bool:
        """:data:`PATCH_CLIENT_TOOLS` (asked when a turn's calls name a client tool)."""
        return workflow.patched(PATCH_CLIENT_TOOLS)

    @staticmethod
    def memory_handoff() -> bool:
        """:data:`PATCH_MEMORY` (asked at the end of a run whose spec writes memory)."""
        return workflow.patched(PATCH_MEMORY)
