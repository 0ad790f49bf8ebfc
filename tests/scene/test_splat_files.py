"""Splat files as the tools write them: the INRIA PLY (properties in any order, normals or not, SH
degree 0-3, little or big endian) and antimatter15's .splat; real captures; bad files refused in one
line naming the file and the property."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

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
    with pytest.raises(
        SceneError, match=r"\[\[splat\]\] #1: 'file' 'mesh.obj': a splat is a .ply, .splat or .spz file"
    ):
        load_static_scene(scene)


def test_a_mesh_ply_is_not_taken_for_a_splat_and_a_point_cloud_is_neither(tmp_path):
    import trimesh

    mesh = tmp_path / "mesh.ply"
    trimesh.creation.box().export(mesh)
    assert not is_splat_file(mesh) and is_splat_file(write_ply(tmp_path / "g.ply", gaussians()))
    cloud = write_ply(tmp_path / "points.ply", {"x": np.zeros(3), "y": np.zeros(3), "z": np.zeros(3)})
    with pytest.raises(SceneError, match="a point cloud .*: neither a mesh nor a Gaussian splat"):
        load_static_scene(cloud)


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


DATA = Path(__file__).resolve().parents[1] / "data" / "splats"


def _matched(reference, other):
    """``other``'s Gaussians in ``reference``'s order (SuperSplat's writer sorts them into chunks)."""
    from scipy.spatial import cKDTree

    distance, index = cKDTree(other.positions).query(reference.positions)
    assert len(set(index)) == len(index)
    return index


@pytest.mark.parametrize("name", ["playbot-2k.spz", "playbot-2k.compressed.ply"])
def test_spz_and_supersplats_compressed_ply_read_as_the_capture_they_were_made_from(name):
    """2,000 Gaussians of the PLAYBOT capture (SH degree 2) as a PLY, and as PlayCanvas's
    splat-transform 3.7.0 wrote them into .spz (version 4) and SuperSplat's compressed PLY: every
    value within the format's quantisation, and the renders agree (measured 42 and 52 dB)."""
    ply = read_splat_file(DATA / "playbot-2k.ply")
    other = read_splat_file(DATA / name)
    index = _matched(ply, other)
    spz = name.endswith(".spz")
    step = 2.0**-12 if spz else np.ptp(ply.positions, axis=0).max() / 1023
    np.testing.assert_allclose(other.positions[index], ply.positions, atol=step)
    np.testing.assert_allclose(np.log(other.scales[index]), np.log(ply.scales), atol=1 / 32 if spz else 0.01)
    assert np.abs((other.rotations[index] * ply.rotations).sum(axis=1)).min() > 0.9999
    np.testing.assert_allclose(other.opacity[index], ply.opacity, atol=0.5 / 255 + 1e-6)
    assert other.degree == 2
    assert np.median(np.abs(other.sh[index] - ply.sh)) < 0.03
    assert list(other.filters) == ["3dgs"]


def test_a_version_3_spz_reads_as_its_version_4(tmp_path):
    """Version 3 is one gzip stream of the 16-byte header and the same attribute blocks version 4
    keeps as zstd frames: rebuilt from the version 4 file by the format's layout, both read alike."""
    import gzip
    import struct

    import zstandard

    raw = (DATA / "playbot-2k.spz").read_bytes()
    magic, version, points, degree, fractional, flags, streams, toc = struct.unpack("<IIIBBBBI", raw[:20])
    assert (magic, version, degree, streams) == (0x5053474E, 4, 2, 6)
    at, blocks = toc + 16 * streams, []
    for i in range(streams):
        packed, unpacked = struct.unpack("<QQ", raw[toc + 16 * i : toc + 16 * i + 16])
        blocks.append(zstandard.ZstdDecompressor().decompress(raw[at : at + packed], max_output_size=unpacked))
        at += packed
    header = struct.pack("<IIIBBBB", magic, 3, points, degree, fractional, flags | 1, 0)
    (tmp_path / "v3.spz").write_bytes(gzip.compress(header + b"".join(blocks)))
    v3, v4 = read_splat_file(tmp_path / "v3.spz"), read_splat_file(DATA / "playbot-2k.spz")
    for a, b in zip(
        (v3.positions, v3.scales, v3.rotations, v3.opacity, v3.sh),
        (v4.positions, v4.scales, v4.rotations, v4.opacity, v4.sh),
    ):
        np.testing.assert_array_equal(a, b)
    assert list(v3.filters) == ["antialiased"]  # the header's flag: trained with the antialiased filter


def _broken(tmp_path: Path, case: str) -> Path:
    """A malformed capture of kind ``case``."""
    ply = (DATA / "playbot-2k.ply").read_bytes()
    head, body = ply.split(b"end_header\n", 1)
    spz = (DATA / "playbot-2k.spz").read_bytes()
    packed = (DATA / "playbot-2k.compressed.ply").read_bytes()
    made = {
        "garbage.ply": np.random.default_rng(1).bytes(5000),
        "ply-magic-then-garbage.ply": b"ply\n" + np.random.default_rng(1).bytes(5000),
        "empty.ply": b"",
        "misnamed.ply": head.replace(b"property float f_dc_0\n", b"property float fdc0\n") + b"end_header\n" + body,
        "list.ply": head.replace(b"property float opacity", b"property list uchar float opacity")
        + b"end_header\n"
        + body,
        "type.ply": head.replace(b"property float x", b"property vec3 x") + b"end_header\n" + body,
        "count.ply": head.replace(b"element vertex 2000", b"element vertex lots") + b"end_header\n" + body,
        "promise.ply": head.replace(b"element vertex 2000", b"element vertex 20000") + b"end_header\n" + body,
        "truncated.ply": ply[: len(ply) // 2],
        "ascii.ply": head.replace(b"binary_little_endian", b"ascii") + b"end_header\n0 0 0\n",
        "nan.ply": head + b"end_header\n" + body[:164] + np.float32(np.nan).tobytes() + body[168:],  # x of the 2nd
        "magic.spz": b"XGSP" + spz[4:],
        "version.spz": spz[:4] + (9).to_bytes(4, "little") + spz[8:],
        "truncated.spz": spz[: len(spz) // 2],
        "empty.spz": b"",
        "garbage.spz": np.random.default_rng(1).bytes(3000),
        "truncated.compressed.ply": packed[: len(packed) // 2],
    }[case]
    path = tmp_path / case
    path.write_bytes(made)
    return path


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("garbage.ply", "not a PLY file"),
        ("ply-magic-then-garbage.ply", "not a PLY file"),
        ("empty.ply", "not a PLY file"),
        ("misnamed.ply", "missing property 'f_dc_0'"),
        ("list.ply", "vertex property 'opacity' is a list"),
        ("type.ply", "header line 4 'property vec3 x': unknown property type"),
        ("count.ply", "'element vertex lots': an element needs a name and a count"),
        ("promise.ply", "truncated: 20000 Gaussians"),
        ("truncated.ply", "truncated: 2000 Gaussians"),
        ("ascii.ply", "PLY format 'ascii'"),
        ("nan.ply", "property 'x' has 1 NaN or infinite values (first at Gaussian 1)"),
        ("magic.spz", "not a .spz file (no 'NGSP' magic)"),
        ("version.spz", ".spz version 9"),
        ("truncated.spz", ".spz stream"),
        ("empty.spz", "not a .spz file"),
        ("garbage.spz", "not a .spz file"),
        ("truncated.compressed.ply", "truncated"),
    ],
)
def test_every_malformed_capture_is_one_line_naming_the_file_and_what_is_wrong(tmp_path, case, says):
    path = _broken(tmp_path, case)
    with pytest.raises(SceneError, match=re.escape(says)) as error:
        read_splat_file(path)
    message = str(error.value)
    assert message.startswith(str(path)) and "\n" not in message


@pytest.mark.parametrize("case", ["garbage.ply", "misnamed.ply", "list.ply", "truncated.spz"])
def test_goggles_render_of_a_malformed_capture_says_the_same_line(tmp_path, case):
    from tests.support import goggles_result

    path = _broken(tmp_path, case)
    result = goggles_result("render", "--scene", path, "--out", tmp_path / "out", "--width", "32", "--height", "24")
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and lines[0].startswith(f"goggles: error: {path}")
    assert "Traceback" not in result.stderr and "mesh" not in lines[0]
