"""Waiting for a process group started with ``start_new_session=True`` to be gone, for the tests
that stop commands the ways people stop them."""

from __future__ import annotations

import os
import signal
import time


def group_gone(group: int, seconds: float = 60.0) -> bool:
    """Whether every process of ``group`` has ended, waiting up to ``seconds`` for it."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def kill_group(group: int) -> None:
    """SIGKILL whatever of ``group`` is left (a test's clean-up)."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass
