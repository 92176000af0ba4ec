"""``make chaos`` on two hosts (``CHAOS_ARGS=--two-hosts``): workers that share no folder.

Each of the two workers gets an ``AGENT_HOME`` of its own (its state folder: logs, the local
payload folder, the sandbox's run folders, the pending consolidations' SQLite file, key files),
and they share only what workers on many machines share (docs/deploying.md, "Many hosts"):

* Temporal (the chaos dev server, SIGKILLed and restarted as in the one-host mode);
* PostgreSQL for memory (``AGENT_MEMORY_URL``; the ``pgserver`` wheel's PostgreSQL 16 with
  pgvector): the memory items and the runs waiting for consolidation;
* an S3 API for payloads and the sandbox's files (``AGENT_PAYLOAD_STORE=s3``; moto's server over
  HTTP, :mod:`workers.testing.stores`), with the payload threshold lowered to
  :data:`THRESHOLD` bytes so that the runs' transcripts go to the bucket too;
* the payload keys (``AGENT_ENCRYPTION_KEYS``, the same value on both);
* the spec file and the agent's workspace (``write_file``'s folder: one path, a shared volume on
  real hosts) and the chaos journal (the side effects' target, outside the runtime).

:meth:`TwoHosts.figures` adds to the report what the hosts' own folders hold (nothing may be in
their payload folders or sandbox run folders) and what the bucket holds.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.testing.stores import (
    AWS_TEST_ENV,
    Postgres,
    S3Server,
    host_env,
    new_encryption_keys,
    start_postgres,
    start_s3,
)

PREFIX = "agent-runtime/"
THRESHOLD = 2048
"""``AGENT_PAYLOAD_THRESHOLD_BYTES`` of the two hosts: a chaos run's transcript passes it after
two or three model steps, so most model steps read and write the bucket."""


@dataclass
class TwoHosts:
    """The shared stores of one two-host chaos session and the two hosts' folders."""

    pg: Postgres
    s3: S3Server
    bucket: str
    memory_url: str
    keys: str
    homes: list[Path]

    def worker_env(self, index: int) -> dict[str, str]:
        """The environment of worker ``index`` (host ``index``)."""
        env = host_env(self.homes[index], memory_url=self.memory_url, s3=self.s3,
                       bucket=self.bucket, encryption_keys=self.keys)  # fmt: skip
        return {**env, "AGENT_S3_PREFIX": PREFIX, "AGENT_PAYLOAD_THRESHOLD_BYTES": str(THRESHOLD)}

    def client_settings(self, address: str, task_queue: str) -> Any:
        """Settings of the driver's client: the same bucket and keys (results are stored there)."""
        from workers.config import Settings

        return Settings(
            temporal_address=address, task_queue=task_queue, payload_store="s3",
            s3_bucket=self.bucket, s3_prefix=PREFIX, encryption_keys=self.keys,
            payload_threshold_bytes=THRESHOLD, state_dir=str(self.homes[0].parent / "driver"),
        )  # fmt: skip

    def figures(self) -> dict[str, Any]:
        """Objects in the bucket by kind; files left in each host's local stores (want none)."""
        keys = self.s3.keys(self.bucket)
        local: dict[str, int] = {}
        for home in self.homes:
            n = 0
            for folder in (home / "payloads", home / "sandbox" / "runs"):
                n += sum(1 for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0
            local[home.name] = n
        return {
            "two_hosts": {
                "homes": [str(h) for h in self.homes],
                "memory_url": self.memory_url,
                "bucket": self.bucket,
                "payload_objects": sum(1 for k in keys if k.startswith(f"{PREFIX}v0/")),
                "file_objects": sum(1 for k in keys if k.startswith(f"{PREFIX}sandbox-files/")),
                "files_in_local_stores": local,
            }
        }

    def stop(self) -> None:
        """Stop the S3 server and PostgreSQL (each by what started it)."""
        self.s3.stop()
        self.pg.stop()


async def start_two_hosts(workdir: Path) -> TwoHosts:
    """Start PostgreSQL and the S3 server, make the bucket, the database and the two homes."""
    s3 = await asyncio.to_thread(start_s3, workdir / "moto.log")
    try:
        pg = await asyncio.to_thread(start_postgres, workdir / "pg")
    except BaseException:
        s3.stop()
        raise
    try:
        bucket = await asyncio.to_thread(s3.make_bucket)
        memory_url = await asyncio.to_thread(pg.new_database)
    except BaseException:
        s3.stop()
        pg.stop()
        raise
    homes = [workdir / f"host-{name}" for name in ("a", "b")]
    for h in homes:
        h.mkdir(mode=0o700)
    return TwoHosts(pg=pg, s3=s3, bucket=bucket, memory_url=memory_url,
                    keys=new_encryption_keys(), homes=homes)  # fmt: skip


def use_bucket_here(hosts: TwoHosts) -> None:
    """Point this process's AWS configuration at the hosts' S3 server (the driver's client)."""
    import os

    for k, v in hosts.worker_env(0).items():
        if k in AWS_TEST_ENV or k == "AWS_ENDPOINT_URL_S3":
            os.environ[k] = v
