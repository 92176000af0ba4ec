"""External payload storage: the codec server app (workers/payloads/codec_server.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
from temporalio.api.common.v1 import Payload

from activities.storage import (
    LOCAL_DRIVER_NAME,
)
from tests.support.payloads import payload_of, settings_in
from workers.console.auth import Authenticator
from workers.payloads.codec_server import default_allowed_origins, start_codec_server
from workers.payloads.converter import (
    build_data_converter,
)

UI = "http://127.0.0.1:8233"


# --------------------------------------------------------------------------- codec server


def _json_payload(p: Payload) -> dict:
    return {
        "metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
        "data": base64.b64encode(p.data).decode(),
    }


def _value(p: dict):
    return json.loads(base64.b64decode(p["data"]))


async def test_codec_server_decode_encode_and_cors(tmp_path: Path):
    s = settings_in(tmp_path, payload_threshold_bytes=1000)
    dc = build_data_converter(s)
    ref, small = await dc.encode([{"content": "q" * 5000}, "small"])
    server = await start_codec_server(
        s, port=0, allowed_origins=default_allowed_origins(UI), auth=Authenticator(token="t")
    )
    try:
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer t"}) as http:
            # what the Web UI sends: base64 metadata/data, X-Namespace, its Origin
            body = {"payloads": [_json_payload(ref), _json_payload(small)]}
            headers = {"Origin": UI, "X-Namespace": "default"}
            async with http.post(f"{server.url}/decode", json=body, headers=headers) as r:
                assert r.status == 200
                assert r.headers["Access-Control-Allow-Origin"] == UI
                out = (await r.json())["payloads"]
            assert _value(out[0]) == {"content": "q" * 5000}
            assert base64.b64decode(out[0]["metadata"]["encoding"]) == b"json/plain"
            assert _value(out[1]) == "small"

            # CORS preflight from the UI, with localhost as well as 127.0.0.1
            for origin in (UI, "http://localhost:8233"):
                pre = {
                    "Origin": origin,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type,x-namespace",
                }
                async with http.options(f"{server.url}/decode", headers=pre) as r:
                    assert r.status == 200
                    assert r.headers["Access-Control-Allow-Origin"] == origin
                    assert "POST" in r.headers["Access-Control-Allow-Methods"]
                    allowed = r.headers["Access-Control-Allow-Headers"].lower()
                    assert "x-namespace" in allowed and "content-type" in allowed

            # another web page may not use it
            evil = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
            async with http.options(f"{server.url}/decode", headers=evil) as r:
                assert r.status == 403
                assert "Access-Control-Allow-Origin" not in r.headers
            async with http.post(f"{server.url}/encode", json=body, headers=evil) as r:
                assert r.status == 403

            # encode stores large payloads and returns references that decode back
            plain = {"payloads": [_json_payload(payload_of("e" * 3000)), _json_payload(small)]}
            async with http.post(f"{server.url}/encode", json=plain) as r:
                assert r.status == 200
                enc = (await r.json())["payloads"]
            assert base64.b64decode(enc[0]["metadata"]["encoding"]) == b"json/protobuf"
            assert enc[1] == _json_payload(small)
            async with http.post(f"{server.url}/decode", json={"payloads": enc}) as r:
                assert _value((await r.json())["payloads"][0]) == "e" * 3000

            # a reference whose file is gone: the slot explains, the request still succeeds
            for f in (tmp_path / "state" / "payloads").rglob("*"):
                if f.is_file():
                    f.unlink()
            async with http.post(f"{server.url}/decode", json=body) as r:
                assert r.status == 200
                err = _value((await r.json())["payloads"][0])
            assert "not found" in err["codec_error"]
            assert err["reference"]["driver_name"] == LOCAL_DRIVER_NAME

            # malformed body
            async with http.post(f"{server.url}/decode", data=b"not json") as r:
                assert r.status == 400
                assert "payloads" in (await r.json())["error"]
            # only the last path segment counts (the endpoint may be mounted at any depth)
            async with http.post(f"{server.url}/default/decode", json={"payloads": enc}) as r:
                assert r.status == 200
            async with http.post(f"{server.url}/nothing", json={"payloads": enc}) as r:
                assert r.status == 404
            async with http.get(f"{server.url}/healthz") as r:
                assert (await r.json())["store"] == "local"
    finally:
        await server.stop()


def test_default_allowed_origins():
    assert default_allowed_origins("http://127.0.0.1:8233/") == [UI, "http://localhost:8233"]
    assert default_allowed_origins("https://ui.example:9443") == ["https://ui.example:9443"]
    # default: the shipped temporal-dev.yml's Web UI
    assert UI in default_allowed_origins()


def test_codec_server_module_runs_and_stops(tmp_path: Path):
    """``python -m workers.payloads.codec_server`` binds, says so, and stops on SIGTERM."""
    import os
    import signal
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "AGENT_STATE_DIR": str(tmp_path), "AGENT_CODEC_PORT": str(port)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.payloads.codec_server"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert f"codec_server_started url=http://127.0.0.1:{port}" in line, line

        async def health(headers: dict[str, str]) -> dict:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/healthz", headers=headers) as r:
                    return await r.json()

        # the settings only to the token's holder (the server created the token at start)
        token = (tmp_path / "console-token").read_text().strip()
        mine = asyncio.run(health({"Authorization": f"Bearer {token}"}))
        assert mine["payload_dir"] == str((tmp_path / "payloads").resolve())
        assert asyncio.run(health({})) == {"status": "ok"}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
