"""docs/configuration.md lists every key the run file takes, and nothing the run file refuses: the keys
are read from the tables the parser builds while it reads a run file that has every kind of table."""

from __future__ import annotations

import re
from pathlib import Path

import trimesh

from goggles import checks
from goggles.rig.runfile import parse_run_config
from tests.support import REPO

DOCS = REPO / "docs" / "configuration.md"


def documented() -> dict[str, set[str]]:
    """Each table's keys as the page's rows name them: ``key``, ``table.key``, then ``.key`` for more
    of the same table in one cell; a section's one table for bare keys."""
    keys: dict[str, set[str]] = {}
    for section in re.split(r"^## ", DOCS.read_text(encoding="utf-8"), flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        tables = re.findall(r"`\[\[?(\w+)\]\]?`", heading)
        for row in (line for line in body.splitlines() if line.startswith("| `")):
            current = tables[0] if len(tables) == 1 else None
            for token in re.findall(r"`([^`]+)`", row.split("|")[1]):
                table, dot, key = token.rpartition(".")
                if dot and table:
                    current = table
                keys.setdefault(current, set()).add(key)
    return keys


def parsed(tmp_path: Path) -> dict[str, set[str]]:
    """Each table's allowed keys, as the parser asks for them reading a run file with every table."""
    seen: dict[str, set[str]] = {}
    original = checks.Table.__init__

    def recording(self, path, where, table, allowed=None, error=checks.ConfigError):
        name = re.fullmatch(r"\[\[?(\w+)\]\]?.*", where)
        if name and allowed is not None:
            seen.setdefault(name.group(1), set()).update(allowed)
        original(self, path, where, table, allowed, error)

    trimesh.creation.box().export(tmp_path / "box.stl")
    data = {
        "run": {"mode": "sim"},
        "clock": {"scale": 1.0},
        "zmq": {"enabled": False},
        "lcm": {"enabled": False},
        "ros2": {"enabled": False},
        "wind": {"speed": 1.0, "gusts": [{"start_s": 0.0, "duration_s": 1.0, "peak": [1.0, 0.0, 0.0]}]},
        "vehicle": [{"name": "q"}],
        "camera": [
            {"vehicle": "q", "name": "c"},
            {"vehicle": "q", "name": "e", "outputs": ["events"]},
        ],
        "range_sensor": [{"vehicle": "q", "name": "r"}],
        "lidar": [{"vehicle": "q", "name": "l", "preset": "vlp16"}],
        "prop": [
            {"name": "b", "box": [1.0, 1.0, 1.0]},
            {"name": "m", "mesh": "box.stl", "units": "m", "up": "+z"},
            {"name": "s", "splat": str(REPO / "tests/data/splats/playbot-2k.ply"), "units": "m", "up": "+z"},
        ],
        "splat": [{"file": str(REPO / "tests/data/splats/playbot-2k.ply"), "units": "m", "up": "+z"}],
    }
    checks.Table.__init__ = recording
    try:
        parse_run_config(data, tmp_path / "run.toml")
    finally:
        checks.Table.__init__ = original
    return seen


def test_every_run_file_key_is_documented_and_every_documented_key_is_taken(tmp_path):
    code, docs = parsed(tmp_path), documented()
    assert len(code["camera"]) > 20 and {"splat", "instances", "filter"} <= code["prop"]
    tables = ("run", "clock", "zmq", "lcm", "ros2", "vehicle", "camera", "range_sensor", "lidar", "prop", "wind")
    for table in tables:
        assert code[table] - docs.get(table, set()) == set(), f"[{table}] keys not in {DOCS.name}"
        assert docs.get(table, set()) - code[table] == set(), f"[{table}] keys {DOCS.name} names that it refuses"
