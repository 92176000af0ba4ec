"""No file of the repository points outside it, and every relative link of its Markdown resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", ".git", "bench-results", "node_modules", "__pycache__"}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _files(*suffixes: str) -> list[Path]:
    return [
        p
        for p in ROOT.rglob("*")
        if p.suffix in suffixes and p.is_file() and not SKIP & set(p.relative_to(ROOT).parts)
    ]


def test_no_file_points_to_the_shared_folder_beside_the_clone():
    bad = [
        str(p.relative_to(ROOT))
        for p in _files(".py", ".md", ".yml", ".toml", ".sh")
        if re.search(r"\.\./shared|shared/notes|shared/CONTRACT", p.read_text(errors="replace"))
        and p != Path(__file__).resolve()
    ]
    assert not bad, f"files pointing outside the repository: {bad}"


def test_every_relative_markdown_link_resolves_inside_the_repository():
    bad: list[str] = []
    docs = _files(".md")
    assert len(docs) > 20
    for p in docs:
        for target in LINK.findall(p.read_text(errors="replace")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor of the same page
            path = (p.parent / target.split("#")[0]).resolve()
            if ROOT not in path.parents and path != ROOT or not path.exists():
                bad.append(f"{p.relative_to(ROOT)} -> {target}")
    assert not bad, f"links that do not resolve inside the repository: {bad}"


def test_every_file_the_readme_names_in_how_a_run_flows_exists():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## How a run flows", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:workers|workflows|activities)/[\w/]+\.py)`", section))
    assert len(named) >= 10
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"the README's run flow names files that do not exist: {missing}"
