"""What a run reports about itself: input and output counters, stage timings and achieved rates."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

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
    from goggles.clock import ClockMode

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
