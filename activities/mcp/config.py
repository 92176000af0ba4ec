"""MCP servers in an agent spec: the ``mcp_servers:`` entry, tool names, ``${VAR}`` expansion.

An agent lists its servers by name::

    mcp_servers:
      notes:                                   # a stdio server the worker starts
        command: [python, -m, workers.local.mcp_example_server]
        env: {NOTES_TOKEN: "${NOTES_TOKEN}"}   # expanded on the worker, redacted from output
      search:                                  # a streamable-HTTP server
        url: http://127.0.0.1:8000/mcp
        headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
        task_queue: net-tools                  # its calls run on workers serving this queue

The server ``notes``'s tool ``add_note`` is offered to the model as ``notes__add_note``
(OpenAI function names must match ``^[a-zA-Z0-9_-]{1,64}$``); ``notes.add_note`` is accepted too.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from activities.contracts import McpServerConfig

SEPARATOR = "__"
"""Between the server's name and the tool's in the name offered to the model."""

SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_-]")
MAX_TOOL_NAME = 64


class McpConfigError(Exception):
    """A server's settings cannot be used on this worker (e.g. an unset ``${VAR}``)."""


class McpServerSpec(BaseModel):
    """One entry of an agent's ``mcp_servers:``.

    Exactly one of ``command`` (argv of a stdio server, or one string split like a shell does;
    ``python`` as the program means the worker's own interpreter) and ``url`` (a streamable-HTTP
    endpoint, ``http://`` or ``https://``). ``cwd`` defaults to the spec file's folder.
    ``risk`` overrides the policy hint of every tool of the server; when absent, tools the
    server marks ``readOnlyHint`` are ``read`` and the others ``write`` (they need approval under
    the default ``by_risk`` policy). ``tools`` keeps only the named tools of the server.
    """

    model_config = ConfigDict(extra="forbid")

    command: list[str] | None = Field(
        default=None, min_length=1, description="argv of a stdio server (or one string)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="environment of a stdio server")
    cwd: str | None = Field(
        default=None, description="folder of a stdio server (default: the spec file's)"
    )
    url: str | None = Field(default=None, description="a streamable-HTTP endpoint")
    headers: dict[str, str] = Field(
        default_factory=dict, description="HTTP headers sent to a url server"
    )
    task_queue: str | None = Field(None, min_length=1, description="queue of its tool calls")
    timeout_seconds: float = Field(60.0, gt=0, description="start-to-close of one call attempt")
    max_attempts: int = Field(3, ge=1, description="attempts of one call (server unreachable)")
    handshake_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="seconds a stdio server has to answer the MCP handshake (10); then the "
        "attempt fails naming the server, with the last lines of its stderr. After a call of it "
        "timed out, the seconds it has to answer tools/list before it is stopped and replaced",
    )
    risk: Literal["read", "write", "exec", "network"] | None = Field(
        default=None, description="risk of every tool of the server (none: from readOnlyHint)"
    )
    tools: list[str] | None = Field(default=None, description="only these tools of the server")

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, v: Any) -> Any:
        return shlex.split(v) if isinstance(v, str) else v

    @field_validator("env", "headers", mode="before")
    @classmethod
    def _text_values(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {
                str(k): str(x) if isinstance(x, int | float | bool) else x
                for k, x in cast("dict[Any, Any]", v).items()
            }
        return v

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of `command` (a stdio server) or `url` (HTTP)")
        if self.url is not None and not re.match(r"^(https?://|\$\{)", self.url):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        if self.url is not None and (self.env or self.cwd):
            raise ValueError("`env` and `cwd` apply to stdio servers (`command`) only")
        if self.command is not None and self.headers:
            raise ValueError("`headers` apply to HTTP servers (`url`) only")
        if self.task_queue is not None and not re.fullmatch(r"\S+", self.task_queue):
            raise ValueError("task_queue must not contain spaces")
        return self

    def pinned(self, name: str) -> McpServerConfig:
        """The connection settings as pinned with the spec (``${VAR}`` left unexpanded)."""
        return McpServerConfig(
            name=name,
            command=self.command,
            env=dict(self.env),
            cwd=self.cwd,
            url=self.url,
            headers=dict(self.headers),
            handshake_timeout_seconds=self.handshake_timeout_seconds,
        )


def check_server_name(name: str) -> str:
    """Return ``name`` when it can prefix tool names.

    Raises:
        ValueError: not 1-32 of ``[A-Za-z0-9_-]`` starting with a letter or digit, or holds ``__``.
    """
    if not SERVER_NAME.fullmatch(name):
        raise ValueError(
            f"MCP server name {name!r} must be 1-32 letters, digits, '-' or '_' (no '__'), "
            "starting with a letter or digit"
        )
    return name


def tool_name(server: str, tool: str) -> str:
    """The name offered to the model for ``tool`` of ``server``: ``server__tool``.

    Characters outside ``[A-Za-z0-9_-]`` become ``_``; names longer than 64 are cut to 64.
    """
    return f"{server}{SEPARATOR}{_NOT_NAME_CHAR.sub('_', tool)}"[:MAX_TOOL_NAME]


def canonical_tool_name(name: str, known: set[str] | list[str]) -> str:
    """``server.tool`` -> ``server__tool`` when that is a known name; other names unchanged."""
    if name in known or "." not in name:
        return name
    server, _, tool = name.partition(".")
    candidate = tool_name(server, tool)
    return candidate if candidate in known else name


def referenced_vars(server: McpServerConfig) -> list[str]:
    """Names of the worker environment variables the server's settings refer to as ``${VAR}``."""
    texts = [*(server.command or []), *server.env.values(), *server.headers.values()]
    texts.append(server.url or "")
    return sorted({m.group(1) for t in texts for m in _VAR.finditer(t)})


def expand(text: str, environ: dict[str, str] | None = None) -> str:
    """Replace every ``${VAR}`` in ``text`` by the worker's value of ``VAR``.

    Raises:
        McpConfigError: a variable is not set on this worker.
    """
    env = os.environ if environ is None else environ

    def value(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise McpConfigError(f"environment variable {m.group(1)} is not set on this worker")
        return env[m.group(1)]

    return _VAR.sub(value, text)


def stdio_argv(server: McpServerConfig) -> list[str]:
    """The server's command, expanded; a leading ``python`` is the worker's own interpreter."""
    argv = [expand(a) for a in server.command or []]
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv
