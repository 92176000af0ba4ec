"""Whether a namespace has the run's search attributes: the one check the client and the spec use.

:func:`workers.client.search_attributes_registered` (before a start) and ``spec.resolve`` (for a
run any client started) both ask the server through :func:`namespace_has_search_attributes`; each
decides what an error means for it.
"""

from __future__ import annotations

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from activities.contracts import SEARCH_ATTRIBUTES


async def namespace_has_search_attributes(client: Client) -> bool:
    """True when ``client``'s namespace has every name in :data:`SEARCH_ATTRIBUTES`.

    Raises:
        temporalio.service.RPCError: the operator service did not answer or refused.
    """
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    names = set(resp.custom_attributes.keys())
    return all(n in names for n in SEARCH_ATTRIBUTES)
