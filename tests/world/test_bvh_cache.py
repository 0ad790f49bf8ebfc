"""The BVH disk cache: a stored tree is the tree the builder makes, and a bad file, an unwritable
folder or a full folder never costs more than a rebuild."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from goggles.paths import cache_dir
from goggles.world import bvh_cache
from goggles.world.bvh_cache import MAX_FILES, cached_ray_bvh, cached_wide_bvh, tree_key
from goggles.world.ray_bvh import build_ray_bvh
from goggles.world.wide_bvh import build_wide_bvh


def _terrain(n: int = 40, lift: float = 0.0):
    x, y = np.meshgrid(np.linspace(0, 10, n), np.linspace(0, 10, n))
    z = np.sin(x) * np.cos(y) + lift
    vertices = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1).astype(np.float32)
    i = np.arange(n - 1)[:, None] * n + np.arange(n - 1)[None, :]
    faces = np.concatenate(
        [np.stack([i, i + 1, i + n], -1).reshape(-1, 3), np.stack([i + 1, i + n + 1, i + n], -1).reshape(-1, 3)]
    )
    return vertices, faces.astype(np.int32)


def _assert_same_tree(a, b):
    for name in ("boxes", "children", "triangles", "faces"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert getattr(a, name).dtype == getattr(b, name).dtype
    assert a.depth == b.depth


def test_a_stored_tree_is_the_built_tree(tmp_path):
    vertices, faces = _terrain()
    first, loaded = cached_ray_bvh(vertices, faces, tmp_path)
    assert not loaded and (tmp_path / f"{tree_key(vertices, faces)}.npz").is_file()
    again, loaded = cached_ray_bvh(vertices, faces, tmp_path)
    assert loaded
    _assert_same_tree(again, build_ray_bvh(vertices, faces))
    _assert_same_tree(first, again)


def test_a_stored_wide_tree_is_the_collapsed_tree_and_a_bad_one_is_made_again(tmp_path, caplog):
    vertices, faces = _terrain()
    first, loaded = cached_wide_bvh(vertices, faces, tmp_path)
    again, loaded_again = cached_wide_bvh(vertices, faces, tmp_path)
    assert not loaded and loaded_again
    made = build_wide_bvh(build_ray_bvh(vertices, faces))
    for tree in (first, again):
        for name in ("origin", "scale", "quantized", "children", "triangles", "faces"):
            np.testing.assert_array_equal(getattr(tree, name), getattr(made, name))
            assert getattr(tree, name).dtype == getattr(made, name).dtype
        assert tree.stack == made.stack
    (wide,) = tmp_path.glob("*-wide*.npz")
    np.savez(wide, origin=np.zeros(3), scale=np.zeros(3), quantized=np.zeros(3), children=np.zeros(3), stack=0)
    with caplog.at_level(logging.WARNING, logger="goggles.world.bvh_cache"):
        tree, loaded = cached_wide_bvh(vertices, faces, tmp_path)
    assert not loaded and "building" in caplog.text and str(wide) in caplog.text
    np.testing.assert_array_equal(tree.quantized, made.quantized)
    assert cached_wide_bvh(vertices, faces, tmp_path)[1]


def test_other_triangles_get_their_own_tree(tmp_path):
    vertices, faces = _terrain()
    cached_ray_bvh(vertices, faces, tmp_path)
    moved = vertices.copy()
    moved[7, 2] = np.nextafter(moved[7, 2], np.float32(np.inf))  # one vertex, one ulp
    tree, loaded = cached_ray_bvh(moved, faces, tmp_path)
    assert not loaded
    _assert_same_tree(tree, build_ray_bvh(moved, faces))
    assert len(list(tmp_path.glob("*.npz"))) == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),  # cut short
        lambda path: path.write_bytes(b"not a zip"),
        lambda path: np.savez(path, boxes=np.array([object()], dtype=object)),  # would need pickle
        lambda path: np.savez(path, boxes=np.zeros(3), children=np.zeros(3), triangles=np.zeros(3), faces=np.zeros(3)),
    ],
    ids=["truncated", "garbage", "pickled", "wrong-arrays"],
)
def test_a_bad_file_is_rebuilt_and_replaced(tmp_path, caplog, damage):
    vertices, faces = _terrain()
    cached_ray_bvh(vertices, faces, tmp_path)
    path = tmp_path / f"{tree_key(vertices, faces)}.npz"
    damage(path)
    with caplog.at_level(logging.WARNING, logger="goggles.world.bvh_cache"):
        tree, loaded = cached_ray_bvh(vertices, faces, tmp_path)
    assert not loaded and "building" in caplog.text and str(path) in caplog.text
    _assert_same_tree(tree, build_ray_bvh(vertices, faces))
    _, loaded = cached_ray_bvh(vertices, faces, tmp_path)
    assert loaded  # the rebuilt tree replaced the bad file


def test_an_unwritable_folder_still_gives_the_tree(tmp_path, caplog):
    vertices, faces = _terrain()
    blocked = tmp_path / "a_file"
    blocked.write_text("x")
    with caplog.at_level(logging.WARNING, logger="goggles.world.bvh_cache"):
        tree, loaded = cached_ray_bvh(vertices, faces, blocked / "bvh")
    assert not loaded and "cannot keep the BVH" in caplog.text
    _assert_same_tree(tree, build_ray_bvh(vertices, faces))


def test_the_folder_keeps_the_newest_trees(tmp_path):
    keys = []
    for k in range(MAX_FILES + 3):
        vertices, faces = _terrain(8, lift=float(k))
        cached_ray_bvh(vertices, faces, tmp_path)
        keys.append(tree_key(vertices, faces))
    kept = {p.stem for p in tmp_path.glob("*.npz")}
    assert len(kept) == MAX_FILES and set(keys[-MAX_FILES:]) <= kept | {keys[-1]}
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary file left behind


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GOGGLES_CACHE_DIR", "")
    assert cache_dir() is None
    vertices, faces = _terrain(8)
    cached_ray_bvh(vertices, faces)
    assert not cached_ray_bvh(vertices, faces)[1]  # off: never stored, never loaded
    monkeypatch.setenv("GOGGLES_CACHE_DIR", str(tmp_path / "c"))
    cached_ray_bvh(vertices, faces)
    assert cached_ray_bvh(vertices, faces)[1] and (tmp_path / "c" / "bvh").is_dir()
    monkeypatch.delenv("GOGGLES_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "goggles"
    assert bvh_cache._default_folder() == tmp_path / "xdg" / "goggles" / "bvh"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # invalid by the XDG spec: ignored
    assert cache_dir() == Path.home() / ".cache" / "goggles"
