"""What the process is busy with in a step that can be long and silent: Warp compiling its kernels
on a machine's first run (about 15 s for ``goggles run`` on two cores), a large scene's import, a
BVH build. Steps say so with ``busy(text)``; the command line tells a person who has waited a few
seconds what they wait for (``current``), and nothing when steps are quick.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_steps: dict[int, tuple[str, float]] = {}  # by order of beginning: text, monotonic start
_numbers = itertools.count()


def _start_afresh() -> None:
    """In a forked child (goggles' own pools spawn theirs, but a caller may fork: a data loader's
    workers): the parent's steps are not its own, and the lock may have been held by a parent thread
    that the child does not have."""
    global _lock, _steps
    _lock, _steps = threading.Lock(), {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_start_afresh)


@contextmanager
def busy(text: str) -> Iterator[None]:
    """Mark the enclosed work as a step a person may wait for, described by ``text``."""
    number = next(_numbers)
    with _lock:
        _steps[number] = (text, time.monotonic())
    try:
        yield
    finally:
        with _lock:
            del _steps[number]


def current() -> tuple[str, float] | None:
    """The step begun last of those still going (from any thread), and its monotonic start."""
    with _lock:
        return _steps[max(_steps)] if _steps else None


def load_kernels(module, device) -> None:
    """Load a Warp module (a Python module of kernels, or a kernel's ``.module``) on ``device`` now,
    not inside a first frame: compiled on a machine's first run, read from Warp's cache after."""
    import warp as wp

    name = getattr(module, "__name__", None) or getattr(module, "name", str(module))
    name = name.split("__locals__")[-1].strip("_").rsplit("_", 1)[0] if "__locals__" in name else name
    with busy(f"compiling Warp kernels for {device}: {name} (a first run only; cached after)"):
        wp.load_module(module, device=device)
