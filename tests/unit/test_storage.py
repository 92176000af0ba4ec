"""External payload storage: the local driver (activities/storage.py)."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext
from temporalio.converter import StorageDriverStoreContext as StoreCtx

from activities.storage import (
    LocalStorageDriver,
    PayloadIntegrityError,
    PayloadNotFoundError,
)
from tests.support.payloads import payload_of

# --------------------------------------------------------------------------- local driver


async def test_local_driver_roundtrip_is_content_addressed_and_idempotent(tmp_path: Path):
    driver = LocalStorageDriver(tmp_path / "store")
    p = payload_of("x" * 10_000)
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
    payloads = [payload_of(f"item {i} " * 1000) for i in range(8)]
    claims = await driver.store(StoreCtx(), payloads)
    assert len({c.claim_data["key"] for c in claims}) == 8
    assert await driver.retrieve(StorageDriverRetrieveContext(), list(reversed(claims))) == list(
        reversed(payloads)
    )


async def test_missing_file_error_names_key_and_folder(tmp_path: Path):
    driver = LocalStorageDriver(tmp_path / "a")
    [claim] = await driver.store(StoreCtx(), [payload_of("hello")])
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
    [claim] = await driver.store(StoreCtx(), [payload_of("hello")])
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
    p = payload_of("shared between processes " * 100)
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
    old = driver.put_bytes(payload_of("old").SerializeToString())
    new = driver.put_bytes(payload_of("new").SerializeToString())
    past = time.time() - 3600
    os.utime(tmp_path / old, (past, past))
    assert driver.prune(older_than_seconds=60) == 1
    assert not driver.contains(old) and driver.contains(new)
