"""The package's layers, read from its imports: data flows one way (sources -> world -> renderer ->
sensors -> outputs), so no part imports one above it and no modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

GOGGLES = Path(__file__).resolve().parents[1] / "goggles"

#: Each part's layer: a part imports its own layer's allowed neighbours and the layers below.
LAYERS = {
    "errors": 0, "checks": 0, "distributions": 0, "frames": 0, "paths": 0, "clock": 0, "control_modes": 0, "runtime": 0,
    "scene": 1,
    "world": 2,
    "render": 3, "sensors": 3, "dynamics": 3, "firmware": 3,
    "transport": 4,
    "rig": 5,
    "engine": 6,
    "logs": 7, "envs": 7, "race": 7, "client": 7,
    "preview": 8, "bench": 8,
    "cli": 9, "console": 9,
}  # fmt: skip
#: Imports allowed between parts of one layer (importer -> imported).
SIDEWAYS = {("sensors", "render"), ("logs", "envs"), ("envs", "race"), ("logs", "race"), ("console", "cli")}


def _part(module: str) -> str:
    """``goggles.world.build`` -> ``world``."""
    return module.split(".")[1]


def imports_in(source: str, module: str, package: bool = False) -> list[tuple[str, int]]:
    """(imported goggles module, line) of every import in ``source`` (the text of ``module``; a
    package's ``__init__`` when ``package``), at module level or inside functions, in every form:
    ``import goggles.x``, ``from goggles.x import y``, ``from goggles import x``, relative imports
    (``from . import x``, ``from ..x import y``) and ``importlib.import_module("goggles.x")``."""
    found = []
    here = module.split(".") if package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here[: len(here) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            if base == "goggles" or (node.level and not node.module):
                found += [(f"{base}.{a.name}", node.lineno) for a in node.names]
            elif base.startswith("goggles."):
                found.append((base, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("goggles.")]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith("goggles.")
        ):
            found.append((node.args[0].value, node.lineno))
    return found


def _imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every goggles import in the package."""
    found = []
    for path in GOGGLES.rglob("*.py"):
        module = ".".join(("goggles", *path.relative_to(GOGGLES).with_suffix("").parts)).removesuffix(".__init__")
        package = path.name == "__init__.py"
        found += [(module, imported, line) for imported, line in imports_in(path.read_text("utf-8"), module, package)]
    return found


def test_every_form_of_import_is_seen():
    """An upward import written any way is found (a test that missed ``from goggles import engine``
    passed a mutation that added one)."""
    source = """
import goggles.engine.engine
from goggles import engine
from goggles.rig import parts
from .. import engine as e
from ..engine.engine import Engine
from . import props
import importlib
def later():
    from goggles.logs import replay
    importlib.import_module("goggles.cli.render")
"""
    seen = [name for name, _ in imports_in(source, "goggles.world.build")]
    assert seen == [
        "goggles.engine.engine",
        "goggles.engine",
        "goggles.rig",
        "goggles.engine",
        "goggles.engine.engine",
        "goggles.world.props",
        "goggles.logs",
        "goggles.cli.render",
    ]


def test_every_part_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in GOGGLES.iterdir() if not p.name.startswith("_")}
    parts -= {"py", "__pycache__"}
    assert {p for p in parts if p.replace(".py", "") not in LAYERS and p != "py.typed"} == set()


def test_no_part_imports_a_part_above_it():
    upward = []
    for importer, imported, line in _imports():
        a, b = _part(importer), _part(imported)
        if a == b:
            continue
        sideways = LAYERS[b] == LAYERS[a] and LAYERS[a] > 0 and (a, b) not in SIDEWAYS  # the base shares freely
        if LAYERS[b] > LAYERS[a] or sideways:
            upward.append(f"{importer}:{line} imports {imported}")
    assert not upward, upward


def test_no_modules_import_each_other_in_a_circle():
    """At module level (an import inside a function runs later, when both are loaded)."""
    graph: dict[str, set[str]] = {}
    for path in GOGGLES.rglob("*.py"):
        module = ".".join(("goggles", *path.relative_to(GOGGLES).with_suffix("").parts)).removesuffix(".__init__")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("goggles")
                and not node.level
            ):
                graph.setdefault(module, set()).add(node.module)
    seen: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        seen[module] = 1
        stack.append(module)
        for target in graph.get(module, ()):
            if seen.get(target) == 1 and not module.startswith(target + "."):  # a package importing its own module
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in seen:
                visit(target)
        stack.pop()
        seen[module] = 2

    for module in sorted(graph):
        if module not in seen:
            visit(module)
    real = [c for c in cycles if not all(m.startswith(c[0].rsplit(".", 1)[0]) for m in c) or len(c) > 2]
    assert not real, real


def test_renderers_simulators_lidars_and_firmwares_are_built_in_one_place():
    """``goggles.rig.parts`` builds every ``Renderer``, ``MultirotorSim``, ``Lidar`` and firmware
    (``BetaflightSitl``, ``FirmwareLink``) of the package and its tools: one place to change how each
    is built; tests may build their own."""
    built_elsewhere = []
    for root in (GOGGLES, GOGGLES.parent / "tools", GOGGLES.parent / "bridges"):
        for path in root.rglob("*.py"):
            if path == GOGGLES / "rig" / "parts.py":
                continue
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                    if name in ("Renderer", "MultirotorSim", "Lidar", "BetaflightSitl", "FirmwareLink"):
                        built_elsewhere.append(f"{path.relative_to(GOGGLES.parent)}:{node.lineno} {name}(")
    assert not built_elsewhere, built_elsewhere


def test_the_engine_only_orders():
    """What an event does lives in its part (``engine/vehicle_events``, ``sensor_events``, ``status``):
    the engine module stays a driver's size."""
    assert len((GOGGLES / "engine" / "engine.py").read_text("utf-8").splitlines()) < 250
