"""PosedContacts: where vehicles placed from outside touch the virtual world.

A real drone in the motion-capture room flies among obstacles that exist only in the virtual world:
its autonomy stack should hear when it flies into a virtual wall, gate or prop, as a simulated
vehicle's would. Live mode tests each vehicle's collision shape at every mocap pose taken, a replay
at every logged pose (a real flight replayed into another scene says where it would have hit), with
the simulator's own test. Nothing can stop a real drone: contacts are only reported. Other vehicles
are not tested: real ones touch for real.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import warp as wp

from goggles.checks import poses as checked_poses
from goggles.dynamics import kernels
from goggles.dynamics.airframe import Airframe
from goggles.dynamics.model import AirframeParams, SimSettings
from goggles.dynamics.simulator import ContactReport, device_params
from goggles.dynamics.wind import wind_params
from goggles.errors import ConfigError
from goggles.runtime.device_copies import HostMirror, fetch
from goggles.runtime.progress import load_kernels
from goggles.world.device_scene import DeviceScene


class PosedContacts:
    """The contacts of vehicles of ``airframes`` at given poses with ``world`` (its static mesh and its
    obstacles: not other vehicles' bodies): one launch and one copy for a batch of poses."""

    def __init__(self, airframes: Sequence[Airframe], world: DeviceScene):
        self.world = world
        self.count = len(airframes)
        self._params = wp.array(  # the collision shapes are read; the noise (scaled by the steps) is not
            [device_params(af, 1.0, 1.0, None) for af in airframes], dtype=AirframeParams, device=world.device
        )
        settings = SimSettings()
        settings.world_mesh = world.mesh.id
        settings.wind = wind_params(None, world.device)  # not read: still air
        self._settings = settings
        self._capacity = 0
        load_kernels(kernels, world.device)

    def _hold(self, count: int) -> None:
        """Room for ``count`` poses (grown by doubling: a live loop's batch of poses varies)."""
        if count <= self._capacity:
            return
        d, self._capacity = self.world.device, max(count, 2 * self._capacity)
        self._poses = wp.zeros(self._capacity, dtype=wp.mat44, device=d)
        self._vehicles = wp.zeros(self._capacity, dtype=wp.int32, device=d)
        self._out = wp.zeros((self._capacity, 8), dtype=wp.float64, device=d)
        self._host = HostMirror(self._out)

    def touching(self, poses: np.ndarray, vehicles: Sequence[int], step: int = 0) -> list[ContactReport | None]:
        """The contact of vehicle ``vehicles[i]`` at ``poses[i]`` (body -> world) for each pose, or None
        where it touches nothing; ``step``: the physics step of the poses (the reports' ``step``)."""
        vehicles = np.asarray(vehicles)
        poses = checked_poses(poses, "poses", len(vehicles))
        if vehicles.dtype.kind not in "iu" or vehicles.ndim != 1 or np.any((vehicles < 0) | (vehicles >= self.count)):
            raise ConfigError(f"vehicles must be indices 0..{self.count - 1}, got {vehicles.tolist()!r}")
        n = len(poses)
        if n == 0:
            return []
        self._hold(n)
        self._poses[:n].assign(poses.astype(np.float32))
        self._vehicles[:n].assign(vehicles.astype(np.int32))
        wp.launch(
            kernels.posed_contacts_kernel,
            dim=n,
            inputs=[self._params, self._settings, self.world.obstacles, self._poses, self._vehicles],
            outputs=[self._out],
            device=self.world.device,
        )
        (rows,) = fetch([self._host])
        return [
            ContactReport(int(v), step, row[1:4].copy(), row[4:7].copy(), float(row[7])) if row[0] else None
            for v, row in zip(vehicles, rows[:n])
        ]
