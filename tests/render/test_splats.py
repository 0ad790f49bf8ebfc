"""Gaussian splats rendered against closed forms and independent references: a Gaussian's image (its
sigma f·s/Z and its EWA-projected covariance, Zwicker et al. 2001), spherical harmonics against gsplat's
PyTorch reference, front-to-back compositing, meshes and splats hiding each other, stereo, LiDAR."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from goggles.frames import camera_pose_from_body, quat_from_euler, quat_to_matrix, transform
from goggles.render import CameraModel, Renderer, RenderSettings, Shading, stereo_right_offset
from goggles.scene.splats import SH_C0, SplatCloud
from goggles.world import DeviceScene
from goggles.world.splats import DeviceSplats, trace_rays
from tests.conftest import quad, scene_of


def cloud(
    positions, scales, rotations=None, opacity=None, colours=None, sh=None, segment=5, screen_filter="3dgs"
) -> SplatCloud:
    positions = np.asarray(positions, np.float32).reshape(-1, 3)
    n = len(positions)
    if sh is None:
        colours = np.ones((n, 3)) if colours is None else np.asarray(colours, float).reshape(n, 3)
        sh = ((colours - 0.5) / SH_C0)[:, None, :]
    rotations = np.tile([1.0, 0, 0, 0], (n, 1)) if rotations is None else np.asarray(rotations, float).reshape(n, 4)
    return SplatCloud(
        positions,
        np.asarray(scales, np.float32).reshape(n, 3),
        rotations.astype(np.float32),
        np.full(n, 0.8, np.float32) if opacity is None else np.asarray(opacity, np.float32).reshape(n),
        np.asarray(sh, np.float32),
        np.full(n, segment, np.int32),
        np.zeros(n, np.int32),
        np.eye(3, dtype=np.float32)[None],
    ).filtered(screen_filter)


def nothing():
    """A mesh no ray meets (one triangle far below): the background is black."""
    return quad([[0, 0, -1e5], [1, 0, -1e5], [1, 1, -1e5], [0, 1, -1e5]])


@pytest.fixture(params=["rays", "raster"])
def splat_pass(request) -> str:
    """Both ways a renderer composites splats: each pixel's ray traced, and 3DGS's rasteriser."""
    return request.param


def render(
    splats, device, camera, T_WC, meshes=None, outputs=("rgb", "depth", "segmentation"), partner=None, how="auto"
):
    scene = dataclasses.replace(scene_of(*(meshes or [(nothing(), 1)])), splats=splats)
    settings = RenderSettings(
        outputs=set(outputs), shading=Shading.UNLIT, background_rgb=(0.0, 0.0, 0.0), splat_pass=how
    )
    renderer = Renderer(DeviceScene(scene, device), [camera] * len(T_WC), settings, shadow_partner=partner)
    renderer.render(np.stack(T_WC))
    images = renderer.images()
    renderer.close()
    return images


def moments(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v, u = np.mgrid[: weights.shape[0], : weights.shape[1]]
    total = weights.sum()
    mean = np.array([(u * weights).sum(), (v * weights).sum()]) / total
    du, dv = u - mean[0], v - mean[1]
    cov = np.array([[(du * du * weights).sum(), (du * dv * weights).sum()], [0.0, (dv * dv * weights).sum()]])
    cov[1, 0] = cov[0, 1]
    return mean, cov / total


def truncated(opacity: float) -> float:
    """A 2D Gaussian's second moments cut where it falls under 1/255 (Mahalanobis radius k, k^2 = 2
    ln(255 opacity)), over its whole ones: 1 - (k^2 / 2) e^(-k^2/2) / (1 - e^(-k^2/2))."""
    half_k2 = np.log(255.0 * opacity)
    return 1.0 - half_k2 * np.exp(-half_k2) / (1.0 - np.exp(-half_k2))


@pytest.mark.parametrize("screen_filter", ["none", "3dgs"])
def test_an_isotropic_gaussian_head_on_is_a_2d_gaussian_of_sigma_f_s_over_z(device, screen_filter, splat_pass):
    """Seen head-on at distance Z, a Gaussian of standard deviation s images as exp(-r^2 / 2 sigma^2) of
    sigma = f s / Z pixels, peaking at its opacity (a white one on black: the image is its alpha); with
    3DGS's screen-space filter sigma^2 grows by 0.3 px^2 and the peak stays (Kerbl et al. 2023)."""
    camera = CameraModel.from_fov(121, 121, 30.0)
    Z, s, opacity = 6.0, 0.05, 0.7
    splat = cloud([[Z, 0, 0]], [[s, s, s]], opacity=[opacity], screen_filter=screen_filter)
    images = render(splat, device, camera, [camera_pose_from_body(np.eye(4))], how=splat_pass)
    alpha = images.rgb[0][..., 0].astype(float) / 255.0
    assert alpha[60, 60] == pytest.approx(opacity, abs=1.0 / 255)
    _, cov = moments(alpha)
    sigma = np.sqrt((camera.fx * s / Z) ** 2 + {"none": 0.0, "3dgs": 0.3}[screen_filter])  # ~1.9 px
    sigma *= np.sqrt(truncated(opacity))
    assert np.sqrt(cov[0, 0]) == pytest.approx(sigma, rel=0.02)
    assert np.sqrt(cov[1, 1]) == pytest.approx(sigma, rel=0.02) and abs(cov[0, 1]) < 0.02 * sigma**2


def test_a_rotated_anisotropic_gaussian_images_as_its_ewa_projected_covariance(device, splat_pass):
    """J W Sigma W^T J^T + 0.3 I (EWA splatting and 3DGS's filter): W the world-to-camera rotation, J the
    perspective Jacobian at the mean; the rendered alpha's second moments agree within 2 %."""
    camera = CameraModel.from_fov(161, 121, 40.0)
    q = quat_from_euler(0.4, -0.3, 0.9)
    mean, scales = np.array([8.0, 0.3, -0.2]), np.array([0.12, 0.03, 0.06])
    T_WC = camera_pose_from_body(transform([0.0, 0.0, 0.0], quat_from_euler(0.0, 0.02, -0.03)))
    images = render(cloud([mean], [scales], [q], opacity=[0.9]), device, camera, [T_WC], how=splat_pass)
    alpha = images.rgb[0][..., 0].astype(float) / 255.0
    centre, cov = moments(alpha)
    R = quat_to_matrix(q)
    sigma_W = R @ np.diag(scales**2) @ R.T
    W = T_WC[:3, :3].T
    x, y, z = W @ (mean - T_WC[:3, 3])
    J = np.array([[camera.fx / z, 0.0, -camera.fx * x / z**2], [0.0, camera.fy / z, -camera.fy * y / z**2]])
    expected = J @ W @ sigma_W @ W.T @ J.T + 0.3 * np.eye(2)  # 3DGS's screen-space filter
    expected *= truncated(0.9)
    assert np.linalg.norm(cov - expected) / np.linalg.norm(expected) < 0.02
    np.testing.assert_allclose(centre, [camera.fx * x / z + camera.cx, camera.fy * y / z + camera.cy], atol=0.1)


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_spherical_harmonic_colours_match_gsplats_reference(device, degree):
    """The colour of a Gaussian seen from a direction: gsplat's pure-PyTorch SH (plus 0.5, clamped at 0),
    in the frame of the file it came from (a placed splat turns its colours with it)."""
    torch = pytest.importorskip("torch")
    reference = pytest.importorskip("gsplat.cuda._torch_impl")
    rng = np.random.default_rng(degree)
    coefficients = rng.normal(0.0, 0.3, (1, (degree + 1) ** 2, 3)).astype(np.float32)
    local = cloud([[0.0, 0.0, 0.0]], [[0.05, 0.05, 0.05]], opacity=[0.9], sh=coefficients)
    turn = np.eye(4)
    turn[:3, :3] = quat_to_matrix(quat_from_euler(0.3, 0.5, -1.2))
    turn[:3, 3] = [1.0, 2.0, 3.0]
    placed = local.placed(turn, 1.0, 5)
    splats = DeviceSplats(placed, device)
    directions = rng.normal(size=(40, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    origins = placed.positions[0] - 3.0 * directions  # each ray through the mean
    traced = trace_rays(splats, origins.astype(np.float32), directions.astype(np.float32))
    colour = traced["rgb"] / (1.0 - traced["transmittance"])[:, None]
    in_file = directions @ turn[:3, :3]  # world to file frame: R^T d
    expected = reference._spherical_harmonics(
        degree, torch.tensor(in_file, dtype=torch.float32), torch.tensor(np.repeat(coefficients, 40, axis=0))
    )
    expected = torch.clamp_min(expected + 0.5, 0.0).numpy()
    np.testing.assert_allclose(colour, expected, atol=2e-5)


def test_two_overlapping_gaussians_blend_front_to_back(device):
    """C = c1 a1 + c2 a2 (1 - a1), T = (1 - a1)(1 - a2), and the depth where opacity passes one half."""
    red, green = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    pair = cloud([[4.0, 0, 0], [6.0, 0, 0]], [[0.2] * 3] * 2, opacity=[0.4, 0.7], colours=[red, green])
    splats = DeviceSplats(pair, device)
    traced = trace_rays(splats, np.zeros((1, 3), np.float32), np.array([[1.0, 0.0, 0.0]], np.float32))
    np.testing.assert_allclose(traced["rgb"][0], [0.4, 0.7 * 0.6, 0.0], atol=1e-6)
    assert traced["transmittance"][0] == pytest.approx(0.6 * 0.3, abs=1e-6)
    assert traced["t_half"][0] == pytest.approx(6.0, abs=1e-5)  # 0.4 after the first, 0.82 after the second
    behind = trace_rays(splats, np.array([[10.0, 0.0, 0.0]], np.float32), np.array([[-1.0, 0.0, 0.0]], np.float32))
    np.testing.assert_allclose(behind["rgb"][0], [0.4 * 0.3, 0.7, 0.0], atol=1e-6)  # the other way round


def test_a_mesh_plane_through_a_splat_cloud_cuts_it_at_the_planes_depth(device, splat_pass):
    """A cloud of small Gaussians from x = 4 to 6 and a plane at x = 5: the image is that of the cloud's
    front half and the plane alone (the Gaussians behind it add nothing), and every depth is at most
    the plane's, the cloud's where its front half lets less than half the light through."""
    rng = np.random.default_rng(3)
    n = 4000
    depth = np.where(rng.uniform(size=n) < 0.5, rng.uniform(4.0, 4.9, n), rng.uniform(5.1, 6.0, n))  # none on it
    positions = np.column_stack([depth, rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)])
    colours = rng.uniform(0.0, 1.0, (n, 3))
    everything = cloud(positions, np.full((n, 3), 0.01), opacity=np.full(n, 0.9), colours=colours)
    front = positions[:, 0] < 5.0
    front_half = cloud(
        positions[front], np.full((front.sum(), 3), 0.01), opacity=np.full(front.sum(), 0.9), colours=colours[front]
    )
    plane = quad([[5.0, 3, -3], [5.0, -3, -3], [5.0, -3, 3], [5.0, 3, 3]])
    camera = CameraModel.from_fov(64, 64, 20.0)
    T_WC = camera_pose_from_body(np.eye(4))
    cut = render(everything, device, camera, [T_WC], meshes=[(plane, 2)], how=splat_pass)
    halved = render(front_half, device, camera, [T_WC], meshes=[(plane, 2)], how=splat_pass)
    np.testing.assert_array_equal(cut.rgb, halved.rgb)
    assert np.all(cut.depth[0] <= 5.0 + 1e-4) and np.any(cut.segmentation[0] == 2) and np.any(cut.segmentation[0] == 5)
    assert np.all(cut.depth[0][cut.segmentation[0] == 5] < 5.0)
    whole = render(everything, device, camera, [T_WC], how=splat_pass)  # without the plane, the back half shows too
    assert np.any(whole.depth[0] > 5.0)


def test_an_opaque_splat_hides_the_mesh_behind_and_a_mesh_in_front_hides_the_splat(device, splat_pass):
    grid = np.stack(np.meshgrid(np.linspace(-1.5, 1.5, 61), np.linspace(-1.5, 1.5, 61)), -1).reshape(-1, 2)
    sheet = cloud(
        np.column_stack([np.full(len(grid), 3.0), grid]),
        np.full((len(grid), 3), 0.05),
        opacity=np.full(len(grid), 0.95),
    )
    camera = CameraModel.from_fov(48, 48, 20.0)
    T_WC = camera_pose_from_body(np.eye(4))
    wall = quad([[6.0, 3, -3], [6.0, -3, -3], [6.0, -3, 3], [6.0, 3, 3]])
    images = render(sheet, device, camera, [T_WC], meshes=[(wall, 2)], how=splat_pass)
    assert np.all(images.segmentation[0] == 5)
    np.testing.assert_allclose(images.depth[0], 3.0, atol=0.05)
    crate = quad([[2.0, 3, -3], [2.0, -3, -3], [2.0, -3, 3], [2.0, 3, 3]])
    images = render(sheet, device, camera, [T_WC], meshes=[(wall, 2), (crate, 4)], how=splat_pass)
    assert np.all(images.segmentation[0] == 4)
    np.testing.assert_allclose(images.depth[0], 2.0, atol=1e-4)


def test_a_stereo_pair_sees_a_splat_sheet_at_f_b_over_z(device, splat_pass):
    grid = np.stack(np.meshgrid(np.linspace(-3, 3, 121), np.linspace(-3, 3, 121)), -1).reshape(-1, 2)
    rng = np.random.default_rng(0)
    sheet = cloud(
        np.column_stack([np.full(len(grid), 4.0), grid]),
        np.full((len(grid), 3), 0.05),
        opacity=np.full(len(grid), 0.95),
        colours=rng.uniform(0, 1, (len(grid), 3)),
    )
    camera = CameraModel.from_fov(96, 64, 40.0)
    shift = 5  # pixels: the baseline that makes the disparity f B / Z whole
    T_L = camera_pose_from_body(np.eye(4))
    poses = [T_L, T_L @ stereo_right_offset(shift * 4.0 / camera.fx)]
    images = render(sheet, device, camera, poses, outputs=("rgb", "depth"), partner=[1, -1], how=splat_pass)
    valid = np.isfinite(images.depth[0])
    assert valid.mean() > 0.8
    np.testing.assert_allclose(images.depth[0][valid], 4.0, atol=0.06)  # the sheet's Gaussians are 5 cm thick
    np.testing.assert_allclose(images.depth[1], 4.0, atol=0.06)
    left, right = images.rgb[0].astype(int), images.rgb[1].astype(int)  # the right image: the left shifted by f B / Z
    # Each eye sees each Gaussian's largest response along its own rays: a few levels apart.
    assert np.median(np.abs(left[:, shift + 5 : -5] - right[:, 5 : -5 - shift])) <= 2.0


def test_a_lidar_beam_stops_where_the_splats_opacity_passes_one_half(device):
    from goggles.rig import parts
    from goggles.sensors.lidar import VLP16

    ring = np.linspace(0, 2 * np.pi, 2000, endpoint=False)
    heights = np.linspace(-3, 3, 121)
    angle, z = np.meshgrid(ring, heights)
    positions = np.column_stack([5.0 * np.cos(angle.ravel()), 5.0 * np.sin(angle.ravel()), z.ravel()])
    wall = cloud(positions, np.full((len(positions), 3), 0.05), opacity=np.full(len(positions), 0.95))
    scene = dataclasses.replace(scene_of((nothing(), 1)), splats=wall)
    lidar = parts.lidar(DeviceScene(scene, device), VLP16)
    scan = lidar.scan(np.eye(4), np.eye(4))
    lidar.close()
    hit = np.isfinite(scan.range)
    assert hit.mean() > 0.95
    horizontal = scan.range * np.hypot(scan.directions[..., 0], scan.directions[..., 1])  # to the ring's axis
    off = np.abs(horizontal[hit] - 5.0)  # the wall's Gaussians are 5 cm: their hits lie within a few of that
    assert np.median(off) < 0.03 and np.quantile(off, 0.99) < 0.1 and off.max() < 0.2


def test_a_textured_mesh_made_into_a_splat_renders_as_the_mesh(device, tmp_path, splat_pass):
    """The YCB mug (a real textured scan) sampled into 100,000 flat Gaussians (``goggles splat
    from-mesh``) against the mesh itself, unlit, from four sides: PSNR over the mug's pixels 27.3-28.3
    dB when measured (300,000 Gaussians: 29.5-30.2); the check holds it above 26."""
    from goggles.paths import assets_dir
    from goggles.scene import load_static_scene
    from goggles.scene.mesh_splats import mesh_splats
    from goggles.scene.splats import read_splat_file, write_splat_ply

    mesh = load_static_scene(assets_dir() / "ycb-025-mug" / "textured.obj")
    splat = mesh_splats(mesh, 100_000)
    low, high = mesh.bounds()
    centre, size = (low + high) / 2.0, float(np.max(high - low))
    camera = CameraModel.from_fov(160, 120, 50.0)
    poses = []
    for i in range(4):
        yaw = np.pi / 2 * i + 0.3
        eye = centre + 1.3 * size * np.array([-np.cos(yaw), -np.sin(yaw), 0.5])
        poses.append(camera_pose_from_body(transform(eye, quat_from_euler(0.0, np.arctan2(0.5, 1.0), yaw))))
    outputs = ("rgb", "segmentation")
    meshed = render(None, device, camera, poses, meshes=[(mesh_trimesh(mesh), 3)], outputs=outputs, how=splat_pass)
    splatted = render(splat, device, camera, poses, outputs=outputs, how=splat_pass)
    for i in range(4):
        on = (meshed.segmentation[i] > 0) | (splatted.segmentation[i] > 0)
        error = (meshed.rgb[i].astype(float) - splatted.rgb[i].astype(float))[on]
        psnr = 10.0 * np.log10(255.0**2 / np.mean(error**2))
        assert psnr > 26.0, (i, psnr)
    # What goggles writes, gsplat and the others read: the PLY round trip keeps every Gaussian.
    back = read_splat_file(write_splat_ply(splat, tmp_path / "mug.ply"))
    np.testing.assert_allclose(back.positions, splat.positions)
    np.testing.assert_allclose(back.opacity, splat.opacity, rtol=1e-5)


def mesh_trimesh(scene):
    """The static scene as one textured trimesh (its first texture over its corner uvs)."""
    import trimesh
    from PIL import Image

    faces = np.arange(scene.num_faces * 3).reshape(-1, 3)
    mesh = trimesh.Trimesh(scene.vertices[scene.faces].reshape(-1, 3), faces, process=False)
    material = trimesh.visual.material.SimpleMaterial(image=Image.fromarray(scene.textures[0]))
    mesh.visual = trimesh.visual.TextureVisuals(uv=scene.corner_uv.reshape(-1, 2), material=material)
    return mesh
