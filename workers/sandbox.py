"""The workflow sandbox the replayer and the tests run ``AgentRun`` in (a worker: on request).

Temporal's sandbox imports a workflow's module afresh for every run it starts, so module-level
work runs again per run. For ``workflows/agent_run.py`` that was the ``@workflow.defn`` pass over
the class and its base (every signal, query and update handler): about 4% of a worker's CPU
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

from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSTHROUGH = ("workflows", "cryptography", "re2", "cedarpy")
"""Packages imported once per worker, outside the per-run sandbox. ``cryptography`` verifies signed
decisions in handlers (activities/signing.py): its Rust extension imports
``cryptography.exceptions`` when a signature fails, and a second copy of the extension inside the
sandbox aborts the process (seen here: "Fatal Python error: Aborted"); it is deterministic.
``re2`` (google-re2, a C++ extension) matches the policy's patterns (workflows/policy.py): one copy
per worker, like every C extension; matching is deterministic. ``cedarpy`` (the Cedar engine, a
Rust extension) decides tool calls by a spec's Cedar policies (activities/cedar_policy.py): without
it here, its first import inside a workflow activation loads a second copy of the extension in the
sandbox (the SDK warns "Module cedarpy was imported after initial workflow load"); evaluation is
a pure function of the pinned policies, the schema and the request."""


def workflow_runner(sandboxed: bool = True) -> WorkflowRunner:
    """The runner of workflow code: Temporal's sandbox with :data:`PASSTHROUGH`, or none.

    ``sandboxed=False`` (``AGENT_WORKFLOW_SANDBOX=false``, the worker's default) runs without it.
    Why a worker runs without it by default: entering the sandbox for every activation and every
    payload it converts was about a quarter of a worker's CPU (py-spy, ``make bench`` scenario
    ``peers``: 78.5 against 59.9 ms per 5-turn run, 9.8 against 11.8 runs/s at 100 concurrent
    runs; docs/throughput.md). Temporal documents running without it for workflow code known to be
    deterministic ("Python SDK sandbox", docs.temporal.io). Ours is held to that by the sandbox
    where it can fail a build: every test's worker and the replayer (``agentctl replay``, the
    stored histories in CI) use it, so a non-deterministic call in ``workflows/`` fails there.
    """
    if not sandboxed:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )
