"""The vehicles of a run: simulated, in fleets (the vehicles of one airframe, floor and IMU set-up
share one ``MultirotorSim``: one physics launch for a swarm), or placed by poses from outside (mocap,
recordings); with the pilot that flies each one's route, its live-pose bookkeeping, and how viewers
draw it."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from goggles.clock import came_late
from goggles.dynamics import ControlMode, MultirotorSim, SimulatorSettings, load_airframe
from goggles.errors import GogglesError
from goggles.firmware.link import FirmwareLink
from goggles.frames import quat_yaw, transform
from goggles.rig import parts
from goggles.rig.pilots import RoutePilot
from goggles.rig.runfile import IMAGE_OUTPUTS
from goggles.scene.vehicle_model import vehicle_model, vehicle_shape
from goggles.world.viewed import ViewedActor

log = logging.getLogger(__name__)

#: Live mode: a body whose poses stop for longer than this is called silent (mocap streams at 100 Hz
#: and more, and a lost body is flagged within three frame periods).
SILENT_AFTER_S = 0.5


#: A vehicle's status goes out when it changes, and at least this often (s of sim time).
STATUS_EVERY_S = 1.0


@dataclass(frozen=True)
class VehicleStatus:
    """What goggles says of a simulated vehicle beyond its state (``<vehicle>/status``)."""

    holding: bool
    """Its client's commands timed out: it holds where it was."""
    command_at: float | None
    """Sim time of its client's last command, s (None: none yet)."""
    crashed: bool
    problem: str
    """The status line's words for it ("" when nothing is wrong)."""


@dataclass
class Vehicle:
    name: str
    sim: MultirotorSim | None
    """Its fleet's simulator (None: the pose comes from outside: live mode, replay)."""
    row: int = 0
    """Its index in the simulator."""
    pilot: RoutePilot | None = None
    """Flies the run file's route until a client sends a command."""
    external_control: bool = False
    T_WB: np.ndarray = field(default_factory=lambda: np.eye(4))
    pose_utime: int = 0
    new_pose: bool = False
    crashed: bool = False
    """Simulated: stopped by a crash, as its last state said (the status line tells it)."""
    touching: frozenset[str] = frozenset()
    """What it touched during the last physics advance, or at its last poses from outside: "world"
    and other vehicles' names (a collision is published for each that joins)."""
    stale: bool = False
    """Live mode: the pose source flagged this body lost; its last pose is kept."""
    previous: tuple[np.ndarray, int] | None = None
    """Live mode: the pose before the last one, with its utime (for extrapolation)."""
    heard_at: float | None = None
    """Live mode: ``time.monotonic()`` when the last pose came from the bus (None: none yet)."""
    untested: list[tuple[np.ndarray, int]] = field(default_factory=list)
    """The poses from outside taken since the engine last tested them for contacts, with their utimes."""
    motion: tuple[np.ndarray, np.ndarray] | None = None
    """Replay of a simulated flight: the recorded state's velocity (world, m/s) and body rates (rad/s)
    at the pose, which carry the pose through an exposure as the simulator's did."""
    firmware: FirmwareLink | None = None
    """Simulated and flown by flight-controller firmware (``[[vehicle]] controller = "betaflight"``)."""
    fc_period: int = 0
    """Physics steps between two of its firmware's ticks."""
    command_timeout: float = 0.5
    """s of sim time a client's command lasts (0: for ever): then it holds where it is."""
    commanded: ControlMode | None = None
    """The mode of a client's command that came since ``hold_if_abandoned`` last looked."""
    command_mode: ControlMode | None = None
    """The mode of its client's last command."""
    command_at: float | None = None
    """Sim time of its client's last command (as ``hold_if_abandoned`` saw it)."""
    holding_since: float | None = None
    """Sim time it began holding its position because its client's commands stopped; None: not holding."""
    status_sent: tuple[float, VehicleStatus] | None = None
    """When its status last went out, and what it said."""

    def problem(self) -> str | None:
        """What the status line says of a simulated vehicle: stale, crashed, its firmware's trouble, holding."""
        said = [
            "STALE" if self.stale else "CRASHED" if self.crashed else None,
            self.firmware.problem() if self.firmware is not None else None,
            None if self.holding_since is None else f"HOLDING (no command since {self.command_at:.2f} s)",
        ]
        return ", ".join(p for p in said if p) or None

    def due_status(self, t: float) -> VehicleStatus | None:
        """Its status where it changed since it last went out (a new command alone is no change), or
        ``STATUS_EVERY_S`` passed."""
        status = VehicleStatus(self.holding_since is not None, self.command_at, self.crashed, self.problem() or "")
        sent = self.status_sent
        same = sent is not None and dataclasses.replace(sent[1], command_at=self.command_at) == status
        if same and t - sent[0] < STATUS_EVERY_S:
            return None
        self.status_sent = (t, status)
        return status

    def hold_if_abandoned(self, t: float, states) -> None:
        """A vehicle its client flew by velocity, attitude, rates or rotor speeds, past ``command_timeout``
        without a command, holds its position and heading, as an autopilot does when its offboard
        setpoints stop (PX4: after 0.5 s); the client's next command flies it again. A position command
        is a place to be: the vehicle flies there and stays, however old it is. A firmware's vehicle
        has its own timeout (its receiver goes silent)."""
        if self.commanded is not None:
            self.command_at, self.command_mode, self.holding_since = t, self.commanded, None
            self.commanded = None
        if (
            self.firmware is not None
            or self.command_mode in (None, ControlMode.POSITION)
            or self.holding_since is not None
            or self.command_timeout <= 0
            or t - self.command_at <= self.command_timeout + 1e-9
        ):
            return
        hold = [*states.position[self.row], quat_yaw(states.attitude[self.row])]
        self.sim.set_command(ControlMode.POSITION, hold, vehicles=[self.row])
        self.holding_since = t
        log.warning(
            "%s: no command for %.2f s of sim time: it holds its position (the next command flies it again)",
            self.name,
            t - self.command_at,
        )

    def set_pose(self, T_WB: np.ndarray, utime: int) -> None:
        """A pose from outside: a recording's, or the bus's (``take_live_pose``)."""
        self.T_WB, self.pose_utime, self.new_pose, self.stale = T_WB, utime, True, False
        self.untested.append((T_WB, utime))

    def take_live_pose(self, T_WB: np.ndarray, utime: int) -> bool:
        """A pose from a bus (live mode), keeping the one before for extrapolation; False if not taken.

        A pose may come twice: a mocap bridge sends on ZeroMQ and LCM, and the engine reads both. A
        copy of the pose held (same time, same pose) is only heard: taken, it left no motion between
        the two last poses, and extrapolation stopped. A late copy (``clock.came_late``) is dropped,
        so the body never steps back; a pose older still is a source that restarted (or whose clock
        stepped back), and starts afresh.
        """
        self.heard_at = time.monotonic()
        if self.pose_utime:
            if utime == self.pose_utime and np.array_equal(T_WB, self.T_WB) or came_late(utime, self.pose_utime):
                return False
        moved_on = self.pose_utime and utime >= self.pose_utime
        self.previous = (self.T_WB, self.pose_utime) if moved_on else None
        self.set_pose(T_WB, utime)
        return True

    def pose_source_problem(self, now: float | None = None) -> str | None:
        """Live mode: why this body's pose is not fresh (``now``: ``time.monotonic()``), for the status
        line: flagged lost by its source, never heard, or silent (a bridge that stopped sends nothing)."""
        if self.stale:
            return "STALE"
        if self.heard_at is None:
            return "NO POSE YET"
        silent = (time.monotonic() if now is None else now) - self.heard_at
        return f"SILENT {silent:.1f} s" if silent > SILENT_AFTER_S else None

    def pose(self, extrapolate: float = 0.0, now: float | None = None) -> np.ndarray:
        """The body pose now: the simulator's, or the last pose from outside carried forward to
        ``now`` (wall time, s; default the clock)."""
        if self.sim is not None:
            s = self.sim.states()
            return transform(s.position[self.row], s.attitude[self.row])
        return extrapolated(self, extrapolate, time.time() if now is None else now)


def twist(vehicle: Vehicle, T_WB: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The vehicle's present motion at ``T_WB``: its velocity and its turn rate (rad/s), both in the
    world frame, of a simulated vehicle, of its recorded state in a replay, or of a live one's last
    two poses; None when nothing says."""
    import cv2

    if vehicle.sim is not None:
        s = vehicle.sim.states()
        return s.velocity[vehicle.row], T_WB[:3, :3] @ s.rates[vehicle.row]
    if vehicle.motion is not None:
        return np.asarray(vehicle.motion[0]), T_WB[:3, :3] @ vehicle.motion[1]
    if vehicle.previous is not None and vehicle.pose_utime > vehicle.previous[1]:
        T0, u0 = vehicle.previous
        span = (vehicle.pose_utime - u0) * 1e-6
        velocity = (vehicle.T_WB[:3, 3] - T0[:3, 3]) / span
        return velocity, cv2.Rodrigues(vehicle.T_WB[:3, :3] @ T0[:3, :3].T)[0].ravel() / span
    return None


def pose_after(vehicle: Vehicle, T_WB: np.ndarray, dt: float) -> np.ndarray:
    """``T_WB`` moved ``dt`` seconds along the vehicle's present motion (``twist``): the poses a
    camera sees during an exposure, and a live pose carried forward."""
    import cv2

    motion = twist(vehicle, T_WB)
    if motion is None:
        return T_WB
    velocity, turn_W = motion
    T = T_WB.copy()
    T[:3, 3] += velocity * dt
    T[:3, :3] = cv2.Rodrigues(np.asarray(turn_W, dtype=np.float64) * dt)[0] @ T_WB[:3, :3]
    return T


def extrapolated(vehicle: Vehicle, horizon: float, now: float) -> np.ndarray:
    """The live pose carried forward to ``now`` from its recent motion, at most ``horizon`` seconds
    (0: off). Pose time stamps are the bridge's wall clock: the machines' clocks must agree."""
    if horizon <= 0 or vehicle.previous is None or vehicle.stale:
        return vehicle.T_WB
    ahead = min(horizon, max(0.0, now - vehicle.pose_utime * 1e-6))
    return pose_after(vehicle, vehicle.T_WB, ahead)


@dataclass
class Fleet:
    """Simulated vehicles sharing one simulator (and so one IMU schedule and queue)."""

    sim: MultirotorSim
    vehicles: list[Vehicle]
    imu_utimes: list[int] = field(default_factory=list)
    """Times of the IMU samples waiting on the device (``[[vehicle]] imu_batch``)."""
    contacts_unread: bool = False
    """Stepped since its contacts were last taken."""


def make_vehicles(
    configs,
    *,
    simulate: bool,
    world,
    dt: float,
    seed: int,
    collisions,
    recorded: bool | None = None,
    wind=None,
) -> tuple[dict, list[Fleet]]:
    """The vehicles of a run file's ``[[vehicle]]`` entries, by name, and the fleets of the simulated
    ones: a simulator per airframe, floor and IMU set-up, each vehicle at rest on its floor or hovering
    where it starts in the air, flying towards its route's first waypoint; or placed from outside."""
    vehicles, fleets = {}, []
    groups: dict[tuple, list] = {}
    for v in configs:
        groups.setdefault((v.preset, v.floor_z, v.imu_rate, v.imu_batch), []).append(v)
        start_q = _heading(v.start[3])
        vehicles[v.name] = Vehicle(
            v.name,
            None,
            pilot=RoutePilot(v.route, v.route_tolerance) if v.route else None,
            T_WB=transform(v.start[:3], start_q),
            command_timeout=v.command_timeout,
        )
    if not simulate:
        return vehicles, fleets
    for (preset, floor_z, imu_rate, imu_batch), members in groups.items():
        airframe = load_airframe(preset)
        sim = parts.simulator(
            airframe,
            len(members),
            SimulatorSettings(
                dt=dt,
                seed=seed,
                imu_rate=imu_rate,
                imu_queue=imu_batch,
                collisions=collisions,
                floor_z=floor_z,
                recorded=recorded,
                wind=wind,
            ),
            device=world.device,
            world=world,
        )
        N = airframe.num_rotors
        sim.reset(
            position=[v.start[:3] for v in members],
            attitude=[_heading(v.start[3]) for v in members],
            rotor_speed=[[airframe.hover_speed if v.start[2] > floor_z else 0.0] * N for v in members],
        )
        sim.set_command(ControlMode.POSITION, [v.route[0] if v.route else v.start for v in members])
        fleet = Fleet(sim, [])
        for row, v in enumerate(members):
            vehicle = vehicles[v.name]
            vehicle.sim, vehicle.row = sim, row
            fleet.vehicles.append(vehicle)
            if v.betaflight is not None:
                try:
                    vehicle.firmware = _firmware(v, airframe)
                except Exception:
                    for other in vehicles.values():  # the SITLs started so far stop with the error
                        if other.firmware is not None:
                            other.firmware.close()
                    raise
                vehicle.pilot, vehicle.fc_period = None, max(1, round(1.0 / (v.fc_rate * dt)))
                sim.set_command(ControlMode.ROTOR_SPEEDS, [0.0] * airframe.num_rotors, vehicles=[row])
        fleets.append(fleet)
    return vehicles, fleets


def _firmware(v, airframe) -> FirmwareLink:
    """A vehicle's firmware; goggles' pilot holds the first waypoint (x, y, z, yaw), else 1.5 m above
    where it starts."""
    hold = v.route[0][:4] if v.route else (v.start[0], v.start[1], max(v.start[2], v.floor_z) + 1.5, v.start[3])
    return parts.firmware(airframe, v.betaflight, hold, rc_timeout=v.command_timeout)


def _heading(yaw: float) -> np.ndarray:
    """(w, x, y, z) of a heading alone."""
    return np.array([np.cos(yaw / 2.0), 0.0, 0.0, np.sin(yaw / 2.0)])


def drawn_airframes(configs) -> dict:
    """The airframe each vehicle is drawn (and tested for contacts when posed from outside) as, by
    preset: its own, or fg-quad where it is not here (a replay's or a live run's airframe file need
    not be; said once per preset)."""
    airframes = {}
    for v in configs:
        if v.preset not in airframes:
            try:
                airframes[v.preset] = load_airframe(v.preset)
            except GogglesError as exc:
                log.warning("%s is drawn as fg-quad: %s", v.name, exc)
                airframes[v.preset] = load_airframe("fg-quad")
    return airframes


def body_shapes(configs, airframes: dict) -> tuple:
    """Each vehicle's body as the sensors of the others see it (its airframe's model in its class, an
    actor shape; vehicles of one airframe and class share one), in ``configs`` order; none where a
    run has one vehicle. ``airframes``: ``drawn_airframes(configs)``."""
    if len(configs) < 2:
        return ()
    shapes = {}
    for v in configs:
        if (v.preset, v.segmentation) not in shapes:
            shapes[v.preset, v.segmentation] = vehicle_shape(airframes[v.preset], v.segmentation)
    return tuple(shapes[v.preset, v.segmentation] for v in configs)


def viewed_vehicles(configs, airframes: dict, cameras) -> list[ViewedActor]:
    """Each vehicle as viewers draw it (its airframe's model: ``airframes``, ``drawn_airframes(configs)``),
    following the frame of its first camera that publishes images (that frame's transform comes with
    every image, in every mode), or, with no such camera, the vehicle's own frame (on the viewer's
    transforms from its states or poses)."""
    viewed = []
    models = {
        preset: vehicle_model(a.name, a.rotor_positions, a.rotor_axes, a.rotor_radius)
        for preset, a in airframes.items()
    }
    for v in configs:
        imaging = [c for c in cameras if c.vehicle == v.name and set(c.config.outputs) & set(IMAGE_OUTPUTS)]
        if imaging:
            camera = imaging[0]
            viewed.append(
                ViewedActor(v.name, models[v.preset], np.linalg.inv(camera.T_BC), frame=camera.channel_prefix)
            )
        else:
            viewed.append(ViewedActor(v.name, models[v.preset], np.eye(4), frame=v.name))
    return viewed
