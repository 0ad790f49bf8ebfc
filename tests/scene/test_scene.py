"""Scene import: every format, declared units and up axes, real scans, and clear errors for bad files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import trimesh
from PIL import Image

from goggles.errors import SceneError
from goggles.frames import camera_pose_from_body, quat_from_euler, transform
from goggles.paths import default_scene
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.scene import load_asset, load_scene_spec, load_static_scene
from goggles.world import DeviceScene


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def textured_box(colour) -> trimesh.Trimesh:
    box = trimesh.creation.box(extents=[1.0, 1.0, 1.0])
    uv = np.random.default_rng(0).uniform(0, 1, (len(box.vertices), 2))
    image = Image.fromarray(np.full((4, 4, 3), colour, np.uint8))
    box.visual = trimesh.visual.TextureVisuals(uv=uv, image=image)
    return box


def test_gltf_multi_mesh_textured(tmp_path):
    scene = trimesh.Scene()
    scene.add_geometry(textured_box([255, 0, 0]), node_name="red", transform=transform([0, 0, 0], [1, 0, 0, 0]))
    scene.add_geometry(textured_box([0, 0, 255]), node_name="blue", transform=transform([3, 0, 0], [1, 0, 0, 0]))
    path = tmp_path / "two.glb"
    scene.export(path)
    parts = load_asset(path, units="m", up="+y")
    assert len(parts) == 2
    textures = sorted(tuple(p.material.texture[0, 0]) for p in parts)
    assert textures == [(0, 0, 255), (255, 0, 0)]
    # glTF +Y up: the node moved along +x stays along +x; y becomes z
    centres = sorted(p.vertices.mean(axis=0)[0] for p in parts)
    assert centres == pytest.approx([0.0, 3.0], abs=1e-6)


def test_ply_vertex_colours_render(tmp_path, device):
    box = trimesh.creation.box(extents=[1.0, 1.0, 1.0])
    box.visual.vertex_colors = np.tile([10, 200, 30, 255], (len(box.vertices), 1))
    box.export(tmp_path / "box.ply")
    scene_file = write(
        tmp_path / "s.toml",
        '[[asset]]\nfile = "box.ply"\nunits = "m"\nup = "+z"\nposition = [3, 0, 0]\nsegmentation = 9\n',
    )
    scene = load_static_scene(scene_file)
    camera = CameraModel.from_fov(9, 9, 10.0)
    renderer = Renderer(DeviceScene(scene, device), [camera], RenderSettings(shading=Shading.UNLIT))
    renderer.render(camera_pose_from_body(np.eye(4))[None])
    images = renderer.images()
    renderer.close()
    assert images.segmentation[0][4, 4] == 9
    assert tuple(images.rgb[0][4, 4]) == (10, 200, 30)
    assert images.depth[0][4, 4] == pytest.approx(2.5, abs=1e-5)


def test_stl_units_and_up_axis(tmp_path):
    box = trimesh.creation.box(extents=[10.0, 20.0, 30.0])  # 10 x 20 x 30 mm, y up in the file
    box.export(tmp_path / "box.stl")
    parts = load_asset(tmp_path / "box.stl", units="mm", up="+y")
    extent = np.ptp(np.concatenate([p.vertices for p in parts]), axis=0)
    assert extent == pytest.approx([0.010, 0.030, 0.020])  # file y (20 mm) became z


def test_scene_file_pose_scale_and_segmentation(tmp_path):
    trimesh.creation.box(extents=[1.0, 1.0, 1.0]).export(tmp_path / "box.stl")
    scene_file = write(
        tmp_path / "s.toml",
        '[scene]\nname = "two boxes"\nview = [1, 2, 3, 1, 0, 0, 0]\n'
        '[[asset]]\nfile = "box.stl"\nunits = "m"\nup = "+z"\nposition = [10, 0, 0]\nrpy_deg = [0, 0, 45]\n'
        "scale = 2.0\nsegmentation = 4\n"
        '[[asset]]\nfile = "box.stl"\nunits = "cm"\nup = "+z"\nsegmentation = 5\n',
    )
    scene = load_static_scene(scene_file)
    assert scene.name == "two boxes"
    np.testing.assert_allclose(scene.view[:3, 3], [1, 2, 3])
    first = scene.vertices[scene.faces[scene.face_segment == 4].ravel()]
    second = scene.vertices[scene.faces[scene.face_segment == 5].ravel()]
    assert first.mean(axis=0) == pytest.approx([10, 0, 0], abs=1e-5)
    assert np.ptp(first[:, 0]) == pytest.approx(2 * np.sqrt(2), abs=1e-5)  # scaled 2x, turned 45 deg
    assert np.ptp(second, axis=0) == pytest.approx([0.01, 0.01, 0.01])


def test_single_mesh_path_is_a_scene(tmp_path):
    trimesh.creation.icosphere().export(tmp_path / "ball.obj")
    spec = load_scene_spec(tmp_path / "ball.obj")
    assert len(spec.assets) == 1 and spec.assets[0].units == "m" and spec.assets[0].up == "+z"
    assert load_scene_spec(tmp_path / "ball.obj").assets[0].segmentation == 1


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[[asset]]\nfile = "box.stl"\nunits = "m"\nup = "+z"\ncolour = 3\n', "unknown key 'colour'"),
        ('[[asset]]\nfile = "box.stl"\nup = "+z"\n', "missing key 'units'"),
        ('[[asset]]\nfile = "box.stl"\nunits = "furlong"\nup = "+z"\n', "'units' must be one of .*, got 'furlong'"),
        ('[[asset]]\nfile = "box.stl"\nunits = "m"\nup = "+q"\n', "'up' must be one of .*, got '\\+q'"),
        ('[[asset]]\nfile = "box.stl"\nunits = "m"\nup = "+z"\nposition = [1, 2]\n', "'position' must be a list of 3"),
        ('[[asset]]\nfile = "box.stl"\nunits = "m"\nup = "+z"\nscale = -1\n', "'scale' must be a finite number > 0"),
        ('[[asset]]\nfile = "box.stl"\nunits = "m"\nup = "+z"\nsegmentation = 0\n', "'segmentation' must be"),
        ('[scene]\nfoo = 1\n[[asset]]\nfile = "box.stl"\nunits = "m"\nup = "+z"\n', r"\[scene\]: unknown key 'foo'"),
        ("[scene]\nname = 'x'\n", r"at least one \[\[asset\]\]"),
        ("[[asset]\n", "not valid TOML"),
        (
            '[[asset]]\nfile = "nothere.obj"\nunits = "m"\nup = "+z"\n',
            r"bad.toml: \[\[asset\]\] #1: 'file' 'nothere.obj': mesh file not found \(.*nothere.obj\)",
        ),
        ('[[asset]]\nfile = 5\nunits = "m"\nup = "+z"\n', r"bad.toml: \[\[asset\]\] #1: 'file' must be a non-empty"),
        ('[[asset]]\nfile = "empty.glb"\nunits = "m"\nup = "+z"\n', r"empty.glb: is empty \(0 bytes\)"),
    ],
)
def test_bad_scene_files_name_file_and_key(tmp_path, toml, message):
    trimesh.creation.box().export(tmp_path / "box.stl")
    (tmp_path / "empty.glb").write_bytes(b"")  # was "index 0 is out of bounds for axis 0 with size 0"
    path = write(tmp_path / "bad.toml", toml)
    with pytest.raises(SceneError, match=message) as error:
        load_static_scene(path)
    assert any(name in str(error.value) for name in ("bad.toml", "empty.glb"))


def test_missing_texture_is_named(tmp_path, shared):
    source = shared / "assets-real" / "ycb-025-mug"
    shutil.copyfile(source / "textured.obj", tmp_path / "textured.obj")
    shutil.copyfile(source / "textured.mtl", tmp_path / "textured.mtl")
    with pytest.raises(SceneError, match=r"texture 'MI_025_mug_MI_025_mug_D.png' \(map_Kd\) not found"):
        load_asset(tmp_path / "textured.obj", units="cm", up="+z")


def test_no_faces_and_nan_vertices(tmp_path):
    trimesh.PointCloud(np.random.default_rng(0).uniform(size=(10, 3))).export(tmp_path / "cloud.ply")
    with pytest.raises(SceneError, match="cloud.ply: has no triangle faces"):
        load_asset(tmp_path / "cloud.ply", units="m", up="+z")
    write(tmp_path / "nan.obj", "v 0 0 0\nv 1 0 0\nv nan 1 0\nf 1 2 3\n")
    with pytest.raises(SceneError, match="nan.obj: .* non-finite"):
        load_asset(tmp_path / "nan.obj", units="m", up="+z")
    write(tmp_path / "junk.glb", "this is not a glb")
    with pytest.raises(SceneError, match="junk.glb: cannot be read"):
        load_asset(tmp_path / "junk.glb", units="m", up="+y")


def test_a_mesh_beyond_float32_is_named_not_rendered_as_infinity(tmp_path):
    """Finite in the file's float64, infinite in the renderer's float32: a mesh in the wrong units."""
    from goggles.scene import load_static_scene

    write(tmp_path / "far.obj", "v 4e38 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    with pytest.raises(SceneError, match=r"far.obj: geometry 'far.obj' reaches 4e\+38 m, beyond float32's range"):
        load_asset(tmp_path / "far.obj", units="m", up="+z")
    write(tmp_path / "near.obj", "v 1e37 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    with pytest.raises(SceneError, match=r"reaches 1e\+40 m"):  # its units make it so
        load_asset(tmp_path / "near.obj", units="km", up="+z")
    scene = tmp_path / "scene.toml"
    scene.write_text('[[asset]]\nname = "big"\nfile = "near.obj"\nunits = "m"\nup = "+z"\nscale = 1e3\n')
    with pytest.raises(SceneError, match=r"scene.toml: asset 'big' placed reaches 1e\+40 m, beyond float32's range"):
        load_static_scene(scene)


def test_real_mars_terrain_is_z_up_in_metres(shared, device):
    """The Dingo Gap scan is +Y up: after import its 64 m relief is along z, and a camera looking
    straight down from 100 m over the arena plateau (54.2 m high) sees it 45.8 m away."""
    parts = load_asset(shared / "assets-real/mars-dingo-gap-terrain/dingo_gap_leaves.glb", units="m", up="+y")
    vertices = np.concatenate([p.vertices for p in parts])
    extent = np.ptp(vertices, axis=0)
    assert extent == pytest.approx([323.15, 241.89, 64.34], abs=0.05)  # MANIFEST: x 323, y(up) 64, z 242
    assert sum(len(p.faces) for p in parts) == 177950
    scene = load_static_scene(shared / "assets-real/mars-dingo-gap-terrain/dingo_gap_leaves.glb")
    camera = CameraModel.from_fov(5, 5, 5.0)
    down = transform([92.0, -70.0, 100.0], quat_from_euler(0.0, np.pi / 2, 0.0))  # body x pointing down
    renderer = Renderer(DeviceScene(scene, device), [camera])
    renderer.render(camera_pose_from_body(down)[None])
    assert renderer.images().depth[0][2, 2] == pytest.approx(100.0 - 54.22, abs=0.3)
    renderer.close()


def test_real_ycb_mug_is_centimetres(shared, tmp_path, device):
    mug = shared / "assets-real/ycb-025-mug/textured.obj"
    parts = load_asset(mug, units="cm", up="+z")
    extent = np.ptp(parts[0].vertices, axis=0)
    assert extent == pytest.approx([0.11668, 0.092388, 0.081196], rel=1e-3)
    assert parts[0].material.texture.shape == (2048, 2048, 3)
    # Rendered from 0.5 m the mug, 8.1 cm tall along z, spans about fy * 0.081 / 0.5 rows.
    scene_file = write(tmp_path / "mug.toml", f'[[asset]]\nfile = "{mug}"\nunits = "cm"\nup = "+z"\nsegmentation = 2\n')
    camera = CameraModel.from_fov(200, 200, 30.0)
    renderer = Renderer(DeviceScene(load_static_scene(scene_file), device), [camera])
    renderer.render(camera_pose_from_body(transform([-0.5, 0.0, 0.0], [1, 0, 0, 0]))[None])
    rows = np.flatnonzero((renderer.images().segmentation[0] == 2).any(axis=1))
    renderer.close()
    expected = camera.fy * 0.081196 / 0.5
    assert rows.max() - rows.min() + 1 == pytest.approx(expected, rel=0.12)  # perspective of the mug's depth


def test_default_scene_loads_with_real_scans():
    scene = load_static_scene(default_scene())
    assert scene.num_faces > 190_000
    assert set(np.unique(scene.face_segment)) == {1, 2, 3, 4, 5, 6}
    assert len(scene.textures) >= 3  # terrain tiles, landing pad, mug
    assert scene.view is not None


@pytest.mark.parametrize("backend", ["warp", "bvh", "wide", "embree"])
def test_a_ground_plane_of_any_size_renders_where_it_is(tmp_path, backend):
    """Two triangles spanning +-1e20 m (a 'ground plane' of any size) vanished on every backend (float32
    products overflow): cut to +-10 km, exactly, they are the plane, and a camera 2 m above it looking
    straight down reads 2 m at every pixel, the quad's diagonal included."""
    from goggles.frames import camera_pose_from_body, quat_from_euler, transform
    from goggles.render import CameraModel, Renderer, RenderSettings, Shading
    from goggles.world import DeviceScene

    (tmp_path / "plane.obj").write_text(
        "v -1e20 -1e20 0\nv 1e20 -1e20 0\nv 1e20 1e20 0\nv -1e20 1e20 0\nf 1 2 3\nf 1 3 4\n"
    )
    scene = load_static_scene(tmp_path / "plane.obj")
    assert np.abs(scene.vertices).max() <= 1e4
    if backend == "embree":
        pytest.importorskip("embreex")
    camera = CameraModel.from_fov(32, 24, 60.0)
    down = camera_pose_from_body(transform([0.3, -0.2, 2.0], quat_from_euler(0.0, np.pi / 2, 0.0)))
    settings = RenderSettings(outputs={"depth"}, shading=Shading.NONE, backend=backend)
    renderer = Renderer(DeviceScene(scene, "cpu"), [camera], settings)
    renderer.render(down[None])
    depth = renderer.images().depth[0]
    renderer.close()
    np.testing.assert_allclose(depth, 2.0, rtol=1e-5)
