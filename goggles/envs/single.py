"""One environment with NumPy values, the plain ``gymnasium.Env`` view of ``DroneVectorEnv``: for tools
that take single environments (and Gymnasium's own environment checker)."""

from __future__ import annotations

import gymnasium
import numpy as np
import torch

from goggles.envs.vector import DroneVectorEnv
from goggles.errors import ConfigError


class DroneEnv(gymnasium.Env):
    """``DroneVectorEnv`` with one environment; observations are NumPy copies, actions (4,) arrays.
    Keyword arguments go to ``DroneVectorEnv``. The episode ends at ``terminated or truncated``: call
    ``reset`` then (this view does not autoreset)."""

    def __init__(self, **kwargs):
        self.vector = DroneVectorEnv(1, **kwargs)
        self.observation_space = self.vector.single_observation_space
        self.action_space = self.vector.single_action_space
        self.render_mode = self.vector.render_mode
        self.metadata = {name: self.vector.metadata[name] for name in ("render_modes", "render_fps")}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        observations, info = self.vector.reset(seed=seed, options=options)
        return self._numpy(observations), info

    def step(self, action):
        shape = self.action_space.shape
        try:
            array = np.asarray(action, dtype=np.float32)
        except (TypeError, ValueError):
            array = None
        if array is None or array.shape not in (shape, (1, *shape)):
            raise ConfigError(f"an action must be {shape[0]} numbers, got {action!r}")
        action = torch.as_tensor(array.reshape(1, -1), device=self.vector.torch_device)
        observations, reward, terminated, truncated, info = self.vector.step(action)
        return self._numpy(observations), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> np.ndarray | None:
        """With ``render_mode="rgb_array"``, an (H, W, 3) uint8 chase view of the vehicle; else None."""
        frames = self.vector.render()
        return None if frames is None else frames[0]

    def close(self) -> None:
        self.vector.close()

    @staticmethod
    def _numpy(observations: dict) -> dict:
        return {k: v[0].detach().cpu().numpy().copy() for k, v in observations.items()}
