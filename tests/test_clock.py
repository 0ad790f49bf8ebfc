"""Pacing against a fake wall clock: fixed scale, automatic scale from a measured cost."""

from __future__ import annotations

import pytest

from goggles.clock import PacedClock
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
        clock.record_work(1 / 30, 1.5 / 30, sim)
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
    wall = FakeWall()
    clock = PacedClock(1.0, now=wall.now, sleep=wall.sleep)
    clock.start(0.0)
    wall.t = 5.0  # stalled 5 s at sim time 0.1
    assert clock.pace(0.1) == 0.0
    assert clock.pace(0.2) == pytest.approx(0.1)  # paced again from the stall, not rushing to catch up


def test_bad_scales_are_refused():
    with pytest.raises(ConfigError):
        PacedClock(0.0)
    with pytest.raises(ConfigError):
        PacedClock(None, min_scale=2.0, max_scale=1.0)
