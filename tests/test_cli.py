"""The command-line contract, run as a user runs it: a real process, real files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image


def goggles(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "goggles.cli", *args], capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"goggles {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def test_render_writes_the_contract_files(tmp_path):
    goggles("render", "--width", "64", "--height", "48", "--baseline", "0.32", "--out", str(tmp_path))
    for prefix in ("", "right_"):
        depth = np.load(tmp_path / f"{prefix}depth.npy")
        assert depth.shape == (48, 64) and depth.dtype == np.float32
        with Image.open(tmp_path / f"{prefix}intensity.png") as picture:
            assert picture.size == (64, 48)
    for name in ("range", "segmentation", "normals"):
        assert np.load(tmp_path / f"{name}.npy").shape[:2] == (48, 64)
    assert np.load(tmp_path / "normals.npy").shape == (48, 64, 3)
    assert np.load(tmp_path / "range.npy").dtype == np.float32
    depth = np.load(tmp_path / "depth.npy")
    assert np.isfinite(depth).mean() > 0.3 and np.isposinf(depth).any()  # ground and sky


def test_render_pose_and_scene_mesh_path(tmp_path):
    import trimesh

    trimesh.creation.box(extents=[1, 10, 10]).export(tmp_path / "wall.stl")
    goggles(
        "render", "--scene", str(tmp_path / "wall.stl"), "--pose=-4,0,0,1,0,0,0",
        "--width", "8", "--height", "6", "--vfov", "20", "--out", str(tmp_path / "out"),
    )
    np.testing.assert_allclose(np.load(tmp_path / "out" / "depth.npy"), 3.5, rtol=1e-5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pose", "0,0,nan,1,0,0,0"], "seven finite numbers"),
        (["--scene", "/nonexistent/scene.toml"], "scene file not found"),
        (["--vfov", "190"], "field of view"),
        (["--baseline", "-1"], "baseline"),
    ],
)
def test_render_bad_input_is_a_clear_error(tmp_path, args, message):
    result = goggles("render", *args, "--width", "8", "--height", "6", "--out", str(tmp_path), check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_render_last_line():
    pytest.importorskip("embreex")
    result = goggles("bench", "render", "--width", "32", "--height", "24", "--views", "2", "--seconds", "0.05")
    last = result.stdout.strip().splitlines()[-1]
    fields = dict(item.split("=") for item in last.split())
    assert set(fields) == {"rays_per_s", "embree_rays_per_s", "ratio"}
    assert float(fields["ratio"]) == pytest.approx(float(fields["rays_per_s"]) / float(fields["embree_rays_per_s"]), rel=1e-2)
