"""The sun's shadows against the closed form: a post on a plane, seen from above, shadows exactly the
ground points whose ray to the sun meets the post; shadowed ground keeps the ambient light."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from goggles.frames import camera_pose_from_body, quat_from_axis_angle, transform
from goggles.render import CameraModel, Renderer, Shading
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

SUN = np.array([1.0, 0.5, 1.5]) / np.linalg.norm([1.0, 0.5, 1.5])
POST_LOW, POST_HIGH = np.array([-0.1, -0.1, 0.0]), np.array([0.1, 0.1, 2.0])


def hits_post(points: np.ndarray) -> np.ndarray:
    """Does the ray from each point towards the sun meet the post (slab test, float64)?"""
    with np.errstate(divide="ignore", invalid="ignore"):
        t0 = (POST_LOW - points) / SUN
        t1 = (POST_HIGH - points) / SUN
    near = np.maximum(np.minimum(t0, t1).max(axis=1), 0.0)
    far = np.maximum(t0, t1).min(axis=1)
    return near <= far


def test_a_posts_shadow_falls_where_the_sun_says(tracer):
    device, backend = tracer
    post = trimesh.creation.box(extents=POST_HIGH - POST_LOW)
    post.apply_translation((POST_LOW + POST_HIGH) / 2)
    ground = quad([[-20, -20, 0], [20, -20, 0], [20, 20, 0], [-20, 20, 0]])
    world = DeviceScene(scene_of((ground, 1), (post, 2)), device)
    camera = CameraModel.from_fov(200, 200, 50.0)
    looking_down = transform([-0.6, -0.3, 5.0], quat_from_axis_angle([0, 1, 0], np.pi / 2))
    T_WC = camera_pose_from_body(looking_down)
    renderer = Renderer(world, [camera], backend=backend, shading=Shading.SUN, sun_W=SUN, ambient=0.3)
    renderer.render(T_WC[None])
    images = renderer.images()
    renderer.close()

    on_ground = images.segmentation[0] == 1
    rays_W = camera.ray_directions().reshape(-1, 3) @ T_WC[:3, :3].T
    points = T_WC[:3, 3] + rays_W * images.range[0].reshape(-1, 1)
    expected = hits_post(points[on_ground.ravel()])
    assert 200 < expected.sum() < on_ground.sum() // 2  # a real shadow, on a lit ground

    grey = images.rgb[0][on_ground].astype(float).mean(axis=1)
    lit = grey.max()  # the ground's albedo x (ambient + (1 - ambient) n . sun), its normal +z
    shadowed = lit * 0.3 / (0.3 + 0.7 * SUN[2])  # the ambient light only: not black
    rendered = np.abs(grey - shadowed) < np.abs(grey - lit)
    assert np.all(np.abs(grey[rendered] - shadowed) <= 1.0) and np.all(np.abs(grey[~rendered] - lit) <= 1.0)
    mismatched = (rendered != expected).sum()
    assert mismatched <= 0.002 * on_ground.sum(), f"{mismatched} pixels disagree with the closed form"


def test_shadows_can_be_turned_off_and_the_sky_graded(device):
    post = trimesh.creation.box(extents=POST_HIGH - POST_LOW)
    ground = quad([[-20, -20, 0], [20, -20, 0], [20, 20, 0], [-20, 20, 0]])
    world = DeviceScene(scene_of((ground, 1), (post, 2)), device)
    camera = CameraModel.from_fov(64, 64, 60.0)
    T_WC = camera_pose_from_body(transform([-6.0, 0.0, 1.0], [1, 0, 0, 0]))[None]  # level: half sky
    flat = Renderer(world, [camera], shadows=False, sun_W=SUN)
    flat.render(T_WC)
    sky = Renderer(world, [camera], sun_W=SUN, background_rgb=(0.6, 0.7, 0.9), sky_rgb=(0.2, 0.3, 0.8))
    sky.render(T_WC)
    top, horizon = sky.images().rgb[0][0, 32], sky.images().rgb[0][31, 32]
    assert top[2] < horizon[2] and top[0] < horizon[0]  # towards the zenith's colour, up the image
    assert np.all(flat.images().rgb[0][0] == flat.images().rgb[0][0, 0])  # a uniform background
    flat.close()
    sky.close()
    with pytest.raises(TypeError):
        Renderer(world, [camera], shadows=False, sky=True)
