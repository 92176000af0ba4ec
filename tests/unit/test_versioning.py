"""Worker Versioning helpers without a server: build ids, the worker's deployment, rollback target."""

from __future__ import annotations

import re
from typing import Any, cast

import pytest
from temporalio.common import VersioningBehavior
from temporalio.service import RPCError, RPCStatusCode

from workers import versioning
from workers.config import Settings
from workers.versioning import DEPLOYMENT_NAME, build_id, deployment_config, previous_build


def test_build_id_is_version_and_commit_unless_given() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+.*-([0-9a-f]{12}|nogit)", build_id(Settings()))
    assert build_id(Settings(build_id="b7")) == "b7"


def test_deployment_only_when_versioning_is_on() -> None:
    assert deployment_config(Settings()) is None
    cfg = deployment_config(Settings(worker_versioning=True, build_id="b7"))
    assert cfg is not None and cfg.use_worker_versioning
    assert (cfg.version.deployment_name, cfg.version.build_id) == (DEPLOYMENT_NAME, "b7")
    assert cfg.default_versioning_behavior == VersioningBehavior.PINNED


def test_previous_build_is_the_newest_other_version() -> None:
    desc = {
        "current": "v3",
        "ramping": "v4",
        "versions": [
            {"build_id": "v1", "created": "2026-11-01T00:00:00Z"},
            {"build_id": "v2", "created": "2026-11-02T00:00:00Z"},
            {"build_id": "v3", "created": "2026-11-03T00:00:00Z"},
            {"build_id": "v4", "created": "2026-11-04T00:00:00Z"},
        ],
    }
    assert previous_build(desc) == "v2"
    assert (
        previous_build(
            {"current": "v1", "ramping": None, "versions": [{"build_id": "v1", "created": "x"}]}
        )
        is None
    )


class _Service:
    """The client's ``workflow_service`` as a server answering ``errors`` first, then OK."""

    def __init__(self, *errors: RPCStatusCode) -> None:
        self.errors = list(errors)
        self.sent: list[object] = []

    async def set_worker_deployment_current_version(self, req: object) -> object:
        self.sent.append(req)
        if self.errors:
            raise RPCError("from the server", self.errors.pop(0), b"")
        return req


class _Client:
    namespace = "default"

    def __init__(self, service: _Service) -> None:
        self.workflow_service = service


async def test_a_routing_change_is_sent_again_while_the_server_is_busy() -> None:
    # the deployment's own workflow answers CANCELLED/RESOURCE_EXHAUSTED while it continues as new
    svc = _Service(RPCStatusCode.CANCELLED, RPCStatusCode.RESOURCE_EXHAUSTED)
    await versioning.set_current(cast(Any, _Client(svc)), "v1")
    assert len(svc.sent) == 3


async def test_a_refused_routing_change_is_raised_at_once() -> None:
    svc = _Service(RPCStatusCode.FAILED_PRECONDITION)
    with pytest.raises(RPCError) as got:
        await versioning.set_current(cast(Any, _Client(svc)), "v9")
    assert got.value.status == RPCStatusCode.FAILED_PRECONDITION and len(svc.sent) == 1
