"""The generated references (docs/agent-spec.md, docs/cli.md, docs/environment.md) match the code
and document everything a user can set or type."""

import re
from pathlib import Path

from pydantic import BaseModel

from activities.spec import AgentSpec
from workers.cli import gen_docs


def test_committed_references_are_current():
    for path, text in gen_docs.outputs().items():
        assert path.exists(), f"{path.name} missing: run `make docs`"
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run `make docs`"


def test_references_name_every_spec_field_and_command():
    spec = gen_docs.agent_spec_markdown()
    for name in AgentSpec.model_fields:
        assert f"| `{name}` |" in spec
    cli = gen_docs.cli_markdown()
    for command in ("run", "approve", "reject", "status", "result", "follow"):
        assert f"## `agentctl {command}`" in cli


def test_check_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gen_docs, "DOCS", tmp_path)
    assert gen_docs.main(["--check"]) == 1
    assert "stale: agent-spec.md, cli.md, environment.md" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    assert gen_docs.main([]) == 0
    assert gen_docs.main(["--check"]) == 0


def test_every_command_subcommand_and_option_is_documented():
    import typer.main

    from workers.cli import app

    cli = gen_docs.cli_markdown()
    missing = []
    for path, cmd in gen_docs.walk_commands(typer.main.get_command(app)):
        if f"## `agentctl {path}`" not in cli:
            missing.append(path)
            continue
        section = cli.split(f"## `agentctl {path}`\n", 1)[1].split("\n## ", 1)[0]
        for param in gen_docs.documented_params(cmd):
            if not gen_docs._is_option(param):
                continue
            if not (param.help or "").strip():
                missing.append(f"{path} {param.opts[0]}: no help text")
            elif f"`{param.opts[0]}`" not in section:
                missing.append(f"{path} {param.opts[0]}: not in docs/cli.md")
    assert not missing, missing
    assert "## `agentctl memory list`" in cli


def _spec_models() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [AgentSpec]
    while todo:
        model = todo.pop(0)
        if model not in seen:
            seen.append(model)
            for field in model.model_fields.values():
                todo.extend(gen_docs._nested(field.annotation))
    return seen


def test_every_spec_field_has_a_description_and_required_means_must_write():
    spec = gen_docs.agent_spec_markdown()
    missing = [
        f"{model.__name__}.{name}"
        for model in _spec_models()
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not missing, f"spec fields without a description: {missing}"
    agent = spec.split("## `AgentSpec`")[1].split("\n## ")[0]
    assert "| `name` | str | required |" not in agent  # the loader sets it
    assert "| `model` | str | required |" not in agent  # AGENT_MODEL when absent
    for key in ("agents", "tool_modules", "rate_limits"):
        assert f"| `{key}` |" in spec.split("## `AgentSpec`")[0]


ENV_READ = re.compile(
    r"""(?:environ(?:\.get)?[\[(]|getenv\(|envvar=|_env\(\s*)\s*["']([A-Z][A-Z0-9_]+)["']"""
)


def test_every_environment_variable_read_is_in_the_generated_table():
    table = gen_docs.environment_markdown()
    root = Path(gen_docs.__file__).resolve().parents[2]
    read = {
        name
        for package in ("workers", "activities", "workflows")
        for path in (root / package).rglob("*.py")
        for name in ENV_READ.findall(path.read_text(encoding="utf-8"))
    }
    assert {"AGENT_LOG_LEVEL", "AGENT_PRINCIPAL", "AGENT_TENANT", "OTEL_SERVICE_NAME"} <= read
    missing = sorted(name for name in read if f"| `{name}` |" not in table)
    assert not missing, f"environment variables without a row in docs/environment.md: {missing}"
    for name in ("TEMPORAL_API_KEY", "TEMPORAL_PROFILE", "AGENT_TOOL_LEDGER_DAYS"):
        assert f"| `{name}` |" in table
    assert all(row[3].strip() for row in gen_docs.environment_rows()), "a variable has no meaning"
