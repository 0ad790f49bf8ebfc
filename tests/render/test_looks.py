"""Looks: each camera's own sun, ambient, sky, albedo, swapped texture and exposure, read by the render
kernel from per-camera arrays. Checked against geometry (a pole's shadow from a slab test in NumPy),
the lighting's closed form, and the scene's own look (the same bytes as a renderer without looks)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from goggles.bench.measure import bench_views
from goggles.errors import ConfigError
from goggles.frames import camera_pose_from_body, transform
from goggles.paths import default_scene
from goggles.render import CameraModel, Renderer, RenderSettings
from goggles.render.looks import Look, LooksSpec, sun_angles, sun_direction
from goggles.scene import load_static_scene
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

#: The pole's half width and height, metres.
HALF, HEIGHT = 0.5, 3.0


def _box(lower, upper):
    import trimesh

    box = trimesh.creation.box(extents=np.subtract(upper, lower))
    box.apply_translation(np.add(lower, upper) / 2)
    return box


def _pole_scene():
    ground = quad([[-50, -50, 0], [50, -50, 0], [50, 50, 0], [-50, 50, 0]])
    return scene_of((ground, 1), (_box([-HALF, -HALF, 0.0], [HALF, HALF, HEIGHT]), 2))


def _default_views(n: int):
    scene = load_static_scene(default_scene())
    return scene, np.asarray([camera_pose_from_body(T) for T in bench_views(scene.view, n)])


def _default_world(tracer, n: int):
    """The default scene on the tracer's device, a 96x72 camera and ``n`` views of it; the backend."""
    device, backend = tracer
    scene, T_WC = _default_views(n)
    return DeviceScene(scene, device), CameraModel.from_fov(96, 72, 70.0), T_WC, backend


def test_the_scenes_own_look_is_the_same_bytes_as_a_renderer_without_looks(tracer):
    world, camera, T_WC, backend = _default_world(tracer, 3)
    plain = Renderer(world, [camera] * 3, RenderSettings(backend=backend))
    looked = Renderer(world, [camera] * 3, RenderSettings(backend=backend, looks=True))
    looked.set_looks([Look()] * 3)
    for r in (plain, looked):
        r.render(T_WC)
    a, b = plain.images(), looked.images()
    np.testing.assert_array_equal(a.rgb, b.rgb)
    np.testing.assert_array_equal(a.depth, b.depth)
    for r in (plain, looked):
        r.close()


def _shadowed_by_pole(points: np.ndarray, sun: np.ndarray) -> np.ndarray:
    """Does the ray from each ground point towards the sun pass through the pole (a slab test)?"""
    lower, upper = np.array([-HALF, -HALF, 0.0]), np.array([HALF, HALF, HEIGHT])
    with np.errstate(divide="ignore", invalid="ignore"):
        t0, t1 = (lower - points) / sun, (upper - points) / sun
    near = np.nanmax(np.minimum(t0, t1), axis=-1)
    far = np.nanmin(np.maximum(t0, t1), axis=-1)
    return (far >= np.maximum(near, 0.0)) & (far > 0)


def test_the_sun_of_each_look_casts_the_poles_shadow_where_geometry_says(tracer):
    """A camera 12 m over a 3 m pillar, two looks with two suns: each ground pixel is dark exactly where
    the ray from its point to that look's sun meets the pole, and its brightness is the closed form's."""
    device, backend = tracer
    world = DeviceScene(_pole_scene(), device)
    camera = CameraModel.from_fov(160, 160, 60.0)
    down = transform([0.0, 0.0, 12.0], [math.cos(math.pi / 4), 0.0, math.sin(math.pi / 4), 0.0])  # body x down
    T_WC = np.asarray([camera_pose_from_body(down)] * 2)
    settings = RenderSettings(backend=backend, looks=True, ambient=0.4)
    renderer = Renderer(world, [camera] * 2, settings)
    suns = [(45.0, 90.0, 1.0), (30.0, 0.0, 0.8)]  # elevation, bearing, intensity
    renderer.set_looks([Look(sun_W=sun_direction(e, a), sun_intensity=i) for e, a, i in suns])
    renderer.render(T_WC)
    images = renderer.images()
    rays = camera.ray_directions().astype(np.float64)
    for k, (elevation, bearing, intensity) in enumerate(suns):
        sun = np.asarray(sun_direction(elevation, bearing))
        ground = images.segmentation[k] == 1
        points = T_WC[k, :3, 3] + (rays * images.range[k][..., None]) @ T_WC[k, :3, :3].T
        expected = _shadowed_by_pole(points, sun)
        # Away from the shadow's edge (a pixel is 9 cm across here): the same answer as geometry.
        edge = np.zeros_like(expected)
        for dx, dy in ((0.08, 0), (-0.08, 0), (0, 0.08), (0, -0.08)):
            edge |= _shadowed_by_pole(points + [dx, dy, 0.0], sun) != expected
        grey = images.rgb[k].astype(float).mean(axis=-1)
        albedo = (
            grey[ground & ~expected & ~edge].max() / 255.0 / (0.4 + 0.6 * intensity * math.sin(math.radians(elevation)))
        )
        lit_level = 255 * albedo * (0.4 + 0.6 * intensity * math.sin(math.radians(elevation)))
        dark_level = 255 * albedo * 0.4
        judged = ground & ~edge
        dark = grey < (lit_level + dark_level) / 2
        assert np.count_nonzero(expected & judged) > 150  # the shadow is long enough to judge
        assert np.array_equal(dark[judged], expected[judged])
        np.testing.assert_allclose(grey[judged & expected], dark_level, atol=1.0)
        # The shadow points away from the sun: its far end lies along -sun's bearing, L = h / tan(elevation).
        along = -(points[..., :2] @ sun[:2]) / np.linalg.norm(sun[:2])
        length = HEIGHT / math.tan(math.radians(elevation))
        assert along[judged & expected].max() == pytest.approx(HALF + length, abs=0.2)  # less the edge band
    renderer.close()


def test_a_swapped_texture_and_albedo_change_colour_only(tracer):
    world, camera, T_WC, backend = _default_world(tracer, 2)
    plain = Renderer(world, [camera] * 2, RenderSettings(backend=backend))
    looked = Renderer(world, [camera] * 2, RenderSettings(backend=backend, looks=True))
    m = looked.look_materials
    checker = np.kron((np.indices((8, 8)).sum(axis=0) % 2) * 255, np.ones((8, 8)))[..., None].repeat(3, -1)
    looks = [Look(texture=np.zeros(m, np.int32)), Look(albedo=np.tile([0.2, 1.0, 0.5], (m, 1)))]
    looked.set_looks(looks, [checker.astype(np.uint8)])
    for r in (plain, looked):
        r.render(T_WC)
    a, b = plain.images(), looked.images()
    for name in ("depth", "segmentation", "normal_W", "face", "status"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    hit = a.status == 0
    for k in range(2):
        changed = np.any(a.rgb[k] != b.rgb[k], axis=-1)
        assert changed[hit[k]].mean() > 0.9
        assert not changed[~hit[k] & (a.status[k] != 0)].any()  # the sky is the same
    # The albedo factor: red to a fifth, green as it was, blue to a half (bytes round).
    lit = hit[1]
    for channel, factor in enumerate((0.2, 1.0, 0.5)):
        np.testing.assert_allclose(b.rgb[1][lit][:, channel], factor * a.rgb[1][lit][:, channel], atol=1.01)
    for r in (plain, looked):
        r.close()


def test_exposure_gain_and_sky_scale_what_the_camera_sees(tracer):
    world, camera, T_WC, backend = _default_world(tracer, 1)
    renderer = Renderer(world, [camera] * 3, RenderSettings(backend=backend, looks=True))
    spec = LooksSpec.from_table({"exposure": {"uniform": [0.5, 0.5]}, "gain_db": {"uniform": [-6.0206, -6.0206]}})
    quarter = spec.draw(seed=1, stream=0, episode=0, materials=renderer.look_materials)
    assert quarter.exposure == pytest.approx(0.25, rel=1e-4)
    renderer.set_looks([Look(), quarter, Look(sky=(0.5, 1.0, 0.0))])
    renderer.render(np.repeat(T_WC, 3, axis=0))
    rgb = renderer.images().rgb.astype(float)
    np.testing.assert_allclose(rgb[1], rgb[0] / 4, atol=1.01)
    sky = renderer.images().status[0] != 0
    np.testing.assert_allclose(rgb[2][sky], rgb[0][sky] * [0.5, 1.0, 0.0], atol=1.01)
    np.testing.assert_array_equal(rgb[2][~sky], rgb[0][~sky])
    renderer.close()


def test_a_spec_draws_the_same_looks_for_the_same_seed_and_stream_and_others_for_others():
    spec = LooksSpec.from_table(
        {
            "sun_elevation_deg": {"uniform": [10.0, 80.0]},
            "albedo": {"normal": [1.0, 0.3]},
            "capture_tint": {"uniform": [0.8, 1.2]},
        }
    )
    bright = LooksSpec.from_table({"brightness": {"uniform": [0.5, 1.5]}}).draw(7, 3, 0, 4).albedo
    assert bright.shape == (4, 3) and np.all(bright == bright[:, :1]) and len(set(bright[:, 0])) == 4
    a, b = spec.draw(7, 3, 0, 5), spec.draw(7, 3, 0, 5)
    assert a.sun_W == b.sun_W and np.array_equal(a.albedo, b.albedo) and a.capture == b.capture
    c = spec.draw(7, 4, 0, 5)
    assert c.sun_W != a.sun_W and not np.array_equal(c.albedo, a.albedo)
    assert spec.draw(7, 3, 1, 5).sun_W != a.sun_W  # the next episode
    assert a.albedo.shape == (5, 3) and np.all(a.albedo >= 0)  # a normal is truncated at the floor
    # Only the elevation is drawn: the bearing stays the scene's sun's.
    scene_sun = (0.35, 0.25, 0.9)
    look = spec.draw(7, 3, 0, 5, scene_sun)
    assert sun_angles(look.sun_W)[1] == pytest.approx(sun_angles(scene_sun)[1])
    assert sun_angles(look.sun_W)[0] == pytest.approx(look.values["looks.sun_elevation_deg"])


def test_a_sun_direction_is_east_north_up():
    np.testing.assert_allclose(sun_direction(0.0, 90.0), [1.0, 0.0, 0.0], atol=1e-12)  # due east
    np.testing.assert_allclose(sun_direction(0.0, 0.0), [0.0, 1.0, 0.0], atol=1e-12)  # due north
    np.testing.assert_allclose(sun_direction(90.0, 0.0), [0.0, 0.0, 1.0], atol=1e-12)


def test_bad_looks_are_one_line_naming_the_file_and_the_key(tmp_path):
    def error(text: str) -> str:
        path = tmp_path / "looks.toml"
        path.write_text(text)
        with pytest.raises(ConfigError) as caught:
            LooksSpec.load(path)
        message = str(caught.value)
        assert "\n" not in message and str(path) in message
        return message

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    empty = error('[looks]\ntextures = "empty"\n')
    assert "holds no images" in empty and "textures" in empty
    assert "is not a folder" in error('[looks]\ntextures = "missing"\n')
    assert "'sheen'" in error("[looks]\nsheen = { uniform = [0, 1] }\n")
    assert "exposure" in error("[looks]\nexposure = { uniform = [0.0, 1.0] }\n")  # must be > 0
    assert "texture_probability" in error("[looks]\ntexture_probability = 0.5\n")
    (tmp_path / "bad.png").write_bytes(b"not a png")
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "bad.png").write_bytes(b"not a png")
    assert "bad.png" in error('[looks]\ntextures = "imgs"\n')
    assert "no [looks] table" in error("[wind]\n")


def test_a_texture_folder_is_read_relative_to_its_file_and_shrunk(tmp_path):
    from PIL import Image

    (tmp_path / "textures").mkdir()
    Image.fromarray(np.full((2000, 1000, 3), 90, np.uint8)).save(tmp_path / "textures" / "big.png")
    Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).save(tmp_path / "textures" / "small.jpg")
    (tmp_path / "looks.toml").write_text('[looks]\ntextures = "textures"\ntexture_probability = 0.25\n')
    spec = LooksSpec.load(tmp_path / "looks.toml")
    assert [t.shape for t in spec.textures] == [(512, 256, 3), (8, 8, 3)]
    swapped = np.mean([spec.draw(0, s, 0, 40).texture >= 0 for s in range(50)])
    assert swapped == pytest.approx(0.25, abs=0.05)


def test_looks_need_a_renderer_made_for_them():
    world = DeviceScene(_pole_scene(), "cpu")
    camera = CameraModel.from_fov(16, 16, 60.0)
    with pytest.raises(ConfigError, match="RenderSettings\\(looks=True\\)"):
        Renderer(world, [camera], RenderSettings()).set_looks([Look()])
    renderer = Renderer(world, [camera], RenderSettings(looks=True))
    with pytest.raises(ConfigError, match="one Look per camera"):
        renderer.set_looks([Look(), Look()])
    with pytest.raises(ConfigError, match="albedo of shape"):
        renderer.set_looks([Look(albedo=np.ones((renderer.look_materials + 1, 3)))])
    with pytest.raises(ConfigError, match="texture index"):
        renderer.set_looks([Look(texture=np.ones(renderer.look_materials, np.int32))])
    for bad in (Look(sun_W=(0.0, 0.0, 0.0)), Look(exposure=float("nan")), Look(sky=(1.0, -1.0, 1.0))):
        with pytest.raises(ConfigError, match="look 0"):
            renderer.set_looks([bad])
    renderer.close()


def test_looks_set_for_some_cameras_leave_the_others_and_a_refused_batch_changes_none():
    world = DeviceScene(_pole_scene(), "cpu")
    camera = CameraModel.from_fov(16, 16, 60.0)
    T = np.stack([camera_pose_from_body(transform([0.0, -4.0, 2.0], [1.0, 0.0, 0.0, 0.0]))] * 3)
    renderer = Renderer(world, [camera] * 3, RenderSettings(looks=True))
    renderer.render(T)
    before = renderer.images().rgb.copy()
    renderer.set_looks([Look(exposure=0.5)], cameras=[1])
    renderer.render(T)
    after = renderer.images().rgb
    np.testing.assert_array_equal(after[[0, 2]], before[[0, 2]])
    np.testing.assert_allclose(after[1], before[1] / 2, atol=1.01)
    with pytest.raises(ConfigError, match="look 2"):  # the first is fine, the second refused: neither set
        renderer.set_looks([Look(exposure=0.25), Look(exposure=-1.0)], cameras=[0, 2])
    renderer.render(T)
    np.testing.assert_array_equal(renderer.images().rgb, after)
    with pytest.raises(ConfigError, match="camera indices"):
        renderer.set_looks([Look()], cameras=[3])
    renderer.close()


def test_a_pool_of_suns_builds_each_table_once_and_renders_what_tracing_every_shadow_ray_does(tracer):
    """``sun_directions = N``: every stream takes one of the same N suns, and a sun with its table of
    faces lit whole gives the bytes of the same sun with every shadow ray traced."""
    spec = LooksSpec.from_table(
        {
            "sun_elevation_deg": {"uniform": [20.0, 70.0]},
            "sun_azimuth_deg": {"uniform": [0.0, 360.0]},
            "sun_directions": 3,
        }
    )
    suns = {spec.draw(5, stream, episode, 1).sun_W for stream in range(20) for episode in range(3)}
    assert len(suns) == 3 and all(spec.draw(5, 0, 0, 1).sun_table for _ in range(2))
    world, camera, T_WC, backend = _default_world(tracer, 2)
    renderer = Renderer(world, [camera] * 4, RenderSettings(backend=backend, looks=True))
    pooled = sorted(suns)[:2]
    looks = [Look(sun_W=s, sun_table=True) for s in pooled] + [Look(sun_W=s) for s in pooled]
    renderer.set_looks(looks)
    assert renderer.looks.sun_tables == 3  # the scene's sun and the two pooled ones; none for the others
    renderer.render(np.concatenate([T_WC, T_WC]))
    rgb = renderer.images().rgb
    np.testing.assert_array_equal(rgb[:2], rgb[2:])
    renderer.set_looks(looks[::-1])
    assert renderer.looks.sun_tables == 3  # built once
    renderer.close()
    with pytest.raises(ConfigError, match="sun_directions"):
        LooksSpec.from_table({"sun_directions": -1})


def test_a_captures_tint_and_the_exposure_scale_its_colours_over_what_is_behind(device):
    """Splats composite colour + transmittance x behind: a tint t and exposure e give t x e x colour +
    transmittance x e x behind (the mesh's colour, already exposed)."""
    import dataclasses

    from tests.render.test_splats import cloud

    wall = quad([[6, -20, -20], [6, 20, -20], [6, 20, 20], [6, -20, 20]])
    splats = cloud([[3.0, 0.0, 0.0]], [[0.01, 0.6, 0.6]], opacity=[0.6], colours=[[0.8, 0.6, 0.4]])
    scene = dataclasses.replace(scene_of((wall, 1)), splats=splats)
    settings = RenderSettings(shading="unlit", looks=True, outputs={"rgb", "depth"})
    renderer = Renderer(DeviceScene(scene, device), [CameraModel.from_fov(48, 48, 60.0)] * 3, settings)
    renderer.set_looks([Look(), Look(capture=(0.5, 1.0, 0.25)), Look(exposure=0.5)])
    T = camera_pose_from_body(transform([0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]))
    renderer.render(np.stack([T] * 3))
    rgb = renderer.images().rgb.astype(float)
    behind = rgb[0][0, 0]  # a corner: the wall alone (the splat covers the middle)
    centre = rgb[:, 24, 24]
    transmittance = 0.4  # head-on at the Gaussian's centre: 1 - opacity
    splat = centre[0] - transmittance * behind  # its own colour, in bytes
    np.testing.assert_allclose(centre[1], [0.5, 1.0, 0.25] * splat + transmittance * behind, atol=1.5)
    np.testing.assert_allclose(centre[2], 0.5 * splat + transmittance * rgb[2][0, 0], atol=1.5)
    np.testing.assert_allclose(rgb[2][0, 0], behind / 2, atol=1.01)
    renderer.close()
