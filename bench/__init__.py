"""Benchmarks of the agent runtime: ``make bench`` / ``python -m bench.run`` (bench/README.md)."""
