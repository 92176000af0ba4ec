"""Agent specs: the YAML file that defines agents, its validation, and its pinned, hashed form.

A spec file looks like::

    tool_modules: [my_company.tools]      # optional: modules whose @tool functions to register
    rate_limits:                          # optional: per model, held across all workers
      gpt-4o-mini: {requests_per_second: 5}
    agents:
      default:
        model: qwen2.5-coder-1.5b-instruct  # optional: AGENT_MODEL when absent; a list = fallbacks
        system_prompt: You are ...
        tools: [list_files, read_file, search_files, calculator]
        workspace: ./workspace              # relative to the spec file; ~ and $VARS expanded
        limits: {max_turns: 20, max_seconds: 300}
        policy:
          default: allow
          tools:
            write_file:
              action: approve
              approvers: [alice, role:reviewer]
              rules:
                - {when: {path_prefix: drafts/}, action: allow}

The spec is read once, when a run starts, by the ``spec.resolve`` activity; the workflow keeps the
resolved :class:`AgentSpec` and its sha256 (:class:`PinnedSpec`), so editing the file never changes a
run in flight.

This module is the one to import from; the names live in modules by job:

* :mod:`activities.spec_agent` -- :class:`AgentSpec` (one agent, resolved) and :class:`PinnedSpec`.
* :mod:`activities.spec_settings` -- its sections: :class:`Limits`, :class:`Pricing`,
  :class:`MemorySpec`, :class:`CodeModeSpec`, :class:`Compaction`, :class:`PlanSettings`,
  :class:`RateLimit`, :class:`ToolEntry`.
* :mod:`activities.spec_policy` -- ``policy:``: :class:`Policy`, :class:`ToolPolicy`,
  :class:`PolicyRule`, :class:`ArgCondition`.
* :mod:`activities.spec_pinning` -- :func:`resolve_agent`, :func:`load_rate_limits`,
  :func:`spec_hash`; :mod:`activities.spec_file` reads the file (:class:`SpecError`).
"""

from __future__ import annotations

from activities.spec_agent import AGENT_TOOL_NAME, AgentSpec, PinnedSpec
from activities.spec_file import SpecError, load_spec_file
from activities.spec_pinning import load_rate_limits, pin_cedar, resolve_agent, spec_hash
from activities.spec_policy import (
    CHECK_PATTERNS,
    JUDGE_PREFIX,
    ArgCondition,
    CedarPolicy,
    JudgeSettings,
    Policy,
    PolicyAction,
    PolicyRule,
    ToolPolicy,
    pattern_problem,
)
from activities.spec_settings import (
    CodeModeSpec,
    Compaction,
    Limits,
    MemorySpec,
    PlanSettings,
    Pricing,
    RateLimit,
    ToolEntry,
)

__all__ = [
    "AGENT_TOOL_NAME",
    "CHECK_PATTERNS",
    "JUDGE_PREFIX",
    "AgentSpec",
    "ArgCondition",
    "CedarPolicy",
    "CodeModeSpec",
    "Compaction",
    "JudgeSettings",
    "Limits",
    "MemorySpec",
    "PinnedSpec",
    "PlanSettings",
    "Policy",
    "PolicyAction",
    "PolicyRule",
    "Pricing",
    "RateLimit",
    "SpecError",
    "ToolEntry",
    "ToolPolicy",
    "load_rate_limits",
    "load_spec_file",
    "pattern_problem",
    "pin_cedar",
    "resolve_agent",
    "spec_hash",
]
