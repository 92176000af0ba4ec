"""The sandbox's files in S3 (activities/s3_files.py) against a real S3 API: moto's server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.s3_files import S3FileStore
from activities.storage import PayloadIntegrityError, PayloadNotFoundError, PayloadStoreError
from workers.config import Settings
from workers.payloads.converter import PayloadStoreConfigError, build_file_store
from workers.testing.stores import S3Server, free_port, start_s3


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield server
    finally:
        server.stop()


def test_files_round_trip_content_addressed_under_the_prefix(s3: S3Server):
    bucket = s3.make_bucket()
    store = S3FileStore(bucket, "agents/", client=s3.client())
    key = store.put_bytes(b"tide table 42")
    assert (
        key.startswith("agents/sandbox-files/sha256/") and store.put_bytes(b"tide table 42") == key
    )
    assert store.get_bytes(key) == b"tide table 42"
    assert s3.keys(bucket) == [key]
    # a store with another prefix still reads the key a run recorded (the key holds the prefix)
    assert S3FileStore(bucket, "other/", client=s3.client()).get_bytes(key) == b"tide table 42"


def test_missing_tampered_and_malformed_keys_are_refused(s3: S3Server):
    bucket = s3.make_bucket()
    store = S3FileStore(bucket, client=s3.client())
    key = store.put_bytes(b"original")
    with pytest.raises(PayloadNotFoundError, match="not found"):
        store.get_bytes(key.replace(key[-6:], "000000"))
    s3.client().put_object(Bucket=bucket, Key=key, Body=b"changed")
    with pytest.raises(PayloadIntegrityError, match="corrupt"):
        store.get_bytes(key)
    for bad in ("../x", "sha256/ab/" + "cd" * 32, "sandbox-files/sha256/zz/" + "0" * 64):
        with pytest.raises(PayloadIntegrityError, match="malformed"):
            store.get_bytes(bad)


def test_an_unreachable_store_is_a_store_error_not_a_missing_file(s3: S3Server):
    import boto3
    from botocore.config import Config

    dead = f"http://127.0.0.1:{free_port()}"
    client = boto3.Session(
        aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1"
    ).client("s3", endpoint_url=dead, config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    store = S3FileStore("b", client=client)
    with pytest.raises(PayloadStoreError) as ei:
        store.get_bytes("sandbox-files/sha256/ab/ab" + "0" * 62)
    assert not isinstance(ei.value, PayloadNotFoundError | PayloadIntegrityError)
    with pytest.raises(PayloadStoreError, match="cannot put"):
        store.put_bytes(b"x")
    # a sandboxed call reading a run's file: an unreachable store is raised (Temporal retries
    # the call), a missing file is a tool error the model reads
    from activities.tools import sandbox_tools
    from activities.tools.registry import ToolError

    try:
        sandbox_tools.configure(Path("/tmp/unused-sandbox-root"), store=store)
        with pytest.raises(PayloadStoreError):
            sandbox_tools._get("sandbox-files/sha256/ab/ab" + "0" * 62)
        bucket = s3.make_bucket()
        sandbox_tools.configure(
            Path("/tmp/unused-sandbox-root"), store=S3FileStore(bucket, client=s3.client())
        )
        with pytest.raises(ToolError, match="cannot be read"):
            sandbox_tools._get("sandbox-files/sha256/ab/ab" + "0" * 62)
    finally:
        sandbox_tools.configure(Path("/tmp/unused-sandbox-root"))


def test_the_worker_keeps_files_in_the_bucket_with_the_s3_payload_store(tmp_path: Path):
    s = Settings(state_dir=str(tmp_path), payload_store="s3", s3_bucket="b", s3_prefix="p/")
    store = build_file_store(s)
    assert isinstance(store, S3FileStore) and (store.bucket, store.prefix) == ("b", "p/")
    assert not isinstance(build_file_store(Settings(state_dir=str(tmp_path))), S3FileStore)
    with pytest.raises(PayloadStoreConfigError, match="AGENT_S3_BUCKET"):
        build_file_store(Settings(state_dir=str(tmp_path), payload_store="s3"))
