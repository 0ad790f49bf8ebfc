"""The tasks under Gymnasium ids, so ``gymnasium.make("goggles/Hover-v0")`` gives the single-environment
view and ``gymnasium.make_vec("goggles/Hover-v0", num_envs=N, vectorization_mode="vector_entry_point")``
the batched one (one simulator and one render for all N). Keyword arguments go to ``DroneEnv`` /
``DroneVectorEnv`` and override the defaults here. Registered when ``goggles.envs`` is imported
(``gymnasium.make("goggles.envs:goggles/Hover-v0")`` imports it)."""

from __future__ import annotations

from functools import partial

import gymnasium

from goggles.envs.single import DroneEnv
from goggles.envs.tasks import DepthFlightTask, HoverTask, RaceTask
from goggles.envs.vector import DroneVectorEnv


def _arena_depth(kwargs: dict) -> dict:
    """DepthFlight's defaults: the default arena (its obstacles) and a 64x48 depth camera."""
    from goggles.paths import default_scene
    from goggles.render import CameraModel
    from goggles.scene import load_static_scene
    from goggles.world import DeviceScene

    defaults = {"camera": CameraModel.from_fov(64, 48, 80.0), "control": "velocity"}
    if "scene" not in kwargs:
        defaults["scene"] = DeviceScene(load_static_scene(default_scene()), kwargs.get("device"))
    return defaults


#: Gymnasium id -> (task, defaults for the environment's other arguments from the caller's).
TASKS = {
    "goggles/Hover-v0": (HoverTask, lambda kwargs: {}),
    "goggles/Race-v0": (RaceTask, lambda kwargs: {}),
    "goggles/DepthFlight-v0": (DepthFlightTask, _arena_depth),
}


def _make(env_id: str, vector: bool, **kwargs):
    task, defaults = TASKS[env_id]
    arguments = {"task": task(), **defaults(kwargs), **kwargs}
    return DroneVectorEnv(**arguments) if vector else DroneEnv(**arguments)


#: What ``gymnasium.make`` reads off an entry point: the render modes (so it wraps the environment for
#: ``render_mode="human"`` (HumanRendering) and ``"rgb_array_list"`` (RenderCollection)), and the
#: frame rate at the default 8 physics steps per action.
METADATA = {"render_modes": ["rgb_array"], "render_fps": 120.0}


def register() -> None:
    for env_id in TASKS:
        if env_id not in gymnasium.registry:
            single = partial(_make, env_id, False)
            single.metadata = METADATA
            gymnasium.register(env_id, entry_point=single, vector_entry_point=partial(_make, env_id, True))
