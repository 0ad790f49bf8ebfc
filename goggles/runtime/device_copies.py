"""Device→host copies: into host memory allocated once (pinned on CUDA), one synchronisation per
batch, and counted, so a run can say how many it made, in how many synchronisations (``goggles run``
reports both per sim second).

On the CPU a Warp array already lives in host memory: the mirror is a view of it and "copying" is
free, but it is counted all the same, so the figure measured here is the CUDA path's. A view is
only valid until the next launch writes the device array: readers copy what they keep.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import warp as wp


class CopyCounter:
    """How many device→host copies were made, and in how many synchronisations, from any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0
        self.syncs = 0

    def add(self, copies: int = 1, syncs: int = 0) -> None:
        with self._lock:
            self.count += copies
            self.syncs += syncs


#: Every copy made through a HostMirror.
COPIES = CopyCounter()


class HostMirror:
    """A host array that mirrors a device array, refreshed on demand into memory allocated once."""

    def __init__(self, source: wp.array):
        self.source = source
        if source.device.is_cuda:
            self._host = wp.empty(source.shape, dtype=source.dtype, device="cpu", pinned=True)
            self.array: np.ndarray = self._host.numpy()
        else:
            self._host = None
            self.array = source.numpy()  # the device array's own memory

    def enqueue(self) -> None:
        """Begin the copy (asynchronous on CUDA), counted by ``collect``, which waits for it: recorded
        work (``goggles.runtime.recorded_work``) may hold the copy, since its replays are counted there."""
        if self._host is not None:
            wp.copy(self._host, self.source)


def fetch(mirrors: Sequence[HostMirror]) -> list[np.ndarray]:
    """Copy every mirror's device array to the host with one synchronisation; their host arrays."""
    for mirror in mirrors:
        mirror.enqueue()
    return collect(mirrors)


def collect(mirrors: Sequence[HostMirror]) -> list[np.ndarray]:
    """The host arrays of mirrors whose copies were enqueued: counted, then one synchronisation."""
    COPIES.add(len(mirrors), syncs=1 if mirrors else 0)
    devices = {str(mirror.source.device): mirror.source.device for mirror in mirrors if mirror.source.device.is_cuda}
    for device in devices.values():  # Warp's Device is not hashable: keyed by its name
        wp.synchronize_device(device)
    return [mirror.array for mirror in mirrors]
