"""The built-in multirotor simulator: rigid body, motors, aerodynamics, disturbances, IMU, controllers.

Contract:
    * ``load_airframe(name_or_path)`` reads a preset (``fg-quad``, ``hexa-550`` or a TOML path).
    * ``MultirotorSim(airframe, n, SimulatorSettings(dt=1/960, integrator=..., ...), device=...)`` owns a batch of
      vehicles on one Warp device; ``set_command(mode, values)`` sets what each controller follows;
      ``step(k)`` advances k physics steps in one launch (per CPU thread); ``states()`` copies out
      positions, velocities, attitudes (w, x, y, z), rates, rotor speeds and the latest IMU sample.
    * ``Swarm(sims)`` steps the simulators of one world together: their vehicles meet each other.
    * ``PosedContacts(airframes, world)`` tests vehicles placed from outside (live, replay) for contacts.
    * World ENU, body FLU, SI units throughout.
"""

from goggles.dynamics.airframe import Airframe, ImuNoise, load_airframe, load_imu_preset
from goggles.dynamics.control import ControlMode
from goggles.dynamics.model import CollisionResponse, GroundEffect, Integrator
from goggles.dynamics.posed import PosedContacts
from goggles.dynamics.settings import SimulatorSettings
from goggles.dynamics.simulator import GRAVITY, ContactReport, MultirotorSim, VehicleStates
from goggles.dynamics.swarm import Swarm

__all__ = [
    "CollisionResponse",
    "ContactReport",
    "GRAVITY",
    "Airframe",
    "ControlMode",
    "GroundEffect",
    "ImuNoise",
    "Integrator",
    "MultirotorSim",
    "PosedContacts",
    "SimulatorSettings",
    "Swarm",
    "VehicleStates",
    "load_airframe",
    "load_imu_preset",
]
