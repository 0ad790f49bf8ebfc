"""Packed launches (goggles.runtime.launches): a replay does what ``wp.launch`` of the same arguments does,
whatever changed between calls: a number, an array, a struct's scalar or its array, a kernel. The
kernels' results are checked against numbers written here, not against the launcher."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from goggles.runtime.launches import Launches
from goggles.runtime.recorded_work import RecordedWork


@wp.struct
class Gain:
    scale: float
    offset: wp.array(dtype=float)


@wp.kernel
def scaled_kernel(gain: Gain, source: wp.array(dtype=float), amount: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = gain.scale * source[i] + gain.offset[0] + amount


@wp.kernel
def negated_kernel(gain: Gain, source: wp.array(dtype=float), amount: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = -(gain.scale * source[i] + gain.offset[0] + amount)


def _gain(scale: float, offset: float, device) -> Gain:
    gain = Gain()
    gain.scale = scale
    gain.offset = wp.array([offset], dtype=float, device=device)
    return gain


def test_a_replay_sees_every_change_a_fresh_launch_would():
    d = "cpu"
    launch = Launches(d)
    source = wp.array([1.0, 2.0, 3.0], dtype=float, device=d)
    out = wp.zeros(3, dtype=float, device=d)
    gain = _gain(2.0, 10.0, d)

    def run(kernel=scaled_kernel, dim=3, amount=0.5, src=None, dst=None):
        dst = out if dst is None else dst
        launch(kernel, dim, [gain, source if src is None else src, amount], [dst])
        return dst.numpy().tolist()

    assert run() == [12.5, 14.5, 16.5]
    assert run() == [12.5, 14.5, 16.5] and len(launch) == 1  # replayed, not packed again
    assert run(amount=1.5) == [13.5, 15.5, 17.5]  # a number by value
    gain.scale = 3.0  # a struct's scalar, changed in place
    assert run() == [13.5, 16.5, 19.5]
    gain.offset = wp.array([-1.0], dtype=float, device=d)  # a struct's array, replaced
    assert run() == [2.5, 5.5, 8.5]
    gain.offset.fill_(0.0)  # an array's contents: read at launch, as ever
    assert run() == [3.5, 6.5, 9.5]
    other = wp.array([0.0, 0.0, 1.0], dtype=float, device=d)  # another array in the same place
    assert run(src=other) == [0.5, 0.5, 3.5]
    assert run(kernel=negated_kernel) == [-3.5, -6.5, -9.5]
    fresh = wp.zeros(3, dtype=float, device=d)
    assert run(dim=2, dst=fresh) == [3.5, 6.5, 0.0]  # the dimension
    assert run(dim=np.int64(3), src=np.array([1.0, 1.0, 1.0], np.float32), dst=fresh) == [3.5, 3.5, 3.5]
    assert run(dim=0, dst=fresh, amount=9.0) == [3.5, 3.5, 3.5]  # nothing to run


def test_two_structs_of_equal_bytes_are_two_arguments():
    """A packed launch reads its struct where it lies: one of equal bytes must not stand in for it."""
    d = "cpu"
    launch = Launches(d)
    offset = wp.array([0.0], dtype=float, device=d)
    source = wp.array([1.0], dtype=float, device=d)
    out = wp.zeros(1, dtype=float, device=d)
    a, b = Gain(), Gain()
    a.scale = b.scale = 2.0
    a.offset = b.offset = offset
    launch(scaled_kernel, 1, [a, source, 0.0], [out])
    launch(scaled_kernel, 1, [b, source, 0.0], [out])
    assert out.numpy()[0] == 2.0
    a.scale = 5.0
    launch(scaled_kernel, 1, [b, source, 0.0], [out])
    assert out.numpy()[0] == 2.0  # b's, not a's


@wp.kernel
def inverse_kernel(amount: float, out: wp.array(dtype=float)):
    out[0] = 1.0 / amount


def test_numbers_equal_in_python_but_not_to_the_kernel_are_two_arguments():
    d = "cpu"
    launch = Launches(d)
    out = wp.zeros(1, dtype=float, device=d)
    for amount, expected in ((0.0, np.inf), (-0.0, -np.inf), (0.0, np.inf), (2, 0.5), (2.0, 0.5), (True, 1.0)):
        launch(inverse_kernel, 1, [amount], [out])
        assert out.numpy()[0] == expected
    launch(inverse_kernel, 1, [float("nan")], [out])
    assert np.isnan(out.numpy()[0])


def test_the_launches_kept_are_bounded_and_a_cleared_launcher_packs_again():
    d = "cpu"
    launch = Launches(d, keep=2)
    source = wp.array([1.0], dtype=float, device=d)
    out = wp.zeros(1, dtype=float, device=d)
    gain = _gain(1.0, 0.0, d)
    for amount in (1.0, 2.0, 3.0, 4.0):
        launch(scaled_kernel, 1, [gain, source, amount], [out])
        assert out.numpy()[0] == pytest.approx(1.0 + amount)
    assert len(launch) == 2
    launch.clear()
    assert len(launch) == 0
    launch(scaled_kernel, 1, [gain, source, 5.0], [out])
    assert out.numpy()[0] == 6.0 and len(launch) == 1


@wp.kernel
def add_kernel(gain: Gain, total: wp.array(dtype=float)):
    total[0] = total[0] + gain.scale


def test_work_recorded_on_the_cpu_launches_as_wp_launch_does():
    """While Warp records (``RecordedWork``), launches are not packed: the recording holds them."""
    d = "cpu"
    launch = Launches(d)
    total = wp.zeros(1, dtype=float, device=d)
    gain = _gain(1.0, 0.0, d)
    work = RecordedWork(lambda: launch(add_kernel, 1, [gain], [total]), d, enabled=True)
    for expected in (1.0, 2.0, 3.0):  # eager, recorded and replayed, replayed
        work()
        assert total.numpy()[0] == expected
    assert work.recordings == 1 and len(launch) == 1  # the eager call's
