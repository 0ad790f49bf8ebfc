"""Learning environments: batched multirotors behind Gymnasium's vector API, with torch tensors."""

from goggles.envs.randomization import Randomization
from goggles.envs.registry import register
from goggles.envs.single import DroneEnv
from goggles.envs.tasks import DepthFlightTask, HoverTask, RaceTask
from goggles.envs.vector import CONTROLS, DroneVectorEnv

register()  # gymnasium.make("goggles/Hover-v0"), "goggles/Race-v0", "goggles/DepthFlight-v0"

__all__ = ["CONTROLS", "DepthFlightTask", "DroneEnv", "DroneVectorEnv", "HoverTask", "RaceTask", "Randomization"]
