"""Callback tokens, the callback key, the route's limits, client tool entries (issue #38)."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from activities.callbacks import (
    CallbackClaims,
    CallbackRefused,
    CallbackSigner,
    sign_token,
    verify_token,
)
from activities.spec_settings import ToolEntry
from workers import callback_keys
from workers.config import Settings
from workers.console.callbacks import CallbackBody, CallbackState, RateLimiter

KEY = b"k" * 32
CLAIMS = CallbackClaims(
    task_token=base64.b64encode(b"\x00\x01task").decode(),
    run_id="run-1",
    call_id="call_1",
    name="t",
    expires_at=1000.0,
)


def test_a_token_verifies_with_its_key_until_it_expires():
    token = sign_token(KEY, CLAIMS)
    assert verify_token(KEY, token, 999.9) == CLAIMS
    assert CLAIMS.token_bytes() == b"\x00\x01task"
    with pytest.raises(CallbackRefused) as e:
        verify_token(KEY, token, 1000.0)
    assert e.value.status == 410 and "expired" in e.value.reason


@pytest.mark.parametrize(
    "make",
    [
        lambda: sign_token(b"x" * 32, CLAIMS),  # another key
        lambda: (
            sign_token(KEY, CLAIMS).split(".")[0]
            + "."
            + sign_token(KEY, CLAIMS.model_copy(update={"call_id": "c2"})).split(".")[1]
        ),
        lambda: (
            sign_token(KEY, CLAIMS.model_copy(update={"expires_at": 9e9})).split(".")[0]
            + "."
            + sign_token(KEY, CLAIMS).split(".")[1]
        ),  # a later expiry under the old MAC
    ],
)
def test_a_forged_token_is_403(make):  # noqa: ANN001
    with pytest.raises(CallbackRefused) as e:
        verify_token(KEY, make(), 0)
    assert e.value.status == 403


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "!!.!!", "x" * 5000 + ".y"])
def test_a_malformed_token_is_400(token: str):
    with pytest.raises(CallbackRefused) as e:
        verify_token(KEY, token, 0)
    assert e.value.status in (400, 403)


def test_a_signed_payload_that_is_no_claims_is_400():
    import hashlib
    import hmac

    payload = base64.urlsafe_b64encode(b'{"x": 1}').rstrip(b"=").decode()
    mac = hmac.new(KEY, payload.encode(), hashlib.sha256).digest()
    token = f"{payload}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    with pytest.raises(CallbackRefused) as e:
        verify_token(KEY, token, 0)
    assert e.value.status == 400


def test_the_signer_reads_its_key_once_and_refuses_a_short_one():
    reads: list[int] = []

    def read() -> bytes:
        reads.append(1)
        return KEY

    signer = CallbackSigner(read, "https://a.example/")
    assert reads == []
    url = signer.url(CLAIMS)
    signer.url(CLAIMS)
    assert reads == [1]
    assert url.startswith("https://a.example/callbacks/")
    assert verify_token(KEY, url.rsplit("/", 1)[1], 0) == CLAIMS
    with pytest.raises(ValueError, match="at least 32"):
        CallbackSigner(b"short", "http://x").url(CLAIMS)


def test_the_key_file_is_created_once_private_and_the_setting_wins(tmp_path: Path):
    s = Settings(state_dir=str(tmp_path))
    key = callback_keys.load_key(s)
    path = callback_keys.key_file(tmp_path)
    assert len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert callback_keys.load_key(s) == key
    given = base64.b64encode(b"g" * 40).decode()
    assert callback_keys.load_key(Settings(state_dir=str(tmp_path), callback_key=given)) == (
        b"g" * 40
    )
    with pytest.raises(ValueError, match="at least 32"):
        callback_keys.load_key(
            Settings(state_dir=str(tmp_path), callback_key=base64.b64encode(b"s").decode())
        )
    with pytest.raises(ValueError, match="not base64"):
        callback_keys.load_key(Settings(state_dir=str(tmp_path), callback_key="***"))


def test_the_rate_limiter_allows_a_burst_then_the_rate():
    lim = RateLimiter(rate=2.0, burst=3)
    assert [lim.wait_seconds("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert lim.wait_seconds("a", 0.0) == pytest.approx(0.5)
    assert lim.wait_seconds("b", 0.0) == 0.0  # per address
    assert lim.wait_seconds("a", 0.5) == 0.0  # one token back after 1/rate seconds


def test_a_token_is_used_once_per_serve():
    st = CallbackState(CallbackSigner(KEY, "http://x"))
    assert st.use("d1") and not st.use("d1") and st.use("d2")


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        ({"result": None}, True),
        ({"result": {"a": 1}}, True),
        ({"error": "why"}, True),
        ({}, False),
        ({"result": 1, "error": "x"}, False),
        ({"error": None}, False),
        ({"error": 3}, False),
        ({"result": 1, "extra": 2}, False),
    ],
)
def test_a_callback_body_is_one_of_result_and_error(body: dict[str, object], ok: bool):
    if ok:
        CallbackBody.model_validate(body)
    else:
        with pytest.raises(ValidationError):
            CallbackBody.model_validate(body)


def test_client_tool_entries_take_their_fields_and_others_do_not():
    e = ToolEntry(name="pick", client=True, description="d", parameters={"type": "object"})
    assert e.client and e.parameters == {"type": "object"}
    with pytest.raises(ValidationError, match="only for client tools"):
        ToolEntry(name="read_file", description="d")
    with pytest.raises(ValidationError, match="no task_queue or local"):
        ToolEntry(name="pick", client=True, task_queue="q")
