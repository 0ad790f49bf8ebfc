"""LiDAR against closed forms: in a box room every beam measures the wall its ray meets, at every
elevation and azimuth; a scan has the preset's number of points; a moving sensor's points are smeared
as their firing times predict; intensity is albedo x cos(incidence)."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from goggles.frames import transform
from goggles.rig import parts
from goggles.sensors.lidar import MID360, OS1_64, VLP16
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

LOW, HIGH = np.array([-5.0, -4.0, -1.0]), np.array([6.0, 4.5, 3.0])


def room():
    box = trimesh.creation.box(extents=HIGH - LOW)
    box.apply_translation((LOW + HIGH) / 2)
    box.invert()  # walls facing in
    return scene_of((box, 1))


def wall_distance(origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Distance from points inside the box along rays to its walls (the nearest exit), float64."""
    with np.errstate(divide="ignore"):
        exits = np.where(directions > 0, (HIGH - origins) / directions, (LOW - origins) / directions)
    exits[~np.isfinite(exits) | (exits < 0)] = np.inf
    return exits.min(axis=-1)


@pytest.mark.parametrize("model", [VLP16, OS1_64], ids=["vlp16", "os1-64"])
def test_every_beam_measures_the_wall_its_ray_meets(tracer, model):
    device, backend = tracer
    lidar = parts.lidar(DeviceScene(room(), device), model, backend=backend, noise=False)
    position = np.array([0.5, -0.7, 1.2])
    scan = lidar.scan(transform(position, [1, 0, 0, 0]))
    lidar.close()
    assert scan.range.shape == (model.columns, model.beams) and scan.range.size == model.points_per_scan
    expected = wall_distance(position, scan.directions.astype(np.float64))
    np.testing.assert_allclose(scan.range, expected, rtol=2e-5)
    # Elevation and azimuth of each beam are the preset's.
    elevation = np.degrees(np.arcsin(scan.directions[0, :, 2]))
    np.testing.assert_allclose(elevation, model.elevations_deg, atol=1e-4)
    azimuth = np.degrees(np.arctan2(scan.directions[:, 0, 1], scan.directions[:, 0, 0])) % 360
    np.testing.assert_allclose(azimuth, np.arange(model.columns) * 360.0 / model.columns, atol=1e-3)
    assert np.all(np.diff(scan.time) > 0) and scan.time[-1] < 1.0 / model.rate_hz


def test_a_moving_sensors_points_are_smeared_by_their_firing_times(tracer):
    device, backend = tracer
    model = OS1_64
    lidar = parts.lidar(DeviceScene(room(), device), model, backend=backend, noise=False)
    start = np.array([0.0, 0.0, 1.0])
    speed = 20.0  # m/s along +x: 2 m over the 0.1 s scan
    last = start + [speed * (model.columns - 1) / (model.columns * model.rate_hz), 0, 0]  # at the last firing
    scan = lidar.scan(transform(start, [1, 0, 0, 0]), transform(last, [1, 0, 0, 0]))
    lidar.close()
    origins = start + np.outer(speed * scan.time, [1.0, 0.0, 0.0])[:, None, :]
    expected = wall_distance(origins, scan.directions.astype(np.float64))
    np.testing.assert_allclose(scan.range, expected, rtol=2e-5)
    still = wall_distance(start, scan.directions.astype(np.float64))
    assert np.abs(scan.range - still).max() > 1.0  # the smear is real: the wall ahead got 2 m nearer


def test_intensity_is_albedo_times_the_cosine_of_incidence(tracer):
    device, backend = tracer
    lidar = parts.lidar(DeviceScene(room(), device), VLP16, backend=backend, noise=False)
    scan = lidar.scan(transform([0, 0, 1], [1, 0, 0, 0]))
    lidar.close()
    d = scan.directions.astype(np.float64)
    with np.errstate(divide="ignore"):
        exits = np.where(d > 0, (HIGH - [0, 0, 1]) / d, (LOW - [0, 0, 1]) / d)
    axis = np.argmin(np.where(exits > 0, exits, np.inf), axis=-1)  # which wall: its normal is that axis
    cosine = np.abs(np.take_along_axis(d, axis[..., None], axis=-1)[..., 0])
    albedo = scan.intensity / cosine
    lit = cosine > 0.2
    assert np.ptp(albedo[lit]) < 0.02 and albedo[lit].mean() > 0.5  # one albedo, whatever the angle
    # Over an open floor, the beams above the horizon return nothing: range +inf, intensity 0.
    floor = quad([[-99, -99, 0], [99, -99, 0], [99, 99, 0], [-99, 99, 0]])  # -1 degree meets it at 57 m
    open_air = parts.lidar(DeviceScene(scene_of((floor, 1)), device), VLP16, backend=backend, noise=False)
    scan = open_air.scan(transform([0, 0, 1], [1, 0, 0, 0]))
    open_air.close()
    missed = np.isinf(scan.range)
    assert missed.sum() == VLP16.columns * 8  # the eight beams at or above +1 degree
    assert np.all(scan.intensity[missed] == 0.0) and np.all(scan.intensity[~missed] > 0.0)


def test_an_actor_added_after_the_first_scan_returns_its_own_albedo(tracer):
    """The per-face reflectivity table follows the world's appearance: a grey box added after the first
    scan reads its own albedo (0.3), not a stale table's, and the walls keep theirs."""
    from goggles.scene.actors import box_shape

    device, backend = tracer
    world = DeviceScene(room(), device)
    lidar = parts.lidar(world, VLP16, backend=backend, noise=False)
    walls = lidar.scan(transform([0, 0, 1], [1, 0, 0, 0]))
    shape = world.add_shape(box_shape("box", (0.5, 6.0, 6.0), rgb=(0.3, 0.3, 0.3)))
    world.set_actors([shape], transform([3.0, 0.0, 1.0], [1, 0, 0, 0])[None])  # its face at x = 2.75
    scan = lidar.scan(transform([0, 0, 1], [1, 0, 0, 0]))
    lidar.close()
    d = scan.directions.astype(np.float64)
    ahead = (d[..., 0] > 0.95) & np.isfinite(scan.range)  # beams that meet the box's face head-on
    assert ahead.sum() > 20
    np.testing.assert_allclose(scan.range[ahead], 2.75 / d[ahead][:, 0], rtol=1e-4)
    albedo = scan.intensity[ahead] / d[ahead][:, 0]  # the cosine of incidence on a face normal to x
    np.testing.assert_allclose(albedo, 0.3, atol=2.0 / 255)
    assert walls.intensity[ahead].mean() > 0.5  # the wall behind it, seen before


def test_a_rosette_drawn_on_the_device_is_the_models_pattern(device):
    """The scan's directions come from a kernel; they are the model's own (``LidarModel.rays``), late
    into a long run too, where the pattern's index is in the billions."""
    lidar = parts.lidar(DeviceScene(room(), device), MID360)
    for scan in (0, 1, 123_456):
        lidar._scan = scan
        drawn = lidar.scan(transform([0, 0, 1], [1, 0, 0, 0])).directions
        np.testing.assert_allclose(drawn, MID360.rays(scan)[0], atol=2e-6)
    lidar.close()


def test_a_rosette_does_not_repeat_and_keeps_to_its_field(device):
    lidar = parts.lidar(DeviceScene(room(), device), MID360, noise=False)
    first = lidar.scan(transform([0, 0, 1], [1, 0, 0, 0]))
    second = lidar.scan(transform([0, 0, 1], [1, 0, 0, 0]))
    lidar.close()
    assert first.range.size == MID360.points_per_scan == 20_000
    elevation = np.degrees(np.arcsin(first.directions[..., 2]))
    assert elevation.min() >= -7.0 - 1e-4 and elevation.max() <= 52.0 + 1e-4
    assert not np.allclose(first.directions, second.directions)  # the next scan samples new directions
    expected = wall_distance(np.array([0, 0, 1.0]), second.directions.astype(float))
    np.testing.assert_allclose(second.range, expected, rtol=2e-5)


@pytest.mark.parametrize("model", [VLP16, MID360], ids=["vlp16", "mid360"])
def test_range_noise_is_the_datasheets_and_a_function_of_the_scans_time(device, model):
    """Each return carries N(0, range_sigma); the noise and a rosette's stretch of its pattern follow
    the scan's time (µs), so a replay that scans the same instant gets the same scan."""
    world = DeviceScene(room(), device)
    exact, noisy = parts.lidar(world, model, noise=False, seed=3), parts.lidar(world, model, seed=3, stream=7)
    pose = transform([0.5, -0.7, 1.2], [1, 0, 0, 0])
    truth = exact.scan(pose, utime=200_000)
    scans = [noisy.scan(pose, utime=t) for t in (100_000, 200_000, 200_000)]
    again = parts.lidar(world, model, seed=3, stream=7).scan(pose, utime=200_000)
    for lidar in (exact, noisy):
        lidar.close()
    np.testing.assert_array_equal(truth.directions, scans[1].directions)
    valid = np.isfinite(truth.range)
    error = (scans[1].range - truth.range)[valid].astype(np.float64)
    assert valid.sum() > 10_000 and abs(error.std() / model.range_sigma - 1.0) < 0.03 and abs(error.mean()) < 1e-3
    assert np.array_equal(scans[1].range, scans[2].range) and np.array_equal(scans[1].range, again.range)
    assert not np.array_equal(scans[0].range, scans[1].range)


def test_a_lidar_takes_a_presets_name_and_refuses_a_pose_it_cannot_use_without_moving_on():
    """A preset's name serves as the model; a pose that is not rigid is one error naming the scan's
    end, and the rosette does not advance for a scan that was refused."""
    from goggles.errors import ConfigError

    lidar = parts.lidar(DeviceScene(room(), "cpu"), "mid360")
    assert lidar.model is MID360
    start = transform([0, 0, 1], [1, 0, 0, 0])
    with pytest.raises(ConfigError, match="LiDAR pose at the scan's end must have orthonormal rotations"):
        lidar.scan(start, 2.0 * start)
    with pytest.raises(ConfigError, match=r"LiDAR pose at the scan's start must be finite"):
        lidar.scan(np.full((4, 4), np.nan))
    np.testing.assert_allclose(lidar.scan(start).directions, MID360.rays(0)[0], atol=2e-6)  # still scan 0
    lidar.close()
    with pytest.raises(ConfigError, match=r"LiDAR 'os2-128': choose one of"):
        parts.lidar(DeviceScene(room(), "cpu"), "os2-128")


@pytest.mark.slow
def test_a_run_files_lidar_is_published_and_recorded_for_ros2(tmp_path):
    """[[lidar]] in a run file: a lidar_t per scan at the preset's rate on the buses, and PointCloud2s
    in a ROS 2 recording that rosbags reads."""
    import subprocess
    import sys
    from pathlib import Path

    from goggles.logs.record import read_log
    from goggles.transport.schema import decode_any

    repo = Path(__file__).resolve().parents[2]
    run = tmp_path / "run.toml"
    run.write_text(
        f"""
[run]
scene = "{repo / "assets/arena.toml"}"
[clock]
scale = 20.0
[lcm]
enabled = false
[zmq]
enabled = false
[[vehicle]]
name = "quad0"
start = [0.0, 0.0, 0.1, 0.0]
[[lidar]]
vehicle = "quad0"
name = "lidar"
preset = "vlp16"
"""
    )
    for profile in ("goggles", "ros2"):
        out = tmp_path / f"{profile}.mcap"
        command = [sys.executable, "-m", "goggles.cli", "run", str(run), "--duration", "1", "--record", str(out)]
        result = subprocess.run([*command, "--record-profile", profile], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
    scans = [decode_any(d) for _, c, d in read_log(tmp_path / "goggles.mcap") if c == "quad0/lidar/lidar"]
    assert len(scans) == 11  # 10 Hz over 1 s, from t = 0
    first = scans[0]
    points = np.c_[first.x, first.y, first.z]
    distance = np.linalg.norm(points, axis=1)
    assert first.num_points > 5000 and np.all((distance >= VLP16.min_range) & (distance <= VLP16.max_range + 1e-3))
    assert set(first.ring) <= set(range(16)) and 0.0 <= min(first.time) and max(first.time) < 0.1

    rosbags = pytest.importorskip("rosbags.highlevel")
    with rosbags.AnyReader([tmp_path / "ros2.mcap"]) as reader:
        clouds = [c for c in reader.connections if c.msgtype == "sensor_msgs/msg/PointCloud2"]
        assert [c.topic for c in clouds] == ["/goggles/quad0/lidar/points"]
        _, _, raw = next(iter(reader.messages(connections=clouds)))
        cloud = reader.deserialize(raw, "sensor_msgs/msg/PointCloud2")
    assert cloud.header.frame_id == "quad0/lidar" and cloud.width == first.num_points
    assert [f.name for f in cloud.fields] == ["x", "y", "z", "intensity", "time", "ring"]
