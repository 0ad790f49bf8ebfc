"""Device work recorded once and replayed: a CUDA graph on a GPU, Warp's recorded launches on the CPU.

A replay skips Python and the cost of each launch: on CUDA one graph launch instead of tens of kernel
launches. What is recorded must replay the same, so recorded work follows three rules: every array it
passes keeps its memory; every value passed by value is the same at each call, or part of the call's
key (per-call values live on the device: the simulator's step clock, ``goggles.sensors.draws``); and
nothing inside allocates, reads the device from the host or changes host state (the caller keeps its
own books after the call). Work from a thread pool runs in the calling thread while recording
(``recording``): the recording is one ordered stream.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable

import warp as wp

log = logging.getLogger(__name__)


def recording(device) -> bool:
    """Whether work launched on ``device`` now is being recorded rather than run."""
    return wp.get_device(device).is_capturing


def struct_key(struct) -> bytes:
    """What recorded work depends on in a Warp struct passed by value: the bytes the kernel receives
    (its scalars, and where each of its arrays lies and how long it is), nested structs included
    (Warp's ``numpy_value`` cannot read those, so the struct's ctypes bytes are taken as they are)."""
    return bytes(struct._ctype)


class RecordedWork:
    """Runs ``work(*args)`` on ``device``: the first call per key eagerly (it loads the kernels and
    builds what is built lazily), the second records it and replays the recording, later ones replay.

    Args:
        work: the device work; its positional arguments are part of the key.
        device: where it runs.
        enabled: False runs every call eagerly (the same results, call by call); None: recorded on
            CUDA only (a CPU replay runs on one thread, where the eager work may use several).
        keep: recordings kept (one per key; the least recently used goes first).
    """

    def __init__(self, work: Callable[..., None], device, *, enabled: bool | None = None, keep: int = 8):
        self.work = work
        self.device = wp.get_device(device)
        self.enabled = self.device.is_cuda if enabled is None else bool(enabled)
        self.recordings = 0
        """How many times work was recorded (a new key, or after ``forget``)."""
        self._keep = keep
        self._graphs: OrderedDict[Hashable, object] = OrderedDict()
        self._seen: set[Hashable] = set()

    def __call__(self, *args, key: Callable[[], Hashable] | None = None) -> None:
        """Run the work; ``key`` gives what else the recording depends on (asked only when recording
        is enabled)."""
        if not self.enabled:
            self.work(*args)
            return
        full = (args, key() if key is not None else None)
        graph = self._graphs.get(full)
        if graph is None:
            if full not in self._seen:
                if len(self._seen) >= 8 * self._keep:  # keys come and go (people, shapes): forget old ones
                    self._seen.clear()
                self._seen.add(full)
                self.work(*args)
                return
            graph = self._record(args, full)
            if graph is None:
                return
        self._graphs.move_to_end(full)
        wp.capture_launch(graph)

    def forget(self) -> None:
        """Drop every recording (what was recorded no longer holds, e.g. a new seed passed by value)."""
        self._graphs.clear()
        self._seen.clear()

    def _record(self, args, full):
        try:
            with wp.ScopedCapture(device=self.device, force_module_load=False) as capture:
                self.work(*args)
        except RuntimeError as exc:  # Warp's refusal; nothing ran while recording, so nothing is lost
            log.warning("recording %s on %s failed (%s); running it eagerly from now on", self.work, self.device, exc)
            self.enabled = False
            self.forget()
            self.work(*args)
            return None
        self.recordings += 1
        self._graphs[full] = capture.graph
        while len(self._graphs) > self._keep:
            self._graphs.popitem(last=False)
        return capture.graph
