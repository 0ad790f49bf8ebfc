"""The run's changing state: which physics step it is at, in which clock mode; the instants every part
stamps its outputs with. One object the drivers advance and the engine's parts read."""

from __future__ import annotations

import time
from dataclasses import dataclass

from goggles.clock import ClockMode


@dataclass
class RunState:
    mode: ClockMode
    dt: float
    """Physics step, s."""
    step: int = 0
    """Physics steps run (in live mode: the wall clock's step, ``goggles.engine.drivers``)."""

    @property
    def t(self) -> float:
        """Sim time (live: the wall clock's, in steps), s."""
        return self.step * self.dt

    def utime(self) -> int:
        """The present instant (sim time; live mode's wall time), µs."""
        return int(round(self.step * self.dt * 1e6))

    def log_ns(self) -> int:
        """Sim time (wall time in live mode), ns: the time recordings are ordered by."""
        return time.time_ns() if self.mode == ClockMode.LIVE else int(round(self.step * self.dt * 1e9))
