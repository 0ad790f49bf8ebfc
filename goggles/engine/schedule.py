"""Periodic work at integer physics steps: the one "run what is due" loop of every mode.

A camera at 30 Hz with 960 Hz physics is due every 32 steps, so sensor rates are exact in sim time
whatever the machine. Events due at the same step run in the order they were added. An action may
return the steps to its own next run (an event camera renders when its events say).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Event:
    name: str
    period: int
    """Physics steps between two runs (>= 1)."""
    action: Callable[[], int | None]
    """Returns None, or the steps to its next run (>= 1) when that is not ``period``."""
    due: int = 0
    """The next step it runs at."""


class Schedule:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def every(self, period: int, action: Callable[[], int | None], name: str) -> None:
        """Run ``action`` at step 0 and every ``period`` steps after (or as many as it returns)."""
        self.events.append(Event(name, max(1, int(period)), action))

    def next_due(self) -> int:
        return min(event.due for event in self.events)

    def run_due(self, step: int) -> None:
        """Run every event due at ``step`` and move it to its next step."""
        for event in self.events:
            if event.due == step:
                steps = event.action()
                event.due += event.period if steps is None else max(1, int(steps))

    def start_at(self, step: int) -> None:
        """Move every event to its first due step at or after ``step`` (a replayed log starts late)."""
        for event in self.events:
            if event.due < step:
                event.due += -(-(step - event.due) // event.period) * event.period

    def skip_missed(self, step: int) -> None:
        """Move every event more than one period behind ``step`` to its last due step at or before it:
        live mode runs what is due by wall time, and a stall is not made up for with a burst."""
        for event in self.events:
            if event.due <= step - event.period:
                event.due += (step - event.due) // event.period * event.period

    def run_before(self, step: int, at: Callable[[int], None]) -> None:
        """Run, in time order, every event due before ``step``; ``at(s)`` is told each step first."""
        while self.events and self.next_due() < step:
            due = self.next_due()
            at(due)
            self.run_due(due)
