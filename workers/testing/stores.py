"""The stores workers on many hosts share, started on this machine: PostgreSQL and an S3 API.

For the two-host test (tests/integration/test_two_hosts.py) and ``make chaos``'s two-host mode
(``CHAOS_ARGS=--two-hosts``, bench/chaos.py): a real PostgreSQL 16 with pgvector from the
``pgserver`` wheel (the memory store and its pending runs) and a real S3 API, moto's server over
HTTP (the payloads and the sandbox's files). Both are test dependencies (pyproject ``test``), not
the runtime's; each is started as processes of its own and stopped by what started it.

:func:`host_env` is the environment that makes a worker one host of such a deployment: its own
``AGENT_HOME`` (state folder, local files) and the shared settings (docs/deploying.md, "Many
hosts").
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
"""Credentials and region moto accepts (any value does; boto3 needs some)."""


def free_port() -> int:
    """A TCP port nothing listens on at the moment (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    """moto's S3-compatible server, a process of its own (``python -m moto.server``)."""

    proc: subprocess.Popen[bytes]
    url: str
    """``http://127.0.0.1:<port>``: ``AWS_ENDPOINT_URL_S3`` of the workers."""

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        session = boto3.Session(
            aws_access_key_id=AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"],
            region_name=AWS_TEST_ENV["AWS_REGION"],
        )
        return session.client("s3", endpoint_url=self.url)

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (default: a fresh name); returns its name."""
        bucket = name or f"runs-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key of ``bucket`` under ``prefix``."""
        out: list[str] = []
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        for page in pages:
            out.extend(str(o["Key"]) for o in page.get("Contents", []))
        return out

    def stop(self) -> None:
        """End the server (its pid), waiting for it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_s3(log: Path, port: int | None = None, timeout: float = 30.0) -> S3Server:
    """Start moto's server on 127.0.0.1 (``port``, default a free one); wait until it answers.

    Raises:
        RuntimeError: it exited or did not answer within ``timeout`` seconds (see ``log``).
    """
    port = port or free_port()
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = S3Server(proc=proc, url=f"http://127.0.0.1:{port}")
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        if proc.poll() is not None:
            raise RuntimeError(f"moto's server exited ({proc.returncode}); see {log}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"moto's server did not answer on port {port} in {timeout:g} s; see {log}")


@dataclass
class Postgres:
    """A PostgreSQL 16 with pgvector from the ``pgserver`` wheel (local socket)."""

    server: Any  # pgserver.postgres_server.PostgresServer
    folder: Path
    owned: bool = False
    """Whether :meth:`stop` removes ``folder`` (made by :func:`start_postgres`)."""

    def new_database(self) -> str:
        """A fresh, empty database: its libpq URL (``AGENT_MEMORY_URL``)."""
        db = f"d_{uuid.uuid4().hex[:12]}"
        self.server.psql(f"CREATE DATABASE {db};")
        return str(self.server.get_uri(db))

    def stop(self) -> None:
        """Stop the server (pgserver's ``pg_ctl stop``); remove its folder when made here."""
        self.server.cleanup()
        if self.owned:
            shutil.rmtree(self.folder, ignore_errors=True)


def start_postgres(folder: Path | None = None) -> Postgres:
    """Start (or reuse) the server whose data folder is ``folder`` (default: a new one in /tmp).

    Run as root, pgserver runs the server as its own user ``pgserver`` and opens the folders
    above the data folder to others (``g+rx,o+rx``); pytest closes its own base folder again
    (``/tmp/pytest-of-<user>``, mode 0700) whenever another session starts, so the default folder
    is outside it.

    Raises:
        ImportError: pgserver is not installed (a test dependency: ``make install``).
    """
    from pgserver.postgres_server import get_server

    owned = folder is None
    folder = Path(tempfile.mkdtemp(prefix="agent-pg-")) if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    return Postgres(server=get_server(folder, cleanup_mode="stop"), folder=folder, owned=owned)


def host_env(
    home: Path, *, memory_url: str, s3: S3Server, bucket: str, encryption_keys: str
) -> dict[str, str]:
    """The variables that make a worker one host of many (docs/deploying.md, "Many hosts").

    Its own ``AGENT_HOME`` (nothing else of the state folder is shared), the memory on
    PostgreSQL, payloads and the sandbox's files in the bucket, and the payload keys every host
    shares (a key file made in one host's state folder would not decrypt on the other).
    """
    return {
        "AGENT_HOME": str(home),
        "AGENT_STATE_DIR": str(home),
        "AGENT_MEMORY_URL": memory_url,
        "AGENT_PAYLOAD_STORE": "s3",
        "AGENT_S3_BUCKET": bucket,
        "AGENT_S3_PREFIX": "agent-runtime/",
        "AWS_ENDPOINT_URL_S3": s3.url,
        "AGENT_ENCRYPTION_KEYS": encryption_keys,
        **AWS_TEST_ENV,
    }


def new_encryption_keys() -> str:
    """A fresh ``AGENT_ENCRYPTION_KEYS`` value (one AES-256 key, ``k1:<base64>``)."""
    import base64
    import os

    return "k1:" + base64.b64encode(os.urandom(32)).decode()
