"""workers.worker: what a worker prepares before it polls."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import workflows.agent_run
from workers.worker import precompile_workflow_modules


def test_workflow_modules_get_fresh_bytecode_for_the_sandbox():
    source = Path(workflows.agent_run.__file__)
    cached = Path(importlib.util.cache_from_source(str(source)))
    if cached.exists():
        cached.unlink()
    precompile_workflow_modules()
    assert cached.exists()
    # the .pyc records the source's mtime and size, so an edited module is compiled again
    first = cached.stat().st_mtime_ns
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        precompile_workflow_modules()
        assert cached.stat().st_mtime_ns >= first
        data = cached.read_bytes()
        assert int.from_bytes(data[8:12], "little") == int(source.stat().st_mtime)
    finally:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
        precompile_workflow_modules()
