"""The two primary-ray backends give the same images: Warp's BVH and Embree trace, one set of kernels writes.

Compared pixel by pixel on the default scan, a generated terrain and a scene with moving actors:
depth within 1e-5 relative, the same segmentation and triangle ids except on ties where a ray
passes through an edge shared by two triangles (counted, and bounded).
"""

from __future__ import annotations

import numpy as np
import pytest

from goggles.bench.measure import bench_views
from goggles.errors import ConfigError
from goggles.frames import camera_pose_from_body, quat_from_axis_angle, transform
from goggles.paths import default_scene
from goggles.render import CameraModel, Renderer, RenderSettings, Shading, stereo_right_offset
from goggles.render.embree import embree_available
from goggles.render.renderer import choose_backend
from goggles.scene import box_shape, load_static_scene
from goggles.scene.terrain import terrain_scene
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

pytestmark = pytest.mark.skipif(not embree_available(), reason="embreex is not installed")

#: Most pixels allowed to differ on a tie (a ray through a shared edge may take either triangle).
TIES = 1e-3


def render_both(world: DeviceScene, cameras, T_WC, **kwargs):
    images = {}
    for backend in ("warp", "embree"):
        partner = kwargs.get("shadow_partner")
        settings = RenderSettings(backend=backend, **{k: v for k, v in kwargs.items() if k != "shadow_partner"})
        renderer = Renderer(world, cameras, settings, shadow_partner=partner)
        assert renderer.backend == backend
        renderer.render(np.asarray(T_WC))
        images[backend] = renderer.images()
        renderer.close()
    return images["warp"], images["embree"]


def assert_same_images(warp, embree):
    # The pixel status (hit, nothing, too close, stereo shadow) may differ only on ties: a shared edge,
    # or a point exactly at the shadow test's threshold.
    assert (warp.status != embree.status).mean() <= TIES
    ties = warp.face != embree.face
    # A tie is another triangle at the same place (the same depth and object: the edge two triangles
    # share). A test scene's quad whose diagonal runs through pixel centres has one per row, which
    # Embree's packets and Warp may resolve either way; another triangle elsewhere is no tie.
    elsewhere = ties & ~(np.isclose(warp.depth, embree.depth, rtol=1e-5) & (warp.segmentation == embree.segmentation))
    assert elsewhere.mean() <= TIES, f"{elsewhere.sum()} of {ties.size} pixels hit different triangles elsewhere"
    assert ties.mean() <= 0.02, f"{ties.sum()} of {ties.size} pixels hit different triangles"
    same = ~ties
    valid = np.isfinite(warp.depth) & np.isfinite(embree.depth) & same
    assert valid.mean() > 0.2, "the views must see something"
    np.testing.assert_allclose(embree.depth[valid], warp.depth[valid], rtol=1e-5)
    np.testing.assert_allclose(embree.range[valid], warp.range[valid], rtol=1e-5)
    assert np.array_equal(warp.segmentation[same], embree.segmentation[same])
    np.testing.assert_allclose(embree.normal_W[same], warp.normal_W[same], atol=1e-4)
    assert np.abs(warp.rgb[same].astype(int) - embree.rgb[same]).max() <= 1  # rounding of the last byte
    return int(ties.sum())


def stereo_views(T_WB_list, baseline=0.3):
    poses = []
    for T_WB in T_WB_list:
        left = camera_pose_from_body(T_WB)
        poses += [left, left @ stereo_right_offset(baseline)]
    return poses


@pytest.mark.slow
def test_backends_agree_on_the_default_scan():
    scene = load_static_scene(default_scene())
    world = DeviceScene(scene, "cpu")
    camera = CameraModel.from_fov(120, 90, 70.0)
    warped = CameraModel.from_fov(120, 90, 70.0, distortion=(-0.2, 0.05, 0.001, -0.001, 0.0))
    views = bench_views(scene.view, 3)
    poses = stereo_views(views)
    cameras = [camera, warped] * len(views)
    warp, embree = render_both(world, cameras, poses, shadow_partner=[1, -1] * len(views))
    ties = assert_same_images(warp, embree)
    print(f"default scan: {ties} tie(s) in {warp.face.size} pixels")


def test_posed_renders_equal_renders_from_host_poses_with_both_backends():
    """``render_posed`` (poses written on the device, as the learning environments do) gives the
    image ``render`` gives from the same poses, with the warp and the embree backend."""
    scene = load_static_scene(default_scene())
    world = DeviceScene(scene, "cpu")
    camera = CameraModel.from_fov(48, 36, 70.0)
    poses = np.stack([camera_pose_from_body(T) for T in bench_views(scene.view, 3)])
    for backend in ("warp", "embree"):
        renderer = Renderer(world, [camera] * 3, RenderSettings(backend=backend, outputs={"depth", "segmentation"}))
        renderer.render(poses)
        expected = renderer.images()
        renderer.render(np.broadcast_to(np.eye(4), poses.shape))  # elsewhere
        R_WC, p_WC = renderer.camera_poses
        R_WC.assign(np.broadcast_to(poses[:, None, :3, :3], (3, 36, 3, 3)).astype(np.float32))
        p_WC.assign(np.broadcast_to(poses[:, None, :3, 3], (3, 36, 3)).astype(np.float32))
        renderer.render_posed()
        posed = renderer.images()
        assert np.isfinite(expected.depth).mean() > 0.3  # the ground below the horizon
        np.testing.assert_array_equal(posed.depth, expected.depth)
        np.testing.assert_array_equal(posed.segmentation, expected.segmentation)
        renderer.close()


def test_backends_agree_on_a_batch_of_small_cameras():
    """A learning batch's small images: Embree's chunks then hold several whole cameras, each ray with
    its own camera's origin (a chunk of one camera too, a rolling shutter, and every query: the surface
    for rgb, the triangle only for segmentation, the distance only for depth)."""
    scene = load_static_scene(default_scene())
    world = DeviceScene(scene, "cpu")
    camera = CameraModel.from_fov(40, 30, 75.0)
    views = bench_views(scene.view, 10)
    views[:, :3, 3] += np.arange(10)[:, None] * [0.3, -0.2, 0.05]  # each from its own place
    poses = np.stack([camera_pose_from_body(T) for T in views])
    warp, embree = render_both(world, [camera] * 10, poses)
    assert_same_images(warp, embree)
    turned = poses @ transform([0.4, 0.0, 0.0], quat_from_axis_angle([0, 1, 0], 0.2))
    for outputs in ({"segmentation"}, {"depth"}):
        images = {}
        for backend in ("warp", "embree"):
            renderer = Renderer(world, [camera] * 10, RenderSettings(backend=backend, outputs=outputs))
            renderer.render(poses, turned)  # a rolling shutter: each row from its own pose
            images[backend] = renderer.images()
            renderer.close()
        w, e = images["warp"], images["embree"]
        assert (w.status != e.status).mean() <= TIES
        if outputs == {"depth"}:
            valid = np.isfinite(w.depth) & np.isfinite(e.depth)
            assert valid.mean() > 0.2
            np.testing.assert_allclose(e.depth[valid], w.depth[valid], rtol=1e-5)
        else:
            assert (w.segmentation != e.segmentation).mean() <= TIES


def test_backends_agree_on_a_generated_terrain():
    scene = terrain_scene(20_000, seed=3)
    world = DeviceScene(scene, "cpu")
    camera = CameraModel.from_fov(96, 72, 80.0, max_depth=80.0)
    warp, embree = render_both(world, [camera] * 4, [camera_pose_from_body(T) for T in bench_views(scene.view, 4)])
    assert np.isposinf(warp.depth).any()  # the horizon beyond max_depth: REP 118 +inf from both
    ties = assert_same_images(warp, embree)
    print(f"terrain: {ties} tie(s) in {warp.face.size} pixels")


def test_backends_agree_with_moving_actors():
    wall = quad([[10, 10, -10], [10, -10, -10], [10, -10, 10], [10, 10, 10]])
    floor = quad([[-20, -20, -1], [20, -20, -1], [20, 20, -1], [-20, 20, -1]])
    world = DeviceScene(
        scene_of((wall, 1), (floor, 2)),
        "cpu",
        shapes=[box_shape("crate", [1.0] * 3, segmentation=7), box_shape("post", [0.2, 0.2, 3.0], segmentation=8)],
        max_actors=8,
    )
    camera = CameraModel.from_fov(80, 60, 75.0)
    T_WC = [camera_pose_from_body(np.eye(4))]
    for step in range(3):  # the actors move between frames; nothing is rebuilt
        turn = quat_from_axis_angle([0, 0, 1], 0.3 * step)
        places = [[4, -1 + step, 0], [2.5, 0.8, 0], [6, 2, 1]]  # crate, post, another crate
        world.set_actors([0, 1, 0], [transform(p, turn) for p in places])
        warp, embree = render_both(world, [camera], T_WC)
        assert {7, 8} <= set(np.unique(embree.segmentation)), "the actors are in view"
        assert_same_images(warp, embree)
    # An actor's face in front of the wall: the closed form, 3.5 m to the crate's front face at 4 m.
    world.set_actors([0], [transform([4.0, 0.0, 0.0], [1, 0, 0, 0])])
    _, embree = render_both(world, [CameraModel.from_fov(33, 33, 40.0)], T_WC)
    assert embree.depth[0][16, 16] == pytest.approx(3.5, rel=1e-5) and embree.segmentation[0][16, 16] == 7


def test_only_the_outputs_asked_for_are_written():
    scene = load_static_scene(default_scene())
    world = DeviceScene(scene, "cpu")
    camera = CameraModel.from_fov(64, 48, 70.0)
    T = [camera_pose_from_body(scene.view)]
    for backend in ("warp", "embree"):
        full = Renderer(world, [camera], RenderSettings(backend=backend))
        full.render(np.asarray(T))
        depth_only = Renderer(world, [camera], RenderSettings(backend=backend, outputs={"depth"}, shading=Shading.SUN))
        depth_only.render(np.asarray(T))
        images = depth_only.images()
        assert images.rgb is None and images.range is None and images.segmentation is None and images.face is None
        assert depth_only.buffers.rgb.size == 3  # a placeholder: nothing allocated for the unasked
        np.testing.assert_array_equal(images.depth, full.images().depth)
        seg = Renderer(world, [camera], RenderSettings(backend=backend, outputs={"segmentation"}))
        seg.render(np.asarray(T))
        np.testing.assert_array_equal(seg.images().segmentation, full.images().segmentation)
        for r in (full, depth_only, seg):
            r.close()


class _Device:
    def __init__(self, cuda: bool):
        self.is_cuda, self.is_cpu = cuda, not cuda

    def __str__(self):
        return "cuda:0" if self.is_cuda else "cpu"


def test_backend_choice_and_its_errors():
    assert choose_backend("auto", _Device(cuda=False)) == "embree"
    assert choose_backend("auto", _Device(cuda=True)) == "bvh"  # the fastest on an H200 (docs/benchmarks.md)
    assert choose_backend("warp", _Device(cuda=False)) == "warp"
    with pytest.raises(ConfigError, match="embree backend traces on the CPU"):
        choose_backend("embree", _Device(cuda=True))
    with pytest.raises(ConfigError, match="render backend 'optix'"):
        choose_backend("optix", _Device(cuda=False))
    world = DeviceScene(scene_of((quad([[1, 1, -1], [1, -1, -1], [1, -1, 1], [1, 1, 1]]), 1)), "cpu")
    with pytest.raises(ConfigError, match="unknown render outputs"):
        Renderer(world, [CameraModel.from_fov(8, 8, 60.0)], RenderSettings(outputs={"depth", "albedo"}))
