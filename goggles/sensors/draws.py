"""A sensor's noise draws, counted on the device.

Each measurement draws new noise, the same on a rerun, while every kernel argument stays the same from
one measurement to the next: the seed and the draw count live in a device array, so recorded work
(``goggles.captured``) replays a noisy sensor correctly. Draw k of seed s uses the kernel seed
(s * 1 000 003 + k) mod 2^31.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from goggles.busy import load_kernels

wp.set_module_options({"enable_backward": False})

_MODULUS = 2**31
_MODULUS_IN_KERNELS = wp.constant(wp.int64(_MODULUS))


@wp.func
def draw_seed(draws: wp.array(dtype=wp.int64)) -> int:
    """The present draw's 31-bit kernel seed (``draws``: a ``NoiseDraws.array``)."""
    return int((draws[0] * wp.int64(1000003) + draws[1]) % _MODULUS_IN_KERNELS)


@wp.kernel
def next_draw_kernel(draws: wp.array(dtype=wp.int64)):
    draws[1] = draws[1] + wp.int64(1)


class NoiseDraws:
    """A seed and how many draws it has made, on ``device``: kernels read ``draw_seed(array)``, then
    ``next()`` moves on (after every kernel of the measurement has read it)."""

    def __init__(self, seed: int, device):
        self.device = wp.get_device(device)
        self.array = wp.array(self._start(seed), dtype=wp.int64, device=self.device)
        load_kernels(next_draw_kernel.module, self.device)

    def reseed(self, seed: int) -> None:
        """Draw from ``seed`` again, from its first draw (a host-to-device copy: outside recorded work)."""
        self.array.assign(self._start(seed))

    def next(self) -> None:
        wp.launch(next_draw_kernel, dim=1, inputs=[self.array], device=self.device)

    @staticmethod
    def _start(seed: int) -> np.ndarray:
        return np.array([int(seed) % _MODULUS, 0], np.int64)  # reduced: no overflow in the product
