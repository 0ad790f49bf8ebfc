"""The engine: a scheduler over one step. Read inputs, advance the vehicles to the next event, run the
events that are due (render, IMU, state, ranges, clock), hand every output to the buses and sinks.

One loop serves every mode. Work is scheduled at integer physics steps (``goggles.engine.schedule``), so
sensor rates are exact in sim time:

* sim: the clock paces sim time at a fixed or automatic scale; built-in vehicles fly routes or
  follow commands from the bus.
* lockstep: sim time advances only by client step requests; the reply is sent once the outputs of
  those steps are published.
* live: vehicle poses come from the bus (motion capture); a camera renders as soon as a new pose
  arrives (at most twice its rate); if poses stop, it keeps rendering the last pose at half its rate
  (the images' pose_utime shows they are stale). A fallback at the full rate would race the pose
  stream and make fresh poses wait a whole period behind renders of old ones.
* replay: poses come from a recording; the sensors are rendered again (``goggles.logs.replay``).

What each part does lives beside it: the world and its people in ``goggles.world``, vehicles and
pilots in ``goggles.rig.vehicles`` and ``goggles.rig.pilots``, cameras in ``goggles.rig.cameras``, inputs in
``goggles.engine.inputs``, message contents in ``goggles.transport.messages``, counters in ``goggles.engine.status``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np

import goggles_lcm
from goggles.clock import ClockMode, PacedClock, ScaleMeter
from goggles.dynamics import ControlMode, PosedContacts, Swarm
from goggles.engine.inputs import InputHandler
from goggles.engine.outputs import Outputs
from goggles.engine.schedule import Schedule, period_steps
from goggles.engine.status import RateLog, StageTimes, describe_time, status_line
from goggles.errors import ConfigError
from goggles.rig.cameras import Camera, CameraGroup, camera_groups
from goggles.rig.runfile import RangeSensorConfig, RunConfig, check_simulated_starts
from goggles.rig.vehicles import (
    Fleet,
    Vehicle,
    body_shapes,
    drawn_airframes,
    make_vehicles,
    pose_after,
    viewed_vehicles,
)
from goggles.runtime.device_copies import COPIES
from goggles.scene.bvh import load_bvh
from goggles.sensors.draws import stream_of
from goggles.sensors.lidar import Lidar
from goggles.sensors.ranges import RangeSensor
from goggles.transport import messages
from goggles.transport.buses import (
    BARRIER_FOLLOWS,
    ENGINE_STOPPED,
    NOT_LOCKSTEP,
    UNREADABLE_REQUEST,
    ZmqBus,
    open_buses,
)
from goggles.transport.schema import MalformedMessage, decode_input
from goggles.world.build import build_run_world
from goggles.world.crowd import BUILD_INTERVAL_S, Crowd
from goggles.world.props import Props

log = logging.getLogger(__name__)

#: Wall time a lockstep request waits for the barrier behind its client's inputs, s.
BARRIER_WAIT_S = 1.0


class Engine:
    """Everything a run needs, built from a RunConfig.

    Args:
        config: the run file's contents.
        device: Warp device for rendering (and physics, unless ``physics_device`` is given).
        physics_device: Warp device of the simulated vehicles, with its own copy of the static scene and
            the gates to collide with (people, whose meshes live on the render device, are not
            obstacles then); None: the render device's, sharing its world. Physics on the CPU beside
            rendering on CUDA keeps each small vehicle step off the GPU's launch queue.
        backend: primary-ray tracer of the cameras (``goggles.render.BACKENDS``; auto: Embree on the CPU).
        recorded: replay recordings of the physics steps and of each camera group's frame (trace, sensor
            models, copy to the host: ``goggles.runtime.recorded_work``, CUDA graphs); None: on CUDA. The same bytes
            either way.
        world: a ``goggles.world.World`` built for this run's scene and course (``build_run_world``) to
            reuse instead of building one.
        status: called about once per wall second with a one-line status (the CLI prints it).
        recorder, sinks: where every published output and accepted input also goes
            (``write(channel, data, log_time_ns)``): a ``goggles.logs.record.Recorder``, a Foxglove server; a sink
            with ``set_scene(static, actors, sensor_pose, range_beams)`` is given the static scene,
            ``viewed_actors``, ``sensor_pose`` and ``range_beams`` too.
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
    ):
        self.config = config
        self.mode = config.mode
        self.sinks = [sink for sink in (recorder, *sinks) if sink is not None]
        self.dt = 1.0 / config.physics_rate
        self.step = 0
        self.times = StageTimes()
        self.rates = RateLog()
        self._status = status
        self._barrier_missed = False
        self._step_requests: deque[list[bytes]] = deque()  # lockstep requests taken, not yet run
        simulate = self.mode not in (ClockMode.LIVE, ClockMode.REPLAY)
        if simulate:
            check_simulated_starts(config)
        self._airframes = drawn_airframes(config.vehicles)  # loaded once: a missing one is said once
        bodies = body_shapes(config.vehicles, self._airframes)
        if world is None:
            built = build_run_world(config, device, bodies)
        else:  # another run's world, in the same scene, course and airframes (a dataset worker keeps it)
            built = world
            shapes = [built.scene.shapes[i] for i in built.bodies]
            if [(s.name, s.segmentation) for s in shapes] != [(b.name, b.segmentation) for b in bodies]:
                raise ConfigError("the world given was built for other vehicles: build_run_world(config, ...)")
            built.reset()
        self.built = built
        self.world = built.scene
        self.clips = [(a, load_bvh(a.bvh)) for a in config.avatars]
        real_time = self.mode in (ClockMode.SIM, ClockMode.LIVE)  # elsewhere, bytes must not depend on speed
        self.crowd = Crowd(
            self.world,
            self.built.gate_poses,
            keep={a.name for a, _ in self.clips},
            build_interval=BUILD_INTERVAL_S * real_time,
            bodies=built.bodies,
        )
        self.props = Props(self.crowd, self.built)
        self.physics_world = self.world
        if physics_device is not None and not simulate:
            log.warning("the physics device is not used: %s mode simulates no vehicle", self.mode.name.lower())
        elif physics_device is not None:
            self.physics_world = built.on(physics_device).scene
            log.info("physics on %s, rendering on %s: people are not obstacles", self.physics_world.device, device)
        self.vehicles, self.fleets = make_vehicles(
            config.vehicles,
            simulate=simulate,
            world=self.physics_world,
            dt=self.dt,
            seed=config.seed,
            collisions=config.collisions,
            recorded=recorded,
        )
        self.swarm = Swarm([fleet.sim for fleet in self.fleets])
        self.posed = None
        if not simulate:
            self.posed = PosedContacts([self._airframes[v.preset] for v in config.vehicles], self.world)
        self.groups = camera_groups(
            self.world,
            config.cameras,
            config.physics_rate,
            built.beacons,
            config.seed,
            backend=backend,
            recorded=recorded,
        )
        self.range_sensors = [
            (c, RangeSensor(self.world, c.model, seed=config.seed, stream=stream_of(f"{c.vehicle}/{c.name}")))
            for c in config.range_sensors
        ]
        self.lidars = [
            (
                c,
                Lidar(
                    self.world, c.model, backend=backend, seed=config.seed, stream=stream_of(f"{c.vehicle}/{c.name}")
                ),
            )
            for c in config.lidars
        ]
        self.buses = open_buses(config)
        self.zmq = next((b for b in self.buses if isinstance(b, ZmqBus)), None)
        self.inputs = InputHandler(
            self.buses,
            self.vehicles,
            self.crowd,
            self.props,
            sinks=self.sinks,
            log_time_ns=self._log_ns,
            edited=lambda edit, why: self.outputs.edited(edit, why, self._utime()),
        )
        self.counters = self.inputs.counters
        self.outputs = Outputs(self.buses, self.sinks, self.counters, self.times, self._log_ns)
        self.clock = PacedClock(config.scale, max_scale=config.max_scale)
        self._status_meter, self._clock_meter = ScaleMeter(), ScaleMeter()
        self._live_start = 0.0
        self._copies_from = (COPIES.count, COPIES.syncs, 0.0)  # device→host copies, syncs, time when the run began
        self._viewed_vehicles = None
        self._bodies_step = -1  # the step the vehicles' bodies were last placed at (``_carriers``)
        for sink in self.sinks:  # a viewer that draws the world (Foxglove) is told where it comes from
            if hasattr(sink, "set_scene"):
                sink.set_scene(self.built.scene.static, self.viewed_actors, self.sensor_pose, self.range_beams)
        self.schedule = self._schedule()

    def _schedule(self, cameras: bool = True) -> Schedule:
        """The periodic events, in the order they run when due together (live mode's cameras render on
        poses, not on a schedule: ``cameras=False``)."""
        schedule, rate = Schedule(), self.config.physics_rate
        # One achieved "imu" rate when every fleet samples at one rate (their samples of one instant are
        # one event); a rate per fleet otherwise.
        one_rate = len({fleet.sim.imu_decimation for fleet in self.fleets}) <= 1
        for fleet in self.fleets:  # the IMU first: a batch it completes comes in the copy the state then reads
            period = fleet.sim.imu_decimation  # physics steps per IMU sample
            name = f"{fleet.vehicles[0].name}/imu"
            event = "imu" if one_rate else name
            schedule.every(period, lambda f=fleet, e=event: self._publish_imu(f, e), name)
        for vehicle, v in zip(self.vehicles.values(), self.config.vehicles):
            if vehicle.sim is not None:
                period = period_steps(rate, v.state_rate, f"{v.name}/state")
                schedule.every(period, lambda x=vehicle: self._publish_state(x), f"{v.name}/state")
        for group in self.groups if cameras else ():
            schedule.every(group.period_steps, lambda g=group: self._render(g), group.name)
        for c, sensor in self.range_sensors:
            schedule.every(period_steps(rate, c.rate, c.name), lambda c=c, s=sensor: self._publish_ranges(c, s), c.name)
        for c, lidar in self.lidars:
            name = f"{c.vehicle}/{c.name}"
            schedule.every(period_steps(rate, c.rate, name), lambda c=c, s=lidar: self._publish_lidar(c, s), name)
        schedule.every(round(rate / 10.0) or 1, self._publish_clock, "clock")
        return schedule

    avatars = property(lambda self: self.crowd.avatars, doc="The people shown, by name.")

    # ------------------------------------------------------------------ running

    def run(self, *, duration: float | None = None, stop: threading.Event | None = None) -> None:
        """Run until ``duration`` sim seconds (wall seconds in live mode) have passed or ``stop`` is set."""
        stop = stop or threading.Event()
        if self.mode == ClockMode.LIVE:
            self._copies_from = (COPIES.count, COPIES.syncs, 0.0)
            self._run_live(duration, stop)
            return
        end_step = None if duration is None else int(round(duration / self.dt))
        self.clock.start(0.0, self._measure_cost())
        self._copies_from = (COPIES.count, COPIES.syncs, self.step * self.dt)
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
        if self.mode == ClockMode.LOCKSTEP and self.zmq is not None:
            self._refuse_waiting_requests()
        self._publish_pending(force=True)  # a run that stops publishes what it measured

    def _advance(self, limit_step: int | None) -> None:
        """Handle inputs, step physics to the next event, run every event due, pace the clock."""
        start = time.perf_counter()
        self._poll_inputs()
        next_step = self.schedule.next_due()
        if limit_step is not None:
            next_step = min(next_step, limit_step)
        interval = (next_step - self.step) * self.dt
        if next_step > self.step:
            t = time.perf_counter()
            self.swarm.step(next_step - self.step)  # one launch per fleet
            for fleet in self.fleets:
                fleet.contacts_unread = True
            self.step = next_step
            self.times.add("physics", time.perf_counter() - t)
        self.schedule.run_due(self.step)
        self._publish_pending(force=False)
        if self.mode == ClockMode.SIM:
            self.clock.record_work(interval, time.perf_counter() - start)
            self.clock.pace(self.step * self.dt)

    def _poll_inputs(self) -> None:
        t = time.perf_counter()
        self.inputs.poll()
        if self.mode != ClockMode.LOCKSTEP and self.zmq is not None:
            self._refuse(self.zmq.receive_control(), NOT_LOCKSTEP)  # a lockstep client of a free-running engine
        self.times.add("inputs", time.perf_counter() - t)

    def _measure_cost(self) -> float | None:
        """Wall seconds per sim second from one warm-up render of every group: a sane first scale."""
        cost = 0.0
        for group in self.groups:
            t = time.perf_counter()
            poses = np.stack([self._camera_pose(c) for c in group.cameras])
            group.render(poses, T_WA=self.built.gate_poses, carriers=self._carriers(c.vehicle for c in group.cameras))
            cost += (time.perf_counter() - t) * self.config.physics_rate / group.period_steps
        return cost or None

    def _wait_for_step_request(self, stop: threading.Event, end_step: int | None):
        if self.zmq is None:
            raise MalformedMessage("lockstep mode needs the ZeroMQ control socket ([zmq] enabled)")
        while not stop.is_set():
            self._poll_inputs()
            if not self._step_requests:  # taken only when all are run: the socket's queue bounds them
                self._step_requests.extend(self.zmq.receive_control())
            while self._step_requests:  # one at a time; the others wait their turn (several clients)
                frames = self._step_requests.popleft()
                envelope, payload = frames[:-1], frames[-1]
                try:
                    message = decode_input(payload, goggles_lcm.step_t)
                except MalformedMessage as exc:
                    self.inputs.count_malformed("control", exc)
                    self._refuse([frames], UNREADABLE_REQUEST)
                    continue
                if message.header.seq == BARRIER_FOLLOWS:
                    self._await_barrier(message.request_id)
                target = self.step + message.steps if end_step is None else min(self.step + message.steps, end_step)
                return (envelope, message.request_id, self.step), target
            self.zmq.wait(0.05)
        return None, self.step

    def _await_barrier(self, request_id: int) -> None:
        """Apply the inputs a lockstep client sent before its request (they come on the inputs socket,
        the request on the control socket, in no set order) until its barrier, sent behind them, has
        come; said once if it has not within ``BARRIER_WAIT_S`` (an engine restarted under the client)."""
        deadline = time.monotonic() + BARRIER_WAIT_S
        while request_id not in self.inputs.barriers:
            if time.monotonic() > deadline:
                if not self._barrier_missed:
                    self._barrier_missed = True
                    log.warning(
                        "lockstep: the inputs sent before request %d did not all come within %g s; stepping "
                        "(further ones are not told)",
                        request_id,
                        BARRIER_WAIT_S,
                    )
                return
            self.zmq.wait_for_input(0.01)
            self._poll_inputs()
        self.inputs.barriers.remove(request_id)

    def _reply_step(self, request) -> None:
        """Answer a lockstep request once every output of its steps is out (what waited on the
        device too), with the steps it ran: fewer than asked where the run ended (``--duration``)."""
        self._publish_pending(force=True)
        envelope, request_id, started = request
        self.zmq.reply(envelope, messages.step_reply(request_id, self.step - started, self.step, self.dt))

    def _refuse_waiting_requests(self) -> None:
        """A run that ends (and an engine that closes) answers the lockstep requests still waiting
        (``ENGINE_STOPPED``): their clients would otherwise wait out their timeouts."""
        self._refuse([*self._step_requests, *self.zmq.receive_control(limit=1024)], ENGINE_STOPPED)
        self._step_requests.clear()

    def _refuse(self, requests: list[list[bytes]], code: int) -> None:
        """Answer lockstep requests (as received: envelope, then payload) with a refusal ``code``
        (``transport.buses``) in place of the request id, having run no step."""
        for frames in requests:
            self.zmq.reply(frames[:-1], messages.step_reply(code, 0, self.step, self.dt))

    def _publish_pending(self, force: bool) -> None:
        """Queued IMU samples and contacts wait on the device until an event has copied the state
        anyway (each keeps its own time): no copy of their own, unless ``force`` (a lockstep reply,
        the end of a run) needs them out now."""
        for fleet in self.fleets:
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

    def _run_live(self, duration: float | None, stop: threading.Event) -> None:
        """Cameras render as poses come; range sensors, LiDARs and the clock at their rates, by wall time."""
        start = time.perf_counter()
        self._live_start = time.time()
        last_status = start
        timed = self._schedule(cameras=False)
        timed.start_at(self._wall_step())
        while not stop.is_set() and (duration is None or time.perf_counter() - start < duration):
            now = time.perf_counter()
            periods = [g.period_steps * self.dt for g in self.groups] or [0.1]
            waits = [g.last_render_wall + 2.0 * p - now for g, p in zip(self.groups, periods)]
            waits.append(timed.next_due() * self.dt - time.time())  # the next timed sensor, in wall seconds
            timeout = max(0.0, min(waits + [0.01]))
            self._wait_for_inputs(timeout)
            self._poll_inputs()
            self.touch_posed()
            now = time.perf_counter()
            self.step = self._wall_step()
            for group, period in zip(self.groups, periods):
                if group.due_live(now, period, any(self.vehicles[c.vehicle].new_pose for c in group.cameras)):
                    group.last_render_wall = now
                    self._render(group)
            for vehicle in self.vehicles.values():
                vehicle.new_pose = False
            timed.skip_missed(self.step)
            timed.run_before(self.step + 1, lambda s: None)  # stamped now, from the poses now
            if now - last_status > 1.0 and self._status:
                last_status = now
                self._status(self.status_line())

    def _wall_step(self) -> int:
        """Wall time in physics steps (live mode's clock)."""
        return int((time.time_ns() // 1000) * 1e-6 / self.dt)

    def _wait_for_inputs(self, timeout: float) -> None:
        """Live mode: sleep until an input arrives on a bus that can say so, or ``timeout`` passes.
        With two such buses (ZeroMQ and ROS 2) each is asked in turn, 0.5 ms at a time."""
        waiters = [bus for bus in self.buses if hasattr(bus, "wait")]
        if len(waiters) <= 1:
            waiters[0].wait(timeout) if waiters else time.sleep(timeout)
            return
        deadline = time.perf_counter() + timeout
        while not any(bus.wait(0.0005 if i == 0 else 0.0) for i, bus in enumerate(waiters)):
            if time.perf_counter() >= deadline:
                return

    def start_at(self, step: int) -> None:
        """Begin at ``step`` (a replayed log starts at its own time): events move to their next due step."""
        self.schedule.start_at(step)
        self.step = step

    def run_events_before(self, step: int) -> None:
        """Run every sensor event due before ``step``, in order, without physics (replay)."""
        self.schedule.run_before(step, lambda s: setattr(self, "step", s))
        self.step = max(self.step, step)

    def touch_posed(self) -> None:
        """Live and replay: a vehicle placed from outside that touches the virtual world (a real drone
        in a virtual wall) is reported once per contact, stamped with its pose's time. Every pose
        taken is tested, in one launch for all of them (a pose inside a thin gate bar counts, even
        when the next pose of the same poll is through it); a vehicle never posed touches nothing."""
        taken = [(k, vehicle, *pose) for k, vehicle in enumerate(self.vehicles.values()) for pose in vehicle.untested]
        for vehicle in self.vehicles.values():
            vehicle.untested.clear()
        if self.posed is None or not taken:
            return
        contacts = self.posed.touching(np.stack([T for _, _, T, _ in taken]), [k for k, *_ in taken], self.step)
        for (_, vehicle, _, utime), contact in zip(taken, contacts):
            self._touch(vehicle, contact, utime)

    def update_people(self) -> None:
        """Skin the people whose skeletons came (replay applies them as the log goes)."""
        if self.crowd.busy:
            self.crowd.update(self._log_ns() * 1e-9)

    # ------------------------------------------------------------------ outputs

    def _log_ns(self) -> int:
        """Sim time (wall time in live mode), ns: the time recordings are ordered by."""
        return time.time_ns() if self.mode == ClockMode.LIVE else int(round(self.step * self.dt * 1e9))

    def _utime(self) -> int:
        return int(round(self.step * self.dt * 1e6))

    def _camera_poses_after(self, group: CameraGroup, T_WC: np.ndarray, dt: np.ndarray) -> np.ndarray:
        """Each camera's pose ``dt[i]`` seconds from the frame's, along its vehicle's motion."""
        return np.stack(
            [
                pose_after(self.vehicles[c.vehicle], T @ np.linalg.inv(c.T_BC), float(d)) @ c.T_BC
                for c, T, d in zip(group.cameras, T_WC, dt)
            ]
        )

    def _camera_pose(self, camera: Camera) -> np.ndarray:
        return self.vehicles[camera.vehicle].pose(self.config.extrapolate) @ camera.T_BC

    def _pose_people(self) -> None:
        """Pose the BVH clips at the current time and skin the crowd: only when a camera needs it."""
        now = time.time() if self.mode == ClockMode.LIVE else self.step * self.dt
        for avatar, motion in self.clips:
            self.crowd.offer(
                avatar.name, motion.pose(now * avatar.speed, units=avatar.units, up=avatar.up, T_WR=avatar.T_WR)
            )
        self.update_people()

    def _carriers(self, vehicles) -> np.ndarray | None:
        """Place what moves for a sensor instant, and the body instance of each of ``vehicles`` (names):
        a sensor carried by one does not see it (None where no bodies are placed: a run of one
        vehicle). Tracked props take their newest poses. The bodies are placed once per step (a
        replay's poses of a step come before its events); live, where poses are carried forward to the
        wall time, every time."""
        self.props.place_tracked()
        if not self.crowd.bodies:
            return None
        if self.mode == ClockMode.LIVE or self._bodies_step != self.step:
            self.crowd.place_vehicles([v.pose(self.config.extrapolate) for v in self.vehicles.values()])
            self._bodies_step = self.step
        instances = dict(zip(self.vehicles, self.crowd.vehicle_instances()))
        return np.array([instances[name] for name in vehicles])

    def _render(self, group: CameraGroup) -> None:
        self._pose_people()
        t = time.perf_counter()
        carriers = self._carriers(c.vehicle for c in group.cameras)
        poses = np.stack([self._camera_pose(c) for c in group.cameras])
        utime = self._utime() if self.mode != ClockMode.LIVE else time.time_ns() // 1000
        images, detections = group.render(
            poses, lambda dt: self._camera_poses_after(group, poses, dt), self.built.gate_poses, carriers, key=utime
        )
        self.times.add("render", time.perf_counter() - t)
        pose_utimes = [
            self.vehicles[c.vehicle].pose_utime if self.vehicles[c.vehicle].sim is None else utime
            for c in group.cameras
        ]
        self.outputs.camera_frame(group.cameras, poses, images, detections, utime, pose_utimes)
        for name in group.names:  # every camera of the group, each under its own name
            self.rates.note(name, self.step * self.dt)
        self.times.add("frame", time.perf_counter() - t)

    def _publish_ranges(self, config: RangeSensorConfig, sensor: RangeSensor) -> None:
        carriers = self._carriers([config.vehicle])
        T_WS = self.vehicles[config.vehicle].pose(self.config.extrapolate) @ config.T_BS
        name = f"{config.vehicle}/{config.name}"
        utime = self._utime()
        self.outputs.ranges(name, config.model, sensor.measure(T_WS[None], carriers, key=utime)[0].ravel(), utime)
        self.rates.note(name, self.step * self.dt)

    def _publish_lidar(self, config, lidar) -> None:
        """A scan over the coming revolution, each point from where the sensor will be when it fires."""
        carriers = self._carriers([config.vehicle])
        vehicle = self.vehicles[config.vehicle]
        T_WB = vehicle.pose(self.config.extrapolate)
        last = (lidar.model.columns - 1) / (lidar.model.columns * lidar.model.rate_hz)  # the last firing
        carrier = -1 if carriers is None else int(carriers[0])
        utime = self._utime()
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
            sim, row = self.swarm.vehicle(contact.other)
            touched = next(v.name for v in self.vehicles.values() if v.sim is sim and v.row == row)
        if touched not in vehicle.touching:
            self.outputs.collision(vehicle.name, touched, contact, utime)
        hidden = vehicle.touching & {"world"} if touched != "world" else frozenset()  # the ground it hid
        vehicle.touching = hidden | {touched}

    def _publish_imu(self, fleet: Fleet, event: str) -> None:
        """The IMU samples of this instant, published now, or queued on the device and published with
        their batch (``[[vehicle]] imu_batch``): one copy per batch instead of one per sample."""
        sim = fleet.sim
        if sim.imu_queue == 1:
            s, utime = sim.states(), self._utime()
            for vehicle in fleet.vehicles:
                self.outputs.imu(vehicle.name, s.imu_accel[vehicle.row], s.imu_gyro[vehicle.row], utime)
        else:
            fleet.imu_utimes.append(self._utime())
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
        """The vehicle's ground truth; its pilot then takes the next waypoint if it reached one."""
        states = vehicle.sim.states()
        self.outputs.state(vehicle.name, states, self._utime(), row=vehicle.row)
        vehicle.crashed = bool(states.crashed[vehicle.row])
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
        self.outputs.clock(self.mode, scale, self.achieved_rates(), self._utime())

    def viewed_actors(self) -> list:
        """Every gate, prop, person and vehicle as viewers draw them (``ViewedActor``: its mesh and
        where it is); the static scene is ``self.built.scene.static``."""
        if self._viewed_vehicles is None:  # built on the first call: a run without viewers never pays
            cameras = [camera for group in self.groups for camera in group.cameras]
            self._viewed_vehicles = viewed_vehicles(self.config.vehicles, self._airframes, cameras)
        return self.built.viewed_gates() + self.props.viewed() + self.crowd.viewed() + self._viewed_vehicles

    def sensor_pose(self, sensor: str) -> np.ndarray | None:
        """(4, 4) where range sensor or LiDAR ``<vehicle>/<name>`` is in the world now, or None for
        another name: viewers place its readings there (their messages hold the sensor frame's)."""
        for c in (*self.config.lidars, *self.config.range_sensors):
            if f"{c.vehicle}/{c.name}" == sensor:
                return self.vehicles[c.vehicle].pose(self.config.extrapolate) @ c.T_BS
        return None

    def range_beams(self, sensor: str) -> np.ndarray | None:
        """(n, 3) unit beam directions, in its frame and in the order of its readings, of range sensor
        ``<vehicle>/<name>``, or None for another name: viewers draw its readings where they hit."""
        for c in self.config.range_sensors:
            if f"{c.vehicle}/{c.name}" == sensor:
                return c.model.directions().reshape(-1, 3)
        return None

    def scene_boxes(self) -> list:
        """The actors in the world as boxes, for viewers that draw boxes: (name, [(T_WA (4, 4), size
        (3,))]) per gate, prop and person, each its mesh's box where it is now."""
        boxes = []
        for actor in self.viewed_actors():
            if actor.frame != "world":  # a vehicle: it has its own frame on every viewer
                continue
            points = actor.mesh.vertices if actor.vertices is None else actor.vertices
            low, high = points.min(axis=0), points.max(axis=0)
            T = np.array(actor.T_WA, dtype=np.float64)
            T[:3, 3] = T[:3, :3] @ ((low + high) / 2.0) + T[:3, 3]
            boxes.append((actor.name, [(T, high - low)]))
        return boxes

    def time_source(self) -> str:
        """What drives sim time, and how fast it advanced since the last call (for the status line)."""
        measured = None if self.mode == ClockMode.LIVE else self._status_meter.read(self.step * self.dt)
        return describe_time(self.mode, measured, self.clock)

    def status_line(self) -> str:
        elapsed = self.step * self.dt - self._live_start if self.mode == ClockMode.LIVE else self.step * self.dt
        if self.mode == ClockMode.LIVE:
            problems = [(v.name, v.pose_source_problem()) for v in self.vehicles.values() if v.sim is None]
        else:
            problems = [
                (v.name, "STALE" if v.stale else "CRASHED" if v.crashed else None) for v in self.vehicles.values()
            ]
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
        if self.zmq is not None:  # what came after the run ended (a lockstep client, any mode's)
            self._refuse_waiting_requests()
        for group in self.groups:
            group.renderer.close()
        for _, lidar in self.lidars:
            lidar.close()
        for fleet in self.fleets:
            fleet.sim.close()
        for bus in self.buses:
            bus.close()
