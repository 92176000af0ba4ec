"""``agentctl init DIR``: write a project of one's own (:mod:`workers.project`)."""

from __future__ import annotations

import typer
from rich.markup import escape

from workers.cli.base import EXIT_USAGE, app, err, out


@app.command()
def init(
    folder: str = typer.Argument(..., help="the project folder (created when missing)"),
    force: bool = typer.Option(False, "--force", help="overwrite files that exist"),
) -> None:
    """Write a project of your own into FOLDER: agents.yml, a tools package with its test, .env.

    ``agentctl worker`` started in FOLDER serves its agents and tools (docs/your-own-project.md).
    Refuses to overwrite existing files (exit 2, nothing written) unless ``--force``.
    """
    from workers.project import AGENT_NAME, ProjectExistsError, write_project

    try:
        written = write_project(folder, force=force)
    except ProjectExistsError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except OSError as e:
        err.print(f"[red]error:[/red] cannot write the project: {escape(str(e))}", highlight=False)
        raise typer.Exit(1) from None
    root = written[0].parent
    for path in written:
        out.print(f"wrote {escape(str(path.relative_to(root)))}", highlight=False)
    out.print(
        f"next: cd {escape(str(folder))}; pytest; agentctl worker; "
        f'agentctl run --agent {AGENT_NAME} "How many words does hello.txt have?" --follow',
        highlight=False,
    )
