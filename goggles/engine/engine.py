"""The engine: a rig driven over time. Read inputs, advance the vehicles to the next event, run the
events that are due (render, IMU, state, ranges, clock), hand every output to the buses and sinks.

One step serves every mode (``Engine.advance``). Work is scheduled at integer physics steps
(``goggles.engine.schedule``), so sensor rates are exact in sim time. Drivers run that step
(``goggles.engine.drivers``): sim (the clock paces sim time at a fixed or automatic scale), lockstep
(sim time advances only by client step requests, ``goggles.engine.lockstep``), live (poses from the
bus: a camera renders as soon as a new pose arrives) and replay (poses from a recording,
``goggles.engine.drivers.Replayed``, which ``goggles.logs.replay`` drives).

What each part does lives beside it: the rig's parts in ``goggles.rig`` (world, vehicles, cameras,
sensors), inputs in ``goggles.engine.inputs``, message contents in ``goggles.transport.messages``,
counters in ``goggles.engine.status``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack

import numpy as np

from goggles.clock import ClockMode, PacedClock, ScaleMeter
from goggles.dynamics import ControlMode
from goggles.dynamics.model import period_steps
from goggles.engine.inputs import InputHandler
from goggles.engine.lockstep import StepRequests
from goggles.engine.outputs import Outputs
from goggles.engine.schedule import Schedule
from goggles.engine.status import RateLog, StageTimes, describe_time, status_line
from goggles.errors import ConfigError
from goggles.rig.cameras import Camera, CameraGroup
from goggles.rig.rig import Rig
from goggles.rig.runfile import RangeSensorConfig, RunConfig
from goggles.rig.vehicles import Fleet, Vehicle, pose_after
from goggles.runtime.device_copies import COPIES
from goggles.sensors.ranges import RangeSensor
from goggles.transport.buses import (
    NOT_LOCKSTEP,
    ZmqBus,
    open_buses,
)

log = logging.getLogger(__name__)


class Engine:
    """A run: its rig, buses and clock, driven by the mode's driver.

    Args:
        config: the run file's contents.
        device, physics_device, backend, recorded, world: how its rig is built (``goggles.rig.Rig``)
            where ``rig`` is not given.
        status: called about once per wall second with a one-line status (the CLI prints it).
        recorder, sinks: where every published output and accepted input also goes
            (``write(channel, data, log_time_ns)``): a ``goggles.logs.record.Recorder``, a Foxglove
            server; a sink with ``set_scene(rig)`` reads what the rig shows (its static scene, actors
            and sensors) from it.
        rig: a rig built for ``config`` (``goggles.rig.Rig``) to drive; None: one is built here.

    A context manager: leaving it closes the buses and the rig.
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        device=None,
        physics_device=None,
        backend: str = "auto",
        recorded: bool | None = None,
        world=None,
        status: Callable[[str], None] | None = None,
        recorder=None,
        sinks=(),
        rig: Rig | None = None,
        threads: int | None = None,
    ):
        self.config = config
        self.mode = config.mode
        self.sinks = [sink for sink in (recorder, *sinks) if sink is not None]
        self.dt = 1.0 / config.physics_rate
        self.step = 0
        self.times = StageTimes()
        self.rates = RateLog()
        self._status = status
        # The rig, then the buses; a part that fails closes every one built before it (a firmware
        # started for the rig stops when a port is taken).
        with ExitStack() as built:
            if rig is None:
                rig = Rig(
                    config,
                    device=device,
                    physics_device=physics_device,
                    backend=backend,
                    recorded=recorded,
                    world=world,
                    threads=threads,
                )
                built.callback(rig.close)
            self.rig = rig
            self.buses = open_buses(config)
            for bus in self.buses:
                built.callback(bus.close)
            self.zmq = next((b for b in self.buses if isinstance(b, ZmqBus)), None)
            self.inputs = InputHandler(
                self.buses,
                self.rig.vehicles,
                self.rig.crowd,
                self.rig.props,
                sinks=self.sinks,
                log_time_ns=self.log_ns,
                edited=lambda edit, why: self.outputs.edited(edit, why, self.utime()),
            )
            self.counters = self.inputs.counters
            self.outputs = Outputs(self.buses, self.sinks, self.counters, self.times, self.log_ns)
            self.clock = PacedClock(config.scale, max_scale=config.max_scale)
            self._status_meter, self._clock_meter = ScaleMeter(), ScaleMeter()
            self._live_start = 0.0
            self._copies_from = (COPIES.count, COPIES.syncs, 0.0)  # device→host copies, syncs, time when the run began
            self._bodies_step = -1  # the step the vehicles' bodies were last placed at (``_carriers``)
            self.requests = StepRequests(self.zmq, self.inputs, self.poll_inputs, self.dt) if self.zmq else None
            """The lockstep protocol on the ZeroMQ control socket (``goggles.engine.lockstep``)."""
            for sink in self.sinks:  # a viewer that draws the world (Foxglove) reads it from the rig
                if hasattr(sink, "set_scene"):
                    sink.set_scene(self.rig)
            self.schedule = self.make_schedule()
            built.pop_all()

    def make_schedule(self, cameras: bool = True) -> Schedule:
        """The periodic events, in the order they run when due together (live mode's cameras render on
        poses, not on a schedule: ``cameras=False``)."""
        schedule, rate = Schedule(), self.config.physics_rate
        # One achieved "imu" rate when every fleet samples at one rate (their samples of one instant are
        # one event); a rate per fleet otherwise.
        one_rate = len({fleet.sim.imu_decimation for fleet in self.rig.fleets}) <= 1
        for vehicle in self.rig.vehicles.values():  # flight controllers' firmware, before what it makes is read
            if vehicle.firmware is not None:
                schedule.every(vehicle.fc_period, lambda x=vehicle: self._fly_firmware(x), f"{vehicle.name}/fc")
        for fleet in self.rig.fleets:  # the IMU first: a batch it completes comes in the copy the state then reads
            period = fleet.sim.imu_decimation  # physics steps per IMU sample
            name = f"{fleet.vehicles[0].name}/imu"
            event = "imu" if one_rate else name
            schedule.every(period, lambda f=fleet, e=event: self._publish_imu(f, e), name)
        for vehicle, v in zip(self.rig.vehicles.values(), self.config.vehicles):
            if vehicle.sim is not None:
                period = period_steps(rate, v.state_rate, f"{v.name}/state")
                schedule.every(period, lambda x=vehicle: self._publish_state(x), f"{v.name}/state")
        for group in self.rig.groups if cameras else ():
            schedule.every(group.period_steps, lambda g=group: self._render_due(g), group.name)
        for c, sensor in self.rig.range_sensors:
            schedule.every(period_steps(rate, c.rate, c.name), lambda c=c, s=sensor: self._publish_ranges(c, s), c.name)
        for c, lidar in self.rig.lidars:
            name = f"{c.vehicle}/{c.name}"
            schedule.every(period_steps(rate, c.rate, name), lambda c=c, s=lidar: self._publish_lidar(c, s), name)
        schedule.every(round(rate / 10.0) or 1, self._publish_clock, "clock")
        return schedule

    avatars = property(lambda self: self.rig.crowd.avatars, doc="The people shown, by name.")
    vehicles = property(lambda self: self.rig.vehicles, doc="The rig's vehicles, by name (``Vehicle``).")

    # ------------------------------------------------------------------ running

    def run(self, *, duration: float | None = None, stop: threading.Event | None = None) -> None:
        """Run until ``duration`` sim seconds (wall seconds in live mode) have passed or ``stop`` is set,
        with the driver of the run's mode (``goggles.engine.drivers``)."""
        from goggles.engine import drivers

        stop = stop or threading.Event()
        if self.mode == ClockMode.LIVE:
            drivers.run_live(self, duration, stop)
        elif self.mode in (ClockMode.SIM, ClockMode.LOCKSTEP):
            drivers.run_clocked(self, duration, stop)
        else:
            raise ConfigError(f"an engine in {self.mode.name.lower()} mode is driven by its replay (Replayed)")

    def advance(self, limit_step: int | None) -> None:
        """Handle inputs, step physics to the next event, run every event due, pace the clock."""
        start = time.perf_counter()
        self.poll_inputs()
        next_step = self.schedule.next_due()
        if limit_step is not None:
            next_step = min(next_step, limit_step)
        interval = (next_step - self.step) * self.dt
        if next_step > self.step:
            t = time.perf_counter()
            self.rig.swarm.step(next_step - self.step)  # one launch per fleet
            for fleet in self.rig.fleets:
                fleet.contacts_unread = True
            self.step = next_step
            self.times.add("physics", time.perf_counter() - t)
        self.schedule.run_due(self.step)
        self.publish_pending(force=False)
        if self.mode == ClockMode.SIM:
            self.clock.record_work(interval, time.perf_counter() - start)
            self.clock.pace(self.step * self.dt)

    def poll_inputs(self) -> None:
        """Apply the inputs waiting on the buses; a lockstep request to an engine not in lockstep is
        refused at once (its clock does not wait)."""
        t = time.perf_counter()
        self.inputs.poll()
        if self.mode != ClockMode.LOCKSTEP and self.requests is not None:
            self.requests.refuse(self.zmq.receive_control(), NOT_LOCKSTEP, self.step)
        self.times.add("inputs", time.perf_counter() - t)

    def measure_cost(self) -> float | None:
        """Wall seconds per sim second from one warm-up render of every group: a sane first scale."""
        cost = 0.0
        for group in self.rig.groups:
            t = time.perf_counter()
            poses = np.stack([self.camera_pose(c) for c in group.cameras])
            group.render(
                poses, T_WA=self.rig.built.gate_poses, carriers=self._carriers(c.vehicle for c in group.cameras)
            )
            if group.events is not None:  # a warm-up's pixels are not the run's
                group.events.reset()
            cost += (time.perf_counter() - t) * self.config.physics_rate / group.period_steps
        return cost or None

    def publish_pending(self, force: bool) -> None:
        """Queued IMU samples and contacts wait on the device until an event has copied the state
        anyway (each keeps its own time): no copy of their own, unless ``force`` (a lockstep reply,
        the end of a run) needs them out now."""
        for fleet in self.rig.fleets:
            if not (force or fleet.sim.host_current):
                continue
            if fleet.imu_utimes:
                self._flush_imu(fleet)
            if fleet.contacts_unread:
                fleet.contacts_unread = False
                contacts = {c.vehicle: c for c in fleet.sim.contacts()}
                for vehicle in fleet.vehicles:
                    contact = contacts.get(vehicle.row)
                    self._touch(vehicle, contact, None if contact is None else round(contact.step * self.dt * 1e6))

    def touch_posed(self) -> None:
        """Live and replay: a vehicle placed from outside that touches the virtual world (a real drone
        in a virtual wall) is reported once per contact, stamped with its pose's time. Every pose
        taken is tested, in one launch for all of them (a pose inside a thin gate bar counts, even
        when the next pose of the same poll is through it); a vehicle never posed touches nothing."""
        taken = [
            (k, vehicle, *pose) for k, vehicle in enumerate(self.rig.vehicles.values()) for pose in vehicle.untested
        ]
        for vehicle in self.rig.vehicles.values():
            vehicle.untested.clear()
        if self.rig.posed is None or not taken:
            return
        contacts = self.rig.posed.touching(np.stack([T for _, _, T, _ in taken]), [k for k, *_ in taken], self.step)
        for (_, vehicle, _, utime), contact in zip(taken, contacts):
            self._touch(vehicle, contact, utime)

    def update_people(self) -> None:
        """Skin the people whose skeletons came (replay applies them as the log goes)."""
        if self.rig.crowd.busy:
            self.rig.crowd.update(self.log_ns() * 1e-9)

    # ------------------------------------------------------------------ outputs

    def log_ns(self) -> int:
        """Sim time (wall time in live mode), ns: the time recordings are ordered by."""
        return time.time_ns() if self.mode == ClockMode.LIVE else int(round(self.step * self.dt * 1e9))

    def utime(self) -> int:
        """The present instant (sim time; live mode's wall time), µs."""
        return int(round(self.step * self.dt * 1e6))

    def _camera_poses_after(self, group: CameraGroup, T_WC: np.ndarray, dt: np.ndarray) -> np.ndarray:
        """Each camera's pose ``dt[i]`` seconds from the frame's, along its vehicle's motion."""
        return np.stack(
            [
                pose_after(self.rig.vehicles[c.vehicle], T @ np.linalg.inv(c.T_BC), float(d)) @ c.T_BC
                for c, T, d in zip(group.cameras, T_WC, dt)
            ]
        )

    def camera_pose(self, camera: Camera) -> np.ndarray:
        return self.rig.vehicles[camera.vehicle].pose(self.config.extrapolate) @ camera.T_BC

    def _pose_people(self) -> None:
        """Pose the BVH clips at the current time and skin the crowd: only when a camera needs it."""
        now = time.time() if self.mode == ClockMode.LIVE else self.step * self.dt
        for avatar, motion in self.rig.clips:
            self.rig.crowd.offer(
                avatar.name, motion.pose(now * avatar.speed, units=avatar.units, up=avatar.up, T_WR=avatar.T_WR)
            )
        self.update_people()

    def _carriers(self, vehicles) -> np.ndarray | None:
        """Place what moves for a sensor instant, and the body instance of each of ``vehicles`` (names):
        a sensor carried by one does not see it (None where no bodies are placed: a run of one
        vehicle). Tracked props take their newest poses. The bodies are placed once per step (a
        replay's poses of a step come before its events); live, where poses are carried forward to the
        wall time, every time."""
        self.rig.props.place_tracked()
        if not self.rig.crowd.bodies:
            return None
        if self.mode == ClockMode.LIVE or self._bodies_step != self.step:
            self.rig.crowd.place_vehicles([v.pose(self.config.extrapolate) for v in self.rig.vehicles.values()])
            self._bodies_step = self.step
        instances = dict(zip(self.rig.vehicles, self.rig.crowd.vehicle_instances()))
        return np.array([instances[name] for name in vehicles])

    def render(self, group: CameraGroup) -> None:
        """Render ``group`` now, from its vehicles' poses now, and publish its outputs. Live, an event
        camera renders at its newest pose, stamped with the pose's time: its events fall on the
        poses' clock (a motion-capture system's), where they happened, not when they were rendered."""
        self._pose_people()
        t = time.perf_counter()
        carriers = self._carriers(c.vehicle for c in group.cameras)
        if self.mode == ClockMode.LIVE and group.events is not None:
            vehicles = [self.rig.vehicles[c.vehicle] for c in group.cameras]
            poses = np.stack([v.T_WB @ c.T_BC for v, c in zip(vehicles, group.cameras)])
            utime = max(v.pose_utime for v in vehicles)
        else:
            poses = np.stack([self.camera_pose(c) for c in group.cameras])
            utime = self.utime() if self.mode != ClockMode.LIVE else time.time_ns() // 1000
        images, detections, events = group.render(
            poses, lambda dt: self._camera_poses_after(group, poses, dt), self.rig.built.gate_poses, carriers, key=utime
        )
        self.times.add("render", time.perf_counter() - t)
        pose_utimes = [
            self.rig.vehicles[c.vehicle].pose_utime if self.rig.vehicles[c.vehicle].sim is None else utime
            for c in group.cameras
        ]
        self.outputs.camera_frame(group.cameras, poses, images, detections, utime, pose_utimes)
        if events is not None:
            start, end = group.events.window
            self.outputs.events(group.cameras, events, start // 1000, end // 1000)
        for name in group.names:  # every camera of the group, each under its own name
            self.rates.note(name, self.step * self.dt)
        self.times.add("frame", time.perf_counter() - t)

    def _render_due(self, group: CameraGroup) -> int:
        """Render ``group``; the steps to its next render (``CameraGroup.next_steps``)."""
        self.render(group)
        return group.next_steps(self.dt)

    def _fly_firmware(self, vehicle: Vehicle) -> None:
        """A firmware tick: the vehicle's state (sim time, IMU, attitude) to its flight controller, whose
        motor outputs become its rotors' speeds until the next tick."""
        states = vehicle.sim.states()
        t = self.step * self.dt
        speeds = vehicle.firmware.step(t, states, vehicle.row, vehicle.fc_period * self.dt)
        vehicle.sim.set_command(ControlMode.ROTOR_SPEEDS, speeds, vehicles=[vehicle.row])
        report = vehicle.firmware.due_report(t)
        if report is not None:
            self.outputs.fc_status(vehicle.name, report, self.utime())
        self.rates.note(f"{vehicle.name}/fc", self.step * self.dt)

    def _publish_ranges(self, config: RangeSensorConfig, sensor: RangeSensor) -> None:
        carriers = self._carriers([config.vehicle])
        T_WS = self.rig.vehicles[config.vehicle].pose(self.config.extrapolate) @ config.T_BS
        name = f"{config.vehicle}/{config.name}"
        utime = self.utime()
        self.outputs.ranges(name, config.model, sensor.measure(T_WS[None], carriers, key=utime)[0].ravel(), utime)
        self.rates.note(name, self.step * self.dt)

    def _publish_lidar(self, config, lidar) -> None:
        """A scan over the coming revolution, each point from where the sensor will be when it fires."""
        carriers = self._carriers([config.vehicle])
        vehicle = self.rig.vehicles[config.vehicle]
        T_WB = vehicle.pose(self.config.extrapolate)
        last = (lidar.model.columns - 1) / (lidar.model.columns * lidar.model.rate_hz)  # the last firing
        carrier = -1 if carriers is None else int(carriers[0])
        utime = self.utime()
        scan = lidar.scan(T_WB @ config.T_BS, pose_after(vehicle, T_WB, last) @ config.T_BS, carrier, utime)
        name = f"{config.vehicle}/{config.name}"
        self.outputs.lidar(name, config.model, scan, utime)
        self.rates.note(name, self.step * self.dt)

    def _touch(self, vehicle: Vehicle, contact, utime: int | None) -> None:
        """What a vehicle touched since the last look (``contact``; None: nothing): a collision is
        told when it touches something it did not touch before (a drone resting on the ground,
        which is a contact all along, hit by another). A contact with a vehicle takes the place of
        the world's in the record, so the ground it hid is taken to go on: not told again after."""
        if contact is None:
            vehicle.touching = frozenset()
            return
        touched = "world"
        if contact.other >= 0:
            sim, row = self.rig.swarm.vehicle(contact.other)
            touched = next(v.name for v in self.rig.vehicles.values() if v.sim is sim and v.row == row)
        if touched not in vehicle.touching:
            self.outputs.collision(vehicle.name, touched, contact, utime)
        hidden = vehicle.touching & {"world"} if touched != "world" else frozenset()  # the ground it hid
        vehicle.touching = hidden | {touched}

    def _publish_imu(self, fleet: Fleet, event: str) -> None:
        """The IMU samples of this instant, published now, or queued on the device and published with
        their batch (``[[vehicle]] imu_batch``): one copy per batch instead of one per sample."""
        sim = fleet.sim
        if sim.imu_queue == 1:
            s, utime = sim.states(), self.utime()
            for vehicle in fleet.vehicles:
                self.outputs.imu(vehicle.name, s.imu_accel[vehicle.row], s.imu_gyro[vehicle.row], utime)
        else:
            fleet.imu_utimes.append(self.utime())
            if sim.record_imu() == sim.imu_queue:
                self._flush_imu(fleet)
        self.rates.note(event, self.step * self.dt)

    def _flush_imu(self, fleet: Fleet) -> None:
        """Publish the IMU samples queued on the device, each with its own time."""
        for utime, samples in zip(fleet.imu_utimes, fleet.sim.take_imu()):
            for vehicle in fleet.vehicles:
                sample = samples[vehicle.row]
                self.outputs.imu(vehicle.name, sample[:3], sample[3:], utime)
        fleet.imu_utimes.clear()

    def _publish_state(self, vehicle: Vehicle) -> None:
        """The vehicle's ground truth and, when it changed, its status; its pilot then takes the next
        waypoint if it reached one."""
        states = vehicle.sim.states()
        self.outputs.state(vehicle.name, states, self.utime(), row=vehicle.row)
        vehicle.crashed = bool(states.crashed[vehicle.row])
        vehicle.hold_if_abandoned(self.step * self.dt, states)
        status = vehicle.due_status(self.step * self.dt)
        if status is not None:
            self.outputs.vehicle_status(vehicle.name, status, self.utime())
        if vehicle.pilot is not None and not vehicle.external_control:
            target = vehicle.pilot.update(states.position[vehicle.row])
            if target is not None:
                vehicle.sim.set_command(ControlMode.POSITION, target, vehicles=[vehicle.row])

    def achieved_rates(self) -> dict[str, float]:
        """Event rates over their recent history, Hz of sim time."""
        return self.rates.rates()

    def _publish_clock(self) -> None:
        scale = 1.0  # live: wall time
        if self.mode != ClockMode.LIVE:  # the rate sim time actually advanced since the last clock message
            measured = self._clock_meter.read(self.step * self.dt)
            scale = self.clock.scale if measured is None else measured
        self.outputs.clock(self.mode, scale, self.achieved_rates(), self.utime())

    def begin_counting(self) -> None:
        """Count device-to-host copies from now (``host_copies_per_s``): a driver starting its run."""
        self._live_start = time.time() if self.mode == ClockMode.LIVE else 0.0
        self._copies_from = (COPIES.count, COPIES.syncs, 0.0 if self.mode == ClockMode.LIVE else self.step * self.dt)

    def tell_status(self) -> None:
        """Hand the status line to whoever asked for it (the command line prints it)."""
        if self._status:
            self._status(self.status_line())

    def time_source(self) -> str:
        """What drives sim time, and how fast it advanced since the last call (for the status line)."""
        measured = None if self.mode == ClockMode.LIVE else self._status_meter.read(self.step * self.dt)
        return describe_time(self.mode, measured, self.clock)

    def status_line(self) -> str:
        elapsed = self.step * self.dt - self._live_start if self.mode == ClockMode.LIVE else self.step * self.dt
        if self.mode == ClockMode.LIVE:
            problems = [(v.name, v.pose_source_problem()) for v in self.rig.vehicles.values() if v.sim is None]
        else:
            problems = [(v.name, v.problem()) for v in self.rig.vehicles.values()]
        vehicle_problems = [f"{name} {problem}" for name, problem in problems if problem]
        return status_line(
            elapsed,
            self.time_source(),
            self.achieved_rates(),
            self.times,
            self.counters,
            vehicle_problems,
            sorted(self.avatars),
            self.host_copies_per_s(),
            self.host_syncs_per_s(),
        )

    def host_copies_per_s(self) -> float | None:
        """Device→host copies per sim second (wall second in live mode) since ``run`` began."""
        return self._per_s(COPIES.count, self._copies_from[0])

    def host_syncs_per_s(self) -> float | None:
        """The synchronisations those copies waited on, per sim second (wall second in live mode)."""
        return self._per_s(COPIES.syncs, self._copies_from[1])

    def _per_s(self, count: int, at_start: int) -> float | None:
        since = self._copies_from[2]
        elapsed = (time.time() - self._live_start) if self.mode == ClockMode.LIVE else self.step * self.dt - since
        return (count - at_start) / elapsed if elapsed > 0 else None

    def close(self) -> None:
        if self.requests is not None:  # what came after the run ended (a lockstep client, any mode's)
            self.requests.refuse_waiting(self.step)
        self.rig.close()
        for bus in self.buses:
            bus.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
