"""workers/client.py: a server that does not answer is not a server without search attributes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from workers import client as rc


class _Operator:
    def __init__(self, status: RPCStatusCode) -> None:
        self.status = status

    async def list_search_attributes(self, req: Any, timeout: Any = None) -> Any:
        raise RPCError("no", self.status, b"")


class _Client:
    namespace = "default"

    def __init__(self, status: RPCStatusCode) -> None:
        self.operator_service = _Operator(status)


@pytest.mark.parametrize("status", [RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED])
def test_an_unanswered_listing_raises_instead_of_dropping_the_attributes(status):
    with pytest.raises(RPCError):
        asyncio.run(rc.search_attributes_registered(_Client(status)))  # pyright: ignore[reportArgumentType] - a stand-in with the one client method used


def test_a_refused_listing_means_no_attributes():
    refused = _Client(RPCStatusCode.PERMISSION_DENIED)
    assert asyncio.run(rc.search_attributes_registered(refused)) is False  # pyright: ignore[reportArgumentType] - a stand-in with the one client method used


class _Listing:
    """An operator service that answers from ``names`` and counts its calls."""

    def __init__(self, names: list[str]) -> None:
        self.names, self.calls = names, 0

    async def list_search_attributes(self, req: Any, timeout: Any = None) -> Any:
        self.calls += 1
        return type("R", (), {"custom_attributes": dict.fromkeys(self.names, 1)})()


class _ListingClient:
    namespace = "default"

    def __init__(self, names: list[str]) -> None:
        self.operator_service = _Listing(names)


def test_a_registered_answer_is_kept_and_a_missing_one_is_asked_again():
    from activities.contracts import SEARCH_ATTRIBUTES

    ok = _ListingClient(list(SEARCH_ATTRIBUTES))
    for _ in range(3):
        assert asyncio.run(rc.search_attributes_registered(ok)) is True  # pyright: ignore[reportArgumentType] - a stand-in with the one client method used
    assert ok.operator_service.calls == 1  # a burst of starts asks the server once

    missing = _ListingClient([])
    for _ in range(2):
        assert asyncio.run(rc.search_attributes_registered(missing)) is False  # pyright: ignore[reportArgumentType] - a stand-in with the one client method used
    assert missing.operator_service.calls == 2  # registering them later is seen at once
