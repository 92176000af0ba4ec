"""The workflow sandbox the worker and the replayer run ``AgentRun`` in.

Temporal's sandbox imports a workflow's module afresh for every run it starts, so module-level
work runs again per run. For ``workflows/agent_run.py`` that was the ``@workflow.defn`` pass over
the class and its mixins (every signal, query and update handler): about 4% of a worker's CPU
(py-spy, ``make bench`` scenario ``cpu``). Temporal's guide asks to pass through every module
"whose calls will be deterministic" for performance (docs.temporal.io, "Python SDK sandbox",
passthrough modules), and every other module of ``workflows/`` already was (their imports sit in
``workflow.unsafe.imports_passed_through()``). So the whole ``workflows`` package is passed through:
loaded once per worker, shared by all runs.

What that gives up: calls that the sandbox restricts (``datetime.now``, ``random``, file I/O...)
are not intercepted inside ``workflows/``; determinism there is held by review, the rule that
workflow code only calls ``workflow.*`` for time, randomness and I/O, and by replaying the stored
histories in CI (tests/histories). No module of ``workflows/`` keeps mutable state at module
level that a run could change (``test_worker_setup.py`` checks ``AgentRun`` has no class-level
mutable attribute).
"""

from __future__ import annotations

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSTHROUGH = ("workflows", "cryptography")
"""Packages imported once per worker, outside the per-run sandbox. ``cryptography`` verifies signed
decisions in handlers (activities/signing.py): its Rust extension imports
``cryptography.exceptions`` when a signature fails, and a second copy of the extension inside the
sandbox aborts the process (seen here: "Fatal Python error: Aborted"); it is deterministic."""


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandboxed runner with :data:`PASSTHROUGH` added to Temporal's default restrictions."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )
