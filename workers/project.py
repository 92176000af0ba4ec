"""``agentctl init DIR``: a project of one's own, the way to use the runtime (docs/your-own-project.md).

The project holds ``agents.yml`` (one agent using the project's own tool and a built-in one),
the tools package ``tools/`` with one ``@tool`` and its pytest test, a workspace with one file,
``.env`` (the Temporal connection: three commented choices) and a README. ``agentctl worker``
started in that folder uses its ``agents.yml`` and imports ``tools`` from it
(:func:`workers.worker.project_import_path`).
"""

from __future__ import annotations

from pathlib import Path

AGENT_NAME = "word-counter"
"""The agent the new project defines (``agentctl run --agent word-counter ...``)."""

TOOL_NAME = "count_words"
"""The project's own tool."""

AGENTS_YML = """\
# The agents of this project. `agentctl worker`, started in this folder, uses this file (or set
# AGENT_SPEC_FILE to its path) and imports `tool_modules` from this folder. Fields: the runtime's
# docs/agent-spec.md. Relative paths are relative to this file.
tool_modules: [tools.words]

agents:
  word-counter:
    system_prompt: |
      You answer questions about the text files in your workspace. Call list_files to see
      them and count_words to count the words of one; then answer briefly, naming the file.
    tools: [list_files, count_words]
    workspace: workspace
    temperature: 0.1
    max_output_tokens: 256
    limits:
      max_turns: 6
      max_seconds: 120
"""

TOOLS_INIT = '''"""This project's tools: each module listed in agents.yml's `tool_modules` registers its
`@tool` functions when the worker imports it."""
'''

TOOLS_WORDS = '''"""A tool of this project: count the words of a text file in the agent's workspace."""

from activities.tools import ToolContext, ToolError, resolve_in_workspace, tool


@tool(local=True)
def count_words(ctx: ToolContext, path: str) -> str:
    """Count the words of a text file in the workspace.

    Args:
        ctx: the call's context (injected by the runtime, not sent by the model).
        path: the file, relative to the workspace root, e.g. "notes.txt".
    """
    file = resolve_in_workspace(ctx.workspace, path)
    if not file.is_file():
        raise ToolError(f"no such file in the workspace: {path}")
    words = len(file.read_text(encoding="utf-8", errors="replace").split())
    return f"{path} has {words} words"
'''

TEST_WORDS = '''"""The tool called directly, as a function: no worker, no Temporal server."""

from pathlib import Path

import pytest

from activities.tools import ToolContext, ToolError
from tools.words import count_words


def test_count_words_counts_the_words_of_a_workspace_file(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("one two\\nthree\\n")
    assert count_words(ToolContext(workspace=tmp_path), "notes.txt") == "notes.txt has 3 words"


def test_count_words_refuses_a_missing_file_and_paths_outside(tmp_path: Path):
    ctx = ToolContext(workspace=tmp_path)
    with pytest.raises(ToolError):
        count_words(ctx, "missing.txt")
    with pytest.raises(ToolError):
        count_words(ctx, "../outside.txt")
'''

PYPROJECT = """\
# pytest finds the `tools` package from this folder (`pytest` here runs tests/).
[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]
"""

ENV = """\
# The Temporal connection of `agentctl` and the worker (Temporal's own environment
# configuration, which the runtime reads). Load it into your shell before running them:
#   set -a; . ./.env; set +a
# Uncomment ONE of the three choices below.

# 1. The local dev server (`agentctl dev-server`): the default, nothing to set.
# TEMPORAL_ADDRESS=127.0.0.1:7233
# TEMPORAL_NAMESPACE=default

# 2. A self-hosted cluster with TLS (mutual TLS: the client certificate and key).
# TEMPORAL_ADDRESS=temporal.example.com:7233
# TEMPORAL_NAMESPACE=agents
# TEMPORAL_TLS=true
# TEMPORAL_TLS_CLIENT_CERT_PATH=/path/to/client.pem
# TEMPORAL_TLS_CLIENT_KEY_PATH=/path/to/client.key
# TEMPORAL_TLS_SERVER_CA_CERT_PATH=/path/to/ca.pem
# TEMPORAL_TLS_SERVER_NAME=temporal.example.com

# 3. Temporal Cloud with an API key (TLS is on with an API key).
# TEMPORAL_ADDRESS=<region>.<cloud-provider>.api.temporal.io:7233
# TEMPORAL_NAMESPACE=<namespace>.<account-id>
# TEMPORAL_API_KEY=<your API key>

# The model: any OpenAI-compatible endpoint (default: the local model server, 127.0.0.1:8110).
# OPENAI_BASE_URL=https://api.openai.com/v1
# OPENAI_API_KEY=sk-...
# AGENT_MODEL=gpt-4o-mini
"""

README = """\
# {name}

Agents of your own on the durable agent runtime (`pip install temporal-agent-runtime`).

- `agents.yml`: the agent `word-counter`, which uses the tool `count_words` of this project.
- `tools/words.py`: that tool (`@tool`); `tests/test_words.py` calls it directly: `pytest`.
- `workspace/`: the files the agent works on.
- `.env`: the Temporal connection (local dev server, self-hosted with TLS, or Temporal Cloud).

Run it (three terminals, all in this folder):

    set -a; . ./.env; set +a      # in each terminal: the Temporal connection
    agentctl dev-server           # the local Temporal server (choice 1 of .env)
    agentctl worker               # serves agents.yml's agents and the tools of tools/
    agentctl run --agent word-counter "How many words does hello.txt have?" --follow

Add a tool: a function with `@tool` in a module of `tools/`, listed in `agents.yml`'s
`tool_modules` and in an agent's `tools`; restart the worker.
"""

HELLO = "Hello from your own project, in eight words.\n"


def project_files(name: str) -> dict[str, str]:
    """The files of a new project named ``name``: relative path -> text."""
    return {
        "agents.yml": AGENTS_YML,
        "tools/__init__.py": TOOLS_INIT,
        "tools/words.py": TOOLS_WORDS,
        "tests/test_words.py": TEST_WORDS,
        "pyproject.toml": PYPROJECT,
        "workspace/hello.txt": HELLO,
        ".env": ENV,
        "README.md": README.format(name=name),
    }


class ProjectExistsError(FileExistsError):
    """``agentctl init`` would overwrite files; the message names them."""


def write_project(folder: str | Path, force: bool = False) -> list[Path]:
    """Write a new project into ``folder`` (created when missing).

    Args:
        folder: the project folder.
        force: overwrite files that exist (otherwise nothing is written when any exists).

    Returns:
        The files written, in :func:`project_files` order.

    Raises:
        ProjectExistsError: without ``force``, some of the files exist (none is written).
        OSError: a file cannot be written.
    """
    root = Path(folder).expanduser().resolve()
    files = {root / rel: text for rel, text in project_files(root.name).items()}
    existing = [p for p in files if p.exists()]
    if existing and not force:
        shown = ", ".join(str(p.relative_to(root)) for p in existing)
        raise ProjectExistsError(f"{root} already has {shown} (--force overwrites)")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if path.name == ".env":
            path.chmod(0o600)  # it may hold an API key
    return list(files)
