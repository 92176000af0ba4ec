"""Running model-written code in a real OS sandbox (docs/sandbox.md)."""

from __future__ import annotations

from activities.sandbox.backend import Limits, SandboxBackend, SandboxResult, SandboxUnavailable
from activities.sandbox.bwrap import BubblewrapBackend

__all__ = ["BubblewrapBackend", "Limits", "SandboxBackend", "SandboxResult", "SandboxUnavailable"]
