"""A small MCP tool server shipped as an example: notes kept in a JSON file.

Written with the official ``mcp`` SDK (``MCPServer``, formerly FastMCP). The ``mcp-demo`` agent of
``agents/agents.yml`` starts it over stdio (``python -m workers.local.mcp_example_server``); run it
with ``--http --port 8000`` to serve streamable HTTP at ``http://127.0.0.1:8000/mcp`` instead.

``add_note`` shows what the runtime's idempotency key is for: the key arrives in the request's
``_meta`` (``<workflow id>/<tool_call_id>``, the same for every attempt of one call), and a note
added once under a key is not added again when the call is retried.
Notes live in ``$NOTES_FILE`` (default ``notes.json`` in the working directory).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("notes", instructions="Keeps short notes by title.")


def _path() -> Path:
    return Path(os.environ.get("NOTES_FILE") or "notes.json")


def _load() -> dict[str, Any]:
    try:
        data = json.loads(_path().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"notes": {}, "keys": []}
    return data if isinstance(data, dict) else {"notes": {}, "keys": []}


def _save(data: dict[str, Any]) -> None:
    tmp = _path().with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(_path())


@server.tool()
def add_note(title: str, text: str, ctx: Context) -> str:
    """Save a note under a title (replacing a note of the same title).

    Args:
        title: a short title, e.g. "shopping".
        text: the note's text.
        ctx: the request's context; its ``_meta`` carries the idempotency key.
    """
    if not title.strip():
        raise ToolError("the title must not be empty")
    key = (ctx.request_context.meta or {}).get("idempotency_key")
    data = _load()
    if key and key in data["keys"]:
        return f"note {title!r} was already saved by this call"
    data["notes"][title.strip()] = text
    if key:
        data["keys"] = [*data["keys"][-999:], key]
    _save(data)
    return f"saved note {title!r} ({len(text)} characters)"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_notes() -> str:
    """List the titles of the saved notes."""
    titles = sorted(_load()["notes"])
    return "\n".join(titles) if titles else "no notes yet"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(title: str) -> str:
    """Read one note.

    Args:
        title: the note's title, as list_notes shows it.
    """
    notes = _load()["notes"]
    if title not in notes:
        raise ToolError(f"no note titled {title!r}; titles: {', '.join(sorted(notes)) or 'none'}")
    return str(notes[title])


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio (default) or streamable HTTP (``--http``) on 127.0.0.1."""
    p = argparse.ArgumentParser(description="Example MCP server: notes in a JSON file.")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp")
    p.add_argument("--port", type=int, default=8000)
    a = p.parse_args(argv)
    if a.http:
        server.run("streamable-http", host="127.0.0.1", port=a.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
