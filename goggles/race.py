"""Racing: the AlphaPilot pass rule and score, for a flight sampled in time.

A gate counts as passed at the first sample where the vehicle is inside the axis-aligned bounding
box of the gate's four opening corners inflated by 0.1 m, and within 0.3 m of the gate plane. Gates
count only in order: a later gate flown through before the next one earns nothing (a skipped gate
fails the rest). Score = 10 N - T, with N the gates passed and T the time at the last one passed; a
run that ends by crash or timeout scores 0 (the AlphaPilot challenge's scoring rules).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from goggles.dynamics import SimulatorSettings
from goggles.errors import ConfigError
from goggles.rig import parts
from goggles.scene.gates import Course, Gate

BOX_INFLATION_M = 0.1
PLANE_TOLERANCE_M = 0.3


class RunEnd(Enum):
    """Why a run ended (the value is what ``goggles race`` prints)."""

    DONE = "done"
    """Every gate passed in order."""
    CRASH = "crash"
    """The vehicle collided."""
    TIMEOUT = "timeout"
    """The course's time limit passed first."""
    INCOMPLETE = "incomplete"
    """The flight (a log) ended before the time limit with gates left."""


@dataclass(frozen=True)
class RaceResult:
    gates_passed: int
    gate_times: tuple[float, ...]
    """s: when each passed gate was passed."""
    end: RunEnd
    end_time: float

    @property
    def time(self) -> float:
        """s: time at the last gate passed (0 when none)."""
        return self.gate_times[-1] if self.gate_times else 0.0

    @property
    def score(self) -> float:
        if self.end in (RunEnd.CRASH, RunEnd.TIMEOUT):
            return 0.0
        return 10.0 * self.gates_passed - self.time

    def line(self) -> str:
        return f"gates={self.gates_passed} time_s={self.time:.3f} score={self.score:.3f} end={self.end.value}"


def passes(gate: Gate, position: np.ndarray) -> bool:
    """The pass rule for one sample: inside the inflated corner box and near the gate plane."""
    corners = gate.corners_W()
    lower = corners.min(axis=0) - BOX_INFLATION_M
    upper = corners.max(axis=0) + BOX_INFLATION_M
    T = gate.T_WG
    distance_to_plane = abs(np.dot(position - T[:3, 3], T[:3, 0]))
    return bool(np.all(position >= lower) and np.all(position <= upper) and distance_to_plane <= PLANE_TOLERANCE_M)


class RaceJudge:
    """Scores a flight sample by sample (online in sim, or over a log)."""

    def __init__(self, course: Course):
        self.course = course
        self.gate_times: list[float] = []
        self.end: RunEnd | None = None
        self.end_time = 0.0

    @property
    def next_gate(self) -> Gate | None:
        return self.course.gates[len(self.gate_times)] if len(self.gate_times) < len(self.course.gates) else None

    def update(self, t: float, position: np.ndarray, crashed: bool = False) -> RunEnd | None:
        """Account one sample; returns how the run ended, once it has."""
        if self.end is not None:
            return self.end
        gate = self.next_gate
        if gate is not None and passes(gate, np.asarray(position, dtype=np.float64)):
            self.gate_times.append(float(t))
        if len(self.gate_times) == len(self.course.gates):
            self.end = RunEnd.DONE
        elif crashed:
            self.end = RunEnd.CRASH
        elif t > self.course.timeout:
            self.end = RunEnd.TIMEOUT
        if self.end is not None:
            self.end_time = float(t)
        return self.end

    def result(self, last_time: float | None = None) -> RaceResult:
        """The result; a flight that stopped before ending is INCOMPLETE."""
        end = self.end or RunEnd.INCOMPLETE
        end_time = self.end_time if self.end is not None else float(last_time or 0.0)
        return RaceResult(len(self.gate_times), tuple(self.gate_times), end, end_time)


def score_flight(
    course: Course, times: np.ndarray, positions: np.ndarray, crashed: np.ndarray | None = None
) -> RaceResult:
    """Score a recorded flight: (k,) times in s, (k, 3) positions in m, optional (k,) crash flags."""
    judge = RaceJudge(course)
    crashed = np.zeros(len(times), bool) if crashed is None else np.asarray(crashed, bool)
    for t, p, c in zip(times, positions, crashed):
        if judge.update(float(t), p, bool(c)) is not None:
            break
    return judge.result(float(times[-1]) if len(times) else 0.0)


def course_waypoints(course: Course, approach: float = 1.5, exit: float = 1.0) -> list[np.ndarray]:
    """Waypoints x, y, z, yaw through every gate: before it, its centre, after it (along its axis)."""
    points = []
    for gate in course.gates:
        T = gate.T_WG
        for offset in (-approach, 0.0, exit):
            points.append(np.array([*(T[:3, 3] + offset * T[:3, 0]), gate.yaw]))
    return points


def fly_course(
    course: Course,
    *,
    scene_path=None,
    device=None,
    seed: int = 0,
    tolerance: float = 0.35,
    log_every: int = 8,
) -> tuple[RaceResult, np.ndarray]:
    """Fly a course in the simulator with the built-in pilot (position control through the gates),
    gates as actors that the vehicle can crash into, judged online.

    Returns:
        The result, and the flown log as (k, 5) rows t, x, y, z, crashed (every ``log_every`` steps).
    """
    from goggles.dynamics import CollisionResponse, ControlMode, load_airframe
    from goggles.frames import quat_from_euler
    from goggles.rig.pilots import RoutePilot
    from goggles.world import build_world

    world = build_world(scene_path, course=course, device=device).scene
    sim = parts.simulator(
        load_airframe("fg-quad"),
        1,
        SimulatorSettings(seed=seed, floor_z=course.start[2], collisions=CollisionResponse.CRASH),
        device=world.device,
        world=world,
    )
    sim.reset(position=course.start[:3], attitude=quat_from_euler(0.0, 0.0, course.start[3]))
    waypoints = course_waypoints(course)
    judge = RaceJudge(course)
    pilot = RoutePilot(waypoints, tolerance, closed=False)
    rows = []
    sim.set_command(ControlMode.POSITION, pilot.target)
    while judge.end is None:
        sim.step(log_every)
        state = sim.states()
        position = state.position[0]
        rows.append([sim.time, *position, float(state.crashed[0])])
        judge.update(sim.time, position, bool(state.crashed[0]))
        target = pilot.update(position)
        if target is not None:
            sim.set_command(ControlMode.POSITION, target)
    sim.close()
    return judge.result(), np.array(rows)


def read_flight_log(path: Path):
    """A flight log as (table, header): CSV with a header row naming at least t, px, py, pz."""
    try:
        header = [name.strip() for name in path.read_text(encoding="utf-8-sig").splitlines()[0].split(",")]
        with warnings.catch_warnings():  # no rows: said below, in one line
            warnings.simplefilter("ignore", UserWarning)
            table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    except (OSError, ValueError, IndexError) as exc:
        raise ConfigError(f"{path}: cannot be read as a CSV flight log: {exc}") from exc
    missing = [k for k in ("t", "px", "py", "pz") if k not in header]
    if missing:
        raise ConfigError(f"{path}: a flight log needs a header naming t, px, py, pz (missing {missing})")
    if len(table) == 0 or table.shape[1] != len(header):
        raise ConfigError(f"{path}: a flight log needs rows of {len(header)} values, one per header column")
    t, position = table[:, header.index("t")], table[:, [header.index(k) for k in ("px", "py", "pz")]]
    bad = ~np.isfinite(np.column_stack([t, position])).all(axis=1)
    if bad.any():  # lines of the file: the header is line 1
        raise ConfigError(f"{path}: line {int(np.argmax(bad)) + 2}: t, px, py and pz must be finite numbers")
    back = np.diff(t) < 0
    if back.any():
        raise ConfigError(f"{path}: line {int(np.argmax(back)) + 3}: t goes back; a flight log is in time order")
    return table, header
