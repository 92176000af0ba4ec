"""The console's evaluation-suite handlers: the list, a suite's report so far, its live page.

``GET /api/suites``, ``GET /api/suites/{suite_id}`` (the JSON of ``agentctl eval report --json``)
and ``GET /suites/{suite_id}`` (``static/suite.html``); a person sees their tenants' suites only.
"""

from __future__ import annotations

from aiohttp import web
from temporalio.client import Client
from temporalio.service import RPCError

from workers.console.common import CLIENT_KEY, STATIC, _error, _who


async def _suite_tenant(client: Client, suite_id: str) -> str | None:
    """The tenant of an evaluation suite (its start input), or None when it has none to read."""
    from activities.evals.contracts import SuiteRequest

    raw = await client.get_workflow_handle(suite_id).query("request")
    return SuiteRequest.model_validate(raw).tenant_id if raw else None


async def _suites(request: web.Request) -> web.Response:
    """``GET /api/suites``: recent evaluation suites of the person's tenants, newest first."""
    client, ident = request.app[CLIENT_KEY], _who(request)
    out = []
    async for wf in client.list_workflows("WorkflowType = 'EvalSuite'", limit=20):
        if "*" not in ident.tenants:
            try:
                tenant = await _suite_tenant(client, wf.id)
            except RPCError:
                continue
            if tenant is None or not ident.may_see(tenant):
                continue
        out.append(
            {
                "suite_id": wf.id,
                "status": wf.status.name.lower() if wf.status else "unknown",
                "started_at": wf.start_time.isoformat() if wf.start_time else None,
            }
        )
    return web.json_response({"suites": out})


async def _suite(request: web.Request) -> web.Response:
    """``GET /api/suites/{id}``: the suite's report so far (``agentctl eval report --json``)."""
    from activities.evals.report import build_report
    from workers.eval_client import progress

    suite_id, ident = request.match_info["suite_id"], _who(request)
    client = request.app[CLIENT_KEY]
    if "*" not in ident.tenants:
        tenant = await _suite_tenant(client, suite_id)
        if tenant is None or not ident.may_see(tenant):
            return _error(404, f"no such suite: {suite_id}")
    report = build_report(await progress(client, suite_id))
    return web.json_response(report, headers={"Cache-Control": "no-store"})


async def _suite_page(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "suite.html")
