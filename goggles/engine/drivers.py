"""Drivers: what moves a run's clock. Each runs the engine's one step (``Engine.advance``, or its
events at a given instant) the way its mode says.

* ``run_clocked``: sim mode paces sim time at a fixed or automatic scale; lockstep advances it only by
  client step requests (``goggles.engine.lockstep``), replying once their outputs are out.
* ``run_live``: poses come from the bus; a camera renders as soon as a new pose arrives (at most twice
  its rate), and, if poses stop, the last pose at half its rate (the images' ``pose_utime`` shows they
  are stale: a fallback at the full rate would race the pose stream). Range sensors, LiDARs and the
  clock run at their rates by wall time.
* ``Replayed``: a recording's poses and edits, at their own instants (``goggles.logs.replay``).
"""

from __future__ import annotations

import threading
import time

from goggles.clock import ClockMode
from goggles.errors import ConfigError


def run_clocked(engine, duration: float | None, stop: threading.Event) -> None:
    """Sim and lockstep mode: advance until ``duration`` sim seconds have passed or ``stop`` is set."""
    lockstep = engine.mode == ClockMode.LOCKSTEP
    if lockstep and engine.requests is None:
        raise ConfigError("lockstep mode needs the ZeroMQ control socket ([zmq] enabled)")
    end_step = None if duration is None else int(round(duration / engine.dt))
    engine.clock.start(0.0, engine.sensors.measure_cost())
    engine.report.begin_counting()
    last_status = time.perf_counter()
    target = 0 if lockstep else end_step
    request = None
    while not stop.is_set() and (end_step is None or engine.step < end_step):
        if lockstep and engine.step >= target:
            if request is not None:
                engine.vehicle_events.publish_pending(force=True)  # every output of its steps is out before the reply
                engine.requests.reply(request, engine.step)
                request = None
            request, target = engine.requests.next(stop, engine.step, end_step)
            continue
        engine.advance(target)
        if time.perf_counter() - last_status > 1.0:
            last_status = time.perf_counter()
            engine.report.tell()
    engine.vehicle_events.publish_pending(force=True)  # a run that stops publishes what it measured
    if request is not None:
        engine.requests.reply(request, engine.step)
    if lockstep:
        engine.requests.refuse_waiting(engine.step)


def run_live(engine, duration: float | None, stop: threading.Event) -> None:
    """Live mode: cameras render as poses come; range sensors, LiDARs and the clock at their rates, by
    wall time, for ``duration`` wall seconds or until ``stop`` is set."""
    start = time.perf_counter()
    engine.report.begin_counting()
    last_status = start
    timed = engine.make_schedule(cameras=False)
    timed.start_at(wall_step(engine.dt))
    groups, vehicles = engine.rig.groups, engine.rig.vehicles
    periods = [g.period_steps * engine.dt for g in groups] or [0.1]
    while not stop.is_set() and (duration is None or time.perf_counter() - start < duration):
        now = time.perf_counter()
        waits = [g.last_render_wall + 2.0 * p - now for g, p in zip(groups, periods)]
        waits.append(timed.next_due() * engine.dt - time.time())  # the next timed sensor, in wall seconds
        _wait_for_inputs(engine.buses, max(0.0, min(waits + [0.01])))
        engine.poll_inputs()
        engine.vehicle_events.touch_posed()
        now = time.perf_counter()
        engine.step = wall_step(engine.dt)
        for group, period in zip(groups, periods):
            fresh = any(vehicles[c.vehicle].new_pose for c in group.cameras)
            if group.due_live(now, period, fresh, max(vehicles[c.vehicle].pose_utime for c in group.cameras)):
                group.last_render_wall = now
                engine.sensors.render(group)
        for vehicle in vehicles.values():
            vehicle.new_pose = False
        timed.skip_missed(engine.step)
        timed.run_before(engine.step + 1, lambda s: None)  # stamped now, from the poses now
        if now - last_status > 1.0:
            last_status = now
            engine.report.tell()


def wall_step(dt: float) -> int:
    """Wall time in physics steps of ``dt`` s (live mode's clock)."""
    return int((time.time_ns() // 1000) * 1e-6 / dt)


def _wait_for_inputs(buses, timeout: float) -> None:
    """Sleep until an input arrives on a bus that can say so, or ``timeout`` passes. With two such buses
    (ZeroMQ and ROS 2) each is asked in turn, 0.5 ms at a time."""
    waiters = [bus for bus in buses if hasattr(bus, "wait")]
    if len(waiters) <= 1:
        waiters[0].wait(timeout) if waiters else time.sleep(timeout)
        return
    deadline = time.perf_counter() + timeout
    while not any(bus.wait(0.0005 if i == 0 else 0.0) for i, bus in enumerate(waiters)):
        if time.perf_counter() >= deadline:
            return


class Replayed:
    """Drives an engine built in REPLAY mode along a recording: its sensors run at the recorded instants,
    from the recorded poses, without physics (``goggles.logs.replay`` reads the log and calls this).

    Every event due before an instant runs before the inputs of that instant are applied, as the run
    published its frames before it polled what came next.
    """

    def __init__(self, engine):
        if engine.mode != ClockMode.REPLAY:
            raise ConfigError("replay needs an engine built in REPLAY mode")
        self.engine = engine
        self.inputs = engine.inputs

    @property
    def dt(self) -> float:
        return self.engine.dt

    @property
    def step(self) -> int:
        return self.engine.step

    def start_at(self, step: int) -> None:
        """Begin (or skip ahead) at ``step``: events move to their next due step."""
        self.engine.schedule.start_at(step)
        self.engine.step = step

    def run_until(self, step: int) -> None:
        """Run every sensor event due before ``step``, in order, without physics."""
        engine = self.engine
        engine.schedule.run_before(step, lambda s: setattr(engine, "step", s))
        engine.step = max(engine.step, step)

    def place(self, channel: str, data) -> int:
        """Apply a recorded pose (``<vehicle>/state`` or ``pose/<vehicle>``) or skeleton, skin the people
        and tell where the vehicles posed from outside (``pose/``) touch the world, as the live run did
        (a simulated vehicle's collisions were its physics', recorded); the poses a body of the run
        took (0 or 1).
        Raises MalformedMessage for one that cannot be used."""
        if channel.endswith("/state"):
            name = channel[: -len("/state")]
            taken = self.inputs.apply_recorded_state(name, data)
            if taken:  # a simulated vehicle: its physics' collisions are in the recording (carried there)
                self.engine.rig.vehicles[name].untested.clear()
        else:
            taken = self.inputs.apply(channel, data)
        self.engine.sensors.update_people()
        self.engine.vehicle_events.touch_posed()
        return taken

    def edit(self, channel: str, data) -> None:
        """Apply a recorded scene edit or tracked prop's pose, as the run did; malformed: counted."""
        from goggles.transport.schema import MalformedMessage

        try:
            self.inputs.apply(channel, data)
        except MalformedMessage as exc:
            self.inputs.count_malformed(channel, exc)

    def finish(self) -> None:
        """Run the events of the last instant."""
        self.run_until(self.engine.step + 1)
