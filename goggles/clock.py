"""Sim time and how it is paced against wall time.

Sensors fire at exact sim-time instants (integer numbers of physics steps), whatever the pace, so a
camera's sim-time interval is always nominal and no frame is ever skipped in sim or lockstep mode.
The pace only decides how long a sim second takes on the wall:

* fixed scale s: one sim second takes 1/s wall seconds (if the machine keeps up);
* automatic scale: the scale is chosen from the measured wall cost of one sim second (rendering
  included) so that the machine keeps up, with headroom, never above ``max_scale``. It starts from a
  measured estimate (a warm-up render), not from real time, and moves smoothly (exponential
  smoothing). Both use the same pacing code.
* lockstep: no pacing; sim time advances only when a client asks.

Pacing follows a line from an anchor (wall, sim). A new scale starts at the last paced instant, on
the old line, so the interval not yet paced is paced at the new scale (none of its wait is lost).
When the machine falls behind, the anchor moves to now: it never rushes to catch up. So sim time
never advances faster than the scale (beyond the sleep timer's resolution) over any window.
"""

from __future__ import annotations

import time
from enum import IntEnum

from goggles.errors import ConfigError


class ClockMode(IntEnum):
    SIM = 0
    """Sim time paced at a fixed or automatic scale."""
    LOCKSTEP = 1
    """Sim time advanced only by client step requests."""
    LIVE = 2
    """Wall time: poses come from outside (motion capture)."""
    REPLAY = 3
    """Log time: poses come from a recording; sensors are rendered again, as fast as wanted."""


class PacedClock:
    """Keeps sim time at ``scale`` sim seconds per wall second.

    Args:
        scale: fixed scale, or None for automatic.
        max_scale: the fastest automatic scale (1.0: never faster than real time).
        min_scale: the slowest automatic scale.
        headroom: fraction of the measured achievable scale that automatic scaling aims for.
        smoothing: weight of each new measurement (0..1) in the cost estimate and the scale.
        now: the wall clock, seconds (injectable for tests).
        sleep: how to wait, seconds (injectable for tests).
    """

    def __init__(
        self,
        scale: float | None = None,
        *,
        max_scale: float = 1.0,
        min_scale: float = 0.01,
        headroom: float = 0.9,
        smoothing: float = 0.2,
        now=time.perf_counter,
        sleep=time.sleep,
    ):
        if scale is not None and not scale > 0:
            raise ConfigError(f"clock scale {scale} must be > 0 sim seconds per wall second (or 'auto')")
        if not 0 < min_scale <= max_scale:
            raise ConfigError(f"clock scale bounds [{min_scale}, {max_scale}] must satisfy 0 < min <= max")
        self.automatic = scale is None
        self.max_scale, self.min_scale = max_scale, min_scale
        self.headroom, self.smoothing = headroom, smoothing
        self._now, self._sleep = now, sleep
        self.scale = scale if scale is not None else max_scale
        self.cost: float | None = None
        """Measured wall seconds of work per sim second (EMA), or None before any measurement."""
        self._anchor_wall = now()
        self._anchor_sim = 0.0
        self._paced_sim = 0.0

    def start(self, sim_time: float, cost_estimate: float | None = None) -> None:
        """Anchor sim time to now; with automatic scale, start from a measured cost estimate."""
        if self.automatic and cost_estimate is not None and cost_estimate > 0:
            self.cost = cost_estimate
            self.scale = self._target()
        self._anchor(sim_time)

    def _anchor(self, sim_time: float) -> None:
        self._anchor_wall = self._now()
        self._anchor_sim = self._paced_sim = sim_time

    def _target(self) -> float:
        achievable = self.headroom / self.cost if self.cost else self.max_scale
        return min(self.max_scale, max(self.min_scale, achievable))

    def record_work(self, sim_interval: float, wall_work: float) -> None:
        """Account ``wall_work`` seconds of work (not sleeping) for ``sim_interval`` sim seconds."""
        if not self.automatic or sim_interval <= 0:
            return
        cost = wall_work / sim_interval
        self.cost = cost if self.cost is None else self.cost + self.smoothing * (cost - self.cost)
        new_scale = self.scale + self.smoothing * (self._target() - self.scale)
        if abs(new_scale - self.scale) > 1e-9:  # from the last paced instant, on the old line
            self._anchor_wall += (self._paced_sim - self._anchor_sim) / self.scale
            self._anchor_sim = self._paced_sim
            self.scale = new_scale

    def pace(self, sim_time: float) -> float:
        """Wait until the wall clock reaches ``sim_time`` at the current scale; returns seconds slept.

        When behind (the machine is slower than the scale), it does not wait and does not try to
        catch up later: the anchor moves to now, so a stall is never followed by a burst.
        """
        due = self._anchor_wall + (sim_time - self._anchor_sim) / self.scale
        wait = due - self._now()
        self._paced_sim = sim_time
        if wait > 0:
            self._sleep(wait)
            return wait
        self._anchor_wall, self._anchor_sim = self._now(), sim_time
        return 0.0


class ScaleMeter:
    """Sim seconds per wall second actually achieved between reads: what a status line or the clock
    message reports, whatever drives time (a target scale, a lockstep client) and whatever the target."""

    def __init__(self, now=time.perf_counter):
        self._now = now
        self._last: tuple[float, float] | None = None

    def read(self, sim_time: float) -> float | None:
        """The rate since the previous read (None on the first read or if no wall time passed)."""
        wall = self._now()
        last, self._last = self._last, (wall, sim_time)
        if last is None or wall <= last[0]:
            return None
        return (sim_time - last[1]) / (wall - last[0])
