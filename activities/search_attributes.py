"""Whether a namespace has the run's search attributes: the one check the client and the spec use.

:func:`workers.client.search_attributes_registered` (before a start) and ``spec.resolve`` (for a
run any client started) both ask the server through :func:`namespace_has_search_attributes`; each
decides what an error means for it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from activities.contracts import SEARCH_ATTRIBUTES

LIST_TIMEOUT = timedelta(seconds=10)
"""Longest wait for the server's answer: a run's ``spec.resolve`` (a local activity, holding the
run's first workflow task) must not wait on a server that does not answer."""


async def namespace_has_search_attributes(client: Client) -> bool:
    """True when ``client``'s namespace has every name in :data:`SEARCH_ATTRIBUTES`.

    Raises:
        temporalio.service.RPCError: the operator service did not answer (within
            :data:`LIST_TIMEOUT`: ``DEADLINE_EXCEEDED``) or refused.
    """
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace), timeout=LIST_TIMEOUT
    )
    names = set(resp.custom_attributes.keys())
    return all(n in names for n in SEARCH_ATTRIBUTES)
