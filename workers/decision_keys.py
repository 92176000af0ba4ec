"""The local decision-signing key: an Ed25519 private key in ``<AGENT_STATE_DIR>/decision-key``.

The run console and ``agentctl`` sign every ``decide`` with it when it exists
(:func:`local_signer`); ``agentctl decision-key`` creates it (mode 0600) and prints the public key
to list in a spec's ``policy.decision_keys`` (see activities/signing.py and docs/security.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

# cryptography (about 30 ms to import) is loaded where a key is made or read: a decision with no
# local key (``agentctl approve`` without ``agentctl decision-key``) goes unsigned without it.


def key_file(state_dir: str | Path) -> Path:
    """``<state_dir>/decision-key`` (PEM, PKCS#8, mode 0600)."""
    return Path(state_dir).expanduser() / "decision-key"


def load_or_create(state_dir: str | Path) -> Ed25519PrivateKey:
    """The local signing key, created on first use.

    Raises:
        OSError: the state folder cannot be written.
        ValueError: the file holds no Ed25519 private key.
    """
    path = key_file(state_dir)
    if path.exists():
        return _load(path)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    path.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return key


def _load(path: Path) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return key


def local_signer(state_dir: str | Path) -> Ed25519PrivateKey | None:
    """The local signing key if one was created, else None (decisions go unsigned)."""
    path = key_file(state_dir)
    return _load(path) if path.exists() else None
