"""The sandbox's files in S3 (or any S3-compatible store): the ``put_bytes``/``get_bytes`` store.

A sandboxed call's output files are kept for the run's later calls in a store that hands back a
key (:mod:`activities.tools.sandbox_tools`); the run records the keys, so a later call finds the
files on whichever worker runs it. :class:`activities.storage.LocalStorageDriver` is that store on
one machine; this is the same interface over S3, for workers on many hosts
(``AGENT_PAYLOAD_STORE=s3``: the payloads go to the same bucket through the SDK's S3 driver).

Keys::

    <prefix>sandbox-files/sha256/<first 2 hex digits>/<64 hex digits>

content-addressed like the local store's (the lower-case SHA-256 of the bytes stored, which are a
serialized ``Payload``, encrypted when the worker has ``AGENT_ENCRYPTION_KEYS``): a call retried
on another worker writes the same object again, nothing dangles, and :meth:`S3FileStore.get_bytes`
refuses an object whose content does not hash to its key. The key a call returns holds the prefix,
so the runs' keys stay readable when ``AGENT_S3_PREFIX`` changes later.

The S3 client is boto3's (the ``s3`` extra), made on first use; the bucket, credentials, region
and endpoint come from the usual AWS configuration (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``,
``AWS_REGION``, ``AWS_ENDPOINT_URL_S3`` for MinIO, moto or another S3-compatible server). The
calls are synchronous: the sandbox tools run in the activity's thread.
"""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any

from activities.extras import missing_extra
from activities.storage import (
    PayloadIntegrityError,
    PayloadNotFoundError,
    PayloadStoreError,
    payload_key,
)

__all__ = ["FILES_FOLDER", "S3FileStore"]

FILES_FOLDER = "sandbox-files/"
"""Where the files go under the bucket's prefix (payloads are under the SDK driver's ``v0/``)."""

_KEY_RE = re.compile(r"^(?:[^\x00]*/)?sha256/([0-9a-f]{2})/([0-9a-f]{64})$")
_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3FileStore:
    """Files as S3 objects, content-addressed: ``put_bytes(data) -> key``, ``get_bytes(key)``.

    Args:
        bucket: the bucket (it must exist; the worker's credentials may put and get objects).
        prefix: put in front of every key this store writes (``AGENT_S3_PREFIX``, e.g.
            ``agent-runtime/``; default none).
        client: a boto3 S3 client to use instead of one made from the AWS configuration (tests).
        max_size: largest object stored, bytes (default 512 MiB, as the local store).

    Raises (from the methods):
        activities.extras.MissingExtraError: boto3 is not installed (extra ``s3``).
        PayloadNotFoundError: no object under the key (message: bucket and key).
        PayloadIntegrityError: a malformed key, or an object that does not hash to its key.
        PayloadStoreError: S3 refused or could not be reached (message: bucket, key, the error);
            the tool raising it is retried by Temporal.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        max_size: int = 512 * 1024 * 1024,
    ) -> None:
        if not bucket:
            raise ValueError("bucket is empty")
        self.bucket = bucket
        self.prefix = prefix.lstrip("/")
        self._client: Any = client
        self._lock = threading.Lock()
        self._max = max_size

    def _s3(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    import boto3  # pyright: ignore[reportMissingTypeStubs] - boto3 ships no types
                except ModuleNotFoundError as e:  # the optional extra `s3`
                    raise missing_extra("s3", "AGENT_PAYLOAD_STORE=s3", e) from e
                # a session per store: boto3's default session is not thread-safe; clients are
                session: Any = boto3.Session()
                self._client = session.client("s3")
            client: Any = self._client
            return client

    def key_of(self, data: bytes) -> str:
        """The key ``data`` is stored under: ``<prefix>sandbox-files/sha256/<2 hex>/<64 hex>``."""
        return f"{self.prefix}{FILES_FOLDER}{payload_key(data)}"

    def put_bytes(self, data: bytes) -> str:
        """Store ``data`` (idempotent: the same bytes, the same key); returns its key."""
        if len(data) > self._max:
            raise PayloadStoreError(
                f"a file of {len(data)} bytes exceeds the S3 file store's limit of {self._max}"
            )
        key = self.key_of(data)
        try:
            self._s3().put_object(Bucket=self.bucket, Key=key, Body=data)
        except Exception as e:  # noqa: BLE001 - botocore's errors: retried by Temporal
            if isinstance(e, PayloadStoreError | ImportError):
                raise
            raise PayloadStoreError(f"cannot put s3://{self.bucket}/{key}: {e}") from e
        return key

    def get_bytes(self, key: str) -> bytes:
        """The verified bytes stored under ``key`` (a key :meth:`put_bytes` returned)."""
        m = _KEY_RE.match(key)
        if m is None or not m.group(2).startswith(m.group(1)):
            raise PayloadIntegrityError(
                f"malformed file key {key!r} (expected '[prefix]sha256/<2 hex>/<64 hex>') "
                f"in bucket {self.bucket}"
            )
        try:
            data = bytes(self._s3().get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ImportError:
            raise
        except Exception as e:  # noqa: BLE001 - botocore's ClientError and connection errors
            code = str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise PayloadNotFoundError(
                    f"file {key} not found in s3://{self.bucket} (written by a worker using "
                    "another bucket? check AGENT_S3_BUCKET and AWS_ENDPOINT_URL_S3 of every worker)"
                ) from None
            raise PayloadStoreError(f"cannot get s3://{self.bucket}/{key}: {e}") from e
        actual = hashlib.sha256(data).hexdigest()
        if actual != m.group(2):
            raise PayloadIntegrityError(
                f"file {key} in s3://{self.bucket} is corrupt: its content hashes to {actual}"
            )
        return data
