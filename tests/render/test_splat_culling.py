"""Captures out of every camera's view are not traced (nor their boxes fitted): the images are the bytes of
a render that traces them, at poses that see them whole, in part, at the edge of the view, and not at all."""

from __future__ import annotations

import dataclasses

import numpy as np

from goggles.frames import camera_pose_from_body, quat_from_euler, transform
from goggles.render import CameraModel, Renderer, RenderSettings
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of
from tests.render.test_splats import cloud


def test_captures_out_of_view_are_skipped_and_the_images_are_the_same(monkeypatch):
    rng = np.random.default_rng(3)
    positions = rng.normal([6.0, 0.0, 1.0], 0.4, (300, 3))
    splats = cloud(positions, np.full((300, 3), 0.05), colours=rng.uniform(0, 1, (300, 3)))
    ground = quad([[-30, -30, 0], [30, -30, 0], [30, 30, 0], [-30, 30, 0]])
    world = DeviceScene(dataclasses.replace(scene_of((ground, 1)), splats=splats), "cpu")
    camera = CameraModel.from_fov(64, 48, 60.0)
    culled = Renderer(world, [camera, camera], RenderSettings())
    traced = Renderer(world, [camera, camera], RenderSettings())
    monkeypatch.setattr(traced, "_splats_in_view", lambda T_WC: True)
    seen = []
    for yaw in np.linspace(-np.pi, np.pi, 121):  # round the cloud's direction: in view, at its edge, away
        T = [camera_pose_from_body(transform([0.0, 0.0, 1.0], quat_from_euler(0.0, 0.0, yaw + d))) for d in (0, 0.2)]
        for r in (culled, traced):
            r.render(np.stack(T))
        seen.append(culled._splats_seen)
        a, b = culled.images(), traced.images()
        for name in ("rgb", "depth", "segmentation", "status"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{name} at yaw {yaw:.2f}")
    assert any(seen) and not all(seen)  # both cases were met
    for r in (culled, traced):
        r.close()
