"""A sensor's noise draws: a function of the seed, the sensor and the measurement, never of the order.

A measurement's noise comes from three numbers: the run's seed, the sensor's stream (each camera,
range sensor or LiDAR its own: ``stream_of`` its channel name, or an environment's index) and the
draw's key (the measurement's sim time in µs where the engine measures, so a replay that renders the
same instant draws the same noise whatever it rendered before; a count of draws where a learning
environment steps). The seed and the key live in a device array, so recorded work
(``goggles.runtime.recorded_work``) replays a noisy sensor correctly: ``at(key)`` is a copy to the device made
before the recorded work, ``next()`` a kernel inside it. ``draw_seed`` hashes the seed, the stream and
both halves of the 64-bit key through Warp's PCG (``wp.rand_init``); an element's state is that seed
with its index (``draw_state``).
"""

from __future__ import annotations

import zlib

import numpy as np
import warp as wp

from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.runtime.launches import Launches
from goggles.runtime.progress import load_kernels

wp.set_module_options(FORWARD_ONLY)

_MODULUS = 2**31
_LOW_BITS = wp.constant(wp.int64(_MODULUS - 1))


def stream_of(name: str) -> int:
    """A sensor's noise stream from its name (``<vehicle>/<camera>``): 31 bits of its CRC-32, the
    same on every run and machine, so a sensor keeps its noise when others are added or removed."""
    return zlib.crc32(name.encode("utf-8")) & 0x3FFFFFFF  # 30 bits: a batch adds its index


@wp.func
def draw_seed(draws: wp.array(dtype=wp.int64), stream: int) -> int:
    """The present draw's seed for sensor ``stream``: mixed once per row (or sensor), not per element."""
    key = draws[1]
    state = wp.rand_init(int(draws[0]), stream)
    state = wp.rand_init(wp.randi(state), int(key & _LOW_BITS))
    state = wp.rand_init(wp.randi(state), int(key >> wp.int64(31)))
    return wp.randi(state)


@wp.func
def draw_state(draws: wp.array(dtype=wp.int64), stream: int, index: int) -> wp.uint32:
    """The random state of element ``index`` (a pixel, a beam) of sensor ``stream`` in the present draw:
    ``wp.rand_init(draw_seed(draws, stream), index)``."""
    return wp.rand_init(draw_seed(draws, stream), index)


@wp.kernel
def next_draw_kernel(draws: wp.array(dtype=wp.int64)):
    draws[1] = draws[1] + wp.int64(1)


class NoiseDraws:
    """A seed and the present draw's key, on ``device``: kernels read ``draw_state(array, stream, i)``;
    ``at(key)`` chooses the draw (a measurement's time), ``next()`` moves to the following one (after
    every kernel of the measurement has read it)."""

    def __init__(self, seed: int, device):
        self.device = wp.get_device(device)
        self._seed = int(seed) % _MODULUS  # 31 bits: Warp's seeds are int32
        self.array = wp.array(np.array([self._seed, 0], np.int64), dtype=wp.int64, device=self.device)
        self._launches = Launches(self.device, keep=1)
        load_kernels(next_draw_kernel.module, self.device)

    def reseed(self, seed: int) -> None:
        """Draw from ``seed`` again, from its first draw (a host-to-device copy: outside recorded work)."""
        self._seed = int(seed) % _MODULUS
        self.at(0)

    def at(self, key: int) -> None:
        """Make the next measurement draw ``key``'s noise (a host-to-device copy: outside recorded work)."""
        self.array.assign(np.array([self._seed, int(key)], np.int64))

    def next(self) -> None:
        self._launches(next_draw_kernel, 1, [self.array])


class FrameNoise:
    """What a sensor model over a renderer's images shares: each camera's noise stream, the run's seed,
    and frames drawn in turn (``at(key)`` chooses one: its sim time). Its kernels are launched over the
    renderer's rows with the draws and streams as their last inputs, and the draw then moves on."""

    def __init__(self, renderer, seed: int, streams):
        self._renderer = renderer
        self._draws = NoiseDraws(seed, renderer.device)
        self._streams = wp.array(list(streams), dtype=wp.int32, device=renderer.device)

    def reseed(self, seed: int) -> None:
        """Draw from ``seed`` again, from its first frame (a learning environment's ``reset(seed=)``)."""
        self._draws.reseed(seed)

    def at(self, key: int) -> None:
        """Make the next ``apply`` draw frame ``key``'s noise (its sim time, µs)."""
        self._draws.at(key)

    def _launch(self, kernel, inputs: list, outputs: list) -> None:
        self._renderer.launch_rows(kernel, [*inputs, self._draws.array, self._streams], outputs)
        self._draws.next()


def host_generator(seed: int, stream: int, key: int) -> np.random.Generator:
    """The host's random generator of one measurement (beacon noise), keyed as the device's draws are."""
    return np.random.default_rng([int(seed) % _MODULUS, int(stream), int(key) & (2**64 - 1)])
