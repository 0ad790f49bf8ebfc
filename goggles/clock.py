"""Sim time and how it is paced against wall time.

Sensors fire at exact sim-time instants (integer numbers of physics steps), whatever the pace, so a
camera's sim-time interval is always nominal and no frame is ever skipped in sim or lockstep mode.
The pace only decides how long a sim second takes on the wall:

* fixed scale s: one sim second takes 1/s wall seconds (if the machine keeps up);
* automatic scale: the scale is chosen from the measured wall cost of one sim second (rendering
  included) so that the machine keeps up, with headroom, never above ``max_scale``. It starts from a
  measured estimate (a warm-up render), not from real time, and moves smoothly (exponential
  smoothing over sim time: an advance weighs as much as the sim time it covers, so a cheap IMU step
  and a dear render step average to what a sim second really costs). Both use the same pacing code.
* lockstep: no pacing; sim time advances only when a client asks.

Pacing follows a line from an anchor (wall, sim). A new scale starts at the last paced instant, on
the old line, so the interval not yet paced is paced at the new scale (none of its wait is lost).
When the machine falls behind the line, it catches up to ``catch_up`` (0.1 s) of lag by not
waiting; a longer stall is forgiven beyond that (so it is followed by at most 0.1 s of catching
up, not by a burst). Work comes in lumps (a
render every other advance, cheap IMU steps between), and forgiving every render's overrun while
sleeping through the cheap steps fell far short of the chosen scale (0.55 achieved where 0.88 was
chosen, on the demo run on 2 cores). Catching up never lets sim time run faster than ``max_scale``
(or a fixed scale above it) over any window of ``window`` (0.5 s) wall seconds or longer: that bound
is enforced from the paced instants themselves, not argued from the catch-up allowance.
"""

from __future__ import annotations

import math
import time
from collections import deque
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


#: A timed message (a pose, a skeleton) older than the newest taken from its source by less than this
#: (µs) came late, and is dropped; an older one is a source that restarted (or whose clock stepped back).
#: A bridge sends on ZeroMQ and LCM, the engine reads both, and a bus reorders by milliseconds.
REORDERED_US = 1_000_000


def came_late(utime: int, newest: int) -> bool:
    """Whether a message stamped ``utime`` is a late copy next to the ``newest`` taken (µs; 0 is no
    time): taken, it would move a body or a person back one frame."""
    return bool(newest) and newest - REORDERED_US < utime < newest


TIMER_SLACK = 0.02
"""Wall seconds a sleep may wake late on a loaded machine (the pacing guarantees hold beyond it)."""
#: Slowest scale accepted, sim seconds per wall second: a millionth (a physics step of 1/960 s takes
#: 17 wall minutes); below it the wall times to wait overflow the system's clock.
MIN_SCALE = 1e-6
#: The scale that follows the renders: as fast as they keep up, never above ``max_scale``.
AUTO = "auto"


def parse_scale(value, where: str, *, auto: bool = True) -> float | None:
    """A clock's scale as a run file or the command line gives it: ``"auto"`` (None: automatic; where
    ``auto`` allows it) or sim seconds per wall second, at least ``MIN_SCALE``. The one reading of a
    scale, for ``[clock] scale``, ``goggles run --scale`` and ``goggles replay --scale``; ``where``
    names the key or flag in the error."""
    if auto and value == AUTO:
        return None
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not MIN_SCALE <= number < float("inf"):
        accepted = f"'{AUTO}' or a number" if auto else "a number"
        raise ConfigError(f"{where} must be {accepted} of sim seconds per wall second >= {MIN_SCALE:g}, got {value!r}")
    return float(number)


class PacedClock:
    """Keeps sim time at ``scale`` sim seconds per wall second.

    Args:
        scale: fixed scale, or None for automatic.
        max_scale: the fastest automatic scale (1.0: never faster than real time).
        min_scale: the slowest automatic scale.
        headroom: fraction of the measured achievable scale that automatic scaling aims for.
        time_constant: sim seconds over which the cost estimate and the automatic scale are smoothed.
        catch_up: wall seconds of lag behind the pacing line that are caught up (a longer stall is
            forgiven beyond this).
        window: wall seconds: over any window this long or longer, sim time never advances faster
            than ``max_scale``, or than a fixed scale above it.
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
        time_constant: float = 0.25,
        catch_up: float = 0.1,
        window: float = 0.5,
        now=time.perf_counter,
        sleep=time.sleep,
    ):
        if scale is not None and not scale >= MIN_SCALE:
            raise ConfigError(f"clock scale {scale} must be >= {MIN_SCALE:g} sim seconds per wall second (or 'auto')")
        if not MIN_SCALE <= min_scale <= max_scale:
            raise ConfigError(f"clock scale bounds [{min_scale}, {max_scale}] must satisfy {MIN_SCALE:g} <= min <= max")
        self.automatic = scale is None
        self.max_scale, self.min_scale = max_scale, min_scale
        self.headroom, self.time_constant = headroom, time_constant
        self.catch_up, self.window = catch_up, window
        self._now, self._sleep = now, sleep
        self.scale = scale if scale is not None else max_scale
        self.limit = max_scale if self.automatic else max(scale, max_scale)
        """The fastest sim seconds per wall second over any window of ``window`` or more."""
        self.cost: float | None = None
        """Measured wall seconds of work per sim second (EMA), or None before any measurement."""
        self._anchor(0.0)

    def start(self, sim_time: float, cost_estimate: float | None = None) -> None:
        """Anchor sim time to now; with automatic scale, start from a measured cost estimate."""
        if self.automatic and cost_estimate is not None and cost_estimate > 0:
            self.cost = cost_estimate
            self.scale = self._target()
        self._anchor(sim_time)

    def _anchor(self, sim_time: float) -> None:
        self._anchor_wall = self._now()
        self._anchor_sim = self._paced_sim = sim_time
        self._recent: deque[tuple[float, float]] = deque([(self._anchor_wall, sim_time)])
        """Paced (wall, sim) instants younger than ``window``: they bind once a window from them is long enough."""
        self._floor = math.inf
        """min(sim - limit * wall) over the paced instants older than ``window``: they bind from now on."""

    def _target(self) -> float:
        achievable = self.headroom / self.cost if self.cost else self.max_scale
        return min(self.max_scale, max(self.min_scale, achievable))

    def record_work(self, sim_interval: float, wall_work: float) -> None:
        """Account ``wall_work`` seconds of work (not sleeping) for ``sim_interval`` sim seconds."""
        if not self.automatic or sim_interval <= 0:
            return
        cost = wall_work / sim_interval
        weight = 1.0 - math.exp(-sim_interval / self.time_constant)
        self.cost = cost if self.cost is None else self.cost + weight * (cost - self.cost)
        new_scale = self.scale + weight * (self._target() - self.scale)
        if abs(new_scale - self.scale) > 1e-9:  # from the last paced instant, on the old line
            self._anchor_wall += (self._paced_sim - self._anchor_sim) / self.scale
            self._anchor_sim = self._paced_sim
            self.scale = new_scale

    def _window_due(self, sim_time: float, earliest: float) -> float:
        """The first wall instant from ``earliest`` at which ``sim_time`` ends no window of ``window``
        wall seconds or more faster than ``limit``. Windows from ``TIMER_SLACK`` shorter bind too:
        a sleep that wakes late must not stretch an exempt short window into a bound one."""
        window = self.window - TIMER_SLACK
        while self._recent and self._recent[0][0] <= earliest - window:
            wall, sim = self._recent.popleft()
            self._floor = min(self._floor, sim - self.limit * wall)
        due = max(earliest, (sim_time - self._floor) / self.limit)
        moved = True
        while moved:  # a later instant can make a younger point's window long enough to bind
            moved = False
            for wall, sim in self._recent:  # oldest first: only a prefix can bind
                if wall + window > due:
                    break
                bound = wall + (sim_time - sim) / self.limit
                if due < bound:
                    due, moved = bound, True
        return due

    def pace(self, sim_time: float) -> float:
        """Wait until the wall clock reaches ``sim_time`` on the pacing line, and until no window of
        ``window`` or more would end faster than ``limit``; returns seconds slept.

        Behind the line by up to ``catch_up``, it does not wait until it has caught up; behind by
        more (a stall), the anchor moves so that only ``catch_up`` is caught up.
        """
        now = self._now()
        line = self._anchor_wall + (sim_time - self._anchor_sim) / self.scale
        if now - line > self.catch_up:
            self._anchor_wall, self._anchor_sim = now - self.catch_up, sim_time
            line = now - self.catch_up
        due = self._window_due(sim_time, max(now, line))
        self._paced_sim = sim_time
        wait = due - now
        if wait > 0:
            self._sleep(wait)
        self._recent.append((self._now(), sim_time))
        return max(wait, 0.0)


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
