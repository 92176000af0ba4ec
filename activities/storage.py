"""The local payload store: Temporal external payload storage in a folder on this machine.

Large payloads (the transcript sent to every model step, long tool outputs, the state carried over
by continue-as-new) are kept out of the workflow history by the SDK's external payload storage
(``DataConverter(external_storage=ExternalStorage(drivers=[...]))``, see
:mod:`workers.payloads.converter`): the history holds a small reference (about 230 bytes) and the
payload itself is written here.

Layout and keys::

    <directory>/sha256/<first 2 hex digits>/<64 hex digits>

Each file holds one serialized ``temporalio.api.common.v1.Payload`` protobuf (metadata + data),
exactly the bytes the SDK would otherwise have put in the history. The key is the lower-case
SHA-256 of those bytes (content addressing), so:

* a retried activity, a replayed workflow task or a second worker storing the same payload computes
  the same key and finds the file already there: nothing is written twice, no reference dangles;
* retrieval recomputes the hash and refuses a file whose content does not match its key;
* keys are position-independent: the reference names only the key, not the folder, so the worker,
  ``agentctl`` (reading results) and the codec server (showing payloads in the Web UI) resolve the
  same reference in different processes as long as they point at the same folder (the default,
  ``.agent-runtime/payloads``, sits next to the dev server's ``temporal.db``).

Why the key does not include the namespace or the workflow id (the S3 driver's keys do): this store
is for one machine and one user (files are created ``0600``), where namespaces are not a security
boundary; a key made only of the content hash lets any process resolve a reference from the
reference alone, deduplicates identical payloads across runs (the same pinned spec carried by every
continue-as-new), and keeps a reference valid when a run is reset, forked or continued as new under
another run id. The price: files cannot be deleted per workflow; :meth:`LocalStorageDriver.prune`
removes files by age instead (run it with a margin larger than the retention of the histories that
reference them).

Writes are atomic (temporary file in the same folder, ``fsync``, ``os.replace``), so a reader in
another process never sees a half-written payload and a crash leaves at worst a ``.tmp-*`` file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from activities.atomic import write_atomic

__all__ = [
    "LOCAL_DRIVER_NAME",
    "LocalStorageDriver",
    "PayloadIntegrityError",
    "PayloadNotFoundError",
    "PayloadStoreError",
]

LOCAL_DRIVER_NAME = "agent-runtime.local"
"""Driver name written into every reference (``ExternalStorageReference.driver_name``).

Every process that reads references must register a driver under this name; changing it orphans
the references already in histories."""

HASH_ALGORITHM = "sha256"
_KEY_RE = re.compile(r"^sha256/([0-9a-f]{2})/([0-9a-f]{64})$")


class PayloadStoreError(RuntimeError):
    """The local payload store could not store or return a payload (the message says why)."""


class PayloadNotFoundError(PayloadStoreError, FileNotFoundError):
    """A reference names a key whose file is not in the store's folder (message: key and folder)."""


class PayloadIntegrityError(PayloadStoreError, ValueError):
    """A file's SHA-256 does not match its key, or a claim is malformed (names key and folder)."""


def payload_key(data: bytes) -> str:
    """Key of serialized payload bytes: ``"sha256/<2 hex>/<64 hex>"`` (lower-case SHA-256)."""
    digest = hashlib.sha256(data).hexdigest()
    return f"{HASH_ALGORITHM}/{digest[:2]}/{digest}"


class LocalStorageDriver(StorageDriver):
    """A :class:`temporalio.converter.StorageDriver` that keeps payloads as files in ``directory``.

    Claims (``StorageDriverClaim.claim_data``) have the shape ``{"key": "sha256/ab/ab12..."}``:
    the key alone names the file and the expected hash, which keeps each reference in the history
    at about 230 bytes (the SDK adds the payload's size in ``external_payloads[0].size_bytes``).
    Claims that also carry ``hash_algorithm``/``hash_value`` (S3-driver style) are accepted and
    checked against the key.

    Args:
        directory: the store's folder; created (``0700``) on the first store, not before, so a
            read-only user (the codec server, ``agentctl``) never creates it.
        name: driver name written into references; keep the default (:data:`LOCAL_DRIVER_NAME`).
        max_payload_size: largest serialized payload accepted, bytes (default 512 MiB); a larger
            one raises :class:`PayloadStoreError` instead of filling the disk.

    Raises (from :meth:`store` / :meth:`retrieve`):
        PayloadStoreError: the folder cannot be created or written (message names it).
        PayloadNotFoundError: a referenced file is missing (message names key and folder).
        PayloadIntegrityError: a file's content does not match its key, or a claim is malformed.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        name: str = LOCAL_DRIVER_NAME,
        max_payload_size: int = 512 * 1024 * 1024,
    ) -> None:
        if max_payload_size <= 0:
            raise ValueError("max_payload_size must be greater than zero")
        self._dir = Path(directory).expanduser().resolve()
        self._name = name
        self._max = max_payload_size

    # ---------------------------------------------------------------- StorageDriver API

    def name(self) -> str:
        """Driver instance name, looked up when a reference is resolved."""
        return self._name

    def type(self) -> str:
        """Stable driver type identifier."""
        return "agent-runtime.local-file"

    @property
    def directory(self) -> Path:
        """Absolute folder of the store."""
        return self._dir

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        """Write each payload (unless already present) and return one claim per payload, in order.

        The target in ``context`` (workflow or activity) is deliberately not part of the key (see
        the module docstring).
        """
        blobs = [p.SerializeToString(deterministic=True) for p in payloads]
        if len(blobs) == 1:
            return [await asyncio.to_thread(self._store_bytes, blobs[0])]
        return list(await asyncio.gather(*(asyncio.to_thread(self._store_bytes, b) for b in blobs)))

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        """Read, verify and parse the payload of each claim, in order."""
        if len(claims) == 1:
            return [await asyncio.to_thread(self._retrieve_claim, claims[0])]
        return list(
            await asyncio.gather(*(asyncio.to_thread(self._retrieve_claim, c) for c in claims))
        )

    # ---------------------------------------------------------------- synchronous helpers

    def path_for(self, key: str) -> Path:
        """File of ``key`` (``sha256/<2 hex>/<64 hex>``).

        Raises:
            PayloadIntegrityError: ``key`` is not of that shape (also what keeps a crafted
                reference, e.g. from a browser calling the codec server, inside the folder).
        """
        m = _KEY_RE.match(key)
        if m is None or not m.group(2).startswith(m.group(1)):
            raise PayloadIntegrityError(
                f"malformed payload key {key!r} (expected 'sha256/<2 hex>/<64 hex>') "
                f"in store {self._dir}"
            )
        return self._dir / key

    def put_bytes(self, data: bytes) -> str:
        """Store serialized payload bytes; returns their key. Idempotent."""
        return self._store_bytes(data).claim_data["key"]

    def get_bytes(self, key: str) -> bytes:
        """The verified bytes stored under ``key``.

        Raises:
            PayloadNotFoundError: no file for ``key``.
            PayloadIntegrityError: malformed key, or content that does not hash to ``key``.
        """
        path = self.path_for(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise PayloadNotFoundError(
                f"externally stored payload {key} not found in the local payload store {self._dir} "
                f"(expected file {path}). The reference was written by a process using another "
                "folder (check AGENT_PAYLOAD_DIR / AGENT_STATE_DIR of the worker, agentctl and the "
                "codec server), or the file was pruned or deleted."
            ) from None
        except OSError as e:
            raise PayloadStoreError(f"cannot read payload {key} from {path}: {e}") from e
        actual = hashlib.sha256(data).hexdigest()
        if actual != key.rsplit("/", 1)[1]:
            raise PayloadIntegrityError(
                f"payload {key} in store {self._dir} is corrupt: "
                f"its content hashes to sha256 {actual}"
            )
        return data

    def contains(self, key: str) -> bool:
        """True when a file for ``key`` exists (not verified)."""
        return self.path_for(key).is_file()

    def prune(self, older_than_seconds: float) -> int:
        """Delete stored payloads (and stale ``.tmp-*`` files) not modified for that many seconds.

        Returns:
            The number of files deleted. Payloads still referenced by a history become unreadable:
            choose a margin larger than the namespace's retention plus the longest run.
        """
        if not self._dir.is_dir():
            return 0
        cutoff = time.time() - older_than_seconds
        deleted = 0
        for path in self._dir.glob(f"{HASH_ALGORITHM}/*/*"):
            try:
                if path.is_file() and path.stat().st_mtime < cutoff:
                    path.unlink()
                    deleted += 1
            except FileNotFoundError:
                continue
        return deleted

    def _store_bytes(self, data: bytes) -> StorageDriverClaim:
        if len(data) > self._max:
            raise PayloadStoreError(
                f"payload of {len(data)} bytes exceeds the local store's "
                f"max_payload_size of {self._max} bytes"
            )
        key = payload_key(data)
        path = self._dir / key
        claim = StorageDriverClaim(claim_data={"key": key})
        try:
            if path.is_file() and path.stat().st_size == len(data):
                # Same key, same length: the same content (a retry, a replay, another run).
                os.utime(path)  # keeps it young for prune()
                return claim
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(path, data, prefix=".tmp-")
        except OSError as e:
            raise PayloadStoreError(
                f"cannot write payload {key} to the local payload store {self._dir}: {e}"
            ) from e
        return claim

    def _retrieve_claim(self, claim: StorageDriverClaim) -> Payload:
        data = claim.claim_data
        key = data.get("key")
        if not key:
            raise PayloadIntegrityError(f"claim has no 'key' (store {self._dir}): {dict(data)!r}")
        algo = data.get("hash_algorithm", HASH_ALGORITHM)
        if algo != HASH_ALGORITHM:
            raise PayloadIntegrityError(
                f"payload {key}: unsupported hash algorithm {algo!r} "
                f"(store {self._dir} uses sha256)"
            )
        expected = data.get("hash_value")
        if expected and key.rsplit("/", 1)[-1] != expected:
            raise PayloadIntegrityError(
                f"payload {key}: claim hash {expected} does not match its key (store {self._dir})"
            )
        raw = self.get_bytes(key)
        payload = Payload()
        payload.ParseFromString(raw)
        return payload
