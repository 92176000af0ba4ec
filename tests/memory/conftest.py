"""A real PostgreSQL with pgvector for the memory tests, from the ``pgserver`` wheel."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A PostgreSQL 16 server with pgvector for the session (pgserver's own build, local socket)."""
    from pgserver.postgres_server import get_server

    srv = get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
def postgres_url(postgres: Any) -> str:
    """A fresh, empty database of that server: its libpq URL."""
    db = f"t_{uuid.uuid4().hex[:12]}"
    postgres.psql(f"CREATE DATABASE {db};")
    return str(postgres.get_uri(db))
