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

from goggles.checks import finite_vector, read_toml
from goggles.errors import ConfigError
from goggles.frames import quat_from_euler, transform
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
    course = data.get("course", {})
    bad = sorted(set(course) - _COURSE_KEYS)
    if bad:
        raise ConfigError(f"{path}: [course]: unknown key {bad[0]!r}; allowed {sorted(_COURSE_KEYS)}")
    gates = []
    for i, entry in enumerate(data.get("gate", [])):
        where = f"{path}: [[gate]] #{i + 1}"
        bad = sorted(set(entry) - _GATE_KEYS)
        if bad:
            raise ConfigError(f"{where}: unknown key {bad[0]!r}; allowed {sorted(_GATE_KEYS)}")
        if "name" not in entry or "position" not in entry:
            raise ConfigError(f"{where}: needs 'name' and 'position'")
        opening = _numbers(where, entry, "opening", 2, [1.6, 1.6])
        perturbation = _numbers(where, entry, "perturbation", 3, [0.0, 0.0, 0.0])
        if min(opening) <= 0 or min(perturbation) < 0:
            raise ConfigError(f"{where}: 'opening' must be positive and 'perturbation' bounds >= 0")
        gates.append(
            Gate(
                name=str(entry["name"]),
                position=tuple(_numbers(where, entry, "position", 3, None)),
                yaw=float(np.radians(_numbers(where, entry, "yaw_deg", 1, [0.0])[0])),
                opening=tuple(opening),
                perturbation=(perturbation[0], perturbation[1], float(np.radians(perturbation[2]))),
            )
        )
    if not gates:
        raise ConfigError(f"{path}: a course needs at least one [[gate]]")
    names = [g.name for g in gates]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: gate names must be unique, got {names}")
    timeout = course.get("timeout", 60.0)
    if not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"{path}: [course]: 'timeout' must be a positive number of seconds")
    start = _numbers(f"{path}: [course]", course, "start", 4, [0.0, 0.0, 0.0, 0.0])
    return Course(str(course.get("name", path.stem)), tuple(gates), float(timeout), tuple(start))


def _numbers(where: str, table: dict, key: str, n: int, default) -> list[float]:
    value = table.get(key, default)
    if isinstance(value, (int, float)) and n == 1:
        value = [value]
    array = finite_vector(value, n)
    if array is None:
        raise ConfigError(f"{where}: {key!r} must be {n} finite number(s), got {value!r}")
    return [float(v) for v in array]
