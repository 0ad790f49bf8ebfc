"""The engine: a rig driven over time. Read inputs, advance the vehicles to the next event, run the
events that are due (render, IMU, state, ranges, clock), hand every output to the buses and sinks.

One step serves every mode (``Engine.advance``). Work is scheduled at integer physics steps
(``goggles.engine.schedule``), so sensor rates are exact in sim time. Drivers run that step
(``goggles.engine.drivers``): sim (the clock paces sim time at a fixed or automatic scale), lockstep
(sim time advances only by client step requests, ``goggles.engine.lockstep``), live (poses from the
bus: a camera renders as soon as a new pose arrives) and replay (poses from a recording,
``goggles.engine.drivers.Replayed``, which ``goggles.logs.replay`` drives).

The engine orders; its parts do: the rig's parts in ``goggles.rig`` (world, vehicles, cameras,
sensors) built by ``goggles.rig.Rig``, what a vehicle event does in ``goggles.engine.vehicle_events``
and a sensor event in ``goggles.engine.sensor_events``, inputs in ``goggles.engine.inputs``, outputs
in ``goggles.engine.outputs`` (contents in ``goggles.transport.messages``), the status line, clock
message and counters in ``goggles.engine.status``, the run's step and instants in
``goggles.engine.run_state``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack

from goggles.clock import ClockMode, PacedClock
from goggles.dynamics.model import period_steps
from goggles.engine.inputs import InputHandler
from goggles.engine.lockstep import StepRequests
from goggles.engine.outputs import Outputs
from goggles.engine.run_state import RunState
from goggles.engine.schedule import Schedule
from goggles.engine.sensor_events import SensorEvents
from goggles.engine.status import RateLog, RunReport, StageTimes
from goggles.engine.vehicle_events import VehicleEvents
from goggles.errors import ConfigError
from goggles.rig.rig import Rig
from goggles.rig.runfile import RunConfig
from goggles.transport.buses import NOT_LOCKSTEP, ZmqBus, open_buses

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
        self.now = RunState(config.mode, self.dt)
        """The run's changing state: its step, its mode; the instants outputs are stamped with."""
        self.times = StageTimes()
        self.rates = RateLog()
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
                log_time_ns=self.now.log_ns,
                edited=lambda edit, why: self.outputs.edited(edit, why, self.now.utime()),
            )
            self.counters = self.inputs.counters
            self.outputs = Outputs(self.buses, self.sinks, self.counters, self.times, self.now.log_ns)
            self.clock = PacedClock(config.scale, max_scale=config.max_scale)
            self.sensors = SensorEvents(rig, config, self.outputs, self.rates, self.times, self.now)
            self.vehicle_events = VehicleEvents(rig, self.outputs, self.rates, self.now)
            self.report = RunReport(
                self.now, self.clock, self.rates, self.times, self.counters, rig, self.outputs, status
            )
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
        vehicles, sensors = self.vehicle_events, self.sensors
        for vehicle in self.rig.vehicles.values():  # flight controllers' firmware, before what it makes is read
            if vehicle.firmware is not None:
                schedule.every(vehicle.fc_period, lambda x=vehicle: vehicles.fly_firmware(x), f"{vehicle.name}/fc")
        for fleet in self.rig.fleets:  # the IMU first: a batch it completes comes in the copy the state then reads
            name = f"{fleet.vehicles[0].name}/imu"
            event = "imu" if one_rate else name
            schedule.every(fleet.sim.imu_decimation, lambda f=fleet, e=event: vehicles.publish_imu(f, e), name)
        for vehicle, v in zip(self.rig.vehicles.values(), self.config.vehicles):
            if vehicle.sim is not None:
                period = period_steps(rate, v.state_rate, f"{v.name}/state")
                schedule.every(period, lambda x=vehicle: vehicles.publish_state(x), f"{v.name}/state")
        for group in self.rig.groups if cameras else ():
            schedule.every(group.period_steps, lambda g=group: sensors.render_due(g), group.name)
        for c, sensor in self.rig.range_sensors:
            schedule.every(
                period_steps(rate, c.rate, c.name), lambda c=c, s=sensor: sensors.publish_ranges(c, s), c.name
            )
        for c, lidar in self.rig.lidars:
            name = f"{c.vehicle}/{c.name}"
            schedule.every(period_steps(rate, c.rate, name), lambda c=c, s=lidar: sensors.publish_lidar(c, s), name)
        schedule.every(round(rate / 10.0) or 1, self.report.publish_clock, "clock")
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
        self.vehicle_events.publish_pending(force=False)
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

    @property
    def step(self) -> int:
        """Physics steps run (``RunState.step``; the drivers advance it)."""
        return self.now.step

    @step.setter
    def step(self, value: int) -> None:
        self.now.step = value

    def utime(self) -> int:
        return self.now.utime()

    def status_line(self) -> str:
        return self.report.line()

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
