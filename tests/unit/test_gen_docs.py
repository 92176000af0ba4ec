"""The generated references (docs/agent-spec.md, docs/cli.md) match the code that generates them."""

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
    assert "stale: agent-spec.md, cli.md" in capsys.readouterr().err
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
