"""LiDAR against closed forms: in a box room every beam measures the wall its ray meets, at every
elevation and azimuth; a scan has the preset's number of points; a moving sensor's points are smeared
as their firing times predict; intensity is albedo x cos(incidence)."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from goggles.frames import transform
from goggles.sensors.lidar import MID360, OS1_64, VLP16, Lidar
from goggles.world import DeviceScene
from tests.conftest import scene_of

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
    lidar = Lidar(DeviceScene(room(), device), model, backend=backend)
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
    lidar = Lidar(DeviceScene(room(), device), model, backend=backend)
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
    lidar = Lidar(DeviceScene(room(), device), VLP16, backend=backend)
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


def test_a_rosette_does_not_repeat_and_keeps_to_its_field(device):
    lidar = Lidar(DeviceScene(room(), device), MID360)
    first = lidar.scan(transform([0, 0, 1], [1, 0, 0, 0]))
    second = lidar.scan(transform([0, 0, 1], [1, 0, 0, 0]))
    lidar.close()
    assert first.range.size == MID360.points_per_scan == 20_000
    elevation = np.degrees(np.arcsin(first.directions[..., 2]))
    assert elevation.min() >= -7.0 - 1e-4 and elevation.max() <= 52.0 + 1e-4
    assert not np.allclose(first.directions, second.directions)  # the next scan samples new directions
    expected = wall_distance(np.array([0, 0, 1.0]), second.directions.astype(float))
    np.testing.assert_allclose(second.range, expected, rtol=2e-5)
