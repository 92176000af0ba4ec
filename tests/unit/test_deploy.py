"""deploy/: the container runs as a non-root user; the Kubernetes probes hit what the process serves."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from workers.config import Settings
from workers.metrics_server import HEALTH_PATH, METRICS_PATH, split_address

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SECRET_VARIABLES = {
    "OPENAI_API_KEY",
    "TEMPORAL_API_KEY",
    "AGENT_ENCRYPTION_KEYS",
    "AGENT_MEMORY_URL",
}


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in dockerfile():
        if word == "ENV":
            env.update(dict(item.split("=", 1) for item in shlex.split(rest)))
    return env


def documents() -> list[dict[str, Any]]:
    path = DEPLOY / "kubernetes" / "agent-runtime.yaml"
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def deployments() -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == "Deployment"]


def settings_env() -> dict[str, str]:
    (settings,) = [d for d in documents() if d["metadata"]["name"] == "agent-runtime-settings"]
    return dict(settings["data"])


def test_the_image_runs_as_a_user_that_is_not_root():
    users = [rest for word, rest in dockerfile() if word == "USER"]
    assert users, "the Dockerfile sets no USER: the process would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]
    assert user.isdigit(), "a numeric uid lets Kubernetes check runAsNonRoot"
    assert dockerfile()[-1][0] in ("CMD", "ENTRYPOINT")


def test_the_image_serves_metrics_on_the_port_it_exposes():
    env = docker_env()
    _, port = split_address(env["AGENT_METRICS_ADDRESS"])
    Settings(metrics_address=env["AGENT_METRICS_ADDRESS"])  # a valid setting
    exposed = {int(p) for word, rest in dockerfile() if word == "EXPOSE" for p in rest.split()}
    assert port in exposed


def test_every_probe_asks_healthz_on_the_metrics_port():
    _, port = split_address(settings_env()["AGENT_METRICS_ADDRESS"])
    assert deployments()
    for deployment in deployments():
        pod = deployment["spec"]["template"]
        for c in pod["spec"]["containers"]:
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            probes = {k: v for k, v in c.items() if k.endswith("Probe")}
            assert {"readinessProbe", "livenessProbe"} <= probes.keys(), c["name"]
            for kind, probe in probes.items():
                get = probe["httpGet"]
                assert get["path"] == HEALTH_PATH, (c["name"], kind)
                named = get["port"]
                assert ports.get(named, named) == port, (c["name"], kind)
            notes = pod["metadata"]["annotations"]
            assert notes["prometheus.io/path"] == METRICS_PATH
            assert int(notes["prometheus.io/port"]) == port


def test_pods_run_as_non_root_and_keys_come_from_secrets():
    secrets = {d["metadata"]["name"] for d in documents() if d["kind"] == "Secret"}
    assert not SECRET_VARIABLES & settings_env().keys(), "a key in a ConfigMap"
    for deployment in deployments():
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        for c in spec["containers"]:
            for var in c.get("env", []):
                if var["name"] in SECRET_VARIABLES:
                    ref = var["valueFrom"]["secretKeyRef"]
                    assert ref["name"] in secrets and "value" not in var, var["name"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_worker_gets_time_to_shut_down_gracefully():
    from workers.worker import WorkerTuning

    (worker,) = [d for d in deployments() if d["metadata"]["name"] == "agent-worker"]
    grace = worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > WorkerTuning.graceful_shutdown_timeout.total_seconds() + 5


def test_every_variable_the_example_sets_is_a_setting():
    from workers.config import env_var

    known = {env_var(f) for f in Settings.model_fields} | {"TEMPORAL_API_KEY"}
    named = set(settings_env()) | set(docker_env()) - {
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PIP_NO_CACHE_DIR",
        "PIP_DISABLE_PIP_VERSION_CHECK",
    }
    for deployment in deployments():
        for c in deployment["spec"]["template"]["spec"]["containers"]:
            named |= {v["name"] for v in c.get("env", [])}
    assert named - known == set()
