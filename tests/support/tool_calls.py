"""Calling tools in-process: a fresh registry, a workspace, a tool context, and ``run``/``ok``/``err``.

A pytest plugin (``tests/conftest.py`` lists it in ``pytest_plugins``): its fixtures ``reg``,
``ws`` and ``ctx`` are there for every test module that asks for them.
"""

from __future__ import annotations

import json

import pytest

from activities.tools import REGISTRY, ToolContext, ToolRegistry


@pytest.fixture
def reg():
    return ToolRegistry()


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def ctx(ws):
    return ToolContext(workspace=ws, run_id="run-1", turn=2, call_id="call-1")


async def run(name, args, ctx, max_output_chars=16_000):
    if not isinstance(args, str):
        args = json.dumps(args)
    return await REGISTRY.invoke(name, args, ctx, max_output_chars)


async def ok(name, args, ctx, **kw):
    out = await run(name, args, ctx, **kw)
    assert out.status == "ok", out.content
    return out.content


async def err(name, args, ctx, **kw):
    out = await run(name, args, ctx, **kw)
    assert out.status == "error", out.content
    assert out.content.startswith("Error: ")
    return out.content
