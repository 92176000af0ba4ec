"""Payload encryption: the key of the stored encrypted history."""

from __future__ import annotations

# The key of the stored encrypted history: a test fixture, never used for anything else.
FIXTURE_KEYS = "fixture-2026-11:q0mG0N7S2V7oQ8a6Xl0Y3u1n0L3pZ9r5k2d4f6h8j0A="
