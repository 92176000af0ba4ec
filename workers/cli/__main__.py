"""``python -m workers.cli``: the same as ``agentctl``."""

from workers.cli import main

main()
