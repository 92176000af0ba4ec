"""The library a Python user imports: connect, start a run, decide, follow; settings; the worker.

``from workers import connect, start_run, decide, RunRequest`` and so on. Names are resolved on
first use (PEP 562), so importing a submodule such as ``workers.config`` (which the workflow
sandbox may see) does not import the Temporal client. The full helper set stays in
:mod:`workers.client`; names and shapes are pinned in ``docs/contract.md``.

The package by job:

* the library, at the top: :mod:`workers.client` (connect, start, decide, follow),
  :mod:`workers.config` (settings), :mod:`workers.worker` (build and run workers) and what they
  build on: :mod:`workers.telemetry`, :mod:`workers.logging_setup`, :mod:`workers.versioning`,
  :mod:`workers.sandbox`, :mod:`workers.decision_keys`, :mod:`workers.eval_client`;
* :mod:`workers.payloads`: the data converter, payload encryption, the Web UI's codec server;
* :mod:`workers.cli`: ``agentctl``;
* :mod:`workers.console`: the run console (``agentctl serve``);
* :mod:`workers.local`: a machine's own servers (Temporal dev server, the local model in
  :mod:`workers.local.model`), the demo and the example MCP server;
* :mod:`workers.history` (inspect, audit, replay, fork) and :mod:`workers.testing` (test kit).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    # client helpers (workers/client.py)
    "connect": "workers.client",
    "start_run": "workers.client",
    "decide": "workers.client",
    "follow": "workers.client",
    "result": "workers.client",
    "state": "workers.client",
    "wait_for_state": "workers.client",
    # settings (workers/config.py)
    "Settings": "workers.config",
    "load_settings": "workers.config",
    # the data converter a plain Temporal client needs (workers/payloads/converter.py)
    "build_data_converter": "workers.payloads.converter",
    # worker builders (workers/worker.py)
    "build_worker": "workers.worker",
    "build_workers": "workers.worker",
    "run_worker": "workers.worker",
    # the contract's models (workflows/models.py)
    "RunRequest": "workflows.models",
    "RunResult": "workflows.models",
    "RunState": "workflows.models",
    "LimitsOverride": "workflows.models",
    "ApproveSignal": "workflows.models",
    "RejectSignal": "workflows.models",
    "DecideUpdate": "workflows.models",
    "DecideResult": "workflows.models",
    "PendingApproval": "workflows.models",
}

__all__ = [
    "ApproveSignal",
    "DecideResult",
    "DecideUpdate",
    "LimitsOverride",
    "PendingApproval",
    "RejectSignal",
    "RunRequest",
    "RunResult",
    "RunState",
    "Settings",
    "build_data_converter",
    "build_worker",
    "build_workers",
    "connect",
    "decide",
    "follow",
    "load_settings",
    "result",
    "run_worker",
    "start_run",
    "state",
    "wait_for_state",
]

if TYPE_CHECKING:
    from workers.client import connect, decide, follow, result, start_run, state, wait_for_state
    from workers.config import Settings, load_settings
    from workers.payloads.converter import build_data_converter
    from workers.worker import build_worker, build_workers, run_worker
    from workflows.models import (
        ApproveSignal,
        DecideResult,
        DecideUpdate,
        LimitsOverride,
        PendingApproval,
        RejectSignal,
        RunRequest,
        RunResult,
        RunState,
    )


def __getattr__(name: str) -> Any:
    """Import the module that holds ``name`` on first use; AttributeError for anything else."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'workers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
