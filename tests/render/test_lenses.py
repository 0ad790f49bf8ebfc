"""Lens models against independent references: OpenCV's fisheye and omnidir projections, the double
sphere and extended unified models' equivalences to the unified model (their papers' special cases,
which OpenCV's omnidir then checks), and rendered depth of analytic scenes through wide lenses."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import trimesh

from goggles.errors import ConfigError
from goggles.frames import R_BODY_OPTICAL, camera_pose_from_body, quat_from_euler, transform
from goggles.render import CameraModel, Renderer, RenderSettings, lenses
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

INTRINSICS = (190.0, 185.0, 321.5, 238.25)


def random_directions(rng, n: int, max_angle_deg: float) -> np.ndarray:
    """Unit vectors (n, 3) uniformly spread over the cap within ``max_angle_deg`` of +z."""
    cos_top = np.cos(np.radians(max_angle_deg))
    z = rng.uniform(cos_top, 1.0, n)
    phi = rng.uniform(0.0, 2.0 * np.pi, n)
    s = np.sqrt(1.0 - z * z)
    return np.stack([s * np.cos(phi), s * np.sin(phi), z], axis=1)


def K_of(intrinsics) -> np.ndarray:
    fx, fy, cx, cy = intrinsics
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


@pytest.mark.parametrize("k", [(0.0, 0.0, 0.0, 0.0), (-0.013, 0.021, -0.012, 0.002), (0.05, -0.01, 0.003, -0.0004)])
def test_fisheye_projects_as_cv2_fisheye(k):
    rng = np.random.default_rng(3)
    points = random_directions(rng, 500, 89.0) * rng.uniform(0.2, 40.0, (500, 1))
    expected, _ = cv2.fisheye.projectPoints(points[None], np.zeros(3), np.zeros(3), K_of(INTRINSICS), np.array(k))
    pixels, valid = lenses.project("fisheye", k, INTRINSICS, points)
    assert valid.all()
    np.testing.assert_allclose(pixels, expected[0], atol=1e-8)


def test_equidistant_fisheye_is_f_theta_beyond_90_degrees():
    """k = 0: r = f theta, also past the image plane (a 220-degree lens)."""
    rng = np.random.default_rng(4)
    points = random_directions(rng, 400, 110.0)
    pixels, valid = lenses.project("fisheye", (0.0,) * 4, (200.0, 200.0, 0.0, 0.0), points)
    assert valid.all()
    theta = np.arccos(points[:, 2])
    np.testing.assert_allclose(np.hypot(*pixels.T), 200.0 * theta, atol=1e-9)
    np.testing.assert_allclose(np.arctan2(pixels[:, 1], pixels[:, 0]), np.arctan2(points[:, 1], points[:, 0]))


@pytest.mark.parametrize(
    "xi, d", [(0.0, (0.0, 0.0, 0.0, 0.0)), (0.9, (-0.25, 0.07, 0.001, -0.002)), (1.6, (0, 0, 0, 0))]
)
def test_unified_projects_as_cv2_omnidir(xi, d):
    rng = np.random.default_rng(5)
    top = 89.0 if xi == 0.0 else 120.0
    points = random_directions(rng, 500, top) * rng.uniform(0.5, 30.0, (500, 1))
    expected, _ = cv2.omnidir.projectPoints(
        points[None], np.zeros(3), np.zeros(3), K_of(INTRINSICS), xi, np.array([d], dtype=np.float64)
    )
    pixels, valid = lenses.project("unified", (xi, *d), INTRINSICS, points)
    assert valid.all()
    np.testing.assert_allclose(pixels, expected.reshape(-1, 2), atol=1e-6)


@pytest.mark.parametrize("alpha", [0.2, 0.57, 0.8])
def test_double_sphere_and_eucm_reduce_to_the_unified_model(alpha):
    """Usenko et al. 2018, Sec. 3: the double sphere with xi = 0 and the EUCM with beta = 1 are the
    unified model with xi' = alpha / (1 - alpha) and focal lengths f / (1 - alpha), checked here against
    cv2.omnidir."""
    rng = np.random.default_rng(6)
    xi_u = alpha / (1.0 - alpha)
    w = alpha / (1.0 - alpha) if alpha <= 0.5 else (1.0 - alpha) / alpha
    top = np.degrees(np.arccos(-w)) - 0.5  # inside the valid region, z > -w |p| (the paper's Eq. 43)
    points = random_directions(rng, 400, top) * rng.uniform(0.5, 30.0, (400, 1))
    fx, fy, cx, cy = INTRINSICS
    K = K_of((fx / (1.0 - alpha), fy / (1.0 - alpha), cx, cy))
    expected, _ = cv2.omnidir.projectPoints(points[None], np.zeros(3), np.zeros(3), K, xi_u, np.zeros((1, 4)))
    for lens, k in (("double-sphere", (0.0, alpha)), ("eucm", (alpha, 1.0))):
        pixels, valid = lenses.project(lens, k, INTRINSICS, points)
        assert valid.all(), lens
        np.testing.assert_allclose(pixels, expected.reshape(-1, 2), atol=1e-6, err_msg=lens)


def test_double_sphere_matches_the_papers_worked_equations():
    """Eq. 40-45 of Usenko, Demmel and Cremers 2018 for the calibrated BF2M2020S23 lens of their Table 1
    (fx 313.2, xi -0.18, alpha 0.59), written out here term by term."""
    fx, fy, cx, cy, xi, alpha = 313.21, 313.21, 638.45, 514.35, -0.18, 0.59
    rng = np.random.default_rng(7)
    points = random_directions(rng, 300, 95.0) * 3.0
    out = []
    for x, y, z in points:
        d1 = np.sqrt(x * x + y * y + z * z)
        d2 = np.sqrt(x * x + y * y + (xi * d1 + z) ** 2)
        denominator = alpha * d2 + (1 - alpha) * (xi * d1 + z)
        out.append((fx * x / denominator + cx, fy * y / denominator + cy))
    pixels, valid = lenses.project("double-sphere", (xi, alpha), (fx, fy, cx, cy), points)
    assert valid.all()
    np.testing.assert_allclose(pixels, out, atol=1e-9)
    rays = lenses.unproject("double-sphere", (xi, alpha), (fx, fy, cx, cy), pixels)
    np.testing.assert_allclose(rays, points / 3.0, atol=1e-9)


LENS_CASES = {
    "pinhole": (CameraModel.from_fov(64, 48, 80.0, distortion=(-0.2, 0.05, 0.001, -0.001, 0.0)), 40.0),
    "fisheye-200": (CameraModel.fisheye(64, 48, 200.0, distortion=(-0.01, 0.003, 0.0, 0.0)), 100.0),
    "unified": (CameraModel(64, 48, 40.0, 40.0, 31.5, 23.5, (0.8, -0.1, 0.01, 0.0, 0.0), lens="unified"), 100.0),
    "double-sphere": (CameraModel(64, 48, 22.0, 22.0, 31.5, 23.5, (-0.2, 0.6), lens="double-sphere"), 100.0),
    "eucm": (CameraModel(64, 48, 22.0, 22.0, 31.5, 23.5, (0.6, 1.1), lens="eucm", fov_deg=190.0), 95.0),
}


@pytest.mark.parametrize("name", LENS_CASES)
def test_every_pixels_ray_projects_back_to_its_pixel(name):
    camera, _ = LENS_CASES[name]
    rays = camera.ray_directions().reshape(-1, 3).astype(np.float64)
    seen = np.any(rays != 0.0, axis=1)
    assert seen.sum() > 0.5 * len(rays)
    u, v = np.meshgrid(np.arange(camera.width), np.arange(camera.height))
    pixels = np.stack([u.ravel(), v.ravel()], axis=1)
    back, valid = camera.project(rays[seen])
    assert valid.all()
    np.testing.assert_allclose(back, pixels[seen], atol=2e-3)  # float32 rays
    np.testing.assert_allclose(np.linalg.norm(rays[seen], axis=1), 1.0, atol=1e-6)


def test_a_200_degree_fisheye_sees_behind_its_image_plane_and_nothing_outside_its_circle():
    camera = CameraModel.fisheye(101, 101, 200.0)
    rays = camera.ray_directions().astype(np.float64)
    seen = np.any(rays != 0.0, axis=-1)
    u, v = np.meshgrid(np.arange(101) - 50.0, np.arange(101) - 50.0)
    radius = np.hypot(u, v)
    assert seen[radius <= 49.5].all() and not seen[radius >= 50.5].any()
    assert rays[seen][:, 2].min() == pytest.approx(np.cos(np.radians(100.0)), abs=0.02)


def render(camera, scene, T_WC, tracer):
    device, backend = tracer
    renderer = Renderer(DeviceScene(scene, device), [camera], RenderSettings(backend=backend))
    renderer.render(np.asarray([T_WC]))
    images = renderer.images()
    renderer.close()
    return images


@pytest.mark.parametrize("name", LENS_CASES)
def test_a_sphere_around_the_camera_reads_its_radius_in_every_pixel_the_lens_sees(name, tracer):
    """Depth through every wide lens is the range along the ray (REP 118's distance to the point); a
    pinhole's is z. Pixels outside the lens read NaN, black, segment 0."""
    camera, _ = LENS_CASES[name]
    radius = 10.0
    sphere = trimesh.creation.icosphere(subdivisions=6, radius=radius)
    sphere.apply_translation([1.0, -2.0, 3.0])
    images = render(
        camera,
        scene_of((sphere, 9)),
        camera_pose_from_body(transform([1.0, -2.0, 3.0], quat_from_euler(0.3, -0.2, 1.0))),
        tracer,
    )
    rays = camera.ray_directions().astype(np.float64)
    seen = np.any(rays != 0.0, axis=-1)
    # An icosphere's flat faces lie up to radius * (1 - cos(edge half-angle)) inside the sphere.
    assert np.all(images.segmentation[0][seen] == 9)
    np.testing.assert_allclose(images.range[0][seen], radius, atol=2e-3)
    expected_depth = radius * (rays[..., 2] if not camera.radial else 1.0)
    np.testing.assert_allclose(images.depth[0][seen], np.broadcast_to(expected_depth, seen.shape)[seen], atol=2e-3)
    assert np.all(np.isnan(images.depth[0][~seen])) and np.all(np.isnan(images.range[0][~seen]))
    assert np.all(images.segmentation[0][~seen] == 0) and np.all(images.rgb[0][~seen] == 0)


@pytest.mark.parametrize("name", ["fisheye-200", "double-sphere"])
def test_a_plane_below_a_downward_wide_lens(name, tracer):
    """A lens looking straight down from h: a ray at angle theta from the nadir meets the ground at
    range h / cos(theta); rays at or above the horizon (theta >= 90 degrees) read +inf."""
    assert name != "fisheye-200" or LENS_CASES[name][0].max_angle > np.pi / 2  # it sees above the horizon
    camera, _ = LENS_CASES[name]
    h = 2.5
    ground = quad([[-1e3, -1e3, 0.0], [1e3, -1e3, 0.0], [1e3, 1e3, 0.0], [-1e3, 1e3, 0.0]])
    T_WC = camera_pose_from_body(transform([0.3, 0.4, h], quat_from_euler(0.0, np.pi / 2, 0.0)))
    images = render(camera, scene_of((ground, 1)), T_WC, tracer)
    rays_W = camera.ray_directions().astype(np.float64) @ T_WC[:3, :3].T
    seen = np.any(rays_W != 0.0, axis=-1)
    down = seen & (rays_W[..., 2] < -0.05)  # the plane is 1 km wide: its edge subtends 0.14 degrees
    assert down.sum() > 100
    np.testing.assert_allclose(images.depth[0][down], h / -rays_W[..., 2][down], rtol=1e-4)  # float32 rays
    assert np.all(np.isposinf(images.depth[0][seen & (rays_W[..., 2] >= 0.0)]))


def test_a_camera_model_refuses_coefficients_its_lens_does_not_take():
    with pytest.raises(ConfigError, match="fisheye lens takes 4 finite coefficients"):
        CameraModel(64, 48, 40, 40, 32, 24, (0.1, 0.0, 0.0, 0.0, 0.0), lens="fisheye")
    with pytest.raises(ConfigError, match="double-sphere lens needs"):
        CameraModel(64, 48, 40, 40, 32, 24, (0.1, 1.5), lens="double-sphere")
    with pytest.raises(ConfigError, match="lens 'kb8'"):
        CameraModel(64, 48, 40, 40, 32, 24, (0.0,) * 4, lens="kb8")
    with pytest.raises(ConfigError, match="fov_deg"):
        CameraModel(64, 48, 40, 40, 32, 24, (0.0,) * 4, lens="fisheye", fov_deg=float("nan"))


def test_a_fisheye_polynomial_that_turns_back_images_only_its_rising_part():
    """theta_d = theta (1 - 0.9 theta^2 + 0.1 theta^4) stops growing where 1 - 2.7 theta^2 + 0.5 theta^4 = 0
    (theta^2 = 2.7 - sqrt(5.29), in closed form): pixels past that radius see nothing, none fold back."""
    camera = CameraModel(64, 48, 40.0, 40.0, 31.5, 23.5, (-0.9, 0.1, 0.0, 0.0), lens="fisheye")
    theta_top = np.sqrt(2.7 - np.sqrt(5.29))
    assert camera.max_angle == pytest.approx(theta_top, abs=1e-3)
    rays = camera.ray_directions().astype(np.float64)
    seen = np.any(rays != 0.0, axis=-1)
    u, v = np.meshgrid(np.arange(64) - 31.5, np.arange(48) - 23.5)
    reach = 40.0 * theta_top * (1 - 0.9 * theta_top**2 + 0.1 * theta_top**4)
    assert seen[np.hypot(u, v) < reach - 0.05].all() and not seen[np.hypot(u, v) > reach + 0.05].any()


def test_body_frame_rays_of_a_forward_fisheye_cover_the_hemisphere_behind_the_axis():
    """A 200-degree lens on a drone's nose sees 10 degrees behind its own side: the body frame's -x."""
    rays_B = CameraModel.fisheye(101, 101, 200.0).ray_directions().reshape(-1, 3).astype(np.float64) @ R_BODY_OPTICAL.T
    assert rays_B[:, 0].min() == pytest.approx(-np.sin(np.radians(10.0)), abs=0.02)


@pytest.mark.parametrize("xi_alpha", [(-0.2, 0.63), (-0.2, 0.61), (-0.15, 0.62), (0.3, 0.6), (0.5, 0.6)])
def test_a_tum_vi_like_double_sphere_camera_is_accepted_and_its_corners_are_exact(xi_alpha):
    """A TUM-VI-like 512x512 double-sphere calibration was refused: the paper's region (z > -w2 d1) is a
    sufficient bound only, and the corners' rays lie past it. Every pixel that has a ray projects back
    onto itself through the paper's eq. 40-45 written out here, including pixels whose rays lie past the
    bound; pixels whose rays would not come back have none."""
    xi, alpha = xi_alpha
    fx, fy, cx, cy = 158.28, 158.27, 254.96, 256.89
    camera = CameraModel(512, 512, fx, fy, cx, cy, xi_alpha, lens="double-sphere")
    rays = camera.ray_directions().reshape(-1, 3).astype(np.float64)
    seen = np.any(rays != 0.0, axis=1)
    assert seen.mean() > 0.95
    x, y, z = (rays[seen] / np.linalg.norm(rays[seen], axis=1, keepdims=True)).T
    d1 = np.sqrt(x * x + y * y + z * z)
    d2 = np.sqrt(x * x + y * y + (xi * d1 + z) ** 2)
    denominator = alpha * d2 + (1 - alpha) * (xi * d1 + z)
    u, v = np.meshgrid(np.arange(512.0), np.arange(512.0))
    pixels = np.stack([u.ravel(), v.ravel()], axis=1)[seen]
    np.testing.assert_allclose(
        np.stack([fx * x / denominator + cx, fy * y / denominator + cy], axis=1), pixels, atol=1e-4
    )
    w1 = alpha / (1 - alpha) if alpha <= 0.5 else (1 - alpha) / alpha
    w2 = (w1 + xi) / np.sqrt(2 * w1 * xi + xi * xi + 1)
    past_the_bound = z <= -w2 * d1
    assert past_the_bound.any() or xi > 0  # for xi < 0 the corners are where the bound was too strict
