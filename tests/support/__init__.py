"""Shared test helpers: the harness, tools, MCP servers and per-topic helpers the tests import."""
