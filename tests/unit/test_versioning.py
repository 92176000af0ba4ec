"""Worker Versioning helpers without a server: build ids, the worker's deployment, rollback target."""

from __future__ import annotations

import re

from temporalio.common import VersioningBehavior

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
