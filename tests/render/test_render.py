"""Renders checked against closed forms: plane depth and range, sphere silhouette, stereo disparity,
stereo occlusion shadow, distortion against cv2.projectPoints, texture lookup, REP 118 values."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import trimesh
import warp as wp

from goggles.errors import ConfigError
from goggles.frames import R_BODY_OPTICAL, camera_pose_from_body, quat_from_euler, transform
from goggles.render import CameraModel, Renderer, RenderSettings, Shading, stereo_right_offset
from goggles.render.kernels import tile_pixel
from goggles.scene import box_shape
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of


def render(scene, cameras, T_WC, tracer, **kwargs):
    device, backend = tracer
    partner = kwargs.pop("shadow_partner", None)
    renderer = Renderer(
        DeviceScene(scene, device), cameras, RenderSettings(backend=backend, **kwargs), shadow_partner=partner
    )
    renderer.render(np.asarray(T_WC))
    images = renderer.images()
    renderer.close()
    return images


def ground_plane(half: float = 500.0, z: float = 0.0):
    return quad([[-half, -half, z], [half, -half, z], [half, half, z], [-half, half, z]])


def test_plane_depth_and_range_at_many_poses(tracer):
    """A camera above the plane z = 0: range = -h / d_z along each ray, depth = range * ray_z."""
    scene = scene_of((ground_plane(), 7))
    camera = CameraModel.from_fov(64, 48, 70.0)
    rng = np.random.default_rng(1)
    poses = []
    for _ in range(12):
        q = quat_from_euler(rng.uniform(-0.4, 0.4), rng.uniform(0.3, 1.2), rng.uniform(-np.pi, np.pi))
        poses.append(camera_pose_from_body(transform([*rng.uniform(-20, 20, 2), rng.uniform(0.5, 30)], q)))
    images = render(scene, [camera] * len(poses), poses, tracer)
    rays_C = camera.ray_directions().astype(np.float64)
    for i, T in enumerate(poses):
        d_W = rays_C @ T[:3, :3].T
        with np.errstate(divide="ignore"):
            expected_range = np.where(d_W[..., 2] < 0, -T[2, 3] / d_W[..., 2], np.inf)
        expected_range[expected_range > 1000.0 / rays_C[..., 2]] = np.inf  # beyond max_depth
        hit = np.isfinite(expected_range)
        assert hit.any()
        # Rays that graze the plane's far edge (500 m) are excluded: the finite quad ends there.
        inside = hit & (np.abs(T[:2, 3] + expected_range[..., None] * d_W[..., :2]) < 499).all(axis=-1)
        np.testing.assert_allclose(images.range[i][inside], expected_range[inside], rtol=2e-5, atol=1e-4)
        np.testing.assert_allclose(
            images.depth[i][inside], (expected_range * rays_C[..., 2])[inside], rtol=2e-5, atol=1e-4
        )
        assert np.all(images.segmentation[i][inside] == 7)
        np.testing.assert_allclose(images.normal_W[i][inside], np.broadcast_to([0, 0, 1], (inside.sum(), 3)), atol=1e-6)
        assert np.all(np.isposinf(images.depth[i][~hit])) and np.all(images.segmentation[i][~hit] == 0)
        assert np.all(images.face[i][~hit] == -1)


def test_sphere_silhouette_and_nearest_depth(tracer):
    radius, distance = 1.0, 5.0
    sphere = trimesh.creation.icosphere(subdivisions=6, radius=radius)
    sphere.apply_translation([distance, 0.0, 0.0])
    scene = scene_of((sphere, 3))
    camera = CameraModel.from_fov(121, 121, 40.0)
    images = render(scene, [camera], [camera_pose_from_body(np.eye(4))], tracer)
    rays_B = camera.ray_directions().astype(np.float64) @ R_BODY_OPTICAL.T
    angle = np.arccos(np.clip(rays_B[..., 0], -1, 1))  # angle to the sphere centre direction (+x)
    half_angle = np.arcsin(radius / distance)
    hit = images.segmentation[0] == 3
    pixel_angle = 1.0 / camera.fy  # one pixel, radians, near the centre
    assert np.all(hit[angle < half_angle - 1.5 * pixel_angle])
    assert not np.any(hit[angle > half_angle + 1.5 * pixel_angle])
    # Nearest depth: the centre pixel ray hits the sphere's front at distance - radius.
    centre = images.depth[0][60, 60]
    assert centre == pytest.approx(distance - radius, abs=2e-3)  # icosphere faces sit inside the sphere
    assert np.nanmin(images.depth[0]) == pytest.approx(distance - radius, abs=2e-3)


def _textured_wall(distance: float, camera: CameraModel, texture: np.ndarray):
    """A wall at x = distance whose texels land exactly on the pixel centres of a camera at the origin."""
    x0 = (-0.5 - camera.cx) / camera.fx * distance
    x1 = (camera.width - 0.5 - camera.cx) / camera.fx * distance
    y0 = (-0.5 - camera.cy) / camera.fy * distance
    y1 = (camera.height - 0.5 - camera.cy) / camera.fy * distance
    # Optical (x right, y down) at depth `distance` to body/world: X = d, Y = -x, Z = -y.
    corners = [[distance, -x0, -y1], [distance, -x1, -y1], [distance, -x1, -y0], [distance, -x0, -y0]]
    uv = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # uv (0, 0) = bottom-left of image
    return quad(corners, uv, texture)


def test_textured_intensity_equals_texels(tracer):
    camera = CameraModel.from_fov(48, 36, 50.0)
    texture = np.random.default_rng(2).integers(0, 256, (36, 48, 3), dtype=np.uint8)
    scene = scene_of((_textured_wall(3.0, camera, texture), 1))
    images = render(scene, [camera], [camera_pose_from_body(np.eye(4))], tracer, shading=Shading.UNLIT)
    np.testing.assert_allclose(images.rgb[0].astype(int), texture.astype(int), atol=1)


def test_bilinear_texture_between_texels(tracer):
    """A wall twice the texture's resolution samples halfway between texels: their mean."""
    camera = CameraModel.from_fov(40, 30, 50.0)
    texture = np.random.default_rng(3).integers(0, 256, (15, 20, 3), dtype=np.uint8)
    scene = scene_of((_textured_wall(3.0, camera, texture), 1))
    images = render(scene, [camera], [camera_pose_from_body(np.eye(4))], tracer, shading=Shading.UNLIT)
    # Pixel column 2j+1 sits a quarter texel right of texel j's centre... use the OpenCV sampler as truth:
    ys, xs = np.meshgrid(np.arange(30), np.arange(40), indexing="ij")
    map_x = ((xs + 0.5) / 2.0 - 0.5).astype(np.float32)
    map_y = ((ys + 0.5) / 2.0 - 0.5).astype(np.float32)
    expected = cv2.remap(texture.astype(np.float32), map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)
    interior = (slice(1, -1), slice(1, -1))
    np.testing.assert_allclose(images.rgb[0][interior].astype(float), expected[interior], atol=1.01)


def test_stereo_disparity_is_f_b_over_z(tracer):
    """Right image = left image shifted by f*B/Z pixels for a fronto-parallel textured wall."""
    f, baseline, distance = 64.0, 0.25, 2.0  # disparity 8 px
    camera = CameraModel(96, 32, f, f, 47.5, 15.5)
    wide = CameraModel(160, 32, f, f, 79.5, 15.5)
    texture = np.random.default_rng(4).integers(0, 256, (32, 160, 3), dtype=np.uint8)
    scene = scene_of((_textured_wall(distance, wide, texture), 1))
    T_left = camera_pose_from_body(np.eye(4))
    images = render(
        scene,
        [camera, camera],
        [T_left, T_left @ stereo_right_offset(baseline)],
        tracer,
        shading=Shading.UNLIT,
        shadow_partner=[1, -1],
    )
    disparity = f * baseline / distance  # 8 px: the right image is the left one shifted by it
    left, right = images.rgb[0].astype(int), images.rgb[1].astype(int)
    np.testing.assert_allclose(right[:, : 96 - int(disparity)], left[:, int(disparity) :], atol=1)
    # The left camera's first 8 columns are outside the right camera's view: no disparity, NaN depth
    # (the invalid band every stereo camera has); nothing else is occluded on a bare wall.
    assert np.isnan(images.depth[0][:, :8]).all()
    np.testing.assert_allclose(images.depth[0][:, 8:], distance, rtol=1e-5)
    np.testing.assert_allclose(images.depth[1], distance, rtol=1e-5)


def test_stereo_occlusion_shadow(tracer):
    """A post in front of a wall: left pixels on the wall that the right camera cannot see (behind the
    post, or outside its image) are NaN."""
    baseline = 0.3
    wall = quad([[6, 10, -10], [6, -10, -10], [6, -10, 10], [6, 10, 10]])
    post = trimesh.creation.box(extents=[0.2, 0.4, 4.0])
    post.apply_translation([3.0, 0.0, 0.0])
    scene = scene_of((wall, 1), (post, 2))
    camera = CameraModel.from_fov(160, 40, 30.0)
    T_left = camera_pose_from_body(np.eye(4))
    T_right = T_left @ stereo_right_offset(baseline)
    images = render(scene, [camera, camera], [T_left, T_right], tracer, shadow_partner=[1, -1])
    depth = images.depth[0]
    # Analytic shadow: wall point P (from the left ray) is hidden from the right camera at
    # (0, -B, 0) if the segment crosses the post's front face x = 2.9 within |y| <= 0.2.
    rays_W = camera.ray_directions().astype(np.float64) @ T_left[:3, :3].T
    P = rays_W * (6.0 / rays_W[..., :1])
    s = (2.9 - 0.0) / (P[..., 0] - 0.0)
    y_cross = -baseline + s * (P[..., 1] + baseline)
    u_right = camera.fx * (-(P[..., 1] + baseline)) / P[..., 0] + camera.cx  # right optical x = -(y + B)
    on_wall = images.segmentation[0] == 1
    behind_post = on_wall & (np.abs(y_cross) < 0.2)
    outside = on_wall & ((u_right < -0.5) | (u_right >= camera.width - 0.5))
    assert behind_post.sum() > 20 and outside.sum() > 20
    expected_shadow = behind_post | outside
    shadow = np.isnan(depth)
    mismatch = shadow != expected_shadow
    # The partner's depth is sampled at pixel resolution: pixels whose crossing lies within about one
    # right-camera pixel (0.04 m at the post) of the post's edge, or of the image border, may differ.
    edge = (
        (np.abs(np.abs(y_cross) - 0.2) < 0.06)
        | (np.abs(u_right + 0.5) < 1)
        | (np.abs(u_right - camera.width + 0.5) < 1)
    )
    assert not np.any(mismatch & ~edge), np.argwhere(mismatch & ~edge)[:5]
    assert not np.isnan(images.depth[1]).any()  # the right camera has no partner
    lit = images.rgb[0][on_wall & ~shadow].astype(float).mean(axis=0)
    in_shadow = images.rgb[0][on_wall & shadow].astype(float).mean(axis=0)
    np.testing.assert_allclose(in_shadow, lit, atol=3.0)  # intensity is still rendered in the shadow


def test_distortion_matches_cv2_project_points(tracer):
    """Each pixel's ray, from OpenCV (cv2.undistortPoints of the pixel centre), meets the plane x = 4
    at a distance found in closed form; the rendered range must be that distance. Nothing of the
    camera model's own ray table is used."""
    distortion = np.array([-0.28, 0.07, 0.001, -0.0015, 0.0])
    camera = CameraModel.from_fov(80, 60, 75.0, distortion=tuple(distortion))
    scene = scene_of((quad([[4, 20, -20], [4, -20, -20], [4, -20, 20], [4, 20, 20]]), 1))
    T_WC = camera_pose_from_body(transform([0.0, 0.0, 0.0], quat_from_euler(0.1, -0.05, 0.08)))
    images = render(scene, [camera], [T_WC], tracer)
    u, v = np.meshgrid(np.arange(80, dtype=np.float64), np.arange(60, dtype=np.float64))
    pixels = np.stack([u, v], axis=-1).reshape(-1, 1, 2)
    normalised = cv2.undistortPoints(
        pixels, camera.K, distortion, criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 100, 1e-12)
    ).reshape(-1, 2)
    rays_C = np.column_stack([normalised, np.ones(len(normalised))])
    rays_C /= np.linalg.norm(rays_C, axis=1, keepdims=True)
    rays_W = rays_C @ T_WC[:3, :3].T
    expected = (4.0 - T_WC[0, 3]) / rays_W[:, 0]  # where each ray meets x = 4
    np.testing.assert_allclose(images.range[0].reshape(-1), expected, rtol=2e-5)
    # and the image is really distorted: the corner pixel's range differs from a pinhole camera's
    pinhole = render(scene, [CameraModel.from_fov(80, 60, 75.0)], [T_WC], tracer)
    assert abs(pinhole.range[0][0, 0] - images.range[0][0, 0]) > 0.05


def test_rep118_min_and_max_depth(tracer):
    wall = quad([[2, 5, -5], [2, -5, -5], [2, -5, 5], [2, 5, 5]])
    scene = scene_of((wall, 1), (ground_plane(z=-3.0), 2))  # the ground is met beyond the wall
    camera = CameraModel.from_fov(16, 12, 60.0, min_depth=2.5, max_depth=50.0)
    far = CameraModel.from_fov(16, 12, 60.0, min_depth=0.1, max_depth=1.5)
    T = camera_pose_from_body(np.eye(4))
    images = render(scene, [camera, far], [T, T], tracer)
    assert np.all(np.isneginf(images.depth[0])) and np.all(np.isneginf(images.range[0]))  # wall at 2 m < 2.5
    assert np.all(images.segmentation[0] == 1)  # too close is still seen
    assert np.all(np.isposinf(images.depth[1])) and np.all(images.face[1] == -1)  # nothing within 1.5 m


def test_bad_inputs_are_refused(device):
    scene = DeviceScene(scene_of((ground_plane(), 1)), device)
    camera = CameraModel.from_fov(8, 6, 60.0)
    with pytest.raises(ConfigError, match="share width and height"):
        Renderer(scene, [camera, CameraModel.from_fov(9, 6, 60.0)])
    with pytest.raises(ConfigError, match="shadow_partner"):
        Renderer(scene, [camera], shadow_partner=[0])
    renderer = Renderer(scene, [camera])
    with pytest.raises(ConfigError, match="finite"):
        renderer.render(np.full((1, 4, 4), np.nan))
    with pytest.raises(ConfigError, match="orthonormal"):
        renderer.render(2.0 * np.eye(4)[None])
    renderer.close()
    with pytest.raises(ConfigError):
        CameraModel.from_fov(8, 6, 200.0)
    with pytest.raises(ConfigError):
        CameraModel(8, 6, -1.0, 1.0, 3.0, 2.0)
    # A string, a float32 overflow and a size past the run file's bound were taken (or a TypeError);
    # NumPy's numbers are taken as Python's, and the model is the same model.
    for fields, message in (
        ({"fx": "50"}, "camera fx='50' must be a number"),
        ({"fx": 1e39}, "camera fx=1e.39 must be finite"),
        ({"width": 20000}, "camera size 20000x6 must be whole numbers of pixels, 1 to 16384"),
        ({"width": True}, "camera size Truex6"),
    ):
        with pytest.raises(ConfigError, match=message):
            CameraModel(**{"width": 8, "height": 6, "fx": 5.0, "fy": 5.0, "cx": 3.5, "cy": 2.5, **fields})
    assert CameraModel(np.int64(8), 6, np.float32(5.0), 5.0, 3.5, 2.5) == CameraModel(8, 6, 5.0, 5.0, 3.5, 2.5)
    with pytest.raises(ConfigError, match="cannot be inverted"):
        CameraModel.from_fov(64, 48, 120.0, distortion=(-2.0, 0.0, 0.0, 0.0, 0.0)).ray_directions()


def test_one_launch_renders_many_cameras_consistently(tracer):
    """Rendering cameras together equals rendering each alone (batching changes nothing), cameras of
    one model sharing one ray table and a camera of another model among them keeping its own."""
    sphere = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    sphere.apply_translation([4.0, 1.0, 0.5])
    scene = scene_of((ground_plane(z=-1.0), 1), (sphere, 2))
    camera = CameraModel.from_fov(32, 24, 60.0)
    distorted = CameraModel.from_fov(32, 24, 70.0, distortion=(-0.2, 0.05, 0.0, 0.0, 0.0))
    same = CameraModel.from_fov(32, 24, 60.0)  # equal to ``camera``, another object
    cameras = [camera, distorted, same, camera]
    poses = [camera_pose_from_body(transform([0, y, 0], [1, 0, 0, 0])) for y in (0.0, 0.5, 1.0, 1.5)]
    device, backend = tracer
    renderer = Renderer(DeviceScene(scene, device), cameras, RenderSettings(backend=backend))
    assert renderer.rays_C.shape[0] == 2 and renderer.ray_table.numpy().tolist() == [0, 1, 0, 0]
    renderer.render(np.asarray(poses))
    together = renderer.images()
    renderer.close()
    for i, T in enumerate(poses):
        alone = render(scene, [cameras[i]], [T], tracer)
        np.testing.assert_array_equal(together.depth[i], alone.depth[0])
        np.testing.assert_array_equal(together.rgb[i], alone.rgb[0])
        np.testing.assert_array_equal(together.segmentation[i], alone.segmentation[0])
    undistorted = render(scene, [camera], [poses[1]], tracer)
    assert not np.array_equal(together.depth[1], undistorted.depth[0])  # camera 1 traced its own table


@wp.kernel
def _tile_order_kernel(width: int, height: int, order: wp.array2d(dtype=wp.int32)):
    index = wp.tid()
    pixel = tile_pixel(index, width, height)
    order[pixel[1], pixel[0]] = index


def test_tiles_cover_every_pixel_once_in_8x4_blocks(device):
    """CUDA's pixel order: a warp's 32 threads take an 8 x 4 tile; a short last band makes 8 x 2 tiles."""
    width, height = 24, 18
    order = wp.full((height, width), -1, dtype=wp.int32, device=device)
    wp.launch(_tile_order_kernel, dim=width * height, inputs=[width, height], outputs=[order], device=device)
    got = order.numpy()
    assert sorted(got.ravel().tolist()) == list(range(width * height))  # every pixel exactly once
    np.testing.assert_array_equal(got[:4, :8], np.arange(32).reshape(4, 8))
    np.testing.assert_array_equal(got[:4, 8:16], 32 + np.arange(32).reshape(4, 8))
    np.testing.assert_array_equal(got[4:8, :8], 4 * width + np.arange(32).reshape(4, 8))
    np.testing.assert_array_equal(got[16:, 8:16], 16 * width + 16 + np.arange(16).reshape(2, 8))


def test_tiled_pixels_render_what_rows_render(device):
    """Every output of a tiled render (a thread per pixel, CUDA's default) equals the row-order render's,
    with an actor, the sun's shadows and a stereo partner, on an image whose last band is short."""
    sphere = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    sphere.apply_translation([4.0, 1.0, 0.5])
    world = DeviceScene(
        scene_of((ground_plane(z=-1.0), 1), (sphere, 2)),
        device,
        shapes=[box_shape("crate", [1.0, 1.0, 1.0], rgb=(1.0, 0.0, 0.0), segmentation=7)],
    )
    world.set_actors([0], [transform([5.0, -1.5, 0.0], quat_from_euler(0.0, 0.0, 0.4))])
    camera = CameraModel.from_fov(32, 18, 70.0, distortion=(-0.1, 0.01, 0.0, 0.0, 0.0))
    left = camera_pose_from_body(transform([0.0, 0.0, 0.3], quat_from_euler(0.05, 0.1, 0.0)))
    poses = np.stack([left, left @ stereo_right_offset(0.3)])
    images = {}
    for order in ("rows", "tiles"):
        renderer = Renderer(
            world, [camera] * 2, RenderSettings(backend="warp", pixel_order=order), shadow_partner=[1, -1]
        )
        assert renderer.pixel_order == order
        renderer.render(poses)
        images[order] = renderer.images()
        renderer.close()
    for name in ("status", "depth", "range", "rgb", "segmentation", "normal_W", "face"):
        np.testing.assert_array_equal(getattr(images["tiles"], name), getattr(images["rows"], name), err_msg=name)
    assert {1, 2, 7} <= set(np.unique(images["tiles"].segmentation).tolist())  # ground, sphere and crate seen


def test_pixel_order_is_checked(device):
    world = DeviceScene(scene_of((ground_plane(), 1)), device)
    with pytest.raises(ConfigError, match="multiple of 8"):
        Renderer(world, [CameraModel.from_fov(30, 18, 60.0)], RenderSettings(backend="warp", pixel_order="tiles"))
    with pytest.raises(ConfigError, match="pixel order"):
        Renderer(world, [CameraModel.from_fov(32, 18, 60.0)], RenderSettings(backend="warp", pixel_order="diagonal"))
    auto = Renderer(world, [CameraModel.from_fov(32, 18, 60.0)], RenderSettings(backend="warp"))
    assert auto.pixel_order == ("tiles" if auto.device.is_cuda else "rows")
    auto.close()


def test_the_sensor_apis_refuse_what_they_cannot_use_in_one_error(monkeypatch):
    """What a Python user may hand the renderer and the sensors by mistake is one ConfigError naming
    the argument (not NumPy's or Warp's error from inside): poses that are not numbers or not rigid,
    a name where a camera goes, an unknown shading or device, beacons at NaN or on actor -2. A single
    (4, 4) pose serves a single camera, and names serve for a shading and a range preset."""
    from goggles.sensors.beacons import BeaconSensor
    from goggles.sensors.ranges import PRESETS, RangeSensor
    from goggles.world import Beacon

    scene = DeviceScene(scene_of((ground_plane(), 1)), "cpu")
    camera = CameraModel.from_fov(8, 6, 60.0)
    renderer = Renderer(scene, [camera], RenderSettings(shading="unlit"))  # a Shading's name serves too
    ranges = RangeSensor(scene, "vl53l5cx")
    assert ranges.model is PRESETS["vl53l5cx"]
    beacons = BeaconSensor(scene, [Beacon("a/1", (0.0, 0.0, 0.0))], [camera])
    down = np.array([[1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 2.0], [0, 0, 0, 1]])
    renderer.render(down)
    assert float(renderer.images().depth[0, 3, 4]) == pytest.approx(2.0, rel=1e-5)
    assert float(ranges.measure(down)[0, 3, 3]) == pytest.approx(2.0, abs=0.1)
    sheared = down.copy()
    sheared[0, 1] = 0.5
    calls = {
        "camera poses must be .n, 4, 4. arrays of numbers, got str": lambda: renderer.render("pose"),
        "camera poses must have orthonormal rotations": lambda: renderer.render(sheared),
        r"camera poses must be a \(1, 4, 4\) array, got shape \(3, 4\)": lambda: renderer.render(down[:3]),
        "range sensor poses must be finite": lambda: ranges.measure(np.full((2, 4, 4), np.nan)),
        "range sensor poses must have orthonormal": lambda: ranges.measure(2 * down),
        "beacon detection's camera poses must be .n, 4, 4. arrays": lambda: beacons.detect([["x"]]),
        "range sensor 'vl53l1x': a preset": lambda: RangeSensor(scene, "vl53l1x"),
        "cameras are CameraModels": lambda: Renderer(scene, ["camera"]),
        r"shading 'glossy': one of UNLIT \(0\), SUN \(1\)": lambda: Renderer(
            scene, [camera], RenderSettings(shading="glossy")
        ),
        "sun_W .0, 0, 0.: a direction": lambda: Renderer(scene, [camera], RenderSettings(sun_W=(0, 0, 0))),
        "ambient nan": lambda: Renderer(scene, [camera], RenderSettings(ambient=float("nan"))),
        "beacon b/1: position must be 3 finite": lambda: BeaconSensor(scene, [Beacon("b/1", (np.nan, 0, 0))], [camera]),
        "beacon b/2: position .* actor None or an actor's index": lambda: BeaconSensor(
            scene, [Beacon("b/2", (0, 0, 0), actor=-2)], [camera]
        ),
        "device 'gpu' is not a Warp device here": lambda: DeviceScene(scene_of((ground_plane(), 1)), "gpu"),
        "a DeviceScene holds a StaticScene": lambda: DeviceScene("arena.obj", "cpu"),
        r"64 cameras of 16384x16384 need 64.0 GiB of depth, over the 2 GiB one Warp array": lambda: Renderer(
            scene, [CameraModel.from_fov(16384, 16384, 60.0)] * 64
        ),
        r"rendering 64 camera\(s\) of 2048x2048 needs about 26.5 GiB": lambda: Renderer(
            scene, [CameraModel.from_fov(2048, 2048, 40.0 + k) for k in range(64)], RenderSettings(outputs={"depth"})
        ),
    }
    import goggles.runtime.device_memory

    monkeypatch.setattr(
        goggles.runtime.device_memory, "available_memory", lambda device: 16 * 2**30
    )  # any machine's answer
    for message, call in calls.items():
        with pytest.raises(ConfigError, match=message):
            call()
    renderer.close()
