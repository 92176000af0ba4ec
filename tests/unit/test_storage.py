"""External payload storage: the local driver, the converter per config, the codec server app."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import pytest
from pydantic import BaseModel
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriverClient
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext
from temporalio.converter import StorageDriverStoreContext as StoreCtx

from activities.storage import (
    LOCAL_DRIVER_NAME,
    LocalStorageDriver,
    PayloadIntegrityError,
    PayloadNotFoundError,
)
from workers.config import Settings, load_settings
from workers.console.auth import Authenticator
from workers.payloads.codec_server import default_allowed_origins, start_codec_server
from workers.payloads.converter import (
    PayloadStoreConfigError,
    build_data_converter,
    build_external_storage,
    is_reference,
    reference_of,
    resolve_references,
)

UI = "http://127.0.0.1:8233"


def _payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


def _settings(tmp_path: Path, **kw) -> Settings:
    return Settings(state_dir=str(tmp_path / "state"), **kw)


class Transcript(BaseModel):
    messages: list[dict[str, str]]


# --------------------------------------------------------------------------- local driver


async def test_local_driver_roundtrip_is_content_addressed_and_idempotent(tmp_path: Path):
    driver = LocalStorageDriver(tmp_path / "store")
    p = _payload("x" * 10_000)
    [claim] = await driver.store(StoreCtx(), [p])
    key = claim.claim_data["key"]
    digest = hashlib.sha256(p.SerializeToString(deterministic=True)).hexdigest()
    assert key == f"sha256/{digest[:2]}/{digest}"
    path = tmp_path / "store" / key
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # payloads may hold secrets
    inode = path.stat().st_ino
    # a retry / replay / second worker gets the same key and does not rewrite the file
    [again] = await driver.store(StoreCtx(), [p])
    assert again == claim
    assert path.stat().st_ino == inode
    [back] = await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    assert back == p
    # nothing half-written is left around
    assert not list((tmp_path / "store").rglob(".tmp-*"))


async def test_local_driver_many_payloads_keep_order(tmp_path: Path):
    driver = LocalStorageDriver(tmp_path)
    payloads = [_payload(f"item {i} " * 1000) for i in range(8)]
    claims = await driver.store(StoreCtx(), payloads)
    assert len({c.claim_data["key"] for c in claims}) == 8
    assert await driver.retrieve(StorageDriverRetrieveContext(), list(reversed(claims))) == list(
        reversed(payloads)
    )


async def test_missing_file_error_names_key_and_folder(tmp_path: Path):
    driver = LocalStorageDriver(tmp_path / "a")
    [claim] = await driver.store(StoreCtx(), [_payload("hello")])
    other = LocalStorageDriver(tmp_path / "b")  # e.g. a codec server with another AGENT_PAYLOAD_DIR
    with pytest.raises(PayloadNotFoundError) as ei:
        await other.retrieve(StorageDriverRetrieveContext(), [claim])
    msg = str(ei.value)
    assert claim.claim_data["key"] in msg
    assert str((tmp_path / "b").resolve()) in msg
    assert "AGENT_PAYLOAD_DIR" in msg
    assert not (tmp_path / "b").exists()  # reading never creates the folder


async def test_corrupt_file_and_malformed_keys_are_refused(tmp_path: Path):
    driver = LocalStorageDriver(tmp_path)
    [claim] = await driver.store(StoreCtx(), [_payload("hello")])
    path = tmp_path / claim.claim_data["key"]
    path.write_bytes(path.read_bytes() + b"!")
    with pytest.raises(PayloadIntegrityError, match="corrupt"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    for bad in ("../../etc/passwd", "sha256/ab/" + "0" * 64, "sha256/00/" + "0" * 63 + "/x", ""):
        with pytest.raises(PayloadIntegrityError):
            await driver.retrieve(
                StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data={"key": bad})]
            )
    wrong_hash = {"key": claim.claim_data["key"], "hash_value": "f" * 64}
    with pytest.raises(PayloadIntegrityError, match="does not match"):
        await driver.retrieve(StorageDriverRetrieveContext(), [StorageDriverClaim(wrong_hash)])


def test_another_process_reads_what_this_one_wrote(tmp_path: Path):
    driver = LocalStorageDriver(tmp_path)
    p = _payload("shared between processes " * 100)
    key = driver.put_bytes(p.SerializeToString(deterministic=True))
    code = textwrap.dedent(
        f"""
        from activities.storage import LocalStorageDriver
        from temporalio.api.common.v1 import Payload
        d = LocalStorageDriver({str(tmp_path)!r})
        p = Payload(); p.ParseFromString(d.get_bytes({key!r}))
        print(p.data.decode())
        q = Payload(metadata={{"encoding": b"json/plain"}}, data=b'"from the child"')
        print(d.put_bytes(q.SerializeToString(deterministic=True)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert json.loads(out[0]) == "shared between processes " * 100
    child = Payload()
    child.ParseFromString(driver.get_bytes(out[1]))
    assert child.data == b'"from the child"'


def test_prune_removes_old_files_only(tmp_path: Path):
    import os
    import time

    driver = LocalStorageDriver(tmp_path)
    old = driver.put_bytes(_payload("old").SerializeToString())
    new = driver.put_bytes(_payload("new").SerializeToString())
    past = time.time() - 3600
    os.utime(tmp_path / old, (past, past))
    assert driver.prune(older_than_seconds=60) == 1
    assert not driver.contains(old) and driver.contains(new)


# --------------------------------------------------------------------------- settings + converter


def test_settings_from_environment(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("AGENT_STATE_DIR", str(tmp_path))
    for name in ("AGENT_PAYLOAD_STORE", "AGENT_PAYLOAD_DIR", "AGENT_PAYLOAD_THRESHOLD_BYTES"):
        monkeypatch.delenv(name, raising=False)
    s = load_settings()
    assert s.payload_store == "local"
    assert s.payload_threshold_bytes == 32 * 1024
    assert s.payload_path == (tmp_path / "payloads").resolve()
    assert s.codec_port == 8234
    monkeypatch.setenv("AGENT_PAYLOAD_STORE", "s3")
    monkeypatch.setenv("AGENT_PAYLOAD_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("AGENT_PAYLOAD_THRESHOLD_BYTES", "1000")
    monkeypatch.setenv("AGENT_S3_BUCKET", "bkt")
    monkeypatch.setenv("AGENT_S3_PREFIX", "runs/")
    monkeypatch.setenv("AGENT_CODEC_PORT", "9000")
    s = load_settings()
    assert (s.payload_store, s.payload_threshold_bytes, s.s3_bucket, s.s3_prefix, s.codec_port) == (
        "s3",
        1000,
        "bkt",
        "runs/",
        9000,
    )
    assert s.payload_path == (tmp_path / "elsewhere").resolve()
    monkeypatch.setenv("AGENT_PAYLOAD_STORE", "disk")
    with pytest.raises(ValueError, match="payload_store"):
        load_settings()


async def test_local_store_keeps_large_payloads_out_and_decodes_them(tmp_path: Path):
    dc = build_data_converter(_settings(tmp_path, payload_threshold_bytes=4096))
    big = Transcript(messages=[{"role": "user", "content": "y" * 20_000}])
    small = Transcript(messages=[{"role": "user", "content": "hi"}])
    ref, inline = await dc.encode([big, small])
    assert is_reference(ref) and not is_reference(inline)
    assert ref.ByteSize() < 400  # a reference, not the 20 KB
    assert ref.external_payloads[0].size_bytes > 20_000
    assert reference_of(ref).driver_name == LOCAL_DRIVER_NAME
    assert len(list((tmp_path / "state" / "payloads").rglob("*"))) >= 1
    assert await dc.decode([ref, inline], [Transcript, Transcript]) == [big, small]


async def test_store_none_writes_nothing_but_still_reads_local_references(tmp_path: Path):
    writer = build_data_converter(_settings(tmp_path, payload_threshold_bytes=1024))
    [ref] = await writer.encode(["z" * 5000])
    reader = build_data_converter(_settings(tmp_path, payload_store="none"))
    [inline] = await reader.encode(["z" * 500_000])
    assert not is_reference(inline)
    assert await reader.decode([ref], [str]) == ["z" * 5000]


class FakeS3(S3StorageDriverClient):
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        self.objects[(bucket, key)] = data

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        return (bucket, key) in self.objects

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        return self.objects[(bucket, key)]


async def test_s3_store_selects_the_sdk_s3_driver_with_bucket_and_prefix(tmp_path: Path):
    fake = FakeS3()
    s = _settings(
        tmp_path,
        payload_store="s3",
        s3_bucket="bkt",
        s3_prefix="agents/",
        payload_threshold_bytes=1,
    )
    dc = build_data_converter(s, s3_client=fake)
    names = [d.name() for d in dc.external_storage.drivers]
    assert names == [LOCAL_DRIVER_NAME, "aws.s3driver"]
    [ref] = await dc.encode(["in the bucket " * 100])
    r = reference_of(ref)
    assert r.driver_name == "aws.s3driver"
    assert r.claim_data["bucket"] == "bkt"
    assert r.claim_data["key"].startswith("agents/v0/")
    assert [k for (_, k) in fake.objects] == [r.claim_data["key"]]
    assert await dc.decode([ref], [str]) == ["in the bucket " * 100]
    assert not (tmp_path / "state" / "payloads").exists()  # nothing written locally


def test_s3_store_errors_are_clear(tmp_path: Path):
    with pytest.raises(PayloadStoreConfigError, match="AGENT_S3_BUCKET"):
        build_data_converter(_settings(tmp_path, payload_store="s3"))
    try:
        import aioboto3  # noqa: F401
    except ImportError:
        with pytest.raises(PayloadStoreConfigError) as ei:
            build_data_converter(_settings(tmp_path, payload_store="s3", s3_bucket="b"))
        assert 'pip install "temporalio[aioboto3]"' in str(ei.value)
    else:  # pragma: no cover - aioboto3 installed: building works without network
        build_data_converter(_settings(tmp_path, payload_store="s3", s3_bucket="b"))


async def test_resolve_references_passes_other_payloads_through(tmp_path: Path):
    storage = build_external_storage(_settings(tmp_path, payload_threshold_bytes=100))
    dc = build_data_converter(_settings(tmp_path, payload_threshold_bytes=100))
    ref, small = await dc.encode(["a" * 1000, "b"])
    out = await resolve_references(storage, [ref, small])
    assert json.loads(out[0].data) == "a" * 1000
    assert out[1] == small


# --------------------------------------------------------------------------- codec server


def _json_payload(p: Payload) -> dict:
    return {
        "metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
        "data": base64.b64encode(p.data).decode(),
    }


def _value(p: dict):
    return json.loads(base64.b64decode(p["data"]))


async def test_codec_server_decode_encode_and_cors(tmp_path: Path):
    s = _settings(tmp_path, payload_threshold_bytes=1000)
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
            plain = {"payloads": [_json_payload(_payload("e" * 3000)), _json_payload(small)]}
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
        line = proc.stderr.readline()
        assert f"codec_server_started url=http://127.0.0.1:{port}" in line, line

        async def health() -> dict:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                    return await r.json()

        assert asyncio.run(health())["payload_dir"] == str((tmp_path / "payloads").resolve())
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_client_connect_uses_the_storage_converter(monkeypatch, tmp_path: Path):
    """``workers.client.connect`` builds the converter from the settings; an override wins."""
    from temporalio.contrib.pydantic import pydantic_data_converter

    from workers import client as rc

    captured: dict = {}

    async def fake_connect(target: str, **kw) -> str:
        captured.update(kw, target=target)
        return "client"

    monkeypatch.setattr(rc.Client, "connect", staticmethod(fake_connect))
    s = _settings(tmp_path, payload_threshold_bytes=123)
    assert asyncio.run(rc.connect(s)) == "client"
    dc = captured["data_converter"]
    assert dc.external_storage is not None
    assert dc.external_storage.payload_size_threshold == 123
    assert issubclass(dc.payload_converter_class, pydantic_data_converter.payload_converter_class)
    asyncio.run(rc.connect(s, data_converter=pydantic_data_converter))
    assert captured["data_converter"] is pydantic_data_converter
