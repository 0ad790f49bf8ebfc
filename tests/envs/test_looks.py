"""Looks in the learning environments: each environment's camera draws its own look per episode from the
seed (``[looks]``), the scene uploaded once; colour changes, geometry does not."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DroneVectorEnv, HoverTask, Randomization  # noqa: E402
from goggles.render import CameraModel  # noqa: E402
from goggles.world import DeviceScene  # noqa: E402

LOOKS = """[looks]
sun_elevation_deg = { uniform = [20.0, 80.0] }
sun_azimuth_deg = { uniform = [0.0, 360.0] }
albedo = { normal = [1.0, 0.2] }
exposure = { uniform = [0.6, 1.4] }
textures = "../../assets/textures"
texture_probability = 0.3
"""


def _env(arena, randomization, seed=4, outputs=("rgb", "depth", "segmentation")):
    task = HoverTask(spawn_radius=0.0, target_radius=0.0, max_distance=10.0)  # on the pad
    return DroneVectorEnv(
        4,
        task=task,
        scene=DeviceScene(arena, "cpu"),
        camera=CameraModel.from_fov(64, 48, 80.0),
        camera_outputs=outputs,
        randomization=randomization,
        seed=seed,
        device="cpu",
    )


@pytest.fixture
def looks(tmp_path):
    path = tmp_path / "a" / "b" / "looks.toml"
    path.parent.mkdir(parents=True)
    path.write_text(LOOKS.replace("../../assets", str(__import__("goggles.paths").paths.assets_dir())))
    return Randomization.load(path)


def test_each_environment_sees_its_own_look_and_the_same_seed_sees_the_same(arena, looks):
    env, plain = _env(arena, looks), _env(arena, None)
    obs, info = env.reset()
    rgb, depth, seg = (obs[k].clone().numpy() for k in ("rgb", "depth", "segmentation"))
    seen, _ = plain.reset()
    np.testing.assert_array_equal(depth, seen["depth"].numpy())  # the same geometry, other colours
    np.testing.assert_array_equal(seg, seen["segmentation"].numpy())
    for k in range(4):
        assert np.mean(np.any(rgb[k] != seen["rgb"].numpy()[k], axis=-1)) > 0.5
    drawn = info["randomization"]
    elevation = drawn["looks.sun_elevation_deg"]
    assert len(set(elevation)) == 4 and np.all((elevation >= 20) & (elevation <= 80))
    assert np.all(drawn["looks.textures_swapped"] >= 0) and "looks.albedo" in drawn
    again = _env(arena, looks)
    obs2, info2 = again.reset()
    np.testing.assert_array_equal(obs2["rgb"].numpy(), rgb)
    np.testing.assert_array_equal(info2["randomization"]["looks.exposure"], drawn["looks.exposure"])
    # The next episode draws anew; the physical draws are not moved by the looks' (their own stream).
    obs3, info3 = env.reset()
    assert not np.array_equal(info3["randomization"]["looks.exposure"], drawn["looks.exposure"])
    assert np.mean(np.any(obs3["rgb"].numpy() != rgb, axis=-1)) > 0.5
    np.testing.assert_array_equal(obs3["depth"].numpy(), plain.reset()[0]["depth"].numpy())
    for e in (env, plain, again):
        e.close()


def test_a_masked_reset_draws_a_new_look_for_those_environments_only(arena, looks):
    env = _env(arena, looks)
    obs, _ = env.reset()
    before = obs["rgb"].clone().numpy()
    obs, info = env.reset(options={"reset_mask": np.array([False, True, False, False])})
    after = obs["rgb"].numpy()
    np.testing.assert_array_equal(after[[0, 2, 3]], before[[0, 2, 3]])
    assert np.mean(np.any(after[1] != before[1], axis=-1)) > 0.5
    env.close()


def test_looks_leave_a_depth_only_camera_and_the_physical_draws_as_they_were(arena, looks, tmp_path):
    path = tmp_path / "mass.toml"
    path.write_text("[airframe]\nmass = { uniform = [0.7, 1.3] }\n")
    plain = Randomization.load(path)
    both = Randomization(plain.distributions, looks.looks)
    a, b = _env(arena, plain, outputs="depth"), _env(arena, both, outputs="depth")
    (oa, ia), (ob, ib) = a.reset(), b.reset()
    np.testing.assert_array_equal(oa["depth"].numpy(), ob["depth"].numpy())
    np.testing.assert_array_equal(ia["randomization"]["airframe.mass"], ib["randomization"]["airframe.mass"])
    assert b.renderer.settings.looks is False  # nothing to colour: the plain kernel
    for e in (a, b):
        e.close()
