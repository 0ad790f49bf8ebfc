"""Moving actors in the renderer: placed by a pose, hidden behind static geometry, moved without rebuilds."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.errors import ConfigError
from goggles.frames import camera_pose_from_body, quat_from_axis_angle, transform
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.scene import box_shape
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of


def wall(x: float):
    return quad([[x, 10, -10], [x, -10, -10], [x, -10, 10], [x, 10, 10]])


@pytest.fixture
def world(tracer):
    device, backend = tracer
    scene = DeviceScene(
        scene_of((wall(10.0), 1)),
        device,
        shapes=[
            box_shape("crate", [1.0, 1.0, 1.0], rgb=(1.0, 0.0, 0.0), segmentation=7),
            box_shape("post", [0.2, 0.2, 3.0], rgb=(0.0, 0.0, 1.0), segmentation=8),
        ],
        max_actors=4,
    )
    camera = CameraModel.from_fov(33, 33, 40.0)
    renderer = Renderer(scene, [camera], RenderSettings(shading=Shading.UNLIT, backend=backend))
    yield scene, renderer
    renderer.close()


def look(renderer):
    renderer.render(camera_pose_from_body(np.eye(4))[None])
    return renderer.images()


def test_actor_appears_where_it_is_placed_and_moves(world):
    scene, renderer = world
    images = look(renderer)
    assert images.depth[0][16, 16] == pytest.approx(10.0, rel=1e-5) and images.segmentation[0][16, 16] == 1
    scene.set_actors([0], [transform([4.0, 0.0, 0.0], [1, 0, 0, 0])])
    images = look(renderer)
    assert images.depth[0][16, 16] == pytest.approx(3.5, rel=1e-5)  # front face of the 1 m crate at 4 m
    assert images.segmentation[0][16, 16] == 7
    assert tuple(images.rgb[0][16, 16]) == (255, 0, 0)
    assert images.face[0][16, 16] >= scene.num_faces  # actor faces follow the static ones
    np.testing.assert_allclose(images.normal_W[0][16, 16], [-1, 0, 0], atol=1e-6)
    scene.set_actors([0], [transform([4.0, 5.0, 0.0], [1, 0, 0, 0])])  # moved out of view
    assert look(renderer).depth[0][16, 16] == pytest.approx(10.0, rel=1e-5)


def test_a_sensor_does_not_see_the_actor_that_carries_it(world):
    """A camera, a range sensor and a beacon detector inside a crate (their vehicle's body) see out of
    it, and a second crate ahead; the same crate not named as the carrier fills the view at 0.5 m."""
    from goggles.sensors.beacons import Beacon, BeaconSensor
    from goggles.sensors.ranges import RangeSensor

    scene, renderer = world
    crates = [transform([0.0, 0.0, 0.0], [1, 0, 0, 0]), transform([4.0, 0.0, 0.0], [1, 0, 0, 0])]
    scene.set_actors([0, 0], crates)
    T_WC = camera_pose_from_body(np.eye(4))[None]
    for carriers, depth in (([0], 3.5), ([-1], 0.5), (None, 0.5), ([1], 0.5)):
        renderer.render(T_WC, carriers=carriers)
        assert renderer.images().depth[0][16, 16] == pytest.approx(depth, rel=1e-5)
    sensor = RangeSensor(scene, "flightgoggles-altimeter", noise=False)
    assert sensor.measure(T_WC, [0])[0, 0, 0] == pytest.approx(3.5, rel=1e-5)
    assert sensor.measure(T_WC)[0, 0, 0] == pytest.approx(0.5, rel=1e-5)
    beacons = BeaconSensor(scene, [Beacon("ahead", (2.0, 0.0, 0.0))], [renderer.cameras[0]])
    assert [d.id for d in beacons.detect(T_WC, carriers=[0])] == ["ahead"]
    assert beacons.detect(T_WC) == []  # hidden behind the crate's face
    for bad in ([0, 1], [-2], [0.5], "crate"):
        with pytest.raises(ConfigError, match="carriers of camera poses must be 1 actor indices"):
            renderer.render(T_WC, carriers=bad)


def test_rotated_actor_and_several_instances(world):
    scene, renderer = world
    turned = quat_from_axis_angle([0, 0, 1], np.pi / 4)  # the crate's edge faces the camera
    scene.set_actors([0, 1], [transform([4.0, 0.0, 0.0], turned), transform([2.0, 0.0, 0.0], [1, 0, 0, 0])])
    images = look(renderer)
    assert images.segmentation[0][16, 16] == 8  # the post at 2 m is in front of the crate
    assert images.depth[0][16, 16] == pytest.approx(1.9, rel=1e-5)
    column = images.segmentation[0][:, 13]  # left of the post: the turned crate's edge
    assert 7 in column
    depth_edge = images.depth[0][16, 12]
    assert 4.0 - np.sqrt(0.5) - 0.01 < depth_edge < 4.0  # nearest part of a crate turned 45 deg


def test_actor_behind_static_geometry_is_hidden(world):
    scene, renderer = world
    scene.set_actors([0], [transform([12.0, 0.0, 0.0], [1, 0, 0, 0])])
    images = look(renderer)
    assert 7 not in images.segmentation[0]
    assert images.depth[0][16, 16] == pytest.approx(10.0, rel=1e-5)


def test_bad_actor_placements_are_refused(world):
    scene, _ = world
    with pytest.raises(ConfigError, match="shape indices"):
        scene.set_actors([5], [np.eye(4)])
    with pytest.raises(ConfigError, match="one pose each"):
        scene.set_actors([0] * 5, [np.eye(4)] * 5)
    with pytest.raises(ConfigError, match="rigid"):
        scene.set_actors([0], [np.full((4, 4), np.nan)])
    with pytest.raises(ConfigError, match="actor poses must have orthonormal rotations"):  # checks.poses, as cameras'
        scene.set_actors([0], [2.0 * np.eye(4)])
    with pytest.raises(ConfigError, match="actor poses must be .n, 4, 4. arrays of numbers"):
        scene.set_actors([0], "here")
    scene.set_actors([], [])  # none placed: an empty list is no poses


def test_actors_outside_a_cameras_view_are_culled_but_edges_still_render(world):
    """Only instances whose boxes may be seen are traced per pixel; one that barely enters the image at
    its border still renders there (the cull is conservative)."""
    scene, renderer = world
    half_width = 3.5 * np.tan(np.radians(20.0))  # the image's half width at the crate's front face (40 deg)
    edge = transform([4.0, half_width + 0.4, 0.0], [1, 0, 0, 0])  # 0.1 m of its 1 m width inside the view
    behind = transform([-4.0, 0.0, 0.0], [1, 0, 0, 0])
    beside = transform([4.0, 6.0, 0.0], [1, 0, 0, 0])
    scene.set_actors([0, 0, 0], [behind, edge, beside])
    images = look(renderer)
    assert renderer._culling.count.numpy()[0] == 1  # behind and beside are not traced
    left_column = images.segmentation[0][:, 0]  # +y is the image's left
    assert (left_column == 7).sum() >= 8 and images.depth[0][16, 0] == pytest.approx(3.5, rel=1e-5)
    assert 7 not in images.segmentation[0][:, 8:]


@pytest.mark.parametrize("backend", ["warp", "embree"])
def test_actors_render_as_the_same_boxes_built_into_the_static_scene(backend):
    """Sixty crates as actors, seen through a distorted lens, render as the same crates merged into
    the static mesh (traced by the BVH, no actor code): same depth and classes. The crates crowd some
    pixel tiles past their short lists, straddle tile borders and the image's edge, and one reaches
    behind the camera, so each way an actor is found (a tile's list, the camera's) is taken."""
    import trimesh

    from goggles.render.embree import embree_available

    if backend == "embree" and not embree_available():
        pytest.skip("embreex is not installed")
    rng = np.random.default_rng(5)
    places = np.c_[rng.uniform(2.0, 9.0, 60), rng.uniform(-3.0, 3.0, 60), rng.uniform(-1.5, 1.5, 60)]
    places[:12] = np.c_[np.linspace(5.0, 8.0, 12), rng.uniform(-0.3, 0.3, 12), rng.uniform(-0.3, 0.3, 12)]  # a crowd
    places[12] = [0.0, 0.0, -0.4]  # a crate around the camera's plane, part of it behind, seen below
    turns = [quat_from_axis_angle(rng.normal(size=3), rng.uniform(0, np.pi)) for _ in places]
    T_WA = [transform(p, q) for p, q in zip(places, turns, strict=True)]
    wall = quad([[12, 10, -10], [12, -10, -10], [12, -10, 10], [12, 10, 10]])
    crates = [trimesh.creation.box(extents=[0.4] * 3).apply_transform(T) for T in T_WA]
    camera = CameraModel.from_fov(96, 72, 80.0, distortion=(-0.28, 0.07, 0.001, -0.0015, 0.0))
    T_WC = [camera_pose_from_body(transform([0.0, 0.0, 0.0], quat_from_axis_angle([0, 0, 1], 0.05)))]

    actors = DeviceScene(
        scene_of((wall, 1)), "cpu", shapes=[box_shape("crate", [0.4] * 3, segmentation=7)], max_actors=64
    )
    actors.set_actors([0] * len(T_WA), T_WA)
    baked = DeviceScene(scene_of((wall, 1), *[(crate, 7) for crate in crates]), "cpu")
    images = []
    for world in (actors, baked):
        renderer = Renderer(
            world, [camera], RenderSettings(backend=backend, outputs={"segmentation"}, shading=Shading.NONE)
        )
        renderer.render(np.asarray(T_WC))
        images.append(renderer.images())
        if world is actors:
            tiles = renderer._culling.tile_count.numpy()[0]
            assert (tiles > 0).any() and (tiles == -1).any(), "both ways of finding actors are taken"
        renderer.close()
    as_actors, as_static = images
    assert (as_actors.segmentation[0] == 7).mean() > 0.08  # about 600 pixels of crates
    assert (as_static.depth[0] < 0.3).sum() > 30  # the crate reaching behind the camera, seen
    ties = as_actors.segmentation[0] != as_static.segmentation[0]  # a ray through two crates' shared edge
    assert ties.mean() < 2e-3
    same = ~ties & np.isfinite(as_static.depth[0])
    np.testing.assert_allclose(as_actors.depth[0][same], as_static.depth[0][same], rtol=1e-5)
