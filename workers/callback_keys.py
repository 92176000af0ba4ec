"""The callback key: the HMAC key of the tokens in callback URLs (activities/callbacks.py).

Workers sign with it, ``agentctl serve`` checks with it, so both need the same key:
``AGENT_CALLBACK_KEY`` (base64 of at least 32 bytes) where they run on different hosts, else
``<AGENT_STATE_DIR>/callback-key`` (32 random bytes, mode 0600), created by the first process
that needs it.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path

from activities.callbacks import MIN_KEY_BYTES, CallbackSigner
from workers.config import Settings

__all__ = ["key_file", "load_key", "signer"]


def key_file(state_dir: str | Path) -> Path:
    """``<state_dir>/callback-key`` (raw bytes, mode 0600)."""
    return Path(state_dir).expanduser() / "callback-key"


def load_key(settings: Settings) -> bytes:
    """The callback key of ``settings`` (``AGENT_CALLBACK_KEY``, else the state folder's file).

    Raises:
        ValueError: ``AGENT_CALLBACK_KEY`` is not base64 of at least 32 bytes, or the file
            holds fewer.
        OSError: the state folder cannot be written.
    """
    if settings.callback_key:
        try:
            key = base64.b64decode(settings.callback_key, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("AGENT_CALLBACK_KEY is not base64") from None
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"AGENT_CALLBACK_KEY has {len(key)} bytes; at least {MIN_KEY_BYTES}")
        return key
    path = key_file(settings.state_dir)
    if not path.exists():
        _create(path)
    key = path.read_bytes()
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{path} holds {len(key)} bytes; at least {MIN_KEY_BYTES}")
    return key


def _create(path: Path) -> None:
    """Write a new key to ``path`` whole: a temporary file linked in.

    A worker and ``serve`` starting together never read half a key; the first one's key wins.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(MIN_KEY_BYTES))
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process made it first
            pass
    finally:
        tmp.unlink(missing_ok=True)


def signer(settings: Settings) -> CallbackSigner:
    """The signer of a worker's callback URLs (``AGENT_CALLBACK_URL`` and the key above).

    The key is read (or created) when the first URL is signed.
    """
    return CallbackSigner(lambda: load_key(settings), settings.callback_url)
