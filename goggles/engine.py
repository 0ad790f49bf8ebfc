"""The engine: read sources, update the world, render the sensors that are due, publish.

One loop serves every mode. Work is scheduled as events at integer physics steps (a camera at 30 Hz
with 960 Hz physics fires every 32 steps), so sensor rates are exact in sim time:

* sim: the clock paces sim time at a fixed or automatic scale; built-in vehicles fly routes or
  follow commands from the bus.
* lockstep: sim time advances only by client step requests; the reply is sent once the outputs of
  those steps are published.
* live: vehicle poses come from the bus (motion capture); a camera renders as soon as a new pose
  arrives (at most twice its rate); if poses stop, it keeps rendering the last pose at half its rate
  (the images' pose_utime shows they are stale). A fallback at the full rate would race the pose
  stream and make fresh poses wait a whole period behind renders of old ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import goggles_lcm
from goggles.clock import ClockMode, PacedClock, ScaleMeter
from goggles.config import IMAGE_OUTPUTS, CameraConfig, RangeSensorConfig, RunConfig
from goggles.dynamics import ControlMode, MultirotorSim, load_airframe
from goggles.frames import matrix_to_quat, transform
from goggles.render import DeviceScene, Renderer, Shading, stereo_right_offset
from goggles.scene import load_static_scene
from goggles.scene.avatar import SkeletonPose, SkinnedAvatar, avatar_shape, build_avatar_mesh
from goggles.scene.bvh import load_bvh
from goggles.scene.gates import gate_shape, load_course
from goggles.sensors.beacons import Beacon, BeaconSensor
from goggles.sensors.ranges import RangeSensor
from goggles.transport.buses import LcmBus, ZmqBus, split_frame
from goggles.transport.schema import Encoding, MalformedMessage, decode_any, decode_input, header

log = logging.getLogger(__name__)

_ENCODINGS = {
    "depth": Encoding.DEPTH_F32,
    "range": Encoding.RANGE_F32,
    "rgb": Encoding.RGB8,
    "segmentation": Encoding.SEGMENTATION_I32,
}


@dataclass
class Counters:
    """What the engine did with its inputs and outputs."""

    received: int = 0
    malformed: int = 0
    """Undecodable, oversized, wrong-type or non-finite inputs, dropped."""
    ignored: int = 0
    """Valid inputs for nothing in this run (an unknown vehicle, a pose in sim mode...)."""
    published: int = 0
    malformed_by_channel: dict[str, int] = field(default_factory=dict)
    """Drops per input channel of this run; any other channel name (a sender's invention) counts under
    ``OTHER_CHANNELS``, so hostile names cannot grow this table."""

    def count_malformed(self, channel: str, known: bool) -> None:
        self.malformed += 1
        key = channel if known and len(self.malformed_by_channel) < MAX_COUNTED_CHANNELS else OTHER_CHANNELS
        self.malformed_by_channel[key] = self.malformed_by_channel.get(key, 0) + 1


#: Bucket of drop counts for channels that are not inputs of this run.
OTHER_CHANNELS = "(other channels)"
#: Most channels counted by name.
MAX_COUNTED_CHANNELS = 64


class StageTimes:
    """Recent wall durations of each stage of the loop, for the status line and benchmarks."""

    def __init__(self, keep: int = 2000):
        self._samples: dict[str, deque[float]] = {}
        self._keep = keep

    def add(self, stage: str, seconds: float) -> None:
        self._samples.setdefault(stage, deque(maxlen=self._keep)).append(seconds)

    def percentile_ms(self, stage: str, q: float) -> float:
        samples = self._samples.get(stage)
        return float(np.percentile(samples, q) * 1e3) if samples else float("nan")


@dataclass
class _Camera:
    vehicle: str
    name: str
    config: CameraConfig
    T_BC: np.ndarray


@dataclass
class _CameraGroup:
    """Cameras of one size and rate, rendered together in one launch."""

    cameras: list[_Camera]
    renderer: Renderer
    period_steps: int
    beacons: BeaconSensor | None = None
    """Beacon detections of the group's cameras, when any of them outputs beacons."""
    seq: int = 0
    last_render_wall: float = 0.0


@dataclass
class _Vehicle:
    name: str
    sim: MultirotorSim | None
    route: tuple
    route_index: int = 0
    external_control: bool = False
    T_WB: np.ndarray = field(default_factory=lambda: np.eye(4))
    pose_utime: int = 0
    new_pose: bool = False
    in_contact: bool = False
    """Touching the world during the last physics advance (a collision is published when this begins)."""
    stale: bool = False
    """Live mode: the pose source flagged this body lost; its last pose is kept."""
    previous: tuple[np.ndarray, int] | None = None
    """Live mode: the pose before the last one, with its utime (for extrapolation)."""


#: Most skeletons shown as avatars at once.
MAX_AVATARS = 8
#: Wall time the loop spends on inputs before it goes on with physics and outputs, s.
INPUT_BUDGET_S = 0.02
#: An avatar whose skeleton has not come for this long (s of sim time; wall time live) is removed.
AVATAR_TIMEOUT_S = 5.0


@dataclass
class _Avatar:
    skinned: SkinnedAvatar
    shape: int
    last: SkeletonPose | None = None
    heard: float = 0.0
    """When its skeleton last came (the engine's log time, s)."""


class Engine:
    """Everything a run needs, built from a RunConfig.

    Args:
        config: the run file's contents.
        device: Warp device for rendering and physics.
        status: called about once per wall second with a one-line status (the CLI prints it).
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        device=None,
        status: Callable[[str], None] | None = None,
        recorder=None,
        sinks=(),
    ):
        self.config = config
        self.mode = config.mode
        self.sinks = [sink for sink in (recorder, *sinks) if sink is not None]
        """Where every published output and accepted input also goes: a ``goggles.record.Recorder``,
        a Foxglove server (``write(channel, data, log_time_ns)``)."""
        self.dt = 1.0 / config.physics_rate
        self.counters = Counters()
        self._last_drop_log = 0.0
        self.times = StageTimes()
        self._status = status
        self._seq: dict[str, int] = {}
        self._rate_log: dict[str, deque[float]] = {}
        from goggles.paths import default_scene

        self.course = None
        shapes, actor_poses, self.beacon_list = [], [], []
        if config.course is not None:
            self.course = load_course(config.course)
            if config.perturb is not None:
                self.course = self.course.perturbed(config.perturb)
            for i, gate in enumerate(self.course.gates):
                shapes.append(gate_shape(gate.opening, gate.name))
                actor_poses.append(gate.T_WG)
                self.beacon_list += [
                    Beacon(f"{gate.name}/{k}", tuple(p), actor=i) for k, p in enumerate(gate.beacon_positions_G())
                ]
        scene = DeviceScene(
            load_static_scene(config.scene or default_scene()),
            device,
            shapes=shapes,
            max_actors=len(shapes) + MAX_AVATARS,
        )
        self.actor_poses = np.array(actor_poses).reshape(-1, 4, 4)
        scene.set_actors(range(len(shapes)), self.actor_poses)
        self.avatars: dict[str, _Avatar] = {}
        self.world = scene
        self.device = scene.device
        self.vehicles: dict[str, _Vehicle] = {}
        for v in config.vehicles:
            sim = None
            if self.mode not in (ClockMode.LIVE, ClockMode.REPLAY):
                sim = MultirotorSim(
                    load_airframe(v.preset),
                    1,
                    device=self.device,
                    dt=self.dt,
                    seed=config.seed,
                    imu_rate=v.imu_rate,
                    world=scene,
                    collisions=config.collisions,
                    floor_z=v.floor_z,
                )
                airborne = v.start[2] > 0.0
                sim.reset(
                    position=v.start[:3],
                    attitude=_yaw_quat(v.start[3]),
                    rotor_speed=sim.airframe.hover_speed if airborne else 0.0,
                )
                if v.route:
                    sim.set_command(ControlMode.POSITION, v.route[0])
                else:
                    sim.set_command(ControlMode.POSITION, v.start)
            vehicle = _Vehicle(v.name, sim, v.route)
            vehicle.T_WB = transform(v.start[:3], _yaw_quat(v.start[3]))
            self.vehicles[v.name] = vehicle
        self.groups = self._camera_groups(scene, config.cameras)
        self.range_sensors = [(c, RangeSensor(scene, c.model, seed=config.seed)) for c in config.range_sensors]
        self.buses = []
        if config.zmq is not None:
            self.buses.append(ZmqBus(config.zmq, curve=config.curve))
        if config.lcm_url is not None:
            self.buses.append(LcmBus(config.lcm_url))
        self.zmq = next((b for b in self.buses if isinstance(b, ZmqBus)), None)
        self.step = 0
        self._pending_skeletons: dict[str, SkeletonPose] = {}
        self._free_avatar_shapes: list[int] = []
        """World shape slots of avatars that left, reused by the next new one."""
        self._live_start = 0.0
        self.clips = [(a, load_bvh(a.bvh)) for a in config.avatars]
        self.clock = PacedClock(config.scale, max_scale=config.max_scale)
        self._status_meter = ScaleMeter()
        self._clock_meter = ScaleMeter()
        self._events = self._schedule()

    # ------------------------------------------------------------------ building

    def _camera_groups(self, scene: DeviceScene, configs) -> list[_CameraGroup]:
        by_key: dict[tuple, list[tuple[_Camera, int]]] = {}
        for c in configs:
            key = (c.model.width, c.model.height, c.rate)
            cameras = by_key.setdefault(key, [])
            if c.baseline is None:
                cameras.append((_Camera(c.vehicle, c.name, c, c.T_BC), -1))
            else:
                left = len(cameras)
                cameras.append((_Camera(c.vehicle, f"{c.name}_left", c, c.T_BC), left + 1))
                cameras.append((_Camera(c.vehicle, f"{c.name}_right", c, c.T_BC @ stereo_right_offset(c.baseline)), -1))
        groups = []
        for (_, _, rate), members in by_key.items():
            wants_rgb = any("rgb" in m.config.outputs for m, _ in members)
            renderer = Renderer(
                scene,
                [m.config.model for m, _ in members],
                shadow_partner=[p for _, p in members],
                shading=Shading.SUN if wants_rgb else Shading.NONE,
            )
            period = int(round(self.config.physics_rate / rate))
            beacons = None
            if any("beacons" in m.config.outputs for m, _ in members):
                beacons = BeaconSensor(
                    scene, self.beacon_list, [m.config.model for m, _ in members], seed=self.config.seed
                )
            groups.append(_CameraGroup([m for m, _ in members], renderer, period, beacons))
        return groups

    def _schedule(self) -> list[list]:
        """[next_step, period_steps, action] events, in the order they run when due together."""
        events = []
        for vehicle, config in zip(self.vehicles.values(), self.config.vehicles):
            if vehicle.sim is not None:
                events.append(
                    [
                        0,
                        int(round(self.config.physics_rate / config.state_rate)),
                        lambda v=vehicle: self._publish_state(v),
                    ]
                )
                events.append(
                    [0, int(round(self.config.physics_rate / config.imu_rate)), lambda v=vehicle: self._publish_imu(v)]
                )
        for group in self.groups:
            events.append([0, group.period_steps, lambda g=group: self._render(g)])
        for config, sensor in self.range_sensors:
            events.append(
                [
                    0,
                    int(round(self.config.physics_rate / config.rate)),
                    lambda c=config, s=sensor: self._publish_ranges(c, s),
                ]
            )
        events.append([0, int(round(self.config.physics_rate / 10.0)) or 1, self._publish_clock])
        return events

    # ------------------------------------------------------------------ running

    def run(self, *, duration: float | None = None, stop: threading.Event | None = None) -> None:
        """Run until ``duration`` sim seconds (wall seconds in live mode) have passed or ``stop`` is set."""
        stop = stop or threading.Event()
        if self.mode == ClockMode.LIVE:
            self._run_live(duration, stop)
            return
        end_step = None if duration is None else int(round(duration / self.dt))
        self.clock.start(0.0, self._measure_cost())
        last_status = time.perf_counter()
        target = end_step if self.mode == ClockMode.SIM else 0
        request = None
        while not stop.is_set() and (end_step is None or self.step < end_step):
            if self.mode == ClockMode.LOCKSTEP and self.step >= target:
                if request is not None:
                    self._reply_step(request)
                    request = None
                request, target = self._wait_for_step_request(stop, end_step)
                continue
            self._advance(target if self.mode == ClockMode.LOCKSTEP else end_step)
            if time.perf_counter() - last_status > 1.0:
                last_status = time.perf_counter()
                if self._status:
                    self._status(self.status_line())
        if request is not None:
            self._reply_step(request)

    def _advance(self, limit_step: int | None) -> None:
        """Handle inputs, step physics to the next event, run every event due, pace the clock."""
        start = time.perf_counter()
        self._handle_inputs()
        next_step = min(e[0] for e in self._events)
        if limit_step is not None:
            next_step = min(next_step, limit_step)
        interval = (next_step - self.step) * self.dt
        if next_step > self.step:
            t = time.perf_counter()
            for vehicle in self.vehicles.values():
                vehicle.sim.step(next_step - self.step)
            self.step = next_step
            self.times.add("physics", time.perf_counter() - t)
            for vehicle in self.vehicles.values():
                contacts = vehicle.sim.contacts()
                if contacts and not vehicle.in_contact:
                    self._publish_collision(vehicle, contacts[0])
                vehicle.in_contact = bool(contacts)
        for event in self._events:
            if event[0] == self.step:
                event[2]()
                event[0] += event[1]
        if self.mode == ClockMode.SIM:
            self.clock.record_work(interval, time.perf_counter() - start, self.step * self.dt)
            self.clock.pace(self.step * self.dt)

    def _measure_cost(self) -> float:
        """Wall seconds per sim second from one warm-up render of every group: a sane first scale."""
        cost = 0.0
        for group in self.groups:
            t = time.perf_counter()
            group.renderer.render(np.stack([self._camera_pose(c) for c in group.cameras]))
            group.renderer.buffers.depth.numpy()
            cost += (time.perf_counter() - t) * self.config.physics_rate / group.period_steps
        return cost or None

    def _wait_for_step_request(self, stop: threading.Event, end_step: int | None):
        while not stop.is_set():
            self._handle_inputs()
            for frames in self.zmq.receive_control() if self.zmq else []:
                envelope, payload = frames[:-1], frames[-1]
                try:
                    message = decode_input(payload, goggles_lcm.step_t)
                except MalformedMessage as exc:
                    self._count_malformed("control", exc)
                    self.zmq.reply(envelope, _step_reply(-1, 0, self.step, self.dt))
                    continue
                target = self.step + message.steps
                if end_step is not None:
                    target = min(target, end_step)
                return (envelope, message.request_id, message.steps), target
            if self.zmq is None:
                raise MalformedMessage("lockstep mode needs the ZeroMQ control socket ([zmq] enabled)")
            self.zmq.wait(0.05)
        return None, self.step

    def _reply_step(self, request) -> None:
        envelope, request_id, steps = request
        self.zmq.reply(envelope, _step_reply(request_id, steps, self.step, self.dt))

    def _run_live(self, duration: float | None, stop: threading.Event) -> None:
        start = time.perf_counter()
        self._live_start = time.time()
        last_status = start
        while not stop.is_set() and (duration is None or time.perf_counter() - start < duration):
            now = time.perf_counter()
            periods = [g.period_steps * self.dt for g in self.groups] or [0.1]
            waits = [g.last_render_wall + 2.0 * p - now for g, p in zip(self.groups, periods)]
            self._wait_any(max(0.0, min(waits + [0.01])))
            self._handle_inputs()
            now = time.perf_counter()
            self.step = int((time.time_ns() // 1000) * 1e-6 / self.dt)  # wall time, in physics steps
            for group, period in zip(self.groups, periods):
                fresh = any(self.vehicles[c.vehicle].new_pose for c in group.cameras)
                elapsed = now - group.last_render_wall
                if (fresh and elapsed >= 0.5 * period) or elapsed >= 2.0 * period:
                    group.last_render_wall = now
                    self._render(group)
            for vehicle in self.vehicles.values():
                vehicle.new_pose = False
            if now - last_status > 1.0 and self._status:
                last_status = now
                self._status(self.status_line())

    # ------------------------------------------------------------------ replay

    def replay(self, messages, *, speed: float | None = None, progress=None) -> int:
        """Render the sensors again along a recorded flight (REPLAY mode).

        Args:
            messages: (log time ns, channel, bytes) in time order, as ``goggles.record.read_log``
                yields them; vehicle poses come from ``<vehicle>/state`` (a simulated flight) or
                ``pose/<vehicle>`` (a live one), people from ``skeleton/<name>``.
            speed: play at this multiple of the recorded pace; None: as fast as possible.
            progress: called about once per wall second with the log time reached, s.

        Returns:
            The number of recorded poses used.
        """
        if self.mode != ClockMode.REPLAY:
            raise MalformedMessage("replay needs an engine built in REPLAY mode")
        used, start_wall, last_progress = 0, time.perf_counter(), time.perf_counter()
        t_first = None
        for t_ns, channel, data in messages:
            if not (channel.endswith("/state") or channel.startswith(("pose/", "skeleton/"))):
                continue
            try:  # the message's own time stamp (sim time), not the log's: lcm-logger stamps on receipt
                stamp = decode_any(data).header.utime
            except (MalformedMessage, AttributeError) as exc:
                self._count_malformed(channel, MalformedMessage(str(exc)))
                continue
            step = int(round(stamp * 1e-6 / self.dt))
            if t_first is None:
                self._start_events_at(step)
            self._events_before(step)
            try:
                if channel.endswith("/state"):
                    self._apply_recorded_state(channel[: -len("/state")], data)
                else:
                    self._apply_input(channel, data)
                if self._pending_skeletons:
                    self._update_avatars()
            except MalformedMessage as exc:
                self._count_malformed(channel, exc)
                continue
            used += 1
            t_first = t_ns if t_first is None else t_first
            if speed is not None:
                delay = (t_ns - t_first) * 1e-9 / speed - (time.perf_counter() - start_wall)
                if delay > 0:
                    time.sleep(delay)
            if progress is not None and time.perf_counter() - last_progress > 1.0:
                last_progress = time.perf_counter()
                progress(t_ns * 1e-9)
        self._events_before(self.step + 1)
        return used

    def _apply_recorded_state(self, name: str, data: bytes) -> None:
        message = decode_input(data, goggles_lcm.vehicle_state_t)
        vehicle = self.vehicles.get(name)
        if vehicle is None:
            self.counters.ignored += 1
            return
        vehicle.T_WB = transform(message.position, message.orientation)
        vehicle.pose_utime = message.header.utime
        vehicle.new_pose = True

    def _start_events_at(self, step: int) -> None:
        """Move every event to its first due step at or after ``step`` (a live log starts at wall time)."""
        for event in self._events:
            if event[0] < step:
                event[0] += -(-(step - event[0]) // event[1]) * event[1]
        self.step = step

    def _events_before(self, step: int) -> None:
        """Run every sensor event due before ``step``, in order (no physics in replay)."""
        while self._events and min(e[0] for e in self._events) < step:
            self.step = min(e[0] for e in self._events)
            for event in self._events:
                if event[0] == self.step:
                    event[2]()
                    event[0] += event[1]
        self.step = max(self.step, step)

    def _wait_any(self, timeout: float) -> None:
        if self.zmq is not None:
            self.zmq.wait(timeout)
        else:
            time.sleep(timeout)

    # ------------------------------------------------------------------ inputs

    def _handle_inputs(self) -> None:
        """Apply the inputs waiting, within ``INPUT_BUDGET_S`` of wall time: a flood (or one costly
        message after another) waits for the next loop instead of stalling the outputs."""
        t = time.perf_counter()
        for bus in self.buses:
            while time.perf_counter() - t < INPUT_BUDGET_S:
                items = bus.receive_inputs()
                if not items:
                    break
                for item in items:
                    self._handle_input(bus, item)
        self.times.add("inputs", time.perf_counter() - t)

    def _handle_input(self, bus, item) -> None:
        if isinstance(bus, ZmqBus):
            try:
                channel, data = split_frame(item)
            except ValueError as exc:  # includes UnicodeDecodeError
                self._count_malformed("zmq", MalformedMessage(str(exc)))
                return
        else:
            channel, data = item
        self.counters.received += 1
        try:
            self._apply_input(channel, data)
        except MalformedMessage as exc:
            self._count_malformed(channel, exc)
            return
        for sink in self.sinks:
            sink.write(channel, data, self._log_time_ns())

    def _update_avatars(self) -> None:
        """Skin every avatar whose skeleton moved (creating it on its first frame, in the slot of one
        that left if there is one), remove those silent for ``AVATAR_TIMEOUT_S``, and re-place actors."""
        now = self._log_time_ns() * 1e-9
        changed = bool(self._pending_skeletons)
        waiting: dict[str, SkeletonPose] = {}
        created = False
        for name, pose in self._pending_skeletons.items():
            avatar = self.avatars.get(name)
            if avatar is not None and pose.bones != avatar.skinned.bones:
                log.warning("skeleton %s changed its bones; its avatar keeps the first ones", _clip(name, 64))
                continue
            if avatar is None and created:  # building one costs tens of ms: one new avatar per loop
                waiting[name] = pose
                continue
            if avatar is None:
                created = True
                mesh = build_avatar_mesh(pose)
                shape = avatar_shape(name, mesh)
                if self._free_avatar_shapes:
                    index = self.world.replace_shape(self._free_avatar_shapes.pop(), shape)
                else:
                    index = self.world.add_shape(shape)
                avatar = self.avatars[name] = _Avatar(SkinnedAvatar(mesh, pose, self.world.shape_mesh(index)), index)
                log.info("avatar %s: %d bones, %d triangles", name, len(pose.bones), len(mesh.faces))
            self.world.set_shape_bounds(avatar.shape, avatar.skinned.pose(pose))
            avatar.last = pose
            avatar.heard = now
        self._pending_skeletons = waiting
        clip_names = {avatar.name for avatar, _ in self.clips}
        for name in [n for n, a in self.avatars.items() if n not in clip_names and now - a.heard > AVATAR_TIMEOUT_S]:
            log.info("avatar %s removed: no skeleton for %.0f s", name, AVATAR_TIMEOUT_S)
            self._free_avatar_shapes.append(self.avatars.pop(name).shape)
            changed = True
        if not changed:
            return
        gates = len(self.actor_poses)
        shapes = [*range(gates), *(a.shape for a in self.avatars.values())]
        poses = np.concatenate([self.actor_poses, np.repeat(np.eye(4)[None], len(self.avatars), axis=0)])
        self.world.set_actors(shapes, poses)

    def _count_malformed(self, channel: str, exc: Exception) -> None:
        self.counters.count_malformed(channel, self._is_input_channel(channel))
        now = time.monotonic()
        if self.counters.malformed <= 10 or now - self._last_drop_log > 10.0:  # at most one line per 10 s after that
            self._last_drop_log = now
            log.warning(
                "dropped input on %s (%d so far): %s", _clip(channel, 80), self.counters.malformed, _clip(str(exc), 200)
            )

    def _is_input_channel(self, channel: str) -> bool:
        """A channel this run reads: a vehicle's command or pose, a skeleton, scene edits."""
        if channel in ("scene/edit", "zmq"):
            return True
        if channel.endswith("/command"):
            return channel[: -len("/command")] in self.vehicles
        if channel.startswith("pose/"):
            return channel[len("pose/") :] in self.vehicles
        return channel.startswith("skeleton/") and len(channel) <= 64

    def _apply_input(self, channel: str, data: bytes) -> None:
        if channel.endswith("/command"):
            message = decode_input(data, goggles_lcm.command_t)
            vehicle = self.vehicles.get(channel[: -len("/command")])
            if vehicle is None or vehicle.sim is None:
                self.counters.ignored += 1
                return
            try:
                vehicle.sim.set_command(ControlMode(message.mode), message.values)
            except Exception as exc:  # wrong value count for the mode, zero quaternion...
                raise MalformedMessage(str(exc)) from exc
            vehicle.external_control = True
        elif channel.startswith("pose/"):
            message = decode_input(data, goggles_lcm.pose_t)
            vehicle = self.vehicles.get(channel[len("pose/") :])
            if vehicle is None or vehicle.sim is not None:
                self.counters.ignored += 1
                return
            if not message.valid:  # the source lost it: keep its last pose, and say so
                if not vehicle.stale:
                    log.warning("%s is stale: keeping its last pose", vehicle.name)
                vehicle.stale = True
                return
            vehicle.previous = (vehicle.T_WB, vehicle.pose_utime) if vehicle.pose_utime else None
            vehicle.T_WB = transform(message.position, message.orientation)
            vehicle.pose_utime = message.header.utime
            vehicle.new_pose = True
            vehicle.stale = False
        elif channel.startswith("skeleton/"):
            message = decode_input(data, goggles_lcm.skeleton_t)
            try:
                pose = SkeletonPose.from_arrays(
                    message.bone_names, message.parents, message.positions, message.orientations
                )
            except Exception as exc:  # inconsistent bone lists
                raise MalformedMessage(str(exc)) from exc
            name = channel[len("skeleton/") :]
            known = name in self.avatars or name in self._pending_skeletons
            if not known and len(self.avatars.keys() | self._pending_skeletons.keys()) >= MAX_AVATARS:
                self.counters.ignored += 1
                return
            self._pending_skeletons[name] = pose
        elif channel == "scene/edit":
            decode_input(data, goggles_lcm.scene_edit_t)
            self.counters.ignored += 1  # moving actors arrive with the mocap and sensors issues
        else:
            raise MalformedMessage(f"no input channel {channel!r}")

    # ------------------------------------------------------------------ outputs

    def _log_time_ns(self) -> int:
        """Sim time (wall time in live mode), ns: the time recordings are ordered by."""
        return time.time_ns() if self.mode == ClockMode.LIVE else int(round(self.step * self.dt * 1e9))

    def _publish(self, channel: str, message) -> None:
        t = time.perf_counter()
        data = message.encode()
        for bus in self.buses:
            bus.publish(channel, data)
        for sink in self.sinks:
            sink.write(channel, data, self._log_time_ns())
        self.counters.published += 1
        self.times.add("publish", time.perf_counter() - t)

    def _next_seq(self, channel: str) -> int:
        seq = self._seq.get(channel, 0)
        self._seq[channel] = seq + 1
        return seq

    def _note_rate(self, name: str) -> None:
        self._rate_log.setdefault(name, deque(maxlen=64)).append(self.step * self.dt)

    def _utime(self) -> int:
        return int(round(self.step * self.dt * 1e6))

    def _vehicle_pose(self, vehicle: _Vehicle) -> np.ndarray:
        if vehicle.sim is None:
            return self._extrapolated(vehicle)
        s = vehicle.sim.states()
        return transform(s.position[0], s.attitude[0])

    def _extrapolated(self, vehicle: _Vehicle) -> np.ndarray:
        """Live pose carried forward to now from its recent motion, at most ``extrapolate`` seconds
        (0: off). Pose time stamps are the bridge's wall clock: the machines' clocks must agree."""
        horizon = self.config.extrapolate
        if horizon <= 0 or vehicle.previous is None or vehicle.stale:
            return vehicle.T_WB
        T0, u0 = vehicle.previous
        span = (vehicle.pose_utime - u0) * 1e-6
        if span <= 0:
            return vehicle.T_WB
        ahead = min(horizon, max(0.0, time.time() - vehicle.pose_utime * 1e-6))
        T = vehicle.T_WB.copy()
        T[:3, 3] += (vehicle.T_WB[:3, 3] - T0[:3, 3]) * (ahead / span)
        import cv2

        rotation = cv2.Rodrigues(vehicle.T_WB[:3, :3] @ T0[:3, :3].T)[0].ravel()  # world-frame turn over the span
        T[:3, :3] = cv2.Rodrigues(rotation * (ahead / span))[0] @ vehicle.T_WB[:3, :3]
        return T

    def _camera_pose(self, camera: _Camera) -> np.ndarray:
        return self._vehicle_pose(self.vehicles[camera.vehicle]) @ camera.T_BC

    def _play_clips(self) -> None:
        """Pose the BVH-driven avatars at the current time (sim time; wall time in live mode)."""
        now = time.time() if self.mode == ClockMode.LIVE else self.step * self.dt
        for avatar, motion in self.clips:
            self._pending_skeletons[avatar.name] = motion.pose(
                now * avatar.speed, units=avatar.units, up=avatar.up, T_WR=avatar.T_WR
            )
        if self._pending_skeletons or self.avatars:  # skinned when a camera needs them, not per input
            self._update_avatars()

    def _render(self, group: _CameraGroup) -> None:
        self._play_clips()
        t = time.perf_counter()
        poses = np.stack([self._camera_pose(c) for c in group.cameras])
        group.renderer.render(poses)
        buffers = {
            "depth": group.renderer.buffers.depth.numpy(),
            "range": group.renderer.buffers.range.numpy(),
            "rgb": group.renderer.buffers.rgb.numpy(),
            "segmentation": group.renderer.buffers.segmentation.numpy(),
        }
        self.times.add("render", time.perf_counter() - t)
        utime = self._utime() if self.mode != ClockMode.LIVE else time.time_ns() // 1000
        detections = group.beacons.detect(poses, self.actor_poses) if group.beacons is not None else []
        for i, camera in enumerate(group.cameras):
            vehicle = self.vehicles[camera.vehicle]
            if "beacons" in camera.config.outputs:
                self._publish_beacons(camera, utime, [d for d in detections if d.camera == i])
            for output in (o for o in camera.config.outputs if o in IMAGE_OUTPUTS):
                channel = f"{camera.vehicle}/{camera.name}/{output}"
                image = goggles_lcm.image_t()
                image.header = header(utime, self._next_seq(channel))
                image.pose_utime = vehicle.pose_utime if vehicle.sim is None else utime
                image.camera = f"{camera.vehicle}/{camera.name}"
                model = camera.config.model
                image.width, image.height = model.width, model.height
                image.encoding = int(_ENCODINGS[output])
                image.fx, image.fy, image.cx, image.cy = model.fx, model.fy, model.cx, model.cy
                image.distortion = list(model.distortion)
                image.position = poses[i, :3, 3].tolist()
                image.orientation = matrix_to_quat(poses[i, :3, :3]).tolist()
                pixels = np.ascontiguousarray(buffers[output][i])
                image.data = pixels.tobytes()
                image.data_size = len(image.data)
                self._publish(channel, image)
        group.seq += 1
        self._note_rate(f"{group.cameras[0].vehicle}/{group.cameras[0].config.name}")
        self.times.add("frame", time.perf_counter() - t)

    def _publish_beacons(self, camera: _Camera, utime: int, detections) -> None:
        channel = f"{camera.vehicle}/{camera.name}/beacons"
        message = goggles_lcm.beacons_t()
        message.header = header(utime, self._next_seq(channel))
        message.camera = f"{camera.vehicle}/{camera.name}"
        message.num_beacons = len(detections)
        message.ids = [d.id for d in detections]
        message.u = [d.u for d in detections]
        message.v = [d.v for d in detections]
        message.range = [d.range for d in detections]
        self._publish(channel, message)

    def _publish_ranges(self, config: RangeSensorConfig, sensor: RangeSensor) -> None:
        T_WS = self._vehicle_pose(self.vehicles[config.vehicle]) @ config.T_BS
        readings = sensor.measure(T_WS[None])[0].ravel()
        channel = f"{config.vehicle}/{config.name}/ranges"
        message = goggles_lcm.ranges_t()
        message.header = header(self._utime(), self._next_seq(channel))
        message.sensor = f"{config.vehicle}/{config.name}"
        message.min_range, message.max_range = config.model.min_range, config.model.max_range
        message.num_ranges = len(readings)
        message.ranges = readings.tolist()
        self._publish(channel, message)
        self._note_rate(message.sensor)

    def _publish_collision(self, vehicle: _Vehicle, contact) -> None:
        channel = f"{vehicle.name}/collision"
        message = goggles_lcm.collision_t()
        message.header = header(int(round(contact.step * self.dt * 1e6)), self._next_seq(channel))
        message.vehicle = vehicle.name
        message.other = "world"
        message.point = contact.point.tolist()
        message.normal = contact.normal.tolist()
        message.depth = contact.depth
        self._publish(channel, message)

    def _publish_imu(self, vehicle: _Vehicle) -> None:
        s = vehicle.sim.states()
        channel = f"{vehicle.name}/imu"
        message = goggles_lcm.imu_t()
        message.header = header(self._utime(), self._next_seq(channel))
        message.vehicle = vehicle.name
        message.linear_acceleration = s.imu_accel[0].tolist()
        message.angular_velocity = s.imu_gyro[0].tolist()
        self._publish(channel, message)
        self._note_rate("imu")

    def _publish_state(self, vehicle: _Vehicle) -> None:
        s = vehicle.sim.states()
        channel = f"{vehicle.name}/state"
        message = goggles_lcm.vehicle_state_t()
        message.header = header(self._utime(), self._next_seq(channel))
        message.vehicle = vehicle.name
        message.position = s.position[0].tolist()
        message.velocity = s.velocity[0].tolist()
        message.orientation = s.attitude[0].tolist()
        message.angular_velocity = s.rates[0].tolist()
        message.num_rotors = s.rotor_speed.shape[1]
        message.rotor_speeds = s.rotor_speed[0].tolist()
        message.crashed = bool(s.crashed[0])
        self._publish(channel, message)
        self._follow_route(vehicle, s.position[0])

    def _follow_route(self, vehicle: _Vehicle, position: np.ndarray) -> None:
        """Built-in demo pilot: take the next waypoint once within tolerance (until a client commands)."""
        if not vehicle.route or vehicle.external_control:
            return
        config = next(v for v in self.config.vehicles if v.name == vehicle.name)
        if np.linalg.norm(position - vehicle.route[vehicle.route_index][:3]) < config.route_tolerance:
            vehicle.route_index = (vehicle.route_index + 1) % len(vehicle.route)
            vehicle.sim.set_command(ControlMode.POSITION, vehicle.route[vehicle.route_index])

    def achieved_rates(self) -> dict[str, float]:
        """Event rates over their recent history, Hz of sim time."""
        rates = {}
        for name, times in self._rate_log.items():
            if len(times) >= 2 and times[-1] > times[0]:
                rates[name] = (len(times) - 1) / (times[-1] - times[0])
        return rates

    def _publish_clock(self) -> None:
        message = goggles_lcm.clock_t()
        message.header = header(self._utime(), self._next_seq("clock"))
        message.mode = int(self.mode)
        if self.mode == ClockMode.LIVE:
            message.scale = 1.0
        else:  # the rate sim time actually advanced since the last clock message
            measured = self._clock_meter.read(self.step * self.dt)
            message.scale = float(self.clock.scale if measured is None else measured)
        rates = self.achieved_rates()
        message.num_rates = len(rates)
        message.rate_names = list(rates)
        message.rates = list(rates.values())
        self._publish("clock", message)

    def scene_boxes(self) -> list:
        """The actors as boxes for viewers: (name, [(T_WA (4, 4), size (3,))]) per gate and avatar."""
        from goggles.preview.foxglove_sink import bone_boxes
        from goggles.scene.gates import gate_bars

        entities = []
        for gate, T_WG in zip(self.course.gates if self.course else (), self.actor_poses):
            boxes = []
            for size, centre in gate_bars(gate.opening):
                T = T_WG.copy()
                T[:3, 3] = T_WG[:3, :3] @ centre + T_WG[:3, 3]
                boxes.append((T, size))
            entities.append((gate.name, boxes))
        for name, avatar in self.avatars.items():
            if avatar.last is not None:
                entities.append((name, bone_boxes(avatar.last.T_WJ, avatar.last.parents)))
        return entities

    def time_source(self) -> str:
        """What drives sim time, and how fast it advanced since the last call (for the status line)."""
        if self.mode == ClockMode.LIVE:
            return "live (wall time, poses from the bus)"
        measured = self._status_meter.read(self.step * self.dt)
        rate = "-" if measured is None else f"{measured:.2f}"
        if self.mode == ClockMode.LOCKSTEP:
            return f"{rate} (lockstep: client step requests)"
        target = f"auto, target {self.clock.scale:.2f}" if self.clock.automatic else "fixed"
        return f"{rate} ({target})"

    def status_line(self) -> str:
        rates = " ".join(f"{name} {rate:.1f} Hz" for name, rate in self.achieved_rates().items())
        scale = self.time_source()
        elapsed = self.step * self.dt - self._live_start if self.mode == ClockMode.LIVE else self.step * self.dt
        return (
            f"t={elapsed:8.2f} s  scale={scale}  {rates}  render p50 "
            f"{self.times.percentile_ms('render', 50):.1f} ms  frame p99 {self.times.percentile_ms('frame', 99):.1f} ms"
            f"  inputs {self.counters.received} (dropped {self.counters.malformed})"
            + "".join(f"  {v.name} STALE" for v in self.vehicles.values() if v.stale)
            + (f"  avatars {sorted(self.avatars)}" if self.avatars else "")
        )

    def close(self) -> None:
        for group in self.groups:
            group.renderer.close()
        for vehicle in self.vehicles.values():
            if vehicle.sim is not None:
                vehicle.sim.close()
        for bus in self.buses:
            bus.close()


def _clip(text: str, limit: int) -> str:
    """A log-safe prefix of text a sender chose (names can be megabytes long)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([np.cos(yaw / 2.0), 0.0, 0.0, np.sin(yaw / 2.0)])


def _step_reply(request_id: int, steps: int, step: int, dt: float) -> bytes:
    reply = goggles_lcm.step_t()
    reply.header = header(int(round(step * dt * 1e6)), step)
    reply.request_id = request_id
    reply.steps = steps
    return reply.encode()
