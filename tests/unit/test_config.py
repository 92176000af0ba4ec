"""workers/config.py: every variable of docs/contract.md and the README, read by pydantic-settings."""

import base64
from pathlib import Path

import pytest
from pydantic import ValidationError

from workers.config import (
    LOCAL_MODEL_NAME,
    PROJECT_ROOT,
    Settings,
    env_var,
    load_settings,
    settings_errors,
)
from workers.payloads.encryption import EncryptionKeyError, load_keys
from workflows.models import RunResult

VARIABLES = {
    "TEMPORAL_ADDRESS": ("temporal_address", "127.0.0.1:7233", "h:1", "h:1"),
    "TEMPORAL_NAMESPACE": ("temporal_namespace", "default", "ns", "ns"),
    "AGENT_TASK_QUEUE": ("task_queue", "agent-runtime", "q", "q"),
    "AGENT_WORKER_VERSIONING": ("worker_versioning", False, "true", True),
    "AGENT_BUILD_ID": ("build_id", None, "b7", "b7"),
    "AGENT_EVAL_WORKER": ("eval_worker", True, "false", False),
    "AGENT_WORKFLOW_SANDBOX": ("workflow_sandbox", False, "true", True),
    "OPENAI_BASE_URL": (
        "openai_base_url",
        "http://127.0.0.1:8110/v1",
        "http://x/v1",
        "http://x/v1",
    ),
    "OPENAI_API_KEY": ("openai_api_key", "local", "sk-1", "sk-1"),
    "AGENT_MODEL": ("default_model", LOCAL_MODEL_NAME, "gpt-4o", "gpt-4o"),
    "AGENT_SPEC_FILE": (
        "spec_file",
        str(PROJECT_ROOT / "agents" / "agents.yml"),
        "/s.yml",
        "/s.yml",
    ),
    "AGENT_HOME": ("home", str(PROJECT_ROOT / ".agent-runtime"), "/h", "/h"),
    "AGENT_TOOL_MODULES": ("tool_modules", [], " a ,b,, ", ["a", "b"]),
    "AGENT_STATE_DIR": ("state_dir", str(PROJECT_ROOT / ".agent-runtime"), "/st", "/st"),
    "AGENT_MODEL_IDLE_TIMEOUT": ("model_idle_timeout_seconds", 60.0, "2.5", 2.5),
    "AGENT_MODEL_MAX_REPLY_BYTES": ("model_max_reply_bytes", 32 * 1024 * 1024, "4096", 4096),
    "AGENT_HEARTBEAT_TIMEOUT": ("heartbeat_timeout_seconds", 5.0, "3", 3.0),
    "AGENT_LOG_LEVEL": ("log_level", "info", "debug", "debug"),
    "AGENT_PAYLOAD_STORE": ("payload_store", "local", "s3", "s3"),
    "AGENT_PAYLOAD_DIR": ("payload_dir", None, "/p", "/p"),
    "AGENT_PAYLOAD_THRESHOLD_BYTES": ("payload_threshold_bytes", 32 * 1024, "100", 100),
    "AGENT_S3_BUCKET": ("s3_bucket", None, "b", "b"),
    "AGENT_S3_PREFIX": ("s3_prefix", "", "pre/", "pre/"),
    "AGENT_CODEC_PORT": ("codec_port", 8234, "9001", 9001),
    "AGENT_METRICS_ADDRESS": ("metrics_address", None, "0.0.0.0:9464", "0.0.0.0:9464"),
    "AGENT_METRICS_RUN_COUNTS_SECONDS": ("metrics_run_counts_seconds", 15.0, "0", 0.0),
    "AGENT_CONSOLE_AUTH": ("console_auth", "token", "oidc", "oidc"),
    "AGENT_CONSOLE_PRINCIPAL": ("console_principal", "console", "ann", "ann"),
    "AGENT_CONSOLE_TENANTS": ("console_tenants", "*", "a,b", "a,b"),
    "AGENT_CONSOLE_ALLOWED_HOSTS": ("console_allowed_hosts", "", "h.example", "h.example"),
    "AGENT_CONSOLE_ALLOWED_ORIGINS": ("console_allowed_origins", "", "http://o:1", "http://o:1"),
    "AGENT_CONSOLE_IDENTITY_HEADER": (
        "console_identity_header",
        "X-Forwarded-User",
        "X-User",
        "X-User",
    ),
    "AGENT_CONSOLE_TRUSTED_PROXIES": ("console_trusted_proxies", "", "10.0.0.1", "10.0.0.1"),
    "AGENT_OIDC_JWKS_URL": ("oidc_jwks_url", None, "http://idp/jwks", "http://idp/jwks"),
    "AGENT_OIDC_ISSUER": ("oidc_issuer", None, "http://idp", "http://idp"),
    "AGENT_OIDC_AUDIENCE": ("oidc_audience", None, "console", "console"),
    "AGENT_ENCRYPTION_KEYS": ("encryption_keys", None, "/keys", "/keys"),
    "AGENT_CALLBACK_URL": (
        "callback_url",
        "http://127.0.0.1:8235",
        "https://a.example",
        "https://a.example",
    ),
    "AGENT_CALLBACK_KEY": ("callback_key", None, "a2V5", "a2V5"),
    "AGENT_MEMORY_URL": ("memory_url", None, "sqlite:///m.db", "sqlite:///m.db"),
    "AGENT_MODEL_CACHE": ("model_cache", None, "/cache", "/cache"),
    "AGENT_LLAMA_SERVER": ("llama_server", None, "/bin/llama-server", "/bin/llama-server"),
    "AGENT_LLAMA_BUILD": ("llama_build", "auto", "source", "source"),
    "AGENT_LLAMA_BUILD_JOBS": ("llama_build_jobs", None, "2", 2),
    "AGENT_OTEL": ("otel", "off", "console", "console"),
    "OTEL_EXPORTER_OTLP_ENDPOINT": ("otel_endpoint", None, "http://c", "http://c"),
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ("otel_traces_endpoint", None, "http://t", "http://t"),
    "OTEL_SERVICE_NAME": ("otel_service_name", "agent-runtime", "svc", "svc"),
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name, (field, *_rest) in VARIABLES.items():
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
        monkeypatch.delenv(field, raising=False)
    # a key file `make demo` left in the project's state folder is not a default
    monkeypatch.setattr("workers.config.ENCRYPTION_KEY_FILE", "no-key-file-in-these-tests")
    return monkeypatch


def test_defaults_when_unset_or_empty(clean_env: pytest.MonkeyPatch):
    defaults = {field: default for field, default, _raw, _value in VARIABLES.values()}
    assert load_settings().model_dump() == Settings().model_dump()
    assert {k: v for k, v in Settings().model_dump().items() if k in defaults} == defaults
    for name in VARIABLES:
        clean_env.setenv(name, "")
    assert load_settings().model_dump() == Settings().model_dump()


def test_every_variable_sets_its_field(clean_env: pytest.MonkeyPatch):
    for name, (_field, _default, raw, _value) in VARIABLES.items():
        clean_env.setenv(name, raw)
    s = load_settings()
    assert type(s) is Settings
    assert {f: getattr(s, f) for f, *_ in VARIABLES.values()} == {
        f: value for f, _d, _r, value in VARIABLES.values()
    }


def test_only_the_exact_variable_names_count(clean_env: pytest.MonkeyPatch):
    for name, (field, _default, raw, _value) in VARIABLES.items():
        clean_env.setenv(name.lower(), raw)
        clean_env.setenv(field, raw)
    assert load_settings().model_dump() == Settings().model_dump()


def test_settings_built_in_code_ignore_the_environment(clean_env: pytest.MonkeyPatch):
    clean_env.setenv("AGENT_CODEC_PORT", "9001")
    assert Settings(state_dir="/x").codec_port == 8234
    assert Settings(codec_port=5, tool_modules=["m"]).tool_modules == ["m"]


def test_a_bad_value_names_the_field(clean_env: pytest.MonkeyPatch):
    clean_env.setenv("AGENT_CODEC_PORT", "70000")
    with pytest.raises(ValidationError, match="codec_port"):
        load_settings()


def test_every_field_documents_its_variable():
    for name, (field, *_rest) in VARIABLES.items():
        assert (Settings.model_fields[field].description or "").startswith(f"{name}: ")
    assert len(Settings.model_fields) == len(VARIABLES)


def test_a_bad_value_is_one_line_naming_its_variable(clean_env: pytest.MonkeyPatch):
    clean_env.setenv("AGENT_CODEC_PORT", "70000")
    clean_env.setenv("AGENT_WORKFLOW_SANDBOX", "maybe")
    with pytest.raises(ValidationError) as caught:
        load_settings()
    lines = settings_errors(caught.value)
    assert lines is not None and len(lines) == 2
    assert lines[0].startswith("AGENT_WORKFLOW_SANDBOX='maybe': Input should be a valid boolean")
    assert lines[1] == "AGENT_CODEC_PORT='70000': Input should be less than or equal to 65535"
    assert all(name == env_var(field) for name, (field, *_rest) in VARIABLES.items())
    with pytest.raises(ValidationError) as other:
        RunResult.model_validate({"status": 5})
    assert settings_errors(other.value) is None  # not about the settings: not reported as such


@pytest.mark.parametrize("value", ["/no/such/keyfile", "~/no-such-keyfile", "./no-such", "a/b"])
def test_a_key_setting_that_looks_like_a_path_names_the_missing_file(value: str):
    with pytest.raises(EncryptionKeyError, match="which does not exist") as caught:
        load_keys(value)
    assert "expected key_id" not in str(caught.value)


def test_a_key_line_with_a_slash_is_still_a_key_and_garbage_says_both_readings(tmp_path: Path):
    key = "k1:" + base64.b64encode(bytes([255] * 32)).decode()  # "////..."
    assert "/" in key and load_keys(key) == [("k1", bytes([255] * 32))]
    with pytest.raises(EncryptionKeyError, match="not a file"):
        load_keys(str(tmp_path))
    with pytest.raises(EncryptionKeyError, match=r"key_id:base64key \(and no file 'garbage!!'"):
        load_keys("garbage!!")
