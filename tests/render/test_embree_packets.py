"""Embree's ray packets (``embree_packets.c``, rtcIntersect16 in 4 x 4 blocks of pixels) find the hits
embreex's single rays find, and a machine that cannot build them traces single rays, as before."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.bench.measure import bench_views
from goggles.errors import ConfigError
from goggles.frames import camera_pose_from_body
from goggles.paths import default_scene
from goggles.render import CameraModel
from goggles.render import embree as embree_module
from goggles.render.embree import EmbreeTracer, embree_available
from goggles.scene import load_static_scene

pytestmark = pytest.mark.skipif(not embree_available(), reason="embreex is not installed")


@pytest.fixture(scope="module")
def scene():
    return load_static_scene(default_scene())


def _rays(scene, camera, T_WB):
    T = camera_pose_from_body(T_WB)
    directions = np.ascontiguousarray((camera.ray_directions().reshape(-1, 3) @ T[:3, :3].T).astype(np.float32))
    return np.broadcast_to(T[:3, 3].astype(np.float32), directions.shape), directions


def test_packets_find_the_hits_single_rays_find(scene):
    single, packed = EmbreeTracer(scene, packets=False), EmbreeTracer(scene, packets=True)
    assert packed.packets and not single.packets
    camera = CameraModel.from_fov(160, 120, 70.0)
    for T_WB in bench_views(scene.view, 3):
        origins, directions = _rays(scene, camera, T_WB)
        reach_1, reach_16 = np.full(len(directions), 800.0, np.float32), np.full(len(directions), 800.0, np.float32)
        a = single.closest(np.ascontiguousarray(origins), directions, reach_1)
        b = packed.closest(origins, directions, reach_16, camera.width)
        same = a["primID"] == b["primID"]
        assert same.mean() > 0.9995  # a ray through an edge two triangles share may take either
        hit = same & (a["primID"] >= 0)
        assert hit.mean() > 0.3
        np.testing.assert_allclose(reach_16[hit], reach_1[hit], rtol=2e-6)
        unit = [n / np.linalg.norm(n, axis=1, keepdims=True) for n in (a["Ng"][hit], b["Ng"][hit])]
        np.testing.assert_allclose(unit[1], unit[0], atol=1e-4)  # the same plane, float rounding apart
        np.testing.assert_array_equal(reach_16[a["primID"] < 0], 800.0)  # missed: the reach as it was
        assert np.array_equal(b["geomID"] >= 0, b["primID"] >= 0)
        # faces() and distances() see the same
        reach = np.full(len(directions), 800.0, np.float32)
        np.testing.assert_array_equal(packed.faces(origins, directions, reach, camera.width), b["primID"])
        reach_d = np.full(len(directions), 800.0, np.float32)
        packed.distances(origins, directions, reach_d, camera.width)
        np.testing.assert_array_equal(reach_d, reach_16)


def test_rays_of_no_reach_and_ragged_chunks(scene):
    packed = EmbreeTracer(scene, packets=True)
    camera = CameraModel.from_fov(21, 13, 70.0)  # neither side a multiple of 4
    origins, directions = _rays(scene, camera, scene.view)
    reach = np.full(len(directions), 800.0, np.float32)
    reach[::7] = 0.0  # outside a lens: no ray
    hits = packed.closest(np.ascontiguousarray(origins), directions, reach, camera.width)
    assert np.all(hits["primID"][::7] == -1) and np.all(reach[::7] == 0.0)
    ragged = np.full(100, 800.0, np.float32)  # 100 rays said to be rows of 16: traced as one row
    faces = packed.faces(origins[:100], directions[:100], ragged, 16)
    expected = packed.faces(origins[:100], directions[:100], np.full(100, 800.0, np.float32), 100)
    np.testing.assert_array_equal(faces, expected)


def test_hits_written_into_a_callers_arrays_are_the_hits_returned(scene):
    """``out=``: a renderer's buffers, reused frame after frame, take the same hits (packets and single
    rays alike); arrays Embree could not write where they lie are refused."""
    camera = CameraModel.from_fov(32, 24, 70.0)
    origins, directions = _rays(scene, camera, scene.view)
    n = len(directions)
    for tracer in (EmbreeTracer(scene, packets=True), EmbreeTracer(scene, packets=False)):
        expected = tracer.closest(np.ascontiguousarray(origins), directions, np.full(n, 800.0, np.float32), 32)
        out = {"primID": np.full(n, 7, np.int32), "u": np.empty(n, np.float32), "v": np.empty(n, np.float32)}
        out["Ng"] = np.empty((n, 3), np.float32)
        got = tracer.closest(np.ascontiguousarray(origins), directions, np.full(n, 800.0, np.float32), 32, out=out)
        assert got is out and (out["primID"] >= 0).any() and (out["primID"] == -1).any()
        hit = expected["primID"] >= 0  # a missed ray's u, v and Ng are not written
        np.testing.assert_array_equal(out["primID"], expected["primID"])
        for name in ("u", "v", "Ng"):
            np.testing.assert_array_equal(out[name][hit], expected[name][hit])
        faces = np.full(n, 7, np.int32)
        assert tracer.faces(origins, directions, np.full(n, 800.0, np.float32), 32, out=faces) is faces
        np.testing.assert_array_equal(faces, expected["primID"])
        with pytest.raises(ValueError, match="primID must be a contiguous"):
            tracer.faces(origins, directions, np.full(n, 800.0, np.float32), 32, out=np.empty(2 * n, np.int32)[::2])
        with pytest.raises(ValueError, match="the hit arrays must be"):
            tracer.closest(origins, directions, np.full(n, 800.0, np.float32), 32, out={"primID": faces})
        with pytest.raises(ValueError, match="Ng must be a contiguous"):
            tracer.closest(origins, directions, np.full(n, 800.0, np.float32), 32, out={**out, "Ng": out["Ng"].T})


def test_without_a_compiler_single_rays_trace_and_asking_for_packets_says_why(scene, monkeypatch, tmp_path):
    monkeypatch.setenv("GOGGLES_CACHE_DIR", str(tmp_path))  # nothing built there yet
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr("goggles.runtime.native.compiler", lambda: None)
    monkeypatch.setattr(embree_module, "_packets", [])
    tracer = EmbreeTracer(scene)
    assert not tracer.packets
    origins, directions = _rays(scene, CameraModel.from_fov(16, 12, 60.0), scene.view)
    assert (
        tracer.closest(np.ascontiguousarray(origins), directions, np.full(192, 800.0, np.float32))["primID"] >= 0
    ).any()
    with pytest.raises(ConfigError, match="needs a C compiler"):
        EmbreeTracer(scene, packets=True)
    monkeypatch.setattr(embree_module, "_packets", [])
    monkeypatch.setenv("GOGGLES_EMBREE_PACKETS", "0")
    assert not EmbreeTracer(scene).packets


def test_shadow_rays_find_what_blocks_the_sun_as_the_closed_form_does():
    """``occluded`` (the renderer's deferred sun rays) in packets and as single rays: a ray from each
    ground point towards the sun is blocked exactly where it meets a box (slab test, float64); rays of
    no reach are not traced, and a blocked ray's pixel takes its colour in shadow."""
    import trimesh

    from tests.conftest import scene_of

    low, high = np.array([-0.5, -0.5, 0.5]), np.array([0.5, 0.5, 1.5])
    box = trimesh.creation.box(extents=high - low)
    box.apply_translation((low + high) / 2)
    static = scene_of((box, 1))
    sun = np.array([0.3, 0.2, 1.0]) / np.linalg.norm([0.3, 0.2, 1.0])
    width, rows = 83, 61  # neither a multiple of 4
    x, y = np.meshgrid(np.linspace(-2.0, 1.5, width), np.linspace(-1.8, 1.7, rows))
    origins = np.stack([x, y, np.zeros_like(x)], axis=-1).reshape(-1, 3).astype(np.float32)
    directions = np.ascontiguousarray(np.broadcast_to(sun, origins.shape), dtype=np.float32)
    reach = np.full(len(origins), 100.0, np.float32)
    reach[::5] = 0.0  # no ray
    t0, t1 = (low - origins) / sun, (high - origins) / sun
    expected = (np.maximum(np.minimum(t0, t1).max(axis=1), 0.0) <= np.maximum(t0, t1).min(axis=1)) & (reach > 0)
    assert 0.05 < expected.mean() < 0.5  # a real shadow, on a lit ground
    lit = np.full((len(origins), 3), 200, np.uint8)
    dark = np.full((len(origins), 3), 60, np.uint8)
    for packets in (True, False):
        tracer = EmbreeTracer(static, packets=packets)
        colour = lit.copy()
        blocked = tracer.occluded(origins, directions, reach, width, dark, colour)
        # A ray grazing the box's edge may go either way in float32: a handful at most.
        assert (blocked != expected).sum() <= 3, f"packets={packets}: {(blocked != expected).sum()} disagree"
        assert not blocked[::5].any()
        np.testing.assert_array_equal(colour, np.where(blocked[:, None], dark, lit))
    strided = np.zeros((len(origins), 6), np.uint8)[:, ::2]  # the packets write where it lies: refused
    with pytest.raises(ValueError, match="colour must be a contiguous"):
        EmbreeTracer(static, packets=True).occluded(origins, directions, reach, width, dark, strided)
