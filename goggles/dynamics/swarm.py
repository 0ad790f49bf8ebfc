"""Swarm: the simulators whose vehicles share one world, so they meet each other.

A ``MultirotorSim`` alone tests its vehicles against the world only: a learning batch's vehicles are
in worlds of their own. The vehicles of one run share a world, whatever their airframes (one
simulator each): a ``Swarm`` steps them together, and each vehicle meets the others as spheres.
Each launch first shares where every vehicle is (one small launch per simulator, no host copy); in
the launch each vehicle carries the others along their velocities, so they meet within the launch,
a sensor period, not at its end.
"""

from __future__ import annotations

from collections.abc import Sequence

import warp as wp

from goggles.dynamics import kernels
from goggles.dynamics.model import OtherVehicles
from goggles.dynamics.simulator import MultirotorSim


class Swarm:
    """The simulators of one world, stepped together; vehicle ``k`` of the swarm is row ``k - first``
    of the simulator whose vehicles start at ``first`` (``vehicle``), in the order given."""

    def __init__(self, sims: Sequence[MultirotorSim]):
        sims = list(sims)
        if len({str(sim.device) for sim in sims}) > 1:
            raise ValueError("a swarm's simulators are on one device")
        self.sims = sims
        self.firsts = [sum(sim.num_vehicles for sim in sims[:k]) for k in range(len(sims))]
        count = sum(sim.num_vehicles for sim in sims)
        self.meets = count > 1
        """Whether there is anyone to meet (a lone vehicle's steps are a plain ``step``)."""
        if not self.meets:
            return
        d = sims[0].device
        position = wp.zeros(count, dtype=wp.vec3, device=d)
        velocity = wp.zeros(count, dtype=wp.vec3, device=d)
        radius = wp.zeros(count, dtype=float, device=d)
        for sim, first in zip(sims, self.firsts):
            others = OtherVehicles()
            others.position, others.velocity, others.radius = position, velocity, radius
            others.count, others.first = count, first
            sim.meet(others)

    def step(self, steps: int) -> None:
        """Advance every vehicle ``steps`` physics steps: where each is, shared, then one step call per simulator."""
        if steps == 0:
            return
        for sim in self.sims if self.meets else ():
            wp.launch(
                kernels.share_states_kernel,
                dim=sim.num_vehicles,
                inputs=[sim.airframe_params, sim.state_arrays],
                outputs=[sim.others],
                device=sim.device,
            )
        for sim in self.sims:
            sim.step(steps)

    def vehicle(self, index: int) -> tuple[MultirotorSim, int]:
        """The simulator and row of the swarm's vehicle ``index`` (a contact's ``other``)."""
        for sim, first in zip(self.sims, self.firsts):
            if first <= index < first + sim.num_vehicles:
                return sim, index - first
        raise IndexError(f"the swarm has no vehicle {index}")
