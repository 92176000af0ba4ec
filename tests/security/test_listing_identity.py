"""A client cannot make a run list under another tenant or principal through start-time
search attributes (revision 4 skips the start upsert only when the client's values are the run's).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

from temporalio.client import Client
from temporalio.common import RawValue, SearchAttributePair, TypedSearchAttributes

from tests.support.harness import Harness
from workers.testing.scripted_model import ScriptedModel, text
from workflows.agent_run import SA_AGENT, SA_PRINCIPAL, SA_SPEC, SA_STATUS, SA_TENANT, AgentRun
from workflows.models import RunRequest


async def _start(client: Client, h: Harness, tenant: str, principal: str):
    req = RunRequest(agent="default", input="hi", tenant_id="acme", principal_id="alice")
    return await client.start_workflow(
        AgentRun.run,
        cast("RawValue", req),  # run() takes its input raw and decodes it as a RunRequest
        id=f"spoof-{tenant}-{principal}-{h.task_queue}",
        task_queue=h.task_queue,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(SA_AGENT, "default"),
                SearchAttributePair(SA_TENANT, tenant),
                SearchAttributePair(SA_PRINCIPAL, principal),
                SearchAttributePair(SA_STATUS, "running"),
            ]
        ),
    )


async def test_start_time_search_attributes_of_another_tenant_are_overwritten(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(responder=lambda _req: text("ok"))
    async with Harness(client, tmp_path, model) as h:
        spoofed = await _start(client, h, "globex", "mallory")
        honest = await _start(client, h, "acme", "alice")
        for handle in (spoofed, honest):
            assert (await asyncio.wait_for(handle.result(), 60)).status == "completed"
            sa = (await handle.describe()).typed_search_attributes
            assert (sa.get(SA_TENANT), sa.get(SA_PRINCIPAL)) == ("acme", "alice")
            assert sa.get(SA_STATUS) == "completed" and sa.get(SA_SPEC)

    def upserts(history) -> list[set[str]]:
        return [
            set(
                e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            )
            - {"TemporalChangeVersion"}
            for e in history.events
            if e.HasField("upsert_workflow_search_attributes_event_attributes")
        ]

    # the spoofed run corrected its listing in its first workflow task; the honest one needed
    # no upsert until the end
    spoofed_upserts = [u for u in upserts(await spoofed.fetch_history()) if u]
    honest_upserts = [u for u in upserts(await honest.fetch_history()) if u]
    assert {SA_TENANT.name, SA_PRINCIPAL.name} <= spoofed_upserts[0] and len(spoofed_upserts) == 2
    assert len(honest_upserts) == 1 and SA_TENANT.name not in honest_upserts[0]
