"""Ctrl-C and SIGTERM held back across code that would swallow them.

trimesh catches BaseException all through (its optional imports, its caches, its texture loading):
a Ctrl-C that came during its import (0.7 s of a command's start) or a scene's loading raised
KeyboardInterrupt there, was caught, and was lost, so ``goggles race`` flew on to its end; in a
texture's loading it also left the texture out. Functions that call trimesh run with the signals
held (``@signals_held()``), and the first one that came reaches its handler when they return,
whatever that handler does (raise KeyboardInterrupt, set a stop event). A second Ctrl-C while held
is handed over at once, for a load that takes long.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HELD = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_held() -> Iterator[None]:
    """Within: SIGINT and SIGTERM are noted, not handled (a repeated one is handled); after: the first
    noted is handed to its handler. Signals left to the system (ignored, default) stay so; only the
    main thread has handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    handlers = {number: signal.getsignal(number) for number in HELD}
    replaced = {number: handler for number, handler in handlers.items() if callable(handler)}

    def note(signum, frame):
        if signum in came:  # asked again: now
            replaced[signum](signum, frame)
        came.append(signum)

    for number in replaced:
        signal.signal(number, note)
    try:
        yield
    finally:
        for number, handler in replaced.items():
            signal.signal(number, handler)
        if came:
            replaced[came[0]](came[0], None)
