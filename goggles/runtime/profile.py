"""Where a frame's time goes: named stages' wall time and CPU time, summed over every thread that ran
them, while a ``Profile`` is on (``goggles bench latency --breakdown``); otherwise ``stage`` costs one
check. A stage the main thread runs counts the whole process's CPU time meanwhile (the renderer's
workers do that stage's work while the main thread waits); one a worker runs counts that thread's
own. So CPU time over wall time is the cores a stage kept busy."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager

_active: Profile | None = None


class Profile:
    """Stage times while it is on (``with Profile():``). ``root``: count stages only while this one is
    open (a frame's, not a warm-up render's outside any frame)."""

    def __init__(self, root: str | None = None):
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.root = root
        self.open_roots = 0
        self._lock = threading.Lock()

    def add(self, name: str, wall: float, cpu: float) -> None:
        with self._lock:
            self.wall[name] += wall
            self.cpu[name] += cpu
            self.calls[name] += 1

    def __enter__(self) -> Profile:
        global _active
        _active = self
        return self

    def __exit__(self, *exc) -> None:
        global _active
        _active = None


@contextmanager
def stage(name: str):
    """Time what runs inside under ``name`` when a profile is on."""
    profile = _active
    if profile is None or (profile.root is not None and name != profile.root and not profile.open_roots):
        yield
        return
    root = name == profile.root
    profile.open_roots += root
    clock = time.process_time if threading.current_thread() is threading.main_thread() else time.thread_time
    wall, cpu = time.perf_counter(), clock()
    try:
        yield
    finally:
        profile.add(name, time.perf_counter() - wall, clock() - cpu)
        profile.open_roots -= root
