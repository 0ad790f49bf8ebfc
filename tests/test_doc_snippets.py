"""Every Python snippet in docs/ runs as written (a fresh interpreter in the repository), or is marked
``<!-- snippet not run: why -->`` above its fence and is still checked: it compiles, every name it
imports exists, and every ``client.<method>(...)`` call binds to ``goggles.client.Client``'s signature.
So a documented API cannot rot unseen."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"(?:<!-- snippet not run: (?P<why>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.S)


def snippets():
    found = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text[: match.start("code")].count("\n") + 1
            found.append(pytest.param(match["code"], match["why"], id=f"{page.relative_to(REPO)}:{line}"))
    return found


def test_the_docs_have_snippets_to_check():
    assert len(snippets()) >= 7


@pytest.mark.parametrize(("code", "why"), snippets())
def test_a_docs_snippet_names_what_exists(code, why):
    tree = ast.parse(code)  # compiles
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            assert not missing, f"{node.module} has no {missing}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "client"
        ):
            from goggles.client import Client

            method = getattr(Client, node.func.attr, None)
            assert method is not None, f"Client has no {node.func.attr}"
            args = [None] * len(node.args)
            kwargs = {k.arg: None for k in node.keywords}
            inspect.signature(method).bind(None, *args, **kwargs)  # self, then the snippet's arguments


@pytest.mark.slow
@pytest.mark.parametrize(("code", "why"), [s for s in snippets() if s.values[1] is None])
def test_a_docs_snippet_runs_as_written(code, why):
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
