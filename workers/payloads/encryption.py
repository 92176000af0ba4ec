"""Payloads encrypted at rest: an AES-256-GCM payload codec with key ids, so keys rotate.

Every payload the worker, clients, ``agentctl`` and the replayer write to Temporal (start input,
activity inputs and results, signals, updates, queries, the run result) goes through
:class:`AesGcmCodec` when ``AGENT_ENCRYPTION_KEYS`` is set. The Temporal server, its database,
the Web UI without the codec server, and the external payload store (the SDK stores payloads
*after* the codec ran, so the store holds ciphertext) see only ciphertext. Search attributes and
memo-less metadata (workflow type, ids, timestamps, event types, activity names and summaries the
SDK keeps in user metadata, failure messages) stay plaintext: see docs/security.md.

Encrypted payload: metadata ``encoding: binary/encrypted``, ``encryption-key-id: <id>``; data
``nonce (12 bytes) || AES-GCM(ciphertext || tag)`` of the serialized original ``Payload``, with the
key id as associated data. Decoding passes payloads that are not encrypted through unchanged, so
histories recorded before encryption was turned on keep replaying.

Keys: ``AGENT_ENCRYPTION_KEYS`` is a path to a file or the value itself; one key a line,
``key_id:base64(32 bytes)``; ``#`` comments and blank lines ignored. The first key encrypts, every
key decrypts: rotate by putting a new key first and keeping the old ones until no history needs
them. Keys never come from an agent spec. Sources: Temporal's encryption sample
(samples-python ``encryption/codec.py``: AES-GCM codec, ``encryption-key-id`` metadata) and its
codec-server guidance; AES-GCM from the ``cryptography`` package.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12


class EncryptionKeyError(ValueError):
    """``AGENT_ENCRYPTION_KEYS`` cannot be used (the message says which line and why)."""


class DecryptionError(ValueError):
    """A payload could not be decrypted: unknown key id or tampered ciphertext."""


def parse_keys(text: str) -> list[tuple[str, bytes]]:
    """``key_id:base64key`` lines -> ``[(key_id, 32-byte key), ...]`` in order (first encrypts).

    Raises:
        EncryptionKeyError: no key, a line without ``:``, a key that is not base64 of 16, 24 or
            32 bytes, or a key id used twice.
    """
    keys: list[tuple[str, bytes]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        kid, sep, b64 = line.partition(":")
        if not sep or not kid.strip():
            raise EncryptionKeyError(f"AGENT_ENCRYPTION_KEYS line {n}: expected key_id:base64key")
        try:
            key = base64.b64decode(b64.strip(), validate=True)
        except ValueError:
            raise EncryptionKeyError(f"AGENT_ENCRYPTION_KEYS line {n}: key is not base64") from None
        if len(key) not in (16, 24, 32):
            raise EncryptionKeyError(
                f"AGENT_ENCRYPTION_KEYS line {n}: an AES key is 16, 24 or 32 bytes, got {len(key)}"
            )
        if any(k == kid.strip() for k, _ in keys):
            raise EncryptionKeyError(f"AGENT_ENCRYPTION_KEYS line {n}: key id {kid!r} repeated")
        keys.append((kid.strip(), key))
    if not keys:
        raise EncryptionKeyError("AGENT_ENCRYPTION_KEYS holds no key")
    return keys


def load_keys(value: str) -> list[tuple[str, bytes]]:
    """Keys from ``AGENT_ENCRYPTION_KEYS``: a file path (read) or the lines themselves.

    A one-line value that names an existing file is read as that file; one that looks like a path
    (:func:`_looks_like_path`) but names no file is an error saying so, not a malformed key.

    Raises:
        EncryptionKeyError: as :func:`parse_keys`, or a missing or unreadable file.
    """
    candidate = Path(value.strip()).expanduser()
    if "\n" not in value and candidate.is_file():
        try:
            return parse_keys(candidate.read_text())
        except OSError as e:
            raise EncryptionKeyError(f"AGENT_ENCRYPTION_KEYS file {candidate}: {e}") from None
    one_line = "\n" not in value.strip()
    if one_line and _looks_like_path(value.strip()):
        problem = "is not a file" if candidate.exists() else "does not exist"
        raise EncryptionKeyError(
            f"AGENT_ENCRYPTION_KEYS names the key file {candidate.absolute()}, which {problem} "
            "(the setting is a key file's path or key_id:base64key lines)"
        )
    try:
        return parse_keys(value)
    except EncryptionKeyError as e:
        if one_line and ":" not in value:
            raise EncryptionKeyError(f"{e} (and no file {value.strip()!r} exists)") from None
        raise


def _looks_like_path(value: str) -> bool:
    """A path, not a key line: starts with ``/``, ``~`` or ``.``, or has a ``/`` and no ``:``.

    A key line's base64 may hold ``/`` but always has the ``:`` after the key id.
    """
    return value.startswith(("/", "~", ".")) or ("/" in value and ":" not in value)


def new_key_line(key_id: str = "k1") -> str:
    """A fresh ``key_id:base64key`` line (32 random bytes from ``os.urandom``)."""
    return f"{key_id}:{base64.b64encode(os.urandom(32)).decode()}"


class AesGcmCodec(PayloadCodec):
    """AES-GCM payload codec; ``keys`` as :func:`parse_keys` returns (the first encrypts)."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise EncryptionKeyError("no encryption key")
        # here, not at the top: a client without encryption keys never loads cryptography
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._by_id = {kid: AESGCM(key) for kid, key in keys}
        self._current = keys[0][0]

    @property
    def key_id(self) -> str:
        """The id of the key new payloads are encrypted with."""
        return self._current

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt every payload with the current key."""
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt encrypted payloads; others pass through unchanged.

        Raises:
            DecryptionError: a key id this codec does not hold, or a tampered payload.
        """
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        """One payload, encrypted (see the module docstring for the layout)."""
        kid = self._current
        nonce = os.urandom(NONCE_BYTES)
        data = self._by_id[kid].encrypt(nonce, payload.SerializeToString(), kid.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: kid.encode()}, data=nonce + data)

    def decrypt(self, payload: Payload) -> Payload:
        """One payload, decrypted if it is encrypted (else returned as is)."""
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        kid = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        aes = self._by_id.get(kid)
        if aes is None:
            raise DecryptionError(f"payload encrypted with key {kid!r}, which is not configured")
        from cryptography.exceptions import InvalidTag

        try:
            raw = aes.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], kid.encode())
        except InvalidTag:
            raise DecryptionError(f"payload under key {kid!r} failed authentication") from None
        out = Payload()
        out.ParseFromString(raw)
        return out


def codec_from_setting(value: str | None) -> AesGcmCodec | None:
    """The codec for ``AGENT_ENCRYPTION_KEYS`` (None when unset, empty or ``off``).

    Raises:
        EncryptionKeyError: the setting cannot be used.
    """
    if not value or value.strip().lower() in ("", "off"):
        return None
    return AesGcmCodec(load_keys(value))


def load_or_create_key_file(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """The key file at ``path``, created with one fresh key (mode 0600) if missing.

    Returns:
        ``(path, created)``.

    Raises:
        OSError: the folder cannot be written.
        EncryptionKeyError: the file exists but holds no usable key.
    """
    p = Path(path).expanduser()
    if p.is_file():
        load_keys(str(p))
        return p, False
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(
            "# payload encryption keys (workers/payloads/encryption.py): the first encrypts, "
            "all decrypt\n"
        )
        f.write(new_key_line(f"demo-{os.urandom(3).hex()}") + "\n")
    return p, True
