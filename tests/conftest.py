"""Shared fixtures: one real Temporal dev server (from the pip-installed binary) per session."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from workers.testing.env import start_local_env

# Fixtures of support modules, for every test module that asks for them (tests/support/).
pytest_plugins = ["tests.support.tool_calls"]

# Worker processes the tests start read their settings from the environment: they run workflow
# code in Temporal's sandbox, which fails a test on a non-deterministic call (workers/sandbox.py).
os.environ.setdefault("AGENT_WORKFLOW_SANDBOX", "true")
# ... and never pick up a key file `make demo` left in the project's state folder.
os.environ.setdefault("AGENT_ENCRYPTION_KEYS", "off")


@pytest.fixture(autouse=True)
def _journal_env(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TEST_TOOL_JOURNAL", str(tmp_path / "journal.jsonl"))


@pytest_asyncio.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    e = await start_local_env()
    try:
        yield e
    finally:
        await e.shutdown()


@pytest.fixture
def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture(scope="session")
def dev_server_address(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host
