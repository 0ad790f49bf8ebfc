"""Built-in pilots: controllers above the simulator's own, fed by the vehicle's state and producing
the commands an outside client would send (position set-points)."""

from __future__ import annotations

import numpy as np


class RoutePilot:
    """Fly through waypoints ``[x, y, z, yaw]`` in position mode, taking the next one once within
    ``tolerance`` metres of the current one; a closed route starts over, an open one holds the last."""

    def __init__(self, waypoints, tolerance: float, *, closed: bool = True):
        self.waypoints = [tuple(float(v) for v in w) for w in waypoints]
        self.tolerance = tolerance
        self.closed = closed
        self.index = 0

    @property
    def target(self) -> tuple[float, ...]:
        return self.waypoints[self.index]

    def update(self, position: np.ndarray) -> tuple[float, ...] | None:
        """The new set-point when the vehicle at ``position`` reached the current one, else None."""
        if not self.waypoints or np.linalg.norm(np.asarray(position) - self.target[:3]) >= self.tolerance:
            return None
        if self.index + 1 < len(self.waypoints):
            self.index += 1
        elif self.closed:
            self.index = 0
        else:
            return None
        return self.target
