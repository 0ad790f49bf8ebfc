"""The sun's shadows against the closed form: a post on a plane, seen from above, shadows exactly the
ground points whose ray to the sun meets the post; shadowed ground keeps the ambient light."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from goggles.frames import camera_pose_from_body, quat_from_axis_angle, transform
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.render.embree import embree_available
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
    assert_post_shadow(*tracer)


@pytest.mark.skipif(not embree_available(), reason="embreex is not installed")
def test_embree_single_rays_cast_the_same_shadow(monkeypatch):
    """Where Embree's packets cannot be built, its single rays trace the sun's rays too."""
    from goggles.render import embree

    monkeypatch.setattr(embree, "_packets", ["no packets in this test"])
    assert_post_shadow("cpu", "embree")


def assert_post_shadow(device: str, backend: str) -> None:
    post = trimesh.creation.box(extents=POST_HIGH - POST_LOW)
    post.apply_translation((POST_LOW + POST_HIGH) / 2)
    ground = quad([[-20, -20, 0], [20, -20, 0], [20, 20, 0], [-20, 20, 0]])
    world = DeviceScene(scene_of((ground, 1), (post, 2)), device)
    camera = CameraModel.from_fov(200, 200, 50.0)
    looking_down = transform([-0.6, -0.3, 5.0], quat_from_axis_angle([0, 1, 0], np.pi / 2))
    T_WC = camera_pose_from_body(looking_down)
    renderer = Renderer(world, [camera], RenderSettings(backend=backend, shading=Shading.SUN, sun_W=SUN, ambient=0.3))
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
    flat = Renderer(world, [camera], RenderSettings(shadows=False, sun_W=SUN))
    flat.render(T_WC)
    sky = Renderer(world, [camera], RenderSettings(sun_W=SUN, background_rgb=(0.6, 0.7, 0.9), sky_rgb=(0.2, 0.3, 0.8)))
    sky.render(T_WC)
    top, horizon = sky.images().rgb[0][0, 32], sky.images().rgb[0][31, 32]
    assert top[2] < horizon[2] and top[0] < horizon[0]  # towards the zenith's colour, up the image
    assert np.all(flat.images().rgb[0][0] == flat.images().rgb[0][0, 0])  # a uniform background
    flat.close()
    sky.close()
    with pytest.raises(TypeError):
        Renderer(world, [camera], RenderSettings(shadows=False, sky=True))


def bumpy_world(device):
    """A rough heightfield (bumps of a few centimetres and a ridge) with a post, a box overhanging the
    ground and a sphere: shadows of every kind, and many faces no shadow can reach."""
    rng = np.random.default_rng(7)
    n = 60
    x, y = np.meshgrid(np.linspace(-6, 6, n), np.linspace(-6, 6, n))
    z = 0.06 * rng.standard_normal((n, n)) + 0.4 * np.exp(-((x - 2.0) ** 2) / 0.5)
    vertices = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    cell = np.arange(n - 1)[:, None] * n + np.arange(n - 1)[None, :]
    a, b, c, d = cell.ravel(), cell.ravel() + 1, cell.ravel() + n + 1, cell.ravel() + n
    ground = trimesh.Trimesh(vertices, np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)]), process=False)
    post = trimesh.creation.box(extents=POST_HIGH - POST_LOW)
    post.apply_translation((POST_LOW + POST_HIGH) / 2)
    shelf = trimesh.creation.box(extents=[1.5, 1.0, 0.05])
    shelf.apply_translation([-2.5, 2.0, 0.8])
    ball = trimesh.creation.icosphere(subdivisions=3, radius=0.6)
    ball.apply_translation([-2.0, -2.5, 0.7])
    return DeviceScene(scene_of((ground, 1), (post, 2), (shelf, 3), (ball, 4)), device)


@pytest.mark.parametrize("with_actor", [False, True], ids=["static", "actor"])
def test_faces_found_sunlit_render_as_if_every_shadow_ray_were_traced(device, monkeypatch, with_actor):
    """A pixel on a face that no static geometry can shade skips its static shadow ray
    (``goggles.render.sunlit``): the images are byte for byte those of a render that traces every ray,
    an actor's shadow still falls on such faces, and most of the rough ground is found lit."""
    import warp as wp

    import goggles.render.renderer as renderer_module
    from goggles.render import sunlit
    from goggles.scene.actors import box_shape

    world = bumpy_world(device)
    if with_actor:  # a floating crate over the ground, shadowing faces the table calls lit
        shape = world.add_shape(box_shape("crate", (1.6, 1.6, 0.3)))
        world.set_actors([shape], transform([1.0, -1.0, 1.2], [1, 0, 0, 0])[None])
    camera = CameraModel.from_fov(160, 120, 70.0)
    views = [
        transform([-7.0, -1.0, 3.0], quat_from_axis_angle([0, 1, 0], 0.35)),
        transform([0.0, 0.0, 6.0], quat_from_axis_angle([0, 1, 0], np.pi / 2)),
        transform([4.0, 5.0, 2.0], quat_from_axis_angle([0, 0, 1], -2.2)),
    ]
    T_WC = np.stack([camera_pose_from_body(T) for T in views])
    levels = sunlit.sunlit_faces(world, SUN).numpy()
    assert 0.4 < np.mean(levels > 0) < 1.0 and np.mean(levels == len(sunlit.MARGINS)) > 0.05
    # Independently (trimesh): nothing lies over a face found lit, higher than the table allows (0.5 mm).
    static = world.static
    mesh = trimesh.Trimesh(static.vertices, static.faces, process=False)
    rng = np.random.default_rng(3)
    lit = np.flatnonzero(levels > 0)
    weights = rng.dirichlet(np.ones(3), size=(len(lit), 8))  # 8 points on each
    points = np.einsum("fkc,fcx->fkx", weights, static.vertices[static.faces[lit]]).reshape(-1, 3)
    assert not mesh.ray.intersects_any(points + 0.6e-3 * SUN, np.tile(SUN, (len(points), 1))).any()

    def render():
        renderer = Renderer(world, [camera] * 3, RenderSettings(shading=Shading.SUN, sun_W=SUN, ambient=0.3))
        renderer.render(T_WC)
        images = renderer.images()
        renderer.close()
        return images

    fast = render()
    none_lit = lambda scene, sun: wp.zeros(scene.num_faces, dtype=wp.int8, device=scene.device)  # noqa: E731
    monkeypatch.setattr(renderer_module, "sunlit_faces", none_lit)
    traced = render()
    np.testing.assert_array_equal(fast.rgb, traced.rgb)
    on_static = (fast.status == 0) & (fast.face >= 0) & (fast.face < world.num_faces)
    assert np.mean(levels[fast.face[on_static]] > 0) > 0.3  # the table was used, not only kept
    grey = fast.rgb.astype(float).mean(axis=-1)
    assert (grey[on_static] < 0.6 * grey[on_static].max()).sum() > 500  # real shadows in view
    if with_actor:  # the crate's shadow (a slab test from each hit) falls on faces the table calls lit
        on_lit = on_static & (levels[np.clip(fast.face, 0, len(levels) - 1)] > 0)
        rays_W = np.einsum("nij,hwj->nhwi", T_WC[:, :3, :3], camera.ray_directions())
        points = (T_WC[:, None, None, :3, 3] + rays_W * fast.range[..., None])[on_lit]
        low, high = np.array([0.2, -1.8, 1.05]), np.array([1.8, -0.2, 1.35])
        t0, t1 = (low - points) / SUN, (high - points) / SUN
        in_shadow = np.maximum(np.minimum(t0, t1).max(axis=1), 0.0) <= np.maximum(t0, t1).min(axis=1)
        assert in_shadow.sum() > 50
