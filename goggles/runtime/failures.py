"""Failures that may come back every frame, told once with their reason and then counted."""

from __future__ import annotations

import logging
import time


class RepeatedFailure:
    """A failure that may come back every frame (a message a peer cannot take): told the first time
    with its reason, then counted and told at most once per ``interval_s`` with the count, so a run
    never floods its terminal. ``log``: the logger to tell it on; ``what``: what failed."""

    def __init__(self, log: logging.Logger, what: str, interval_s: float = 10.0):
        self.log, self.what, self.interval_s = log, what, interval_s
        self.count = 0
        self._told_at = -float("inf")
        self._told_count = 0

    def happened(self, reason: object) -> None:
        self.count += 1
        now = time.monotonic()
        if self.count == 1:
            self.log.warning(
                "%s: %s (further failures are counted, told every %g s)", self.what, reason, self.interval_s
            )
        elif now - self._told_at >= self.interval_s:
            self.log.warning("%s: %d more failures (the last: %s)", self.what, self.count - self._told_count, reason)
        else:
            return
        self._told_at, self._told_count = now, self.count
