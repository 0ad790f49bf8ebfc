"""The README is a front page whose commands are the ones CI runs, and whose links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_opens_with_what_goggles_is_a_picture_and_the_two_commands():
    lines = README.splitlines()
    assert lines[0] == "# goggles" and len(lines) <= 200
    first_screen = "\n".join(lines[:30])
    assert "![" in first_screen and "docs/img/demo.png" in first_screen
    commands = re.search(r"```bash\n(.*?)\n```", README, re.S).group(1).splitlines()
    assert commands[0].startswith("pip install -e . && goggles run")
    test_command = commands[1].split("#")[0].strip()
    assert test_command == 'pip install -e ".[test]" && python -m pytest -q'
    ci = (REPO / ".ci" / "run").read_text()
    assert 'python3 -m pip install --quiet --disable-pip-version-check -e ".[test]" && python3 -m pytest -q' in ci


def test_every_link_of_the_readme_and_the_docs_leads_to_a_file_and_heading_that_exist():
    def headings(path: Path) -> set[str]:
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        found = re.findall(r"^#+ (.+)$", text, re.M)
        return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in found}

    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in headings(resolved):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, broken


def test_every_docs_page_is_in_the_sites_navigation():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert not {p for p in pages if p not in nav}
