"""Payloads for the payload-store tests: a JSON payload, settings in a temporary folder, a model."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel
from temporalio.api.common.v1 import Payload

from workers.config import Settings


def payload_of(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


def settings_in(tmp_path: Path, **kw) -> Settings:
    return Settings(state_dir=str(tmp_path / "state"), **kw)


class Transcript(BaseModel):
    messages: list[dict[str, str]]
