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

    async def list_search_attributes(self, req: Any) -> Any:
        raise RPCError("no", self.status, b"")


class _Client:
    namespace = "default"

    def __init__(self, status: RPCStatusCode) -> None:
        self.operator_service = _Operator(status)


@pytest.mark.parametrize("status", [RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED])
def test_an_unanswered_listing_raises_instead_of_dropping_the_attributes(status):
    with pytest.raises(RPCError):
        asyncio.run(rc.search_attributes_registered(_Client(status)))  # type: ignore[arg-type]


def test_a_refused_listing_means_no_attributes():
    refused = _Client(RPCStatusCode.PERMISSION_DENIED)
    assert asyncio.run(rc.search_attributes_registered(refused)) is False  # type: ignore[arg-type]
