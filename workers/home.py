"""``AGENT_HOME``: the installed runtime's own configuration files, copied from the package.

In a repository checkout the built-in agents (``agents/agents.yml``) and the dev server's
``temporal-dev.yml`` are used where they are, and their relative paths point into the checkout's
``.agent-runtime``. Installed from the wheel, their packaged copies (:mod:`workers.data`) are
written once into ``AGENT_HOME``, with those paths rewritten to stay inside it (the workspace
``<AGENT_HOME>/workspace``, the dev server's database ``<AGENT_HOME>/temporal.db``), so nothing
is ever written inside the installed package. An existing copy is never overwritten: it is the
user's to edit.
"""

from __future__ import annotations

from pathlib import Path

from workers.config import DATA_DIR, IN_CHECKOUT, Settings

HOME_FILES: dict[str, tuple[tuple[str, str], ...]] = {
    "agents.yml": (("../.agent-runtime/workspace", "workspace"),),
    "temporal-dev.yml": (("db_filename: .agent-runtime/", "db_filename: "),),
}
"""Packaged file -> the rewrites (old text, new text) that move its relative paths into
``AGENT_HOME`` (relative paths in both files are relative to the file itself)."""


def home_text(name: str) -> str:
    """The text of packaged file ``name`` as written into ``AGENT_HOME``.

    Raises:
        KeyError: ``name`` is not one of :data:`HOME_FILES`.
        OSError: the packaged file cannot be read.
    """
    text = (DATA_DIR / name).read_text(encoding="utf-8")
    for old, new in HOME_FILES[name]:
        text = text.replace(old, new)
    return text


def home_file(name: str, home: str | Path) -> Path:
    """``<home>/<name>``, written from the package first when it does not exist yet.

    Args:
        name: one of :data:`HOME_FILES` (``agents.yml`` or ``temporal-dev.yml``).
        home: the ``AGENT_HOME`` folder (created, mode 0700, when missing).

    Returns:
        The file's path (existing copies are left as they are).

    Raises:
        OSError: the folder or the file cannot be written.
    """
    folder = Path(home).expanduser()
    path = folder / name
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(home_text(name), encoding="utf-8")
    return path


def ensure_home_files(settings: Settings, checkout: bool = IN_CHECKOUT) -> list[Path]:
    """Write the built-in agents into ``AGENT_HOME`` when installed and the worker uses them.

    Only when ``settings.spec_file`` is ``<home>/agents.yml`` (the installed default) and that
    file is missing; a checkout, a project's ``agents.yml`` or ``AGENT_SPEC_FILE`` elsewhere
    writes nothing.

    Returns:
        The files written (empty when none was).

    Raises:
        OSError: ``AGENT_HOME`` cannot be written.
    """
    target = Path(settings.home).expanduser() / "agents.yml"
    if checkout or Path(settings.spec_file).expanduser() != target or target.exists():
        return []
    return [home_file("agents.yml", settings.home)]
