"""Warp launches packed once and replayed: a frame's tens of CPU launches without Python's packing.

``wp.launch`` converts every argument to its C form on every call (a struct's arrays one by one):
60-110 us of Python a launch on the CPU, while the GIL is held, for the demo's sixty launches a
frame. ``Launches`` keeps Warp's packed launch (``wp.launch(record_cmd=True)``) for each set of
arguments and replays it. What a launch depends on is its key: each array by identity (the entry
keeps it alive, so an identity is never another array's), each struct by identity and by the bytes
the kernel receives (``struct_key``: its scalars, and where its arrays lie; Warp's packed launch
reads the struct itself, so a change is seen either way), each number by value. A call with another
kind of argument (a numpy array, a vector) is launched as ``wp.launch`` would.

On CUDA, and while work is being recorded (``goggles.runtime.recorded_work``), ``wp.launch`` is used
as is: a camera's frame on CUDA is a recorded graph already.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import warp as wp

from goggles.runtime.recorded_work import struct_key


class Launches:
    """Launches ``kernel`` on ``device``, replaying Warp's packed launch for arguments seen before.

    Args:
        device: where every launch runs.
        keep: packed launches kept (the least recently used goes first), each keeping its arrays.
    """

    def __init__(self, device, keep: int = 64):
        self.device = wp.get_device(device)
        self._keep = keep
        self._packed: OrderedDict[tuple, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, kernel, dim, inputs=(), outputs=()) -> None:
        """``wp.launch(kernel, dim=dim, inputs=inputs, outputs=outputs, device=self.device)``."""
        d = self.device
        key = _key(kernel, dim, inputs, outputs) if d.is_cpu and not d.is_capturing else None
        if key is None:
            wp.launch(kernel, dim=dim, inputs=list(inputs), outputs=list(outputs), device=self.device)
            return
        with self._lock:
            entry = self._packed.get(key)
            if entry is not None:
                self._packed.move_to_end(key)
        if entry is None:
            inputs, outputs = list(inputs), list(outputs)
            command = wp.launch(kernel, dim=dim, inputs=inputs, outputs=outputs, device=self.device, record_cmd=True)
            if command is None:  # nothing to run (a dimension of 0): nothing to keep
                return
            entry = (command, inputs, outputs)  # the arguments kept: their identities stay theirs
            with self._lock:
                self._packed[key] = entry
                while len(self._packed) > self._keep:
                    self._packed.popitem(last=False)
        entry[0].launch()

    def clear(self) -> None:
        """Forget every packed launch (and release the arrays they keep)."""
        with self._lock:
            self._packed.clear()

    def __len__(self) -> int:
        return len(self._packed)


def _key(kernel, dim, inputs, outputs) -> tuple | None:
    """What a packed launch of these arguments depends on; None where an argument cannot be keyed. A
    number's type is not: Warp converts it to the parameter's (1, 1.0 and True pack alike there)."""
    parts = [kernel, tuple(dim) if isinstance(dim, list) else dim]
    for value in (*inputs, *outputs):
        kind = _KINDS.get(type(value))
        if kind is None:
            kind = _KINDS.setdefault(type(value), _kind(type(value)))
        if kind is _ARRAY:
            parts.append(id(value))
        elif kind is _NUMBER:  # -0.0 == 0.0, and NaN is not NaN: those by their spelling
            parts.append(value if value or type(value) is not float else repr(value))
        elif kind is _STRUCT:  # the packed launch reads this very struct: equal bytes of another are not it
            parts.append((id(value), struct_key(value)))
        else:
            return None
    return tuple(parts)


_ARRAY, _NUMBER, _STRUCT, _OTHER = "array", "number", "struct", "other"
_KINDS: dict[type, str] = {}
"""Each argument type's kind, found once (``_kind``)."""


def _kind(cls: type) -> str:
    if issubclass(cls, wp.array):
        return _ARRAY
    if issubclass(cls, (int, float)):  # bool too
        return _NUMBER
    if hasattr(cls, "_cls") and hasattr(cls, "__ctype__"):  # a Warp struct's instances
        return _STRUCT
    return _OTHER
