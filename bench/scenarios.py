"""The benchmark scenarios by name (:data:`SCENARIOS`), as `python -m bench.run --only` takes them.

Each scenario is a coroutine function taking :class:`bench.common.Options` and returning a JSON-able
dict; it starts and stops its own servers and workers. What they share is in :mod:`bench.common`.
"""

from __future__ import annotations

from bench.cli import scenario_cli
from bench.code_mode import scenario_code_mode
from bench.cpu import scenario_cpu
from bench.crash import scenario_crash
from bench.encryption import scenario_encryption
from bench.evals import scenario_evals
from bench.history import scenario_history, scenario_history_inline
from bench.judge import scenario_judge
from bench.memory import scenario_memory
from bench.memory_e2e import scenario_memory_e2e
from bench.models import scenario_fairness, scenario_rate_limit
from bench.overhead import scenario_overhead
from bench.peers import scenario_peers
from bench.prompt_cache import scenario_prompt_cache
from bench.sandbox import scenario_sandbox
from bench.throughput import scenario_throughput, scenario_tuning

SCENARIOS = {
    "peers": scenario_peers,
    "fairness": scenario_fairness,
    "rate_limit": scenario_rate_limit,
    "history": scenario_history,
    "history_inline": scenario_history_inline,
    "overhead": scenario_overhead,
    "throughput": scenario_throughput,
    "crash": scenario_crash,
    "tuning": scenario_tuning,
    "cpu": scenario_cpu,
    "encryption": scenario_encryption,
    "memory": scenario_memory,
    "memory_e2e": scenario_memory_e2e,
    "sandbox": scenario_sandbox,
    "code_mode": scenario_code_mode,
    "evals": scenario_evals,
    "judge": scenario_judge,
    "cli": scenario_cli,
    "prompt_cache": scenario_prompt_cache,
}
