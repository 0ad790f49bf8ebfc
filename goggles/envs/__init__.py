"""Learning environments: batched multirotors behind Gymnasium's vector API, with torch tensors."""

from goggles.envs.randomization import Randomization
from goggles.envs.single import DroneEnv
from goggles.envs.vector import CONTROLS, DroneVectorEnv, HoverTask

__all__ = ["CONTROLS", "DroneEnv", "DroneVectorEnv", "HoverTask", "Randomization"]
