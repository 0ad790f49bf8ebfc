"""Stereo depth as a stereo camera measures it, checked against the closed forms: σ_Z = Z²·σ_d/(f·B) on a
flat wall, disparities on the subpixel grid, and the exact depth limits of the disparity search."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from goggles.errors import ConfigError
from goggles.frames import camera_pose_from_body
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.rig.runfile import parse_run_config
from goggles.sensors.stereo_depth import D435, D455, StereoDepth
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

#: 160x120 over 25 degrees: f = 361 px, so even at 8 m the disparity (2.3 px with D435's 50 mm)
#: is large against its noise and the first-order error formula holds.
CAMERA = CameraModel(160, 120, 360.9, 360.9, 79.5, 59.5, max_depth=2000.0)


def wall_depth(device, distance: float, model, seed=0, frames=1, camera=CAMERA, keys=None):
    half = 10.0 * distance  # wide enough to fill the view at any distance
    wall = quad([[distance, half, -half], [distance, -half, -half], [distance, -half, half], [distance, half, half]])
    renderer = Renderer(
        DeviceScene(scene_of((wall, 1)), device), [camera], RenderSettings(outputs={"depth"}, shading=Shading.NONE)
    )
    noise = StereoDepth([model], renderer, [None], seed=seed)
    out = []
    for frame in range(frames):
        renderer.render(camera_pose_from_body(np.eye(4))[None])
        if keys is not None:
            noise.at(keys[frame])
        noise.apply()
        out.append(renderer.buffers.depth.numpy()[0].copy())
    renderer.close()
    return out


@pytest.mark.parametrize("model", [D435, D455], ids=["d435", "d455"])
def test_depth_noise_grows_with_the_square_of_depth(device, model):
    fb = CAMERA.fx * model.baseline_m
    for distance in (1.0, 2.0, 4.0, 8.0):
        (depth,) = wall_depth(device, distance, model, seed=int(distance))
        valid = np.isfinite(depth)
        assert valid.sum() >= 10_000
        expected = distance**2 * model.subpixel_sigma_px / fb
        measured = depth[valid].std()
        assert measured == pytest.approx(expected, rel=0.10), (distance, measured, expected)
        assert abs(depth[valid].mean() - distance) < 3 * expected / np.sqrt(valid.sum()) + 0.02 * expected


def test_disparities_sit_on_the_subpixel_grid(device):
    (depth,) = wall_depth(device, 4.0, D435)
    disparity = CAMERA.fx * D435.baseline_m / depth[np.isfinite(depth)].astype(np.float64)
    steps = disparity / D435.subpixel_step_px
    assert np.abs(steps - np.round(steps)).max() < 2e-3  # float32 depths, 1/32 px steps
    assert len(np.unique(np.round(steps))) >= 8  # the noise spreads it over several steps


def test_the_disparity_search_sets_exact_depth_limits(device):
    exact = dataclasses.replace(D435, subpixel_sigma_px=0.0)
    fb = CAMERA.fx * exact.baseline_m
    nearest = fb / exact.search_range_px  # closer than this, the disparity is beyond the search
    (inside,) = wall_depth(device, nearest * 1.01, exact)
    (outside,) = wall_depth(device, nearest * 0.99, exact)
    assert np.all(np.isfinite(inside)) and np.all(np.isneginf(outside))
    step = exact.subpixel_step_px
    (far,) = wall_depth(device, fb / (0.4 * step), exact)  # the disparity rounds to zero: too far
    (farthest,) = wall_depth(device, fb / (0.6 * step), exact)  # rounds to one step: the last depth
    assert np.all(np.isposinf(far))
    np.testing.assert_allclose(farthest, fb / step, rtol=1e-5)


def test_noise_is_seeded_and_new_every_frame(device):
    first = wall_depth(device, 3.0, D435, seed=5, frames=2)
    again = wall_depth(device, 3.0, D435, seed=5, frames=2)
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    assert not np.array_equal(first[0], first[1])


def test_noise_is_a_function_of_the_frames_key_not_of_the_frames_before(device):
    """A replay renders the same instants, not always after the same frames (the run's warm-up)."""
    keys = [0, 33333, 66667]
    run = wall_depth(device, 3.0, D435, seed=5, frames=3, keys=keys)
    replay = wall_depth(device, 3.0, D435, seed=5, frames=2, keys=keys[1:])
    assert np.array_equal(run[1], replay[0]) and np.array_equal(run[2], replay[1])
    assert not np.array_equal(run[1], run[2])
    other_seed = wall_depth(device, 3.0, D435, seed=6, frames=1, keys=keys[1:])
    assert not np.array_equal(other_seed[0], replay[0])


@pytest.mark.parametrize("distance", [40.0, 49.6])
def test_measured_depth_stays_within_the_cameras_limits(device, distance):
    """REP 118: beyond the camera's range reads +inf, after the noise too. At 50 m a D435 at f = 361 px
    has σ_Z = 11 m and disparity steps of 4-12 m: without the limit many pixels read up to 70 m."""
    camera = dataclasses.replace(CAMERA, min_depth=0.3, max_depth=50.0)
    (depth,) = wall_depth(device, distance, D435, seed=1, camera=camera)
    finite = depth[np.isfinite(depth)]
    assert finite.size > 100 and finite.max() <= 50.0 and finite.min() >= 0.3
    assert np.isposinf(depth).sum() > 100  # measured beyond the range: too far, not clamped to 50


def test_run_files_name_the_depth_model():
    base = {
        "vehicle": [{"name": "quad0"}],
        "camera": [{"vehicle": "quad0", "name": "stereo", "baseline": 0.05, "depth_model": "d435"}],
    }
    assert parse_run_config(base).cameras[0].depth_model is D435
    base["camera"][0]["depth_model"] = "kinect"
    with pytest.raises(ConfigError, match="depth_model"):
        parse_run_config(base)
