"""Background processes of ``make demo`` (workers/local/procs.py): kept while the code is the
same, restarted once it changed (a ``git pull`` or an edit after the worker started)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from workers.local import procs

PROBE = "http.server 0 --bind 127.0.0.1"  # a real process that prints a ready line
READY = "Serving HTTP"


def test_a_background_process_runs_on_until_the_code_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")  # the probe's ready line reaches its log at once
    code = tmp_path / "code"
    code.mkdir()
    source = code / "module.py"
    source.write_text("x = 1\n")
    os.utime(source, (time.time() - 60, time.time() - 60))
    monkeypatch.setattr(procs, "CODE_ROOTS", (code,))
    try:
        first = procs.start_background("probe", PROBE, READY)
        assert procs.start_background("probe", PROBE, READY) == first  # same code: kept
        later = time.time() + 5
        os.utime(source, (later, later))  # changed after the probe started
        second = procs.start_background("probe", PROBE, READY)
        assert second != first and procs.running("probe") == second
        assert not psutil.pid_exists(first) or psutil.Process(first).status() == "zombie"
    finally:
        procs.stop("probe")
    assert procs.running("probe") is None
