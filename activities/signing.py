"""Signed decisions: Ed25519 signatures over an approval, checked against keys pinned at start.

A spec with ``policy.require_signed_decisions: true`` accepts an ``approve``/``reject`` signal or a
``decide`` update only when its ``signature`` verifies against one of ``policy.decision_keys``
(base64 of raw 32-byte Ed25519 public keys), which were pinned with the spec when the run
started. What is signed (:func:`decision_message`) is the canonical JSON (sorted keys, no spaces)
of ``{"run_id", "tool_call_id", "decision", "arguments_sha256", "principal_id", "signed_at"}``:
the workflow id, the call, ``approve``/``reject``, the SHA-256 of the canonical JSON of the
arguments the decision carries (``null`` when none), who decides and when (ISO-8601, as the
signer wrote it). A decision is taken once per call, so a signature cannot be replayed on another
call, run or principal, nor with edited arguments.

Verification is a pure function of the payload and the pinned keys (no clock, no I/O), so it is
deterministic in the workflow and on replay. Ed25519 from the ``cryptography`` package (RFC 8032).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

# ``cryptography`` is imported where a key is used, not with the spec's models that name this
# module (workflows/models.py): a command such as ``agentctl status`` never needs it. In the
# workflow sandbox it is passed through (workers/sandbox.py).
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def decision_message(
    run_id: str,
    tool_call_id: str,
    decision: str,
    arguments: dict[str, Any] | None,
    principal_id: str,
    signed_at: str,
    roles: Sequence[str] = (),
) -> bytes:
    """The bytes a decision's signature covers (see the module docstring).

    ``roles`` (the decider's roles from their identity claims) are covered as a sorted list under
    ``"roles"`` when there are any; a decision without roles signs the same bytes as before.
    """
    fields: dict[str, Any] = {
        "run_id": run_id,
        "tool_call_id": tool_call_id,
        "decision": decision,
        "arguments_sha256": hashlib.sha256(_canonical(arguments)).hexdigest(),
        "principal_id": principal_id,
        "signed_at": signed_at,
    }
    if roles:
        fields["roles"] = sorted(set(roles))
    return _canonical(fields)


def public_key_text(key: Ed25519PrivateKey) -> str:
    """The base64 raw public key of ``key``: what goes into ``policy.decision_keys``."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def sign_decision(key: Ed25519PrivateKey, message: bytes) -> str:
    """Base64 Ed25519 signature of ``message`` (from :func:`decision_message`)."""
    return base64.b64encode(key.sign(message)).decode()


def parse_public_key(text: str) -> Ed25519PublicKey:
    """An Ed25519 public key from base64 of its 32 raw bytes.

    Raises:
        ValueError: not base64, or not 32 bytes.
    """
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except ValueError:
        raise ValueError(f"decision key {text[:16]!r}... is not base64") from None
    if len(raw) != 32:
        raise ValueError(f"a decision key is 32 bytes (Ed25519), got {len(raw)}")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(raw)


def signature_problem(
    keys: list[str],
    message: bytes,
    signature: str | None,
) -> str | None:
    """Why ``signature`` does not sign ``message`` under any of ``keys``, or None when it does."""
    from cryptography.exceptions import InvalidSignature

    if not signature:
        return "this run requires signed decisions (policy.require_signed_decisions): no signature"
    try:
        sig = base64.b64decode(signature, validate=True)
    except ValueError:
        return "the decision's signature is not base64"
    for text in keys:
        try:
            parse_public_key(text).verify(sig, message)
            return None
        except (InvalidSignature, ValueError):
            continue
    return "the decision's signature does not verify against the run's pinned decision keys"
