"""The console's evaluation-suite handlers: the list, a suite's report so far, its live page.

``GET /api/suites``, ``GET /api/suites/{suite_id}`` (the JSON of ``agentctl eval report --json``)
and ``GET /suites/{suite_id}`` (``static/suite.html``); a person sees their tenants' suites only.
"""

from __future__ import annotations

from aiohttp import web
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from workers.console.auth import Identity
from workers.console.common import CLIENT_KEY, STATIC, _error, _who


async def _suite_tenant(client: Client, suite_id: str) -> str | None:
    """The tenant of an evaluation suite (its start input), or None when it has none to read.

    Raises:
        temporalio.service.RPCError, temporalio.client.WorkflowQueryFailedError: the query failed
            (no such workflow, or one without the ``request`` query).
    """
    from activities.evals.contracts import SuiteRequest

    raw = await client.get_workflow_handle(suite_id).query("request")
    return SuiteRequest.model_validate(raw).tenant_id if raw else None


async def _own_suite(client: Client, ident: Identity, suite_id: str) -> bool:
    """Whether ``suite_id`` is an evaluation suite (``EvalSuite``) of the person's tenants.

    False alike for a missing id, another tenant's suite, another workflow type (an ``AgentRun``)
    and a suite whose tenant cannot be read, so the 404s of :func:`_suite` say nothing more.

    Raises:
        temporalio.service.RPCError: the Temporal server failed otherwise than "not found".
    """
    from activities.evals.contracts import SUITE_WORKFLOW

    try:
        desc = await client.get_workflow_handle(suite_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    if desc.workflow_type != SUITE_WORKFLOW:
        return False
    if "*" in ident.tenants:
        return True
    try:
        tenant = await _suite_tenant(client, suite_id)
    except (RPCError, WorkflowQueryFailedError):
        return False
    return tenant is not None and ident.may_see(tenant)


async def _suites(request: web.Request) -> web.Response:
    """``GET /api/suites``: recent evaluation suites of the person's tenants, newest first."""
    client, ident = request.app[CLIENT_KEY], _who(request)
    out = []
    async for wf in client.list_workflows("WorkflowType = 'EvalSuite'", limit=20):
        if "*" not in ident.tenants:
            try:
                tenant = await _suite_tenant(client, wf.id)
            except (RPCError, WorkflowQueryFailedError):
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
    """``GET /api/suites/{id}``: the suite's report so far (``agentctl eval report --json``).

    404 ``{"error": "no such suite: <id>"}`` alike for a missing id, another tenant's suite and a
    workflow that is no suite (:func:`_own_suite`). 501 with the pip command when the report
    needs the extra ``evals`` (scipy) and it is not installed.
    """
    from activities.evals.report import build_report
    from workers.eval_client import progress

    suite_id, ident = request.match_info["suite_id"], _who(request)
    client = request.app[CLIENT_KEY]
    if not await _own_suite(client, ident, suite_id):
        return _error(404, f"no such suite: {suite_id}")
    from activities.extras import MissingExtraError

    try:
        report = build_report(await progress(client, suite_id))
    except MissingExtraError as e:  # scipy (the extra `evals`) is not installed here
        return _error(501, str(e))
    return web.json_response(report, headers={"Cache-Control": "no-store"})


async def _suite_page(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "suite.html")
