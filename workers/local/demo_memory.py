"""Step 3 of ``make demo``: memory across runs, with the local model.

A first run (agent ``assistant``, agents/agents.yml) is told a fact about the person's workspace
and stores it with the ``remember`` tool; a second run, a new workflow, is asked a question that
needs it. Before its model step the second run is given what it remembers, recorded in its
history (``ModelReply.memory``, the ``state`` query's ``memory``, the Web UI's model step). The
check: the answer names the module, and the second run was given the remembered item.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console

from workers import client as rc
from workers.config import load_settings

AGENT = "assistant"
FAVOURITE = "shlex.py"
TELL = f"Remember this about me: my favourite module in this workspace is {FAVOURITE}."
ASK = "Which module in this workspace is my favourite?"
console = Console(highlight=False)


async def memory_across_runs(
    client: Any, outcome: Any, start: Callable[..., Awaitable[Any]]
) -> None:
    """Run 3 and run 4 (see the module docstring); failures go to ``outcome.fail``."""
    from activities.memory import open_store
    from workers.cli.base import _print_result

    h = await start(client, "3. Memory across runs: a run learns a fact", TELL, AGENT)
    first = await asyncio.wait_for(rc.result(client, h.id), timeout=240)
    _print_result(first, False, h.id)
    remembered = [c for c in first.tool_calls if c.name == "remember" and c.status == "ok"]
    if first.status != "completed" or not remembered:
        outcome.fail(f"run 3 did not remember the fact ({first.status}: {first.stopped_reason})")
        return
    h2 = await start(client, "   ... and a new run answers with it", ASK, AGENT)
    second = await asyncio.wait_for(rc.result(client, h2.id), timeout=240)
    _print_result(second, False, h2.id)
    st = await rc.state(client, h2.id)
    store = open_store(load_settings().memory_store_url)
    given = [store.get(st.tenant_id, i) for i in st.memory]
    texts = [g.text for g in given if g is not None]
    for i, t in zip(st.memory, texts, strict=False):
        console.print(f"the new run was given memory item {i}: {t!r} (in its history)")
    if second.status != "completed" or FAVOURITE.split(".")[0] not in (second.output or ""):
        outcome.fail(f"run 4 did not answer with {FAVOURITE}: {second.output!r}")
    elif not any(FAVOURITE.split(".")[0] in t for t in texts):
        outcome.fail("run 4 was not given the remembered item")
    else:
        console.print(
            f"[bold]check:[/bold] answered {FAVOURITE} from memory -> [green]correct[/green]"
        )
