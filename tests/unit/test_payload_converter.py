"""External payload storage: settings and the data converter per config (workers/payloads/converter.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriverClient
from temporalio.converter import ActivitySerializationContext, WorkflowSerializationContext

from activities.storage import (
    LOCAL_DRIVER_NAME,
)
from tests.support.payloads import Transcript, settings_in
from workers.config import load_settings
from workers.payloads.converter import (
    PayloadStoreConfigError,
    build_data_converter,
    build_external_storage,
    is_reference,
    reference_of,
    resolve_references,
)

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


async def test_the_converters_copies_share_one_payload_converter_and_still_convert(tmp_path: Path):
    """The SDK copies the converter per context (workflow, activity, store): no copy builds a
    payload converter of its own (#36, worker CPU), and each converts and stores as the original."""
    dc = build_data_converter(settings_in(tmp_path, payload_threshold_bytes=4096))
    ctx = WorkflowSerializationContext(namespace="default", workflow_id="w-1")
    act = ActivitySerializationContext(
        namespace="default",
        activity_id="1",
        activity_type="model.complete",
        activity_task_queue="q",
        workflow_id="w-1",
        workflow_type="AgentRun",
        is_local=False,
    )
    copies = [dataclasses.replace(dc), dc.with_context(ctx), dc.with_context(act)]
    assert all(c.payload_converter is dc.payload_converter for c in copies)
    big = Transcript(messages=[{"role": "user", "content": "y" * 20_000}])
    for c in copies:
        (ref,) = await c.encode([big])
        assert is_reference(ref)
        assert await c.decode([ref], [Transcript]) == [big]


async def test_local_store_keeps_large_payloads_out_and_decodes_them(tmp_path: Path):
    dc = build_data_converter(settings_in(tmp_path, payload_threshold_bytes=4096))
    big = Transcript(messages=[{"role": "user", "content": "y" * 20_000}])
    small = Transcript(messages=[{"role": "user", "content": "hi"}])
    ref, inline = await dc.encode([big, small])
    assert is_reference(ref) and not is_reference(inline)
    assert ref.ByteSize() < 400  # a reference, not the 20 KB
    assert ref.external_payloads[0].size_bytes > 20_000
    r = reference_of(ref)
    assert r is not None and r.driver_name == LOCAL_DRIVER_NAME
    assert len(list((tmp_path / "state" / "payloads").rglob("*"))) >= 1
    assert await dc.decode([ref, inline], [Transcript, Transcript]) == [big, small]


async def test_store_none_writes_nothing_but_still_reads_local_references(tmp_path: Path):
    writer = build_data_converter(settings_in(tmp_path, payload_threshold_bytes=1024))
    [ref] = await writer.encode(["z" * 5000])
    reader = build_data_converter(settings_in(tmp_path, payload_store="none"))
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
    s = settings_in(
        tmp_path,
        payload_store="s3",
        s3_bucket="bkt",
        s3_prefix="agents/",
        payload_threshold_bytes=1,
    )
    dc = build_data_converter(s, s3_client=fake)
    assert dc.external_storage is not None
    names = [d.name() for d in dc.external_storage.drivers]
    assert names == [LOCAL_DRIVER_NAME, "aws.s3driver"]
    [ref] = await dc.encode(["in the bucket " * 100])
    r = reference_of(ref)
    assert r is not None and r.driver_name == "aws.s3driver"
    assert r.claim_data["bucket"] == "bkt"
    assert r.claim_data["key"].startswith("agents/v0/")
    assert [k for (_, k) in fake.objects] == [r.claim_data["key"]]
    assert await dc.decode([ref], [str]) == ["in the bucket " * 100]
    assert not (tmp_path / "state" / "payloads").exists()  # nothing written locally


def test_s3_store_errors_are_clear(tmp_path: Path):
    with pytest.raises(PayloadStoreConfigError, match="AGENT_S3_BUCKET"):
        build_data_converter(settings_in(tmp_path, payload_store="s3"))
    try:
        import aioboto3  # noqa: F401  # optional: the test covers both cases
    except ImportError:
        with pytest.raises(PayloadStoreConfigError) as ei:
            build_data_converter(settings_in(tmp_path, payload_store="s3", s3_bucket="b"))
        assert "pip install 'temporal-agent-runtime[s3]'" in str(ei.value)
    else:  # pragma: no cover - aioboto3 installed: building works without network
        build_data_converter(settings_in(tmp_path, payload_store="s3", s3_bucket="b"))


async def test_resolve_references_passes_other_payloads_through(tmp_path: Path):
    storage = build_external_storage(settings_in(tmp_path, payload_threshold_bytes=100))
    dc = build_data_converter(settings_in(tmp_path, payload_threshold_bytes=100))
    ref, small = await dc.encode(["a" * 1000, "b"])
    out = await resolve_references(storage, [ref, small])
    assert isinstance(out[0], Payload) and json.loads(out[0].data) == "a" * 1000
    assert out[1] == small


def test_client_connect_uses_the_storage_converter(monkeypatch, tmp_path: Path):
    """``workers.client.connect`` builds the converter from the settings; an override wins."""
    from temporalio.contrib.pydantic import pydantic_data_converter

    from workers import client as rc

    captured: dict = {}

    async def fake_connect(target: str, **kw) -> str:
        captured.update(kw, target=target)
        return "client"

    monkeypatch.setattr(rc.Client, "connect", staticmethod(fake_connect))
    s = settings_in(tmp_path, payload_threshold_bytes=123)
    assert asyncio.run(rc.connect(s)) == "client"
    dc = captured["data_converter"]
    assert dc.external_storage is not None
    assert dc.external_storage.payload_size_threshold == 123
    assert issubclass(dc.payload_converter_class, pydantic_data_converter.payload_converter_class)
    asyncio.run(rc.connect(s, data_converter=pydantic_data_converter))
    assert captured["data_converter"] is pydantic_data_converter
