"""The data converter of the runtime: pydantic JSON plus external payload storage.

:func:`build_data_converter` returns ``temporalio.contrib.pydantic.pydantic_data_converter`` with
the SDK's (experimental) external payload storage attached, chosen by
:class:`workers.config.Settings`:

=========================  =========================================================================
``AGENT_PAYLOAD_STORE``    effect
=========================  =========================================================================
``local`` (default)        payloads >= ``AGENT_PAYLOAD_THRESHOLD_BYTES`` are written to
                           ``AGENT_PAYLOAD_DIR`` (default ``<AGENT_STATE_DIR>/payloads``) by
                           :class:`activities.storage.LocalStorageDriver`; the history keeps a
                           reference of about 230 bytes.
``s3``                     the SDK's ``S3StorageDriver`` writes them to ``AGENT_S3_BUCKET`` under
                           ``AGENT_S3_PREFIX`` (needs the extra ``s3``:
                           ``pip install 'temporal-agent-runtime[s3]'``; credentials and region
                           from the usual AWS environment, e.g. ``AWS_PROFILE``, ``AWS_REGION``,
                           ``AWS_ENDPOINT_URL_S3`` for MinIO), and the sandbox's files go to the
                           same bucket (:func:`build_file_store`).
``none``                   nothing is stored externally (every payload inline, 2 MiB hard limit).
=========================  =========================================================================

Whatever the store, references already written by the local store stay readable: the local driver
is always registered for reading, so switching ``AGENT_PAYLOAD_STORE`` does not break runs whose
histories already hold local references (as long as the files are still there).

Why the default threshold is 32 KiB (``Settings.payload_threshold_bytes``): the model step's input
is the whole transcript, so inline it grows the history quadratically; the inline bytes before
transcripts cross the threshold ``T`` are about ``T**2 / (2 * g)`` for ``g`` bytes added per turn.
With ``g`` about 1.8 KB (300 B user turns, 1.5 KB replies, docs/temporal-facts.md) that is about
0.3 MB at 32 KiB (1.2 MB at 64 KiB), against about 19 MB at the SDK's default of 256 KiB (past
the 10 MiB history warning) -- after that each model step adds only a reference. Measured by
``make bench`` with 64 KiB: a 1,000-turn run averaged 14 KB of history a turn and its segments
reached 4.2 MB, so the default was lowered to 32 KiB. Below it, on the other hand,
tool outputs (capped at 16,000 characters by default) and most short runs stay inline, so the Web
UI and ``temporal workflow show`` display them without the codec server and no file I/O is paid
on small payloads. Any payload >= 2 MiB (Temporal's hard per-payload limit) is always far above it.
Measured here (60 turns, 1,500-character tool outputs, transcript +1.7 KB a turn): all inline
3.6 MB of history and ~101 KB added by turn 60; 256 KiB the same (never reached); 64 KiB 1.45 MB,
then ~4 KB a turn from turn ~36; 16 KiB 0.32 MB, ~4 KB a turn from turn ~9.

Codec helpers used by :mod:`workers.payloads.codec_server`: :func:`is_reference`,
:func:`resolve_references` (reference -> stored payload) and :func:`store_large_payloads`
(payload >= threshold -> reference).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1.external_storage_pb2 import ExternalStorageReference
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    JSONProtoPayloadConverter,
    PayloadConverter,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverSelectContext,
    StorageDriverStoreContext,
)

from activities.extras import install_hint, installed
from activities.s3_files import S3FileStore
from activities.storage import LocalStorageDriver
from workers.config import Settings, load_settings
from workers.payloads.encryption import codec_from_setting
from workflows.inbound import signal_safe_data_converter as pydantic_data_converter

__all__ = [
    "PayloadStoreConfigError",
    "build_data_converter",
    "build_external_storage",
    "build_file_store",
    "is_reference",
    "reference_of",
    "resolve_references",
    "store_large_payloads",
]

S3_DRIVER_NAME = "aws.s3driver"
"""Name of the S3 driver in references (the SDK's default, shared with the other SDKs)."""

AIOBOTO3_HINT = install_hint("s3") + "  (installs aioboto3 and boto3)"

_REFERENCE_MESSAGE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()
_LEGACY_REFERENCE_ENCODING = b"json/external-storage-reference"
_claim_converter = JSONProtoPayloadConverter()


class PayloadStoreConfigError(ValueError):
    """``AGENT_PAYLOAD_STORE`` and its settings do not make a usable store (message: the fix)."""


# --------------------------------------------------------------------------- building


def build_data_converter(
    settings: Settings | None = None, *, s3_client: S3StorageDriverClient | None = None
) -> DataConverter:
    """The pydantic data converter with external payload storage per ``settings``.

    Args:
        settings: runtime settings (default :func:`workers.config.load_settings`); read:
            ``payload_store``, ``payload_path``, ``payload_threshold_bytes``, ``s3_bucket``,
            ``s3_prefix``.
        s3_client: an ``S3StorageDriverClient`` to use instead of aioboto3 (tests, custom S3
            libraries); only with ``payload_store="s3"``.

    Returns:
        A ``DataConverter``: ``pydantic_data_converter`` plus ``external_storage`` (see the module
        docstring; with ``none`` the local driver is still registered for reading only).

    With ``AGENT_ENCRYPTION_KEYS`` set, payloads are encrypted by
    :class:`workers.payloads.encryption.AesGcmCodec` before they are stored, inline or external.

    Raises:
        PayloadStoreConfigError: ``s3`` without ``AGENT_S3_BUCKET``, or aioboto3 not installed.
        workers.payloads.encryption.EncryptionKeyError: ``AGENT_ENCRYPTION_KEYS`` cannot be used.
    """
    settings = settings or load_settings()
    base = pydantic_data_converter
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init}
    return _DataConverter(
        **{
            **fields,
            "payload_codec": codec_from_setting(settings.encryption_keys),
            "external_storage": build_external_storage(settings, s3_client=s3_client),
        }
    )


@dataclasses.dataclass(frozen=True)
class _DataConverter(DataConverter):
    """A ``DataConverter`` whose copies share one payload converter per payload converter class.

    The SDK copies the data converter for each conversion with a serialization or storage context
    (``with_context``, ``_with_store_context``: about 40 copies a 5-turn run), and each copy's
    ``__post_init__`` built a new payload converter -- pydantic's builds a ``SchemaSerializer`` and
    an empty ``TypeAdapter`` cache, ~5 us -- only for ``with_context`` to replace it with the
    original's. The payload converters here keep no state per copy (``with_context`` itself hands
    the original's instance to the copy), so one per class serves every copy, and its
    ``TypeAdapter`` cache is kept (#36, worker CPU).
    """

    def _new_payload_converter(self) -> PayloadConverter:
        return _payload_converter_of(self.payload_converter_class)


@functools.cache
def _payload_converter_of(cls: type[PayloadConverter]) -> PayloadConverter:
    """The payload converter ``DataConverter`` builds from ``cls`` (SDK transfer types wrapped)."""
    return DataConverter(payload_converter_class=cls).payload_converter


def build_external_storage(
    settings: Settings, *, s3_client: S3StorageDriverClient | None = None
) -> ExternalStorage:
    """The ``ExternalStorage`` of :func:`build_data_converter` (same arguments and errors).

    Drivers: the local driver (always, for reading) and, with ``s3``, the S3 driver. The selector
    picks the configured store's driver for payloads >= the threshold, or None (inline) with
    ``none``.
    """
    local = LocalStorageDriver(settings.payload_path)
    drivers: list[StorageDriver] = [local]
    writer: StorageDriver | None
    if settings.payload_store == "local":
        writer = local
    elif settings.payload_store == "s3":
        writer = _build_s3_driver(settings, s3_client)
        drivers.append(writer)
    elif settings.payload_store == "none":
        writer = None
    else:  # pragma: no cover - Settings validates the literal
        raise PayloadStoreConfigError(
            f"AGENT_PAYLOAD_STORE must be local, s3 or none, got {settings.payload_store!r}"
        )

    def select(_ctx: StorageDriverSelectContext, _payload: Payload) -> StorageDriver | None:
        return writer

    return ExternalStorage(
        drivers=drivers,
        driver_selector=select,
        payload_size_threshold=settings.payload_threshold_bytes,
    )


def build_file_store(settings: Settings) -> LocalStorageDriver | S3FileStore:
    """Where the sandbox's files go (``put_bytes``/``get_bytes``, activities/tools/sandbox_tools.py).

    With ``AGENT_PAYLOAD_STORE=s3`` the bucket of the payloads (``AGENT_S3_BUCKET``, keys under
    ``<AGENT_S3_PREFIX>sandbox-files/``): every worker that shares the bucket reads a run's files,
    whichever host wrote them. Otherwise the local payload folder (``AGENT_PAYLOAD_DIR``): one
    machine's disk.

    Raises:
        PayloadStoreConfigError: ``s3`` without ``AGENT_S3_BUCKET``, or boto3 not installed.
    """
    if settings.payload_store != "s3":
        return LocalStorageDriver(settings.payload_path)
    if not settings.s3_bucket:
        raise PayloadStoreConfigError(
            "AGENT_PAYLOAD_STORE=s3 needs AGENT_S3_BUCKET (the bucket payloads and the sandbox's "
            "files are written to); or set AGENT_PAYLOAD_STORE=local"
        )
    if not installed("boto3"):
        raise PayloadStoreConfigError(
            f"AGENT_PAYLOAD_STORE=s3 keeps the sandbox's files in S3 with boto3, which is not "
            f"installed: {AIOBOTO3_HINT}; or set AGENT_PAYLOAD_STORE=local"
        )
    return S3FileStore(settings.s3_bucket, settings.s3_prefix)


def _build_s3_driver(settings: Settings, s3_client: S3StorageDriverClient | None) -> StorageDriver:
    if not settings.s3_bucket:
        raise PayloadStoreConfigError(
            "AGENT_PAYLOAD_STORE=s3 needs AGENT_S3_BUCKET (the bucket payloads are written to); "
            "or set AGENT_PAYLOAD_STORE=local"
        )
    if s3_client is None:
        try:  # the SDK's aioboto3 adapter imports aioboto3, botocore and types_aiobotocore_s3
            import aioboto3  # noqa: F401  # optional: only with AGENT_PAYLOAD_STORE=s3
            import temporalio.contrib.aws.s3driver.aioboto3  # noqa: F401
        except ImportError as e:
            raise PayloadStoreConfigError(
                f"AGENT_PAYLOAD_STORE=s3 uses the Temporal SDK's S3 driver, which needs aioboto3 "
                f"({e}). Install it with: {AIOBOTO3_HINT}; or set AGENT_PAYLOAD_STORE=local"
            ) from None
        s3_client = _LazyAioboto3Client()
    if not isinstance(s3_client, S3StorageDriverClient):
        raise TypeError(
            f"s3_client must be an S3StorageDriverClient, got {type(s3_client).__name__}"
        )
    prefix = settings.s3_prefix.lstrip("/")
    return _PrefixedS3Driver(
        client=_PrefixedS3Client(s3_client, prefix),
        bucket=settings.s3_bucket,
        driver_name=S3_DRIVER_NAME,
        prefix=prefix,
    )


class _PrefixedS3Client(S3StorageDriverClient):
    """Writes under ``prefix``; reads the full key that the claim holds."""

    def __init__(self, inner: S3StorageDriverClient, prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await self._inner.put_object(bucket=bucket, key=self._prefix + key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        return await self._inner.object_exists(bucket=bucket, key=self._prefix + key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        return await self._inner.get_object(bucket=bucket, key=key)

    def describe(self) -> Mapping[str, str]:
        return self._inner.describe()


class _PrefixedS3Driver(S3StorageDriver):
    """The SDK's S3 driver, with ``AGENT_S3_PREFIX`` in front of its object keys.

    Claims hold the full key (prefix + the SDK's ``v0/ns/.../d/sha256/<hex>``), so references
    stay readable if the prefix setting changes later.
    """

    def __init__(self, *, prefix: str, **kw: Any) -> None:
        super().__init__(**kw)
        self._prefix = prefix

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        claims = await super().store(context, payloads)
        if not self._prefix:
            return claims
        return [
            StorageDriverClaim(
                claim_data={**c.claim_data, "key": self._prefix + c.claim_data["key"]}
            )
            for c in claims
        ]


class _LazyAioboto3Client(S3StorageDriverClient):
    """An aioboto3 S3 client opened on first use, one per event loop, left open until exit.

    aioboto3 clients are async context managers while the converter is built synchronously, so
    the client is entered inside the loop that first stores or retrieves. Credentials and region
    come from the standard AWS configuration (environment, ``~/.aws``).
    """

    def __init__(self) -> None:
        self._by_loop: dict[int, S3StorageDriverClient] = {}

    async def _client(self) -> S3StorageDriverClient:
        import aioboto3  # optional: only with AGENT_PAYLOAD_STORE=s3
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client

        loop_id = id(asyncio.get_running_loop())
        found = self._by_loop.get(loop_id)
        if found is None:
            raw = await aioboto3.Session().client("s3").__aenter__()
            found = self._by_loop.setdefault(loop_id, new_aioboto3_client(raw))
        return found

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await (await self._client()).put_object(bucket=bucket, key=key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        return await (await self._client()).object_exists(bucket=bucket, key=key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        return await (await self._client()).get_object(bucket=bucket, key=key)


# --------------------------------------------------------------------------- codec helpers


def reference_of(payload: Payload) -> ExternalStorageReference | None:
    """The external-storage reference a payload holds, or None for an ordinary payload.

    Understands the SDK's reference (``encoding: json/protobuf``, ``messageType:
    temporal.api.sdk.v1.ExternalStorageReference``) and its legacy form
    (``encoding: json/external-storage-reference``).
    """
    encoding = payload.metadata.get("encoding", b"")
    if (
        encoding == b"json/protobuf"
        and payload.metadata.get("messageType") == _REFERENCE_MESSAGE_TYPE
    ):
        ref = _claim_converter.from_payload(payload, ExternalStorageReference)
        return ref if isinstance(ref, ExternalStorageReference) else None
    if encoding == _LEGACY_REFERENCE_ENCODING:
        try:
            raw = json.loads(payload.data)
            return ExternalStorageReference(
                driver_name=raw["driver_name"], claim_data=dict(raw["driver_claim"]["claim_data"])
            )
        except (ValueError, KeyError, TypeError):
            return None
    return None


def is_reference(payload: Payload) -> bool:
    """True when ``payload`` is an external-storage reference (see :func:`reference_of`)."""
    return reference_of(payload) is not None


async def resolve_references(
    storage: ExternalStorage, payloads: Sequence[Payload], *, return_exceptions: bool = False
) -> list[Payload | BaseException]:
    """Replace every reference in ``payloads`` by the payload it points to; others pass through.

    Args:
        storage: where the drivers are looked up by the reference's driver name.
        payloads: payloads as found in a history.
        return_exceptions: put the exception in place of a payload that cannot be resolved
            instead of raising it.

    Returns:
        One item per input payload, in order.

    Raises:
        PayloadStoreConfigError: unknown driver name (not with ``return_exceptions``).
        activities.storage.PayloadStoreError: the driver could not return it (ditto).
    """
    drivers = {d.name(): d for d in storage.drivers}

    async def one(p: Payload) -> Payload:
        ref = reference_of(p)
        if ref is None:
            return p
        driver = drivers.get(ref.driver_name)
        if driver is None:
            raise PayloadStoreConfigError(
                f"payload stored by driver {ref.driver_name!r}, which is not configured here "
                f"(configured: {', '.join(sorted(drivers))}); check AGENT_PAYLOAD_STORE"
            )
        [out] = await driver.retrieve(
            StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data=dict(ref.claim_data))]
        )
        return out

    return list(
        await asyncio.gather(*(one(p) for p in payloads), return_exceptions=return_exceptions)
    )


async def store_large_payloads(
    storage: ExternalStorage, payloads: Sequence[Payload]
) -> list[Payload]:
    """Replace every payload of at least ``storage.payload_size_threshold`` bytes by a reference.

    The same transformation the SDK applies on the way to the server (references are JSON
    ``ExternalStorageReference`` payloads with ``external_payloads[0].size_bytes`` set), using the
    driver ``storage.driver_selector`` picks (the first driver if none). References and smaller
    payloads pass through.
    """
    ctx = StorageDriverStoreContext()
    out: list[Payload] = []
    for p in payloads:
        if p.ByteSize() < storage.payload_size_threshold or is_reference(p):
            out.append(p)
            continue
        selector = storage.driver_selector
        driver = selector(StorageDriverSelectContext(), p) if selector else storage.drivers[0]
        if driver is None:
            out.append(p)
            continue
        [claim] = await driver.store(ctx, [p])
        ref = _claim_converter.to_payload(
            ExternalStorageReference(driver_name=driver.name(), claim_data=dict(claim.claim_data))
        )
        assert ref is not None
        ref.external_payloads.add().size_bytes = p.ByteSize()
        out.append(ref)
    return out
