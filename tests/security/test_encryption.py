"""Payloads encrypted at rest: nothing readable in the raw history or the payload store, the
codec server decrypts only for authenticated requests from the Web UI, keys rotate, encrypted
histories replay (issue #18, docs/security.md)."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import aiohttp
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory

from tests.support.encryption import FIXTURE_KEYS
from tests.support.harness import Harness
from workers.config import Settings
from workers.console.auth import Authenticator
from workers.history import audit_run, replay_histories
from workers.payloads.codec_server import default_allowed_origins, start_codec_server
from workers.payloads.converter import build_data_converter
from workers.payloads.encryption import (
    AesGcmCodec,
    DecryptionError,
    EncryptionKeyError,
    load_keys,
    new_key_line,
    parse_keys,
)
from workers.testing.scripted_model import ScriptedModel, text, tool_call

HERE = Path(__file__).resolve().parent
STORED = HERE.parent / "histories" / "encrypted"
UI = "http://127.0.0.1:8233"
MARKER_PROMPT = "ZEBRA-PROMPT-7731"
MARKER_TOOL = "OKAPI-TOOL-RESULT-4410"


def _enc_settings(tmp_path: Path, keys: str) -> Settings:
    return Settings(
        payload_dir=str(tmp_path / "payloads"), payload_threshold_bytes=2048, encryption_keys=keys
    )


async def test_marker_strings_appear_nowhere_at_rest_and_the_ui_codec_decrypts_them(
    client: Client, tmp_path: Path
):
    settings = _enc_settings(tmp_path, FIXTURE_KEYS)
    enc = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=build_data_converter(settings),
    )
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "secret.txt").write_text(f"{MARKER_TOOL}\n" + "padding line\n" * 400)
    model = ScriptedModel(
        [tool_call("read_file", {"path": "secret.txt"}), text(f"It says {MARKER_TOOL}.")]
    )
    async with Harness(enc, tmp_path, model) as h:
        handle = await h.start(f"Read secret.txt and repeat it. {MARKER_PROMPT}")
        result = await handle.result()
    assert result.status == "completed" and MARKER_TOOL in (result.output or "")
    history = await handle.fetch_history()
    raw = history.to_json()
    for marker in (MARKER_PROMPT, MARKER_TOOL):
        assert marker not in raw
        assert base64.b64encode(marker.encode()).decode()[:12] not in raw
    stored = list((tmp_path / "payloads").rglob("*"))
    files = [p for p in stored if p.is_file()]
    assert files, "the transcript should have crossed the threshold into the payload store"
    for p in files:
        blob = p.read_bytes()
        assert MARKER_PROMPT.encode() not in blob and MARKER_TOOL.encode() not in blob
    # the audit decrypts every payload, local activities' markers included (the pinned spec and
    # the local read_file call are markers in revision 4)
    trail = await audit_run(enc, handle.id)
    [spec] = [e for e in trail.timeline if e.kind == "spec_resolved"]
    assert spec.model == "scripted" and "read_file" in spec.tools
    [call] = [e for e in trail.timeline if e.kind == "tool_call"]
    assert call.name == "read_file" and isinstance(call.arguments, dict)
    assert call.arguments["path"] == "secret.txt" and call.status == "ok"
    # the plain converter cannot read it; the encrypted one replays it
    report = await replay_histories([history], data_converter=build_data_converter(settings))
    assert report.compatible, report.failure
    if os.environ.get("RECORD_ENCRYPTED_HISTORY"):
        shutil.rmtree(STORED, ignore_errors=True)
        shutil.copytree(tmp_path / "payloads", STORED / "payloads")
        (STORED / "tools.json").write_text(raw)

    # the Web UI's codec server: decrypted only with a credential, only from the UI's origin
    first_input = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    body = {"payloads": [json.loads(_to_json(first_input))]}
    server = await start_codec_server(
        settings, port=0, allowed_origins=default_allowed_origins(UI), auth=Authenticator(token="t")
    )
    try:
        async with aiohttp.ClientSession() as http:
            r = await http.post(f"{server.url}/decode", json=body, headers={"Origin": UI})
            assert r.status == 401
            assert MARKER_PROMPT not in await r.text()
            r = await http.post(
                f"{server.url}/decode",
                json=body,
                headers={"Origin": "http://127.0.0.1:9999", "Authorization": "Bearer t"},
            )
            assert r.status == 403
            r = await http.post(
                f"{server.url}/decode",
                json=body,
                headers={"Origin": UI, "Authorization": "Bearer t"},
            )
            assert r.status == 200
            [p] = (await r.json())["payloads"]
            assert MARKER_PROMPT in base64.b64decode(p["data"]).decode()
            assert base64.b64decode(p["metadata"]["encoding"]) == b"json/plain"
    finally:
        await server.stop()


def _to_json(p: Payload) -> str:
    from google.protobuf import json_format

    return json_format.MessageToJson(p)


def test_the_stored_encrypted_history_replays_with_its_key_only():
    import asyncio

    path = STORED / "tools.json"
    history = WorkflowHistory.from_json("encrypted-tools", path.read_text())
    assert MARKER_PROMPT not in path.read_text()
    store = str(STORED / "payloads")
    for blob in (STORED / "payloads").rglob("*"):  # the external store holds ciphertext too
        assert not blob.is_file() or MARKER_TOOL.encode() not in blob.read_bytes()
    right = Settings(payload_dir=store, encryption_keys=FIXTURE_KEYS)
    report = asyncio.run(replay_histories([history], data_converter=build_data_converter(right)))
    assert report.compatible, report.failure
    wrong = Settings(payload_dir=store, encryption_keys=new_key_line("other"))
    report = asyncio.run(replay_histories([history], data_converter=build_data_converter(wrong)))
    assert not report.compatible and "fixture-2026-11" in (report.failure or "")


async def test_keys_rotate_and_tampering_is_detected(tmp_path: Path):
    old = new_key_line("old")
    new = new_key_line("new")
    p = Payload(metadata={"encoding": b"json/plain"}, data=b'{"x": 1}')
    [sealed] = await AesGcmCodec(parse_keys(old)).encode([p])
    assert sealed.metadata["encryption-key-id"] == b"old" and b'"x"' not in sealed.data
    rotated = AesGcmCodec(parse_keys(f"{new}\n{old}"))
    assert rotated.key_id == "new"
    assert (await rotated.decode([sealed]))[0] == p  # old keys still decrypt
    [resealed] = await rotated.encode([p])
    assert resealed.metadata["encryption-key-id"] == b"new"
    with pytest.raises(DecryptionError, match="not configured"):
        await AesGcmCodec(parse_keys(old)).decode([resealed])
    bad = Payload()
    bad.CopyFrom(sealed)
    bad.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(DecryptionError, match="authentication"):
        await rotated.decode([bad])
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b"1")
    assert (await rotated.decode([plain]))[0] == plain  # histories from before encryption
    keyfile = tmp_path / "keys"
    keyfile.write_text(f"# rotated 2026-11\n{new}\n{old}\n")
    assert [k for k, _ in load_keys(str(keyfile))] == ["new", "old"]
    for broken in (
        "",
        "nocolon",
        "k:!!!",
        "k:" + base64.b64encode(b"short").decode(),
        f"{old}\n{old}",
    ):
        with pytest.raises(EncryptionKeyError):
            parse_keys(broken)


def test_the_demo_key_file_is_used_when_the_setting_is_unset_and_off_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from workers.config import ENCRYPTION_KEY_FILE, load_settings
    from workers.payloads.encryption import codec_from_setting, load_or_create_key_file

    monkeypatch.delenv("AGENT_ENCRYPTION_KEYS", raising=False)
    monkeypatch.setenv("AGENT_STATE_DIR", str(tmp_path))
    assert load_settings().encryption_keys is None
    path, created = load_or_create_key_file(tmp_path / ENCRYPTION_KEY_FILE)
    assert created and path.stat().st_mode & 0o777 == 0o600
    assert load_or_create_key_file(path) == (path, False)  # kept, never replaced
    setting = load_settings().encryption_keys
    assert setting is not None and setting == str(path.resolve())
    codec = codec_from_setting(setting)
    assert codec is not None and len(load_keys(setting)) == 1
    monkeypatch.setenv("AGENT_ENCRYPTION_KEYS", "off")
    assert codec_from_setting(load_settings().encryption_keys) is None
    path.write_text("# no key here\n")
    with pytest.raises(EncryptionKeyError):
        load_or_create_key_file(path)


def test_files_sandboxed_code_writes_are_ciphertext_in_the_payload_store(tmp_path: Path):
    from activities.storage import LocalStorageDriver
    from activities.tools import sandbox_tools
    from activities.tools.registry import ToolContext

    marker = "QUOKKA-FILE-CONTENT-9917"
    store = LocalStorageDriver(tmp_path / "payloads")
    sandbox_tools.configure(tmp_path / "sandbox", store, AesGcmCodec(parse_keys(FIXTURE_KEYS)))
    try:
        (tmp_path / "ws").mkdir()
        ctx = ToolContext(workspace=tmp_path / "ws", run_id="run-enc", tenant_id="t")
        out = json.loads(
            sandbox_tools.run_python(ctx, f"open('secret.txt', 'w').write('{marker}')")
        )
        assert out["exit_code"] == 0 and list(ctx.new_files) == ["secret.txt"]
        blobs = [p.read_bytes() for p in (tmp_path / "payloads").rglob("*") if p.is_file()]
        assert blobs and all(marker.encode() not in b for b in blobs)
        # a later call of the run, given the key, reads the plaintext back
        later = ToolContext(
            workspace=tmp_path / "ws", run_id="run-enc", tenant_id="t", run_files=ctx.new_files
        )
        shutil.rmtree(tmp_path / "sandbox" / "runs")  # not from this worker's own copy
        out = json.loads(
            sandbox_tools.run_python(later, "print(open('secret.txt').read())", ["secret.txt"])
        )
        assert out["stdout"].strip() == marker
    finally:
        sandbox_tools.configure(tmp_path / "sandbox")
