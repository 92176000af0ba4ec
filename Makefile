# Durable AI-agent runtime on Temporal. `make help` lists the targets.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STATE := .agent-runtime
AGENTCTL := $(BIN)/agentctl
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help runtime install agui-client sandbox local-model test test-unit test-slow demo demo-check security dev-server codec-server model-server worker stop bench chaos upgrade-chaos lint docs dist clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# The runtime alone (no extras, no test tools): what the servers, the worker and the demo run.
$(VENV)/.runtime-installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 2>&1 | grep -v 'is ignored' || true
	$(BIN)/pip install -q -e . 2>&1 | grep -v 'is ignored' || true
	$(BIN)/python -c "import temporalio, openai, pydantic, tiktoken, structlog, workers.cli.commands"
	touch $@

# The runtime with every extra (evals, postgres, code-mode, otel) and the test tools; bubblewrap
# for the sandbox's tests.
$(VENV)/.installed: $(VENV)/.runtime-installed
	@$(MAKE) --no-print-directory sandbox
	$(BIN)/pip install -q -e '.[test]' 2>&1 | grep -v 'is ignored' || true
	$(BIN)/python -c "import scipy.stats, psycopg, pydantic_monty, opentelemetry.sdk, pytest, workers.cli.commands"
	touch $@

# The official AG-UI TypeScript client the AG-UI tests drive (tests/agui_client, npm ci: the lock file's
# exact versions; Node 20).
AGUI_CLIENT := tests/agui_client
$(AGUI_CLIENT)/node_modules/.installed: $(AGUI_CLIENT)/package.json $(AGUI_CLIENT)/package-lock.json
	cd $(AGUI_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

agui-client: $(AGUI_CLIENT)/node_modules/.installed ## install the AG-UI TypeScript client the tests use (npm ci in tests/agui_client)

runtime: $(VENV)/.runtime-installed ## create .venv and install the runtime only (no extras, no test tools)

install: $(VENV)/.installed $(AGUI_CLIENT)/node_modules/.installed ## create .venv and install the project with every extra, its test dependencies and the AG-UI client the tests use

local-model: ## install libgomp1 (the OpenMP runtime of the local model server's xllamacpp wheel) with apt-get when it is missing
	@$(PY) -c "import ctypes; ctypes.CDLL('libgomp.so.1')" 2>/dev/null || { \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "warning: libgomp.so.1 is missing and cannot be installed here (apt-get as root): the local model server says how (sudo apt-get install libgomp1)"; \
	  else echo "installing libgomp1 (OpenMP runtime of the local model server's xllamacpp wheel)"; \
	    (apt-get update -qq && apt-get install -y -qq libgomp1) >/dev/null 2>&1 || \
	    echo "warning: could not install libgomp1 with apt-get: the local model server says how"; \
	  fi; }

sandbox: ## install bubblewrap (the sandbox of run_python/run_command) with apt-get when it is missing
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "warning: bubblewrap is missing and cannot be installed here (apt-get as root): run_python and run_command fail until it is (sudo apt-get install bubblewrap libseccomp2)"; \
	  else echo "installing bubblewrap (the sandbox of run_python/run_command)"; \
	    (apt-get update -qq && apt-get install -y -qq bubblewrap libseccomp2) >/dev/null 2>&1 || \
	    echo "warning: could not install bubblewrap with apt-get: run_python and run_command fail until it is (apt-get install bubblewrap libseccomp2)"; \
	  fi; }

test: install ## run the test suite (real Temporal dev server, scripted model server); not the slow tests
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow" tests

security: install ## the security suite: attacks on the console, codec server, decisions and sandbox (tests/security)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/security

test-slow: install local-model ## the slow tests: serve the model from the xllamacpp wheel, and build llama-server from source, each in a clean cache, answering tool calls (10-20 min)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow -s tests

test-unit: install ## unit tests only (no server)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

dev-server: runtime ## start the local Temporal server + Web UI (temporal-dev.yml), in the background
	$(AGENTCTL) dev-server --background

model-server: runtime local-model ## install, verify and serve the local model on 127.0.0.1:8110, in the background
	$(AGENTCTL) model-server --background

codec-server: runtime ## start the codec server the Web UI uses to show payloads stored outside the history
	$(BIN)/python -m workers.local.procs start-codec-server

worker: runtime sandbox ## start a worker in the background (logs: .agent-runtime/logs/worker.log)
	$(BIN)/python -m workers.local.procs start-worker

demo: runtime local-model ## the whole thing on a fresh machine: servers, worker, a real agent run on the local model
	$(BIN)/python -m workers.local.demo

demo-check: runtime local-model ## the demo end to end; exits non-zero when any step fails or the answer is wrong
	$(BIN)/python -m workers.local.demo --check

stop: ## stop the dev server, model server and worker started by make (by their recorded pids)
	@test -x $(BIN)/python && $(BIN)/python -m workers.local.procs stop || echo "nothing to stop"

$(VENV)/.bench-installed: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test,bench]' 2>&1 | grep -v 'is ignored' || true
	$(BIN)/pip install -q --no-deps bfcl-eval==2026.3.23 2>&1 | grep -v 'is ignored' || true
	$(BIN)/python -c "import temporalio.openai_agents, agents"
	touch $@

bench: $(VENV)/.bench-installed ## benchmarks beside the OpenAI Agents SDK plugin (bench/README.md); BENCH_ARGS=--quick
	$(BIN)/python -m bench.run $(BENCH_ARGS)

chaos: install ## runs with approvals while workers and the dev server are SIGKILLed (bench/chaos.py); CHAOS_ARGS=--quick, --two-hosts
	$(BIN)/python -m bench.chaos $(CHAOS_ARGS)

upgrade-chaos: install ## 200 runs in flight while a changed build is ramped 0 -> 50 -> 100% with one rollback (bench/upgrade_chaos.py)
	$(BIN)/python -m bench.upgrade_chaos $(UPGRADE_CHAOS_ARGS)

lint: $(VENV)/.bench-installed ## ruff (lint and format check), pyright over the code, tests and bench (strict modules in pyproject.toml), import-linter (layers, no cycles)
	$(BIN)/ruff check workflows activities workers tests bench
	$(BIN)/ruff format --check workflows activities workers tests bench
	$(BIN)/pyright --project pyproject.toml
	$(BIN)/lint-imports

docs: runtime ## regenerate docs/agent-spec.md, docs/cli.md and docs/environment.md from the code
	$(BIN)/python -m workers.cli.gen_docs

DIST ?= dist
dist: ## build the wheel of temporal-agent-runtime into $(DIST)/ (pip wheel; the CLI, worker, console, built-in agents)
	rm -rf build
	$(PY) -m pip wheel -q --no-deps -w $(DIST) . 2>&1 | grep -v 'is ignored' || true
	@ls $(DIST)/temporal_agent_runtime-*.whl

clean: stop ## remove the venv and local state (runs, logs, model stays in ~/.cache)
	rm -rf $(VENV) $(STATE) build dist
