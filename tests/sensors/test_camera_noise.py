"""A camera's pixels against the closed forms: a photon transfer curve made from flat patches (shot
noise in electrons, read noise, the ADC's gain and steps), and natural vignetting (cos⁴ of the ray)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from goggles.errors import ConfigError
from goggles.frames import camera_pose_from_body
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.rig.runfile import parse_run_config
from goggles.sensors.camera_noise import GLOBAL_SHUTTER, CameraNoise
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

CAMERA = CameraModel(160, 120, 150.0, 150.0, 79.5, 59.5)
LEVELS = [30, 60, 90, 120, 150, 180, 210]


def wall(texture: np.ndarray, half: float):
    uv = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)  # seen from the origin: u runs along -y
    return quad([[5, half, -half], [5, -half, -half], [5, -half, half], [5, half, half]], uv=uv, texture=texture)


def expose(device, texture, model, frames=1, seed=3, half=2.0):
    world = DeviceScene(scene_of((wall(texture, half), 1)), device)
    renderer = Renderer(world, [CAMERA], RenderSettings(shading=Shading.UNLIT))
    noise = CameraNoise([model], renderer, seed=seed)
    out = []
    for _ in range(frames):
        renderer.render(camera_pose_from_body(np.eye(4))[None])
        noise.apply()
        out.append(renderer.buffers.rgb.numpy()[0].astype(float).copy())
    renderer.close()
    return out


def test_noise_follows_the_photon_transfer_curve(device):
    """8-bit ADC: the image is in ADC units. var = g*mean + (g*read)^2 + 1/12 (the ADC's rounding)."""
    model = dataclasses.replace(GLOBAL_SHUTTER, full_well_e=1500.0, read_noise_e=8.0, adc_bits=8, vignetting=0.0)
    stripes = np.repeat(np.array(LEVELS, np.uint8), 64)[None, :, None].repeat(8, axis=0).repeat(3, axis=2)
    (image,) = expose(device, stripes, model)
    (clean,) = expose(device, stripes, dataclasses.replace(model, full_well_e=1e7, read_noise_e=0.0))
    means, variances = [], []
    for level in LEVELS:  # the flat interior of each stripe, where the texture is that level
        patch = np.abs(clean - level).max(axis=-1) < 0.5
        assert patch.sum() > 800
        means.append(image[patch].mean())
        variances.append(image[patch].var())
    gain = 255.0 / 1500.0
    slope, intercept = np.polyfit(means, variances, 1)
    assert slope == pytest.approx(gain, rel=0.08)
    assert intercept == pytest.approx((gain * 8.0) ** 2 + 1 / 12, abs=1.0)
    np.testing.assert_allclose(means, LEVELS, atol=1.0)  # unbiased


def test_vignetting_is_cos4_of_the_ray(device):
    flat = np.full((4, 4, 3), 200, np.uint8)
    model = dataclasses.replace(GLOBAL_SHUTTER, full_well_e=1e7, read_noise_e=0.0, vignetting=0.5)
    (image,) = expose(device, flat, model, half=20.0)  # the wall fills the view
    u, v = np.meshgrid(np.arange(CAMERA.width), np.arange(CAMERA.height))
    cos_theta = 1.0 / np.sqrt(1 + ((u - CAMERA.cx) / CAMERA.fx) ** 2 + ((v - CAMERA.cy) / CAMERA.fy) ** 2)
    expected = 200 * (1 - 0.5 * (1 - cos_theta**4))
    np.testing.assert_allclose(image[..., 1], expected, atol=1.0)
    assert image[0, 0, 1] < 0.8 * image[60, 80, 1]  # the corners darker


def test_noise_is_seeded_and_new_every_frame(device):
    flat = np.full((4, 4, 3), 120, np.uint8)
    first = expose(device, flat, GLOBAL_SHUTTER, frames=2, seed=9)
    again = expose(device, flat, GLOBAL_SHUTTER, frames=2, seed=9)
    assert np.array_equal(first[0], again[0]) and not np.array_equal(first[0], first[1])


def test_run_files_name_the_noise_model():
    camera = {"vehicle": "quad0", "name": "front", "outputs": ["rgb"], "noise_model": "global-shutter"}
    config = parse_run_config({"vehicle": [{"name": "quad0"}], "camera": [camera]})
    assert config.cameras[0].noise_model is GLOBAL_SHUTTER
    camera["noise_model"] = "film"
    with pytest.raises(ConfigError, match="noise_model"):
        parse_run_config({"vehicle": [{"name": "quad0"}], "camera": [camera]})
