"""What a run reports about itself: input and output counters, stage timings and achieved rates."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from goggles.clock import ClockMode, ScaleMeter
from goggles.runtime.device_copies import COPIES

#: Bucket of drop counts for channels that are not inputs of this run.
OTHER_CHANNELS = "(other channels)"
#: Most channels counted by name.
MAX_COUNTED_CHANNELS = 64


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


class StageTimes:
    """Recent wall durations of each stage of the loop, for the status line and benchmarks."""

    def __init__(self, keep: int = 2000):
        self._samples: dict[str, deque[float]] = {}
        self._keep = keep

    def add(self, stage: str, seconds: float) -> None:
        self._samples.setdefault(stage, deque(maxlen=self._keep)).append(seconds)

    def percentile_ms(self, stage: str, q: float) -> float:
        samples = self._samples.get(stage)
        return float(np.percentile(samples, q) * 1000.0) if samples else float("nan")


class RateLog:
    """Sim times of the recent occurrences of named events: their achieved rates in sim time."""

    def __init__(self, keep: int = 64):
        self._times: dict[str, deque[float]] = {}
        self._keep = keep

    def note(self, name: str, sim_time: float) -> None:
        """An occurrence of ``name`` at ``sim_time``; several at one instant (each fleet's IMU samples)
        are one."""
        times = self._times.setdefault(name, deque(maxlen=self._keep))
        if not times or times[-1] != sim_time:
            times.append(sim_time)

    def rates(self) -> dict[str, float]:
        """Hz of sim time, per event with at least two occurrences."""
        return {
            name: (len(times) - 1) / (times[-1] - times[0])
            for name, times in self._times.items()
            if len(times) >= 2 and times[-1] > times[0]
        }


def describe_time(mode, measured: float | None, clock) -> str:
    """What drives sim time in ``mode`` and the scale it was ``measured`` to advance at."""
    if mode == ClockMode.LIVE:
        return "live (wall time, poses from the bus)"
    rate = "-" if measured is None else f"{measured:.2f}"
    if mode == ClockMode.LOCKSTEP:
        return f"{rate} (lockstep: client step requests)"
    target = f"auto, target {clock.scale:.2f}" if clock.automatic else "fixed"
    return f"{rate} ({target})"


def _ms(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:.1f}"  # nothing measured yet


def status_line(
    elapsed: float,
    time_source: str,
    rates: dict[str, float],
    times: StageTimes,
    counters: Counters,
    vehicle_problems,
    avatars,
    host_copies_per_s: float | None = None,
    host_syncs_per_s: float | None = None,
) -> str:
    """The one line a run prints each second (host copies: device→host copies per second of run time,
    and the synchronisations they waited on; vehicle problems: ``quad0 STALE``, ``quad0 SILENT 2.0 s``,
    ``quad0 CRASHED``)."""
    achieved = " ".join(f"{name} {rate:.1f} Hz" for name, rate in rates.items())
    render, frame = _ms(times.percentile_ms("render", 50)), _ms(times.percentile_ms("frame", 99))
    return (
        f"t={elapsed:8.2f} s  scale={time_source}  {achieved}  render p50 {render} ms  frame p99 {frame} ms"
        f"  inputs {counters.received} (dropped {counters.malformed})"
        + (f"  host copies {host_copies_per_s:.0f}/s" if host_copies_per_s is not None else "")
        + (f" in {host_syncs_per_s:.0f} syncs" if host_copies_per_s is not None and host_syncs_per_s else "")
        + "".join(f"  {problem}" for problem in vehicle_problems)
        + (f"  avatars {list(avatars)}" if avatars else "")
    )


class RunReport:
    """What a run says of itself as it goes: the status line (``line``, handed to ``status`` about once
    a wall second), the clock message with the scale sim time achieved, and device→host copies per
    second since its driver began counting."""

    def __init__(self, now, clock, rates: RateLog, times: StageTimes, counters: Counters, rig, outputs, status=None):
        self.now, self.clock, self.rates, self.times, self.counters = now, clock, rates, times, counters
        self.rig, self.outputs, self._status = rig, outputs, status
        self._status_meter, self._clock_meter = ScaleMeter(), ScaleMeter()
        self._live_start = 0.0
        self._copies_from = (COPIES.count, COPIES.syncs, 0.0)  # device→host copies, syncs, when counting began

    @property
    def _live(self) -> bool:
        return self.now.mode == ClockMode.LIVE

    def begin_counting(self) -> None:
        """Count device-to-host copies from now (``host_copies_per_s``): a driver starting its run."""
        self._live_start = time.time() if self._live else 0.0
        self._copies_from = (COPIES.count, COPIES.syncs, 0.0 if self._live else self.now.t)

    def tell(self) -> None:
        """Hand the status line to whoever asked for it (the command line prints it)."""
        if self._status:
            self._status(self.line())

    def publish_clock(self) -> None:
        scale = 1.0  # live: wall time
        if not self._live:  # the rate sim time actually advanced since the last clock message
            measured = self._clock_meter.read(self.now.t)
            scale = self.clock.scale if measured is None else measured
        self.outputs.clock(self.now.mode, scale, self.rates.rates(), self.now.utime())

    def time_source(self) -> str:
        """What drives sim time, and how fast it advanced since the last call (for the status line)."""
        measured = None if self._live else self._status_meter.read(self.now.t)
        return describe_time(self.now.mode, measured, self.clock)

    def line(self) -> str:
        vehicles = self.rig.vehicles.values()
        if self._live:
            problems = [(v.name, v.pose_source_problem()) for v in vehicles if v.sim is None]
        else:
            problems = [(v.name, v.problem()) for v in vehicles]
        return status_line(
            self.now.t - self._live_start if self._live else self.now.t,
            self.time_source(),
            self.rates.rates(),
            self.times,
            self.counters,
            [f"{name} {problem}" for name, problem in problems if problem],
            sorted(self.rig.crowd.avatars),
            self.host_copies_per_s(),
            self.host_syncs_per_s(),
        )

    def host_copies_per_s(self) -> float | None:
        """Device→host copies per sim second (wall second in live mode) since counting began."""
        return self._per_s(COPIES.count, self._copies_from[0])

    def host_syncs_per_s(self) -> float | None:
        """The synchronisations those copies waited on, per sim second (wall second in live mode)."""
        return self._per_s(COPIES.syncs, self._copies_from[1])

    def _per_s(self, count: int, at_start: int) -> float | None:
        elapsed = (time.time() - self._live_start) if self._live else self.now.t - self._copies_from[2]
        return (count - at_start) / elapsed if elapsed > 0 else None
