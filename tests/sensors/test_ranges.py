"""Range sensors: the downward altimeter over a plane, its noise, REP 117 limits, a zone grid, actors."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.frames import transform
from goggles.scene import box_shape
from goggles.sensors.ranges import FLIGHTGOGGLES_ALTIMETER, VL53L5CX, RangeSensor, RangeSensorModel, downward_pose
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of


def ground(device, **kwargs):
    plane = quad([[-100, -100, 0], [100, -100, 0], [100, 100, 0], [-100, 100, 0]])
    return DeviceScene(scene_of((plane, 1)), device, **kwargs)


def test_downward_altimeter_reads_the_height(device):
    sensor = RangeSensor(ground(device), FLIGHTGOGGLES_ALTIMETER, noise=False)
    heights = np.array([0.5, 1.0, 3.7, 12.0, 19.9])
    readings = sensor.measure([downward_pose(transform([1.0, -2.0, h], [1, 0, 0, 0])) for h in heights])
    np.testing.assert_allclose(readings.ravel(), heights, rtol=1e-6)
    beyond = sensor.measure(downward_pose(transform([0, 0, 25.0], [1, 0, 0, 0])))
    assert np.isposinf(beyond).all()  # REP 117: no return within 20 m


def test_altimeter_noise_has_the_configured_sigma(device):
    sensor = RangeSensor(ground(device), FLIGHTGOGGLES_ALTIMETER, seed=3)
    poses = np.repeat(downward_pose(transform([0, 0, 5.0], [1, 0, 0, 0]))[None], 10_000, axis=0)
    readings = sensor.measure(poses).ravel()
    assert readings.mean() == pytest.approx(5.0, abs=3 * 0.0949 / 100)
    assert readings.std() == pytest.approx(0.0949, rel=0.05)
    again = sensor.measure(poses[:10]).ravel()
    assert not np.array_equal(again, readings[:10])  # every call draws new noise
    rerun = RangeSensor(ground(device), FLIGHTGOGGLES_ALTIMETER, seed=3).measure(poses).ravel()
    assert np.array_equal(rerun, readings)  # same seed, same readings


def test_zone_grid_over_a_plane_and_min_range(device):
    sensor = RangeSensor(ground(device), VL53L5CX, noise=False)
    readings = sensor.measure(downward_pose(transform([0, 0, 2.0], [1, 0, 0, 0])))[0]
    directions = VL53L5CX.directions()
    np.testing.assert_allclose(readings, 2.0 / directions[..., 2], rtol=1e-5)
    assert readings.shape == (8, 8) and readings[0, 0] > readings[3, 3]  # corner zones are slanted
    too_close = sensor.measure(downward_pose(transform([0, 0, 0.01], [1, 0, 0, 0])))
    assert np.isneginf(too_close).all()  # REP 117: closer than 2 cm
    beyond = sensor.measure(downward_pose(transform([0, 0, 6.0], [1, 0, 0, 0])))
    assert np.isposinf(beyond).all()


def test_ranges_see_actors(device):
    scene = ground(device, shapes=[box_shape("crate", [1.0, 1.0, 1.0])])
    sensor = RangeSensor(scene, FLIGHTGOGGLES_ALTIMETER, noise=False)
    pose = downward_pose(transform([0, 0, 3.0], [1, 0, 0, 0]))
    scene.set_actors([0], [transform([0, 0, 0.5], [1, 0, 0, 0])])
    assert sensor.measure(pose)[0, 0, 0] == pytest.approx(2.0, rel=1e-6)
    scene.set_actors([], np.zeros((0, 4, 4)))
    assert sensor.measure(pose)[0, 0, 0] == pytest.approx(3.0, rel=1e-6)


def test_bad_models_are_refused():
    from goggles.errors import ConfigError

    with pytest.raises(ConfigError):
        RangeSensorModel("x", 0, 1, (0.0, 0.0), 0.0, 1.0, 0.0)
    with pytest.raises(ConfigError):
        RangeSensorModel("x", 1, 1, (0.0, 0.0), 2.0, 1.0, 0.0)
