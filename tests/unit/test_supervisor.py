"""workers.local.supervisor: pid files, and stopping only the process they recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from workers.local import supervisor as sv

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)", "marker-abc"]


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(SLEEPER)


def test_pid_file_round_trip_and_stop(tmp_path):
    proc = _sleeper()
    pid_file = tmp_path / "pids" / "x.pid"
    try:
        sv.write_pid_file(pid_file, proc.pid, "marker-abc")
        assert pid_file.read_text().splitlines() == [str(proc.pid), "marker-abc"]
        assert sv.running(pid_file) == proc.pid
        assert sv.stop(pid_file, timeout=5) is True
        assert proc.wait(5) is not None
        assert not pid_file.exists()
        assert sv.stop(pid_file) is False  # nothing recorded any more
    finally:
        proc.kill()
        proc.wait()


def test_pid_alone_stays_readable_by_kill(tmp_path):
    pid_file = tmp_path / "dev.pid"
    sv.write_pid_file(pid_file, 4321)
    assert pid_file.read_text() == "4321\n"
    read = sv.read_pid_file(pid_file)
    assert read is not None and read.pid == 4321
    assert sv.read_pid_file(tmp_path / "missing.pid") is None
    (tmp_path / "bad.pid").write_text("not a pid\n")
    assert sv.read_pid_file(tmp_path / "bad.pid") is None


def test_a_different_program_under_the_pid_is_left_alone(tmp_path):
    proc = _sleeper()
    try:
        pid_file = tmp_path / "x.pid"
        sv.write_pid_file(pid_file, proc.pid, "llama-server")  # not in its command line
        assert sv.running(pid_file) is None
        assert sv.stop(pid_file, timeout=1) is False
        sv.write_pid_file(pid_file, proc.pid)  # no marker in the file: the caller's counts
        assert sv.running(pid_file, marker="start-dev") is None
        assert sv.running(pid_file, marker="marker-abc") == proc.pid
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_pid_reused_after_the_file_was_written_is_left_alone(tmp_path):
    pid_file = tmp_path / "x.pid"
    proc = _sleeper()
    try:
        sv.write_pid_file(pid_file, proc.pid, "marker-abc")
        # the file says it was written well before this process started: a reused pid
        old = time.time() - 3600
        os.utime(pid_file, (old, old))
        assert sv.running(pid_file) is None
        assert sv.stop(pid_file, timeout=1) is False
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_exited_child_is_not_running_and_terminate_reports_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass", "marker-abc"])
    pid_file = tmp_path / "x.pid"
    sv.write_pid_file(pid_file, proc.pid, "marker-abc")
    deadline = time.monotonic() + 10
    while sv.running(pid_file) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sv.running(pid_file) is None  # a zombie of ours counts as gone (and is reaped)
    assert sv.terminate(proc) is False


def test_log_tail(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = sv.log_tail(log, 3)
    assert tail.endswith("line 97\nline 98\nline 99") and str(log) in tail
    assert sv.log_tail(log, 2, title=False) == "line 98\nline 99"
    assert sv.log_tail(tmp_path / "none.log") == ""
    assert sv.log_tail(None) == ""
