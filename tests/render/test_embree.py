"""The Warp renderer and Embree agree on the same rays through a real scan (one API, two backends)."""

import numpy as np
import pytest

from goggles.bench.measure import bench_views
from goggles.frames import camera_pose_from_body
from goggles.paths import default_scene
from goggles.render import CameraModel, Renderer
from goggles.scene import load_static_scene
from goggles.world import DeviceScene

embree = pytest.importorskip("goggles.render.embree")


@pytest.mark.slow
def test_warp_matches_embree_on_the_default_scene(device):
    scene = load_static_scene(default_scene())
    camera = CameraModel.from_fov(96, 72, 70.0)
    T_WC = np.stack([camera_pose_from_body(T) for T in bench_views(scene.view, 4)])
    renderer = Renderer(DeviceScene(scene, device), [camera] * 4)
    renderer.render(T_WC)
    images = renderer.images()
    renderer.close()
    tracer = embree.EmbreeTracer(scene)
    rays_C = camera.ray_directions().reshape(-1, 3)
    for i, T in enumerate(T_WC):
        t, face = tracer.trace(np.broadcast_to(T[:3, 3], rays_C.shape), rays_C @ T[:3, :3].T)
        warp_range = images.range[i].ravel()
        assert np.array_equal(np.isfinite(warp_range), np.isfinite(t))
        hit = np.isfinite(t)
        assert hit.mean() > 0.3
        np.testing.assert_allclose(warp_range[hit], t[hit], rtol=1e-4, atol=1e-3)
        assert (images.face[i].ravel()[hit] == face[hit]).mean() > 0.99  # ties on shared edges may differ
    tracer.close()
