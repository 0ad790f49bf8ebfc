"""The motion-capture bridge: mocap frames -> aligned, validated poses -> ``pose/<body>`` and
``skeleton/<name>`` messages on ZeroMQ and LCM.

Pipeline per frame: a source (NatNet, motioncapture, ...) yields bodies and skeletons in the mocap
system's own frame; the room calibration turns them into goggles' world (up axis, units, a fixed room
transform, a per-body offset from the tracked pivot to the vehicle's body frame, and a rename); each
body's tracker rejects NaN poses and jumps and time-stamps it; the publisher sends them. A body not
seen for ``stale_after`` seconds (default: three frame periods) is published once more with
``valid = False`` (its last pose), so the engine keeps it and reports it stale.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import goggles_lcm
from goggles.checks import Table, read_toml
from goggles.errors import ConfigError
from goggles.frames import matrix_to_quat, quat_from_euler, quat_to_matrix
from goggles.scene.assets import UNITS_M, UP_AXES
from goggles.transport.buses import LCM_MAX_CHANNEL, connect
from goggles.transport.buses import frame as zmq_frame
from goggles.transport.schema import header

log = logging.getLogger(__name__)

#: Up axis and units each system streams in by default.
SYSTEM_FRAMES = {
    "optitrack": ("+y", "m"),
    "natnet": ("+y", "m"),
    "vicon": ("+z", "mm"),
    "qualisys": ("+z", "mm"),
    "vrpn": ("+z", "m"),
    "mock": ("+z", "m"),
}


@dataclass(frozen=True)
class BodyCalibration:
    rename: str | None = None
    """The goggles name (e.g. the run file's vehicle), or None to keep the mocap name."""
    T_PB: np.ndarray = field(default_factory=lambda: np.eye(4))
    """(4, 4) the body frame in the tracked pivot's frame (marker centroid -> body), metres."""


@dataclass(frozen=True)
class RoomCalibration:
    """How a mocap room maps into goggles' world."""

    up: str
    """The mocap world's up axis (OptiTrack +y, Vicon/Qualisys +z)."""
    units: str
    """Length unit of the stream (Qualisys and Vicon stream mm)."""
    T_WR: np.ndarray = field(default_factory=lambda: np.eye(4))
    """(4, 4) the aligned mocap room in goggles' world, metres."""
    bodies: dict = field(default_factory=dict)
    """Per-body calibration by mocap name."""
    stale_after: float | None = None
    """s without a frame before a body is stale; None: three frame periods."""
    max_speed: float = 30.0
    """m/s: a pose farther from the last one than this speed allows is a jump, rejected."""
    skeleton_coordinates: str = "global"
    """How the system streams skeleton bones: "global" (world poses) or "local" (relative to the
    parent bone, Motive's default), which the bridge composes down the hierarchy."""

    @classmethod
    def for_system(cls, system: str) -> RoomCalibration:
        up, units = SYSTEM_FRAMES[system]
        return cls(up, units)

    def to_world(self, name: str, position: np.ndarray, q_wxyz: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
        """A mocap pose -> (goggles name, position (3,) m, quaternion (w, x, y, z)) in goggles' world."""
        R_up = UP_AXES[self.up]
        T = np.eye(4)
        T[:3, :3] = R_up @ quat_to_matrix(q_wxyz) @ R_up.T  # both the room and the body frame realigned
        T[:3, 3] = R_up @ (np.asarray(position, dtype=np.float64) * UNITS_M[self.units])
        body = self.bodies.get(name, BodyCalibration())
        T = self.T_WR @ T @ body.T_PB
        return body.rename or name, T[:3, 3], matrix_to_quat(T[:3, :3])


def load_room_calibration(path: str | Path, system: str) -> RoomCalibration:
    """Read a room calibration TOML (see ``calib/room-example.toml``).

    Raises:
        ConfigError: naming the file and the bad key.
    """
    path = Path(path)
    data = read_toml(path, "room calibration")
    default_up, default_units = SYSTEM_FRAMES[system]
    Table(path, "top level", data, {"room", "body"})
    allowed = {"up", "units", "position", "rpy_deg", "stale_after", "max_speed", "skeleton_coordinates"}
    room = Table(path, "[room]", data.get("room", {}), allowed)
    up, units = room.text("up", default_up), room.text("units", default_units)
    if up not in UP_AXES or units not in UNITS_M:
        raise ConfigError(f"{path}: [room]: up must be one of {sorted(UP_AXES)} and units one of {sorted(UNITS_M)}")
    bodies = {}
    for i, entry in enumerate(data.get("body", [])):
        body = Table(path, f"[[body]] #{i + 1}", entry, {"name", "rename", "offset_position", "offset_rpy_deg"})
        rename = body.text("rename") if "rename" in entry else None
        bodies[body.text("name")] = BodyCalibration(rename, _pose(body, "offset_position", "offset_rpy_deg"))
    stale_after = room.number("stale_after", positive=True, unit="s") if "stale_after" in room.table else None
    max_speed = room.number("max_speed", 30.0, positive=True, unit="m/s")
    coordinates = room.text("skeleton_coordinates", "global")
    if coordinates not in ("global", "local"):
        raise room.error("skeleton_coordinates", "'global' or 'local' (Motive's skeleton coordinates setting)")
    return RoomCalibration(
        up, units, _pose(room, "position", "rpy_deg"), bodies, stale_after, max_speed, skeleton_coordinates=coordinates
    )


def _pose(table: Table, position_key: str, rpy_key: str) -> np.ndarray:
    position = table.vector(position_key, 3, [0.0, 0.0, 0.0], unit="m")
    rpy = np.radians(table.vector(rpy_key, 3, [0.0, 0.0, 0.0], unit="deg"))
    T = np.eye(4)
    T[:3, :3] = quat_to_matrix(quat_from_euler(*rpy))
    T[:3, 3] = position
    return T


@dataclass
class MocapFrame:
    """One frame from a source, in the mocap system's own frame and units."""

    received: float
    """time.perf_counter() when its packet arrived."""
    bodies: dict
    """name -> (position (3,), quaternion (w, x, y, z), tracking valid)."""
    skeletons: dict = field(default_factory=dict)
    """name -> (bone names, parent indices, [(position, quaternion)] per bone)."""
    timestamp: float | None = None
    """The mocap system's own time of the frame, s (NatNet: Motive's clock), when it gives one."""


def compose_local(parents, poses):
    """Bone poses relative to their parents -> poses in the mocap world (parents come first)."""
    world = []
    for parent, (p, q) in zip(parents, poses):
        T = np.eye(4)
        T[:3, :3], T[:3, 3] = quat_to_matrix(q), p
        if parent >= 0:
            P = np.eye(4)
            P[:3, :3], P[:3, 3] = quat_to_matrix(world[parent][1]), world[parent][0]
            T = P @ T
        world.append((T[:3, 3], matrix_to_quat(T[:3, :3])))
    return world


class BodyTracker:
    """Per body: the last accepted pose and time, NaN and jump rejection, staleness."""

    def __init__(self, max_speed: float):
        self.max_speed = max_speed
        self.last: tuple[float, np.ndarray, np.ndarray] | None = None
        self.stale_published = False
        self.rejected = 0

    def accept(self, t: float, position: np.ndarray, q: np.ndarray) -> bool:
        if not (np.all(np.isfinite(position)) and np.all(np.isfinite(q)) and np.linalg.norm(q) > 1e-6):
            self.rejected += 1
            return False
        if self.last is not None:
            dt = max(t - self.last[0], 1e-3)
            if np.linalg.norm(position - self.last[1]) > self.max_speed * dt + 0.05:
                self.rejected += 1
                return False
        self.last = (t, position, q)
        self.stale_published = False
        return True


class Publisher:
    """Sends pose_t / skeleton_t on ZeroMQ (PUB connected to the engine's input endpoint) and/or LCM."""

    def __init__(self, zmq_endpoint: str | None, lcm_url: str | None):
        self._zmq = None
        if zmq_endpoint:
            import zmq

            self._zmq = zmq.Context.instance().socket(zmq.PUB)
            self._zmq.setsockopt(zmq.LINGER, 0)
            try:
                connect(self._zmq, zmq_endpoint)
            except ConfigError:
                self._zmq.close()
                raise
        self._lcm = None
        if lcm_url:
            import lcm

            self._lcm = lcm.LCM(lcm_url)
        self._seq = 0
        self.lcm_dropped = 0
        """Messages LCM could not carry (a channel over its length limit, a failed send)."""
        self._told: set[str] = set()

    def send(self, channel: str, message) -> None:
        data = message.encode()
        if self._zmq is not None:
            self._zmq.send(zmq_frame(channel, data))
        if self._lcm is None:
            return
        if len(channel.encode()) > LCM_MAX_CHANNEL:  # LCM refuses it: the body still goes out on ZeroMQ
            why = f"over LCM's {LCM_MAX_CHANNEL} bytes: a [[body]] rename in --calibration shortens it"
            self._not_on_lcm(channel, why)
            return
        try:
            self._lcm.publish(channel, data)
        except OSError as exc:  # a send LCM could not make: this message is lost, the bridge goes on
            self._not_on_lcm(channel, str(exc))

    def _not_on_lcm(self, channel: str, why: str) -> None:
        self.lcm_dropped += 1
        if channel not in self._told and len(self._told) < 64:
            self._told.add(channel)
            log.warning("not published on LCM: %s: %s", channel[:80], why)

    def pose(self, name: str, utime: int, position, q, valid: bool) -> None:
        message = goggles_lcm.pose_t()
        message.header = header(utime, self._seq)
        self._seq += 1
        message.name = name
        message.position = [float(v) for v in position]
        message.orientation = [float(v) for v in q]
        message.valid = valid
        self.send(f"pose/{name}", message)

    def skeleton(self, name: str, utime: int, bones: list[str], parents: list[int], poses) -> None:
        message = goggles_lcm.skeleton_t()
        message.header = header(utime, self._seq)
        self._seq += 1
        message.name = name
        message.num_bones = len(bones)
        message.bone_names = list(bones)
        message.parents = [int(p) for p in parents]
        message.positions = [[float(v) for v in p] for p, _ in poses]
        message.orientations = [[float(v) for v in q] for _, q in poses]
        self.send(f"skeleton/{name}", message)

    def close(self) -> None:
        if self._zmq is not None:
            self._zmq.close(0)


class MocapBridge:
    """Aligns, validates, time-stamps and publishes the frames of a source.

    Args:
        calibration: the room calibration.
        publisher: where poses go.
    """

    def __init__(self, calibration: RoomCalibration, publisher: Publisher):
        self.calibration = calibration
        self.publisher = publisher
        self.trackers: dict[str, BodyTracker] = {}
        self.latency = deque(maxlen=10_000)
        """s from a packet's arrival to its poses being published."""
        self.frames = 0
        self._arrivals = deque(maxlen=50)
        self._timestamps = deque(maxlen=50)

    @property
    def stale_after(self) -> float:
        if self.calibration.stale_after is not None:
            return self.calibration.stale_after
        return 2.5 * self.frame_period  # flagged, with polling, within three frame periods

    @property
    def frame_period(self) -> float:
        """s between frames, from the mocap system's own time stamps when they advance (packets read in
        a burst arrive together), else from arrivals; 0.1 before ten frames."""
        for times in (self._timestamps, self._arrivals):
            if len(times) >= 10 and times[-1] > times[0]:
                return (times[-1] - times[0]) / (len(times) - 1)
        return 0.1

    def handle(self, frame: MocapFrame) -> None:
        """Publish a frame's bodies and skeletons."""
        now_wall = time.time_ns() // 1000
        self._arrivals.append(frame.received)
        if frame.timestamp is not None:
            self._timestamps.append(frame.timestamp)
        self.frames += 1
        for mocap_name, (position, q, valid) in frame.bodies.items():
            if not valid:
                continue  # tracking lost for this frame: the staleness watchdog covers it
            name, p_W, q_W = self.calibration.to_world(mocap_name, position, q)
            tracker = self.trackers.setdefault(name, BodyTracker(self.calibration.max_speed))
            if tracker.accept(frame.received, p_W, q_W):
                self.publisher.pose(name, now_wall, p_W, q_W, True)
        for name, (bones, parents, poses) in frame.skeletons.items():
            if self.calibration.skeleton_coordinates == "local":
                poses = compose_local(parents, poses)
            world = [self.calibration.to_world(f"{name}/{bone}", p, q)[1:] for bone, (p, q) in zip(bones, poses)]
            if all(np.all(np.isfinite(p)) and np.all(np.isfinite(q)) for p, q in world):
                self.publisher.skeleton(name, now_wall, bones, parents, world)
        self.latency.append(time.perf_counter() - frame.received)

    def check_stale(self, now: float | None = None) -> list[str]:
        """Publish ``valid = False`` once for every body silent longer than ``stale_after``."""
        now = time.perf_counter() if now is None else now
        stale = []
        for name, tracker in self.trackers.items():
            if tracker.last is not None and not tracker.stale_published and now - tracker.last[0] > self.stale_after:
                t, p, q = tracker.last
                self.publisher.pose(name, time.time_ns() // 1000, p, q, False)
                tracker.stale_published = True
                stale.append(name)
                log.warning("%s is stale: no frame for %.0f ms", name, (now - t) * 1e3)
        return stale

    def rejected(self) -> int:
        return sum(t.rejected for t in self.trackers.values())


def run_bridge(source, bridge: MocapBridge, *, duration: float | None = None, stop=None, status=None) -> None:
    """Move frames from ``source`` through ``bridge`` until ``duration`` s pass or ``stop`` is set."""
    start = last_status = time.perf_counter()
    while (stop is None or not stop.is_set()) and (duration is None or time.perf_counter() - start < duration):
        for frame in source.frames(timeout=min(0.01, bridge.frame_period / 4.0)):
            bridge.handle(frame)
        bridge.check_stale()
        if status is not None and time.perf_counter() - last_status > 1.0:
            last_status = time.perf_counter()
            status(status_line(source, bridge))


def status_line(source, bridge: MocapBridge) -> str:
    latency = np.array(bridge.latency) * 1e3 if bridge.latency else np.array([np.nan])
    return (
        f"frames {bridge.frames} ({1.0 / bridge.frame_period:.0f} Hz)  bodies {sorted(bridge.trackers)}  "
        f"latency p50 {np.percentile(latency, 50):.3f} ms p99 {np.percentile(latency, 99):.3f} ms  "
        f"rejected {bridge.rejected()}  malformed {source.malformed}"
        + (f"  reconnected {source.restarts}" if getattr(source, "restarts", 0) else "")
        + (f"  not on LCM {bridge.publisher.lcm_dropped}" if bridge.publisher.lcm_dropped else "")
    )
