"""Benchmarks of the agent runtime (``make bench`` / ``python -m bench.run``); see bench/README.md."""
