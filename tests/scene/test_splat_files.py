"""Splat files as the tools write them: the INRIA PLY (properties in any order, normals or not, SH
degree 0-3, little or big endian) and antimatter15's .splat; real captures; bad files refused in one
line naming the file and the property."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from goggles.errors import SceneError
from goggles.scene import load_static_scene
from goggles.scene.splats import SH_C0, is_splat_file, read_splat_file


def write_ply(path, fields: dict, order=None, endian="<", fmt="binary_little_endian", count=None):
    """A PLY of float32 vertex properties ``fields`` (name -> (N,) values), in ``order``."""
    names = order or list(fields)
    n = len(next(iter(fields.values())))
    dtype = np.dtype([(name, endian + "f4") for name in names])
    records = np.zeros(n, dtype)
    for name in names:
        records[name] = fields[name]
    header = ["ply", f"format {fmt} 1.0", f"element vertex {count if count is not None else n}"]
    header += [f"property float {name}" for name in names] + ["end_header"]
    path.write_bytes(("\n".join(header) + "\n").encode() + records.tobytes())
    return path


def gaussians(n=5, degree=0, seed=0):
    rng = np.random.default_rng(seed)
    fields = {name: rng.normal(size=n) for name in ("x", "y", "z")}
    fields |= {f"f_dc_{c}": rng.normal(size=n) for c in range(3)}
    fields |= {f"f_rest_{i}": rng.normal(size=n) for i in range(3 * ((degree + 1) ** 2 - 1))}
    fields |= {"opacity": rng.normal(1.0, 1.0, n)}
    fields |= {f"scale_{i}": rng.normal(-3.0, 0.5, n) for i in range(3)}
    fields |= {f"rot_{i}": rng.normal(size=n) for i in range(4)}
    return fields


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_an_inria_ply_reads_as_written_in_any_property_order(tmp_path, degree):
    fields = gaussians(7, degree, seed=degree)
    order = list(fields)[::-1] + ["nx", "ny", "nz"]
    fields |= {"nx": np.zeros(7), "ny": np.zeros(7), "nz": np.zeros(7)}
    cloud = read_splat_file(write_ply(tmp_path / "g.ply", fields, order))
    assert cloud.degree == degree and len(cloud) == 7
    np.testing.assert_allclose(cloud.positions[:, 1], fields["y"], rtol=1e-6)
    np.testing.assert_allclose(cloud.opacity, 1.0 / (1.0 + np.exp(-fields["opacity"])), rtol=1e-6)
    np.testing.assert_allclose(cloud.scales[:, 2], np.exp(fields["scale_2"]), rtol=1e-6)
    q = np.stack([fields[f"rot_{i}"] for i in range(4)], axis=1)
    np.testing.assert_allclose(cloud.rotations, q / np.linalg.norm(q, axis=1, keepdims=True), rtol=1e-5)
    per_channel = (degree + 1) ** 2 - 1
    for c in range(3):  # f_rest is channel-major: every red coefficient, then green, then blue
        np.testing.assert_allclose(cloud.sh[:, 0, c], fields[f"f_dc_{c}"], rtol=1e-6)
        for k in range(per_channel):
            np.testing.assert_allclose(cloud.sh[:, 1 + k, c], fields[f"f_rest_{c * per_channel + k}"], rtol=1e-6)


def test_a_big_endian_ply_reads_the_same(tmp_path):
    fields = gaussians(4, 1)
    little = read_splat_file(write_ply(tmp_path / "l.ply", fields))
    big = read_splat_file(write_ply(tmp_path / "b.ply", fields, endian=">", fmt="binary_big_endian"))
    np.testing.assert_array_equal(little.sh, big.sh)
    np.testing.assert_array_equal(little.positions, big.positions)


def test_a_dot_splat_reads_as_antimatter15_wrote_it(tmp_path):
    record = np.dtype([("position", "<f4", 3), ("scale", "<f4", 3), ("rgba", "u1", 4), ("rotation", "u1", 4)])
    records = np.zeros(2, record)
    records["position"] = [[1, 2, 3], [-1, 0, 0.5]]
    records["scale"] = [[0.1, 0.2, 0.3], [0.01, 0.01, 0.01]]
    records["rgba"] = [[255, 128, 0, 200], [10, 20, 30, 255]]
    records["rotation"] = [[255, 128, 128, 128], [128, 128, 255, 128]]  # identity; 90 degrees about y
    path = tmp_path / "g.splat"
    path.write_bytes(records.tobytes())
    cloud = read_splat_file(path)
    np.testing.assert_allclose(cloud.scales, records["scale"])
    np.testing.assert_allclose(cloud.opacity, [200 / 255, 1.0])
    np.testing.assert_allclose(0.5 + SH_C0 * cloud.sh[:, 0], records["rgba"][:, :3] / 255.0, atol=1e-6)
    np.testing.assert_allclose(cloud.rotations[0], [1, 0, 0, 0], atol=1e-6)
    np.testing.assert_allclose(cloud.rotations[1], [0, 0, 1, 0], atol=1e-6)


def test_huge_rotation_values_are_a_rotation_not_a_zero_quaternion(tmp_path):
    """rot_* of 1e20 (unnormalised, as trainers write them): float32's norm overflowed to inf and the
    Gaussian's rotation silently became zero."""
    fields = gaussians(3, 0)
    for i, value in enumerate((1e20, 1e20, 0.0, 0.0)):
        fields[f"rot_{i}"][1] = value
    cloud = read_splat_file(write_ply(tmp_path / "huge.ply", fields))
    np.testing.assert_allclose(cloud.rotations[1], [np.sqrt(0.5), np.sqrt(0.5), 0.0, 0.0], atol=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("drop opacity", "missing property 'opacity'"),
        ("nan scale_1", "property 'scale_1' has 1 NaN or infinite values (first at Gaussian 2)"),
        ("zero rotation", "rotation: 1 zero quaternions (first at Gaussian 3)"),
        ("rest 5", "5 f_rest_* properties"),
        ("ascii", "PLY format 'ascii'"),
        ("truncated", "truncated: 9 Gaussians"),
    ],
)
def test_a_bad_splat_file_is_refused_in_one_line_naming_the_property(tmp_path, change, message):
    fields = gaussians(5, 0)
    kwargs = {}
    if change == "drop opacity":
        del fields["opacity"]
    elif change == "nan scale_1":
        fields["scale_1"][2] = np.nan
    elif change == "zero rotation":
        for i in range(4):
            fields[f"rot_{i}"][3] = 0.0
    elif change == "rest 5":
        fields |= {f"f_rest_{i}": np.zeros(5) for i in range(5)}
    elif change == "ascii":
        kwargs["fmt"] = "ascii"
    elif change == "truncated":
        kwargs["count"] = 9
    path = write_ply(tmp_path / "bad.ply", fields, **kwargs)
    with pytest.raises(SceneError, match=re.escape(message)) as error:
        read_splat_file(path)
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)


def test_other_bad_files_are_refused_by_name(tmp_path):
    odd = tmp_path / "g.splat"
    odd.write_bytes(b"\0" * 33)
    with pytest.raises(SceneError, match="not a whole number of them"):
        read_splat_file(odd)
    with pytest.raises(SceneError, match="unknown splat format '.xyz'"):
        (tmp_path / "g.xyz").write_text("1 2 3")
        read_splat_file(tmp_path / "g.xyz")
    with pytest.raises(SceneError, match="splat file not found"):
        read_splat_file(tmp_path / "none.ply")
    scene = tmp_path / "scene.toml"
    scene.write_text('[[splat]]\nfile = "mesh.obj"\nunits = "m"\nup = "+z"\n')
    (tmp_path / "mesh.obj").write_text("v 0 0 0\n")
    with pytest.raises(SceneError, match=r"\[\[splat\]\] #1: 'file' 'mesh.obj': a splat is a .ply or .splat file"):
        load_static_scene(scene)


def test_a_mesh_ply_is_not_taken_for_a_splat(tmp_path):
    mesh = tmp_path / "mesh.ply"
    write_ply(mesh, {"x": np.zeros(3), "y": np.zeros(3), "z": np.zeros(3)})
    assert not is_splat_file(mesh) and is_splat_file(write_ply(tmp_path / "g.ply", gaussians()))


def test_the_real_captures_load_and_their_two_files_agree(shared):
    folder = shared / "assets-real" / "splats"
    plant_splat = read_splat_file(folder / "houseplant" / "plant.splat")
    plant_ply = read_splat_file(folder / "houseplant" / "plant_sh0.ply")
    robot = read_splat_file(folder / "playbot-125k" / "playbot_lod2_125k.ply")
    assert len(plant_splat) == 113_449 and plant_splat.degree == 0  # 199 of 113,648 are under 1/255 opacity
    assert robot.degree == 2 and len(robot) > 120_000
    # The PLY was made from the .splat (opacity clipped to 0.5/255..1-0.5/255): the same Gaussians, nearly.
    common = np.isin(plant_splat.positions[:, 0], plant_ply.positions[:, 0])
    assert common.mean() > 0.99
    np.testing.assert_allclose(np.ptp(plant_splat.positions, axis=0), np.ptp(plant_ply.positions, axis=0), rtol=1e-6)


def test_a_scene_file_places_a_splat_with_its_units_up_axis_scale_and_class(tmp_path):
    splat = write_ply(tmp_path / "g.ply", {**gaussians(3, 1), "x": [0.0, 1.0, 0.0], "y": [0, 0, 2.0], "z": [0, 0, 0]})
    scene = tmp_path / "scene.toml"
    scene.write_text(
        '[[splat]]\nfile = "g.ply"\nunits = "cm"\nup = "+y"\nscale = 2.0\nposition = [1.0, 2.0, 3.0]\n'
        "rpy_deg = [0.0, 0.0, 90.0]\nsegmentation = 9\n"
    )
    placed = load_static_scene(scene).splats
    # +y up: file y -> world z; cm and scale 2: 0.02 m per unit; yaw 90: x -> y.
    np.testing.assert_allclose(placed.positions, [[1, 2, 3], [1, 2.02, 3], [1, 2, 3.04]], atol=1e-6)
    read = read_splat_file(splat)
    np.testing.assert_allclose(placed.scales, read.scales * 0.02, rtol=1e-6)
    assert set(placed.segment.tolist()) == {9}
    # The colour's frame: world directions turned back into the file's (world z is file y).
    np.testing.assert_allclose(placed.frames[0] @ [0.0, 0.0, 1.0], [0.0, 1.0, 0.0], atol=1e-6)
    assert load_static_scene(splat).splats is not None  # a splat file alone is a scene


def test_a_run_file_places_its_own_splats_in_its_scene(tmp_path):
    """The demo's houseplant comes from its run file's [[splat]] table, beside the arena's meshes; a bad
    table names the run file."""
    from goggles.errors import ConfigError
    from goggles.paths import default_run
    from goggles.rig.rig import build_run_world
    from goggles.rig.runfile import load_run_config, parse_run_config

    demo = load_run_config(default_run())
    assert [s.name for s in demo.splats] == ["houseplant"]
    world = build_run_world(dataclasses.replace(demo, props=()), device="cpu")
    assert world.scene.splats is not None and world.scene.splats.count == 113_449
    assert world.scene.num_faces > 100_000  # the arena's meshes too
    with pytest.raises(ConfigError, match=r"run.toml: \[\[splat\]\] #1: missing key 'up'"):
        parse_run_config(
            {"vehicle": [{"name": "q"}], "splat": [{"file": "x.ply", "units": "m"}]}, tmp_path / "run.toml"
        )


def test_a_capture_too_big_for_this_machines_memory_is_refused_before_it_is_read(tmp_path):
    """A 2 GB file took 4.4 GB and 44 s before any check; a 20 GB one ended in 'Cannot allocate memory'
    naming no file. Here a sparse file (no disk spent) larger than this machine's memory."""
    from goggles.runtime.device_memory import available_memory

    free = available_memory(None)
    if free is None:
        pytest.skip("this machine does not say how much memory is available (/proc/meminfo)")
    path = tmp_path / "huge.splat"
    with path.open("wb") as f:
        f.truncate((int(free) // 32 + 1) * 32)  # whole 32-byte records, as big as all the memory free
    with pytest.raises(SceneError, match=r"huge.splat: reading its .* GiB takes about .* GiB of memory, and"):
        read_splat_file(path)
