"""``agentctl run --follow``'s printer (workers/cli/follow.py): each call's result once."""

from __future__ import annotations

import io

from rich.console import Console

from workers.cli.follow import EventPrinter


def test_a_calls_result_is_printed_once_when_it_comes_twice() -> None:
    buf = io.StringIO()
    printer = EventPrinter(Console(file=buf, width=200), "run-1")
    done = {"type": "tool_finished", "turn": 2, "name": "read_file", "status": "ok"}
    printer.show({**done, "tool_call_id": "c1", "result": "42", "live": True, "offset": 4})
    printer.show({**done, "tool_call_id": "c1", "result": "42", "offset": 6})  # after a reconnect
    printer.show({**done, "tool_call_id": "c2", "result": "43", "offset": 7})
    out = buf.getvalue()
    assert out.count("tool read_file -> ok") == 2 and "43" in out
