"""Racing gates and courses: a gate actor shape with IR beacons at its opening's corners, and course
files (TOML) listing gates in order with poses and perturbation bounds.

Gate frame: x is the direction of flight through the gate (the gate plane is x = 0), y left, z up;
the opening is centred on the origin. Beacons sit on the frame's front face (x = -depth/2) at the
four corners of the opening, ids ``<gate>/0..3``: top-left, top-right, bottom-right, bottom-left as
seen by a vehicle approaching along +x.

Example course::

    [course]
    name = "arena-course"
    timeout = 60.0                 # s
    start = [0.0, 0.0, 0.1, 0.0]   # x, y, z (m), yaw (rad)

    [[gate]]
    name = "gate1"
    position = [4.0, 0.0, 2.0]     # centre of the opening, m, world ENU
    yaw_deg = 0.0                  # direction of flight through it
    opening = [1.6, 1.6]           # width, height, m
    perturbation = [0.5, 0.5, 10.0]   # bounds of a random shift: dx, dy (m), dyaw (deg)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from goggles.checks import Table, read_toml
from goggles.errors import ConfigError
from goggles.frames import quat_from_euler, transform
from goggles.runtime.signals import signals_held
from goggles.scene.actors import ActorShape
from goggles.scene.assets import part_from_trimesh

#: Frame bar thickness and depth, m.
GATE_BAR = 0.15
GATE_DEPTH = 0.15
#: Segmentation class of gates.
GATE_CLASS = 10


@dataclass(frozen=True)
class Gate:
    name: str
    position: tuple[float, float, float]
    """Centre of the opening, m, world."""
    yaw: float
    """rad: the gate's x axis (direction of flight) in the world."""
    opening: tuple[float, float]
    """Width and height of the opening, m."""
    perturbation: tuple[float, float, float]
    """Bounds of a random shift: dx, dy (m), dyaw (rad)."""

    @property
    def T_WG(self) -> np.ndarray:
        return transform(self.position, quat_from_euler(0.0, 0.0, self.yaw))

    def corners_G(self) -> np.ndarray:
        """(4, 3) opening corners in the gate frame: top-left, top-right, bottom-right, bottom-left."""
        w, h = self.opening[0] / 2.0, self.opening[1] / 2.0
        return np.array([[0.0, w, h], [0.0, -w, h], [0.0, -w, -h], [0.0, w, -h]])

    def corners_W(self) -> np.ndarray:
        """(4, 3) opening corners in the world."""
        T = self.T_WG
        return self.corners_G() @ T[:3, :3].T + T[:3, 3]

    def beacon_positions_G(self) -> np.ndarray:
        """(4, 3) beacon positions on the frame's front face, gate frame."""
        corners = self.corners_G()
        corners[:, 0] = -GATE_DEPTH / 2.0 - 1e-3
        return corners


@dataclass(frozen=True)
class Course:
    name: str
    gates: tuple[Gate, ...]
    timeout: float
    """s: a run not done by then ends with TIMEOUT."""
    start: tuple[float, float, float, float]
    """x, y, z (m), yaw (rad) of the vehicle at the start."""

    def perturbed(self, seed: int) -> Course:
        """The course with every gate shifted uniformly within its perturbation bounds (seeded)."""
        rng = np.random.default_rng(seed)
        gates = []
        for gate in self.gates:
            dx, dy, dyaw = (rng.uniform(-b, b) if b > 0 else 0.0 for b in gate.perturbation)
            x, y, z = gate.position
            gates.append(replace(gate, position=(x + dx, y + dy, z), yaw=gate.yaw + dyaw))
        return replace(self, gates=tuple(gates))


def gate_bars(opening: tuple[float, float]) -> list[tuple[tuple[float, float, float], tuple[float, float, float]]]:
    """The four bars of a gate's frame as (size, centre) boxes in the gate frame, metres."""
    w, h = opening
    b = GATE_BAR
    return [
        ((GATE_DEPTH, w + 2 * b, b), (0.0, 0.0, h / 2 + b / 2)),
        ((GATE_DEPTH, w + 2 * b, b), (0.0, 0.0, -h / 2 - b / 2)),
        ((GATE_DEPTH, b, h), (0.0, w / 2 + b / 2, 0.0)),
        ((GATE_DEPTH, b, h), (0.0, -w / 2 - b / 2, 0.0)),
    ]


@signals_held()
def gate_shape(opening: tuple[float, float], name: str = "gate") -> ActorShape:
    """A square gate frame around an opening (four bars), in the gate frame, orange."""
    import trimesh

    bars = []
    for size, centre in gate_bars(opening):
        bar = trimesh.creation.box(extents=size)
        bar.apply_translation(centre)
        bars.append(bar)
    frame = trimesh.util.concatenate(bars)
    frame.visual.vertex_colors = np.tile([255, 120, 0, 255], (len(frame.vertices), 1))
    return ActorShape(name, [part_from_trimesh(frame, name)], GATE_CLASS)


_COURSE_KEYS = {"name", "timeout", "start"}
_GATE_KEYS = {"name", "position", "yaw_deg", "opening", "perturbation"}


def load_course(path: str | Path) -> Course:
    """Read a course file.

    Raises:
        ConfigError: naming the file and the bad key.
    """
    path = Path(path)
    data = read_toml(path, "course file")
    unknown = sorted(set(data) - {"course", "gate"})
    if unknown:
        raise ConfigError(f"{path}: unknown table {unknown[0]!r}; a course has [course] and [[gate]]")
    course = Table(path, "[course]", data.get("course", {}), _COURSE_KEYS)
    gates = []
    for i, entry in enumerate(data.get("gate", [])):
        gate = Table(path, f"[[gate]] #{i + 1}", entry, _GATE_KEYS)
        opening = gate.vector("opening", 2, [1.6, 1.6], minimum=1e-3, unit="m")
        perturbation = gate.vector("perturbation", 3, [0.0, 0.0, 0.0], minimum=0.0, unit="m, m, deg")
        gates.append(
            Gate(
                name=gate.text("name"),
                position=tuple(float(v) for v in gate.vector("position", 3, unit="m")),
                yaw=float(np.radians(gate.number("yaw_deg", 0.0, unit="deg"))),
                opening=(float(opening[0]), float(opening[1])),
                perturbation=(float(perturbation[0]), float(perturbation[1]), float(np.radians(perturbation[2]))),
            )
        )
    if not gates:
        raise ConfigError(f"{path}: a course needs at least one [[gate]]")
    names = [g.name for g in gates]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: gate names must be unique, got {names}")
    timeout = course.number("timeout", 60.0, positive=True, unit="s")
    start = tuple(float(v) for v in course.vector("start", 4, [0.0, 0.0, 0.0, 0.0], unit="x, y, z m and yaw rad"))
    return Course(course.text("name", path.stem), tuple(gates), timeout, start)
