"""What every handler of the console uses: the app's keys, errors as JSON, the body, who asks.

:func:`_who` is the authenticated person (a body may only repeat their ``principal_id``),
:func:`_own_run` the path's run once it is known to be one of their tenants' (else 404),
:func:`_body` the JSON body as a pydantic model (else 400), :func:`_errors` the middleware that
turns Temporal's errors into JSON statuses, :func:`_no_framing` the middleware that forbids framing
(clickjacking). :mod:`workers.console.serve` re-exports the public names.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import TypeVar

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ValidationError
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from workers import client as rc
from workers.console import auth as ca
from workers.listing import quote
from workflows.inbound import validation_problems
from workflows.models import WORKFLOW_NAME

__all__ = [
    "AUTH_KEY",
    "B",
    "CLIENT_KEY",
    "MAX_JSON_DEPTH",
    "NO_FRAMING_HEADERS",
    "QUEUE_KEY",
    "SIGNER_KEY",
    "STATIC",
    "WEB_UI_KEY",
]

STATIC = Path(__file__).parent / "static"
B = TypeVar("B", bound=BaseModel)
CLIENT_KEY = web.AppKey("client", Client)
WEB_UI_KEY = web.AppKey[Callable[[str], str]](
    "web_ui"
)  # a Callable is no class: typed by subscript
QUEUE_KEY = web.AppKey("task_queue", str)
AUTH_KEY = web.AppKey("auth", ca.Authenticator)
SIGNER_KEY = web.AppKey("signer", Ed25519PrivateKey)

NO_FRAMING_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
}
"""Headers on every console response: no page may frame the console (clickjacking). Sources:
RFC 7034 (``X-Frame-Options``), CSP Level 2 ``frame-ancestors``, OWASP's clickjacking cheat sheet."""


def _forbid_framing(headers: MutableMapping[str, str]) -> None:
    """Add :data:`NO_FRAMING_HEADERS` to ``headers``, merged into a CSP already there."""
    headers["X-Frame-Options"] = "DENY"
    csp = headers.get("Content-Security-Policy", "").strip().rstrip(";")
    if "frame-ancestors" not in csp:
        ancestors = NO_FRAMING_HEADERS["Content-Security-Policy"]
        headers["Content-Security-Policy"] = f"{csp}; {ancestors}" if csp else ancestors


@web.middleware
async def _no_framing(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every response, errors and redirects included, forbids framing (:data:`NO_FRAMING_HEADERS`).

    A response the handler already sent (the event stream) carries them itself.
    """
    try:
        resp = await handler(request)
    except web.HTTPException as e:
        _forbid_framing(e.headers)
        raise
    if not resp.prepared:
        _forbid_framing(resp.headers)
    return resp


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _who(request: web.Request, named: str | None = None) -> ca.Identity:
    """The authenticated person; raises 403 when the body ``named`` somebody else."""
    ident: ca.Identity = request[ca.IDENTITY_KEY]
    if named is not None and named != ident.principal_id:
        raise web.HTTPForbidden(
            text=json.dumps(
                {
                    "error": f"you are {ident.principal_id!r}: a request cannot name another "
                    f"principal ({named!r})"
                }
            ),
            content_type="application/json",
        )
    return ident


def _no_such_run(run_id: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(
        text=json.dumps({"error": f"no such run: {run_id}"}), content_type="application/json"
    )


async def _own_run(request: web.Request) -> str:
    """The path's run id, once it is known to be a run (``AgentRun``) of the person's tenants.

    As :func:`_own_run_described`, without the description.
    """
    return (await _own_run_described(request))[0]


async def _own_run_described(request: web.Request) -> tuple[str, WorkflowExecutionDescription]:
    """The path's run id and its description (latest execution), once it is the person's.

    Raises:
        web.HTTPNotFound: ``{"error": "no such run: <id>"}``, the same status and body whether
            the id is missing, another tenant's run or another workflow type (no existence
            oracle).
        temporalio.service.RPCError: the Temporal server failed otherwise (:func:`_errors`).
    """
    run_id = request.match_info["run_id"]
    ident = _who(request)
    try:
        desc = await rc.handle(request.app[CLIENT_KEY], run_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise _no_such_run(run_id) from None
        raise
    tenant = ((desc.search_attributes or {}).get("TenantId") or ["default"])[0]
    if desc.workflow_type != WORKFLOW_NAME or not ident.may_see(str(tenant)):
        raise _no_such_run(run_id)
    return run_id, desc


def _tenant_filter(ident: ca.Identity) -> str:
    if "*" in ident.tenants:
        return ""
    names = ", ".join(f"'{quote(t)}'" for t in sorted(ident.tenants))
    return f" AND TenantId IN ({names})"


MAX_JSON_DEPTH = 64
"""Deepest nesting (arrays and objects) a request's JSON body may have."""


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps({"error": message}), content_type="application/json")


def _json_depth(value: object) -> int:
    """How deeply ``value`` (parsed JSON) nests arrays and objects: 0 for a scalar. Iterative."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break
        todo.extend((c, depth + 1) for c in children)
    return deepest


async def _body(request: web.Request, model: type[B]) -> B:
    """The request's JSON body as ``model``.

    Raises:
        web.HTTPBadRequest: (400, ``{"error": ...}`` naming what is wrong) the body is not JSON,
            nests deeper than :data:`MAX_JSON_DEPTH` levels, or does not fit ``model``.
    """
    too_deep = f"the body nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
    try:
        data = json.loads(await request.text() or "{}")
    except RecursionError:  # the parser's own limit (~1000 levels), long before ours matters
        raise _bad_request(too_deep) from None
    except ValueError as e:
        raise _bad_request(f"the body is not JSON: {e}") from None
    if _json_depth(data) > MAX_JSON_DEPTH:
        raise _bad_request(too_deep)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise _bad_request(f"bad request: {validation_problems(e, 'body')}") from None


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Temporal errors as JSON with a status that says what happened.

    A request that does not make a valid input (a decision's arguments over their limit, say) is
    a 400 naming why.
    """
    try:
        return await handler(request)
    except ValidationError as e:
        return _error(400, f"bad request: {validation_problems(e, 'input')}")
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            run_id = request.match_info.get("run_id")
            return _error(404, f"no such run: {run_id or e.message}")
        if e.status == RPCStatusCode.UNAVAILABLE:
            return _error(503, f"the Temporal server is unavailable: {e.message}")
        return _error(400, e.message)
    except WorkflowUpdateFailedError as e:
        return _error(409, str(e.cause or e))
