"""Data shipped in the wheel: the built-in agents and the dev server's ``temporal-dev.yml``.

In the repository these are links to ``agents/agents.yml`` and ``temporal-dev.yml`` at the top,
which stay the files developers edit; the wheel holds copies. Installed, :mod:`workers.home`
writes them into ``AGENT_HOME`` on first use (never read from or written beside the package).
"""
