"""Pacing against a fake wall clock: fixed scale, automatic scale from a measured cost."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.clock import PacedClock, ScaleMeter
from goggles.errors import ConfigError


class FakeWall:
    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_fixed_scale_paces_sim_time():
    wall = FakeWall()
    clock = PacedClock(0.5, now=wall.now, sleep=wall.sleep)
    clock.start(0.0)
    for k in range(1, 11):
        wall.t += 0.01  # work
        clock.pace(0.1 * k)
    assert wall.t == pytest.approx(2.0)  # 1 sim second at half speed


def test_auto_scale_starts_sane_and_converges_smoothly():
    wall = FakeWall()
    clock = PacedClock(None, max_scale=1.0, headroom=0.9, now=wall.now, sleep=wall.sleep)
    clock.start(0.0, cost_estimate=2.0)  # a warm-up render says one sim second costs 2 wall seconds
    assert clock.scale == pytest.approx(0.45)  # sane from the first frame, not real time
    scales = []
    sim = 0.0
    for _ in range(200):
        sim += 1 / 30
        wall.t += 1.5 / 30  # the real cost is 1.5 wall seconds per sim second
        clock.record_work(1 / 30, 1.5 / 30)
        clock.pace(sim)
        scales.append(clock.scale)
    assert scales[-1] == pytest.approx(0.9 / 1.5, rel=1e-3)
    steps = [abs(b - a) for a, b in zip(scales, scales[1:])]
    assert max(steps) < 0.05  # no jumps


def test_auto_scale_is_bounded():
    wall = FakeWall()
    fast = PacedClock(None, max_scale=1.0, now=wall.now, sleep=wall.sleep)
    fast.start(0.0, cost_estimate=0.01)
    assert fast.scale == 1.0  # never faster than max_scale
    slow = PacedClock(None, min_scale=0.05, now=wall.now, sleep=wall.sleep)
    slow.start(0.0, cost_estimate=1000.0)
    assert slow.scale == 0.05


def test_a_stall_is_not_followed_by_a_burst():
    """After a 5 s stall only ``catch_up`` (0.1 s) of lag is caught up without waiting."""
    wall = FakeWall()
    clock = PacedClock(1.0, now=wall.now, sleep=wall.sleep)
    clock.start(0.0)
    wall.t = 5.0  # stalled 5 s at sim time 0.1
    assert clock.pace(0.1) == 0.0
    unwaited = [clock.pace(0.1 + 0.01 * k) == 0.0 for k in range(1, 30)]
    assert sum(unwaited) == 10  # 0.1 s of sim time at once, then paced again
    assert clock.pace(0.4) == pytest.approx(0.01)


def _run_lumpy(scale, light, heavy, seconds=30.0):
    """The engine's rhythm: an advance every 1/60 s of sim time (IMU batch, state), a render every
    second one; ``light`` and ``heavy`` wall seconds of work. Returns published (wall, sim) and the clock."""
    wall = FakeWall()

    def sleep(seconds: float) -> None:
        wall.t += seconds + 1e-4

    clock = PacedClock(scale, now=wall.now, sleep=sleep)
    clock.start(0.0, cost_estimate=(light + heavy) * 30.0)
    sim, points = 0.0, [(0.0, 0.0)]
    for k in range(1, int(seconds * 60) + 1):
        sim = k / 60
        work = heavy if k % 2 == 0 else light
        wall.t += work
        clock.record_work(1 / 60, work)
        clock.pace(sim)
        points.append((wall.t, sim))
    return np.array(points), clock


@pytest.mark.parametrize("light, heavy", [(0.001, 0.030), (0.001, 0.050), (0.002, 0.012)])
def test_lumpy_work_achieves_the_scale_it_chose(light, heavy):
    """A render every other advance overruns its own interval; the cheap advances between must make
    it up. The first auto clock forgave each overrun and slept through the cheap steps: 0.70 achieved
    where 0.97 was chosen (0.55 of 0.88 on the demo run)."""
    cost = (light + heavy) * 30.0  # wall seconds of work per sim second, from the rhythm itself
    points, clock = _run_lumpy(None, light, heavy)
    assert clock.scale == pytest.approx(min(1.0, 0.9 / cost), rel=0.02)
    late = points[points[:, 1] >= 10.0]  # after the first 10 sim seconds
    achieved = (late[-1, 1] - late[0, 1]) / (late[-1, 0] - late[0, 0])
    assert achieved == pytest.approx(clock.scale, rel=0.02)
    assert _fastest_window(points, 0.5) <= 1.0 + 1e-3
    fixed, _ = _run_lumpy(0.8 / cost, light, heavy)  # a fixed scale the machine can afford on average
    assert fixed[-1, 1] / fixed[-1, 0] == pytest.approx(0.8 / cost, rel=0.02)
    assert _fastest_window(fixed, 0.5) <= max(1.0, 0.8 / cost) * (1.0 + 1e-3)  # catching up: under max_scale


def test_bad_scales_are_refused():
    with pytest.raises(ConfigError):
        PacedClock(0.0)
    with pytest.raises(ConfigError):
        PacedClock(None, min_scale=2.0, max_scale=1.0)


def _run_auto(costs, *, max_scale=1.0, frame=1 / 30, overshoot=1e-4):
    """Drive an automatic clock with a per-frame wall cost (s of work per sim second); returns the
    (wall, sim) instants at which each frame's outputs would be published, and the clock."""
    wall = FakeWall()

    def sleep(seconds: float) -> None:
        wall.t += seconds + overshoot  # a real timer wakes a little late

    clock = PacedClock(None, max_scale=max_scale, now=wall.now, sleep=sleep)
    clock.start(0.0, cost_estimate=costs[0])
    sim, points = 0.0, [(0.0, 0.0)]
    for cost in costs:
        sim += frame
        wall.t += cost * frame
        clock.record_work(frame, cost * frame)
        clock.pace(sim)
        points.append((wall.t, sim))
    return np.array(points), clock, wall


def _fastest_window(points: np.ndarray, window: float) -> float:
    """Highest sim/wall ratio over every window of at least ``window`` wall seconds."""
    worst = 0.0
    for i in range(len(points)):
        j = np.searchsorted(points[:, 0], points[i, 0] + window)
        if j < len(points):
            worst = max(worst, np.max((points[j:, 1] - points[i, 1]) / (points[j:, 0] - points[i, 0])))
    return worst


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_scale_never_runs_ahead_of_max_scale_when_the_cost_changes_every_frame(seed):
    """The first wave re-anchored at 'now' on each scale change and lost that frame's wait: sim time
    ran 1.28x (windows up to 1.54x) ahead of real time. A cost that changes every frame, from far
    cheaper than real time to far dearer, must never let sim time outrun max_scale."""
    rng = np.random.default_rng(seed)
    costs = np.exp(rng.uniform(np.log(0.05), np.log(3.0), 3000))  # 100 s of frames at 30 Hz
    points, clock, _ = _run_auto(costs)
    assert _fastest_window(points, 0.5) <= 1.0 + 1e-3
    cheap, _, _ = _run_auto(np.full(600, 0.05))  # always able to keep up: real time, not slower
    assert cheap[-1, 1] / cheap[-1, 0] == pytest.approx(1.0, rel=0.01)


def test_measured_scale_is_the_rate_sim_time_advanced():
    """What the status line shows: sim seconds per wall second over its own interval."""
    rng = np.random.default_rng(5)
    wall = FakeWall()
    clock = PacedClock(None, max_scale=1.0, now=wall.now, sleep=wall.sleep)
    clock.start(0.0, cost_estimate=1.0)
    meter = ScaleMeter(now=wall.now)
    assert meter.read(0.0) is None
    sim, last = 0.0, (0.0, 0.0)
    checked = 0
    for cost in np.exp(rng.uniform(np.log(0.1), np.log(4.0), 1500)):
        sim += 1 / 30
        wall.t += cost / 30
        clock.record_work(1 / 30, cost / 30)
        clock.pace(sim)
        if wall.t - last[0] >= 1.0:
            truth = (sim - last[1]) / (wall.t - last[0])
            assert meter.read(sim) == pytest.approx(truth, rel=0.05)
            last = (wall.t, sim)
            checked += 1
    assert checked > 10
