"""IR beacons: cv2.projectPoints pixels, occlusion by geometry and moving actors, attached beacons, noise."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from goggles.errors import ConfigError
from goggles.frames import camera_pose_from_body, quat_from_euler, transform
from goggles.render import CameraModel
from goggles.scene import box_shape
from goggles.sensors.beacons import BeaconNoise, BeaconSensor
from goggles.world import Beacon, DeviceScene
from tests.conftest import quad, scene_of

CAMERA = CameraModel.from_fov(640, 480, 70.0, distortion=(-0.2, 0.05, 0.001, -0.002, 0.0))


def world(device, **kwargs):
    wall = quad([[20, 30, -30], [20, -30, -30], [20, -30, 30], [20, 30, 30]])
    return DeviceScene(scene_of((wall, 1)), device, shapes=[box_shape("board", [0.1, 1.0, 1.0])], **kwargs)


def opencv_pixels(points_W: np.ndarray, T_WC: np.ndarray, camera: CameraModel) -> np.ndarray:
    T_CW = np.linalg.inv(T_WC)
    rvec, _ = cv2.Rodrigues(T_CW[:3, :3])
    pixels, _ = cv2.projectPoints(points_W, rvec, T_CW[:3, 3], camera.K, np.array(camera.distortion))
    return pixels.reshape(-1, 2)


def test_pixels_equal_cv2_project_points(device):
    rng = np.random.default_rng(0)
    T_WC = camera_pose_from_body(transform([0.5, -0.3, 1.2], quat_from_euler(0.05, -0.1, 0.2)))
    points_C = np.column_stack([rng.uniform(-2.5, 2.5, 200), rng.uniform(-1.8, 1.8, 200), rng.uniform(2.0, 15.0, 200)])
    points_W = points_C @ T_WC[:3, :3].T + T_WC[:3, 3]
    beacons = [Beacon(f"cloud/{i:03d}", tuple(p)) for i, p in enumerate(points_W)]
    sensor = BeaconSensor(world(device), beacons, [CAMERA])
    detections = sensor.detect(T_WC[None])
    expected = opencv_pixels(points_W, T_WC, CAMERA)
    inside = (expected[:, 0] >= -0.5) & (expected[:, 0] < 639.5) & (expected[:, 1] >= -0.5) & (expected[:, 1] < 479.5)
    assert len(detections) == inside.sum() > 100
    for detection in detections:
        i = int(detection.id.split("/")[1])
        assert abs(detection.u - expected[i, 0]) < 0.01 and abs(detection.v - expected[i, 1]) < 0.01
        assert detection.range == pytest.approx(np.linalg.norm(points_W[i] - T_WC[:3, 3]), rel=1e-5)
    assert [d.id for d in detections] == sorted(d.id for d in detections)  # stable order by id


def test_a_fisheye_camera_sees_beacons_where_cv2_fisheye_projects_them_and_behind_its_image_plane(device):
    """Beacons through a 200-degree Kannala-Brandt lens: cv2.fisheye.projectPoints within 85 degrees of
    the axis, r = f theta_d beyond 90 (where OpenCV's fisheye stops)."""
    k = (-0.012, 0.004, -0.001, 0.0002)
    camera = CameraModel.fisheye(640, 480, 200.0, distortion=k)
    rng = np.random.default_rng(2)
    T_WC = camera_pose_from_body(transform([0.5, -0.3, 1.2], quat_from_euler(0.05, -0.1, 0.2)))
    angle = np.radians(rng.uniform(0.0, 85.0, 150))
    phi = rng.uniform(0, 2 * np.pi, 150)
    rays = np.column_stack([np.sin(angle) * np.cos(phi), np.sin(angle) * np.sin(phi), np.cos(angle)])
    behind = np.array([[np.sin(np.radians(95.0)), 0.0, np.cos(np.radians(95.0))]])  # 5 degrees behind
    points_C = np.vstack([rays * rng.uniform(2.0, 15.0, (150, 1)), behind * 4.0])
    points_W = points_C @ T_WC[:3, :3].T + T_WC[:3, 3]
    sensor = BeaconSensor(world(device), [Beacon(f"cloud/{i:03d}", tuple(p)) for i, p in enumerate(points_W)], [camera])
    found = {int(d.id.split("/")[1]): (d.u, d.v) for d in sensor.detect(T_WC[None])}
    expected, _ = cv2.fisheye.projectPoints(points_C[None, :150], np.zeros(3), np.zeros(3), camera.K, np.array(k))
    expected = expected[0]
    inside = (expected[:, 0] >= -0.5) & (expected[:, 0] < 639.5) & (expected[:, 1] >= -0.5) & (expected[:, 1] < 479.5)
    assert set(found) - {150} == set(np.flatnonzero(inside)) and inside.sum() > 100
    for i in np.flatnonzero(inside):
        assert np.hypot(*(np.array(found[i]) - expected[i])) < 0.01
    theta = np.radians(95.0)
    theta_d = theta * (1 + theta**2 * (k[0] + theta**2 * (k[1] + theta**2 * (k[2] + theta**2 * k[3]))))
    assert found[150] == pytest.approx((camera.cx + camera.fx * theta_d, camera.cy), abs=0.01)


def test_occluded_beacon_reappears_when_the_occluder_moves(device):
    scene = world(device)
    sensor = BeaconSensor(scene, [Beacon("post/0", (10.0, 0.0, 0.0)), Beacon("post/1", (10.0, 3.0, 0.0))], [CAMERA])
    T_WC = camera_pose_from_body(np.eye(4))[None]
    assert [d.id for d in sensor.detect(T_WC)] == ["post/0", "post/1"]
    scene.set_actors([0], [transform([5.0, 0.0, 0.0], [1, 0, 0, 0])])  # a board between camera and post/0
    assert [d.id for d in sensor.detect(T_WC)] == ["post/1"]
    scene.set_actors([0], [transform([5.0, -2.0, 0.0], [1, 0, 0, 0])])  # moved aside
    assert [d.id for d in sensor.detect(T_WC)] == ["post/0", "post/1"]


def test_beacon_on_a_surface_does_not_occlude_itself(device):
    scene = world(device)
    on_wall = BeaconSensor(scene, [Beacon("wall/0", (20.0, 1.0, 0.5))], [CAMERA])
    assert len(on_wall.detect(camera_pose_from_body(np.eye(4))[None])) == 1
    behind_wall = BeaconSensor(scene, [Beacon("wall/1", (20.5, 1.0, 0.5))], [CAMERA])
    assert behind_wall.detect(camera_pose_from_body(np.eye(4))[None]) == []


def test_beacons_on_a_moving_gate_follow_it(device):
    scene = world(device)
    corners = [(0.0, y, z) for y, z in ((0.5, 0.5), (-0.5, 0.5), (-0.5, -0.5), (0.5, -0.5))]
    sensor = BeaconSensor(scene, [Beacon(f"gate/{i}", c, actor=0) for i, c in enumerate(corners)], [CAMERA])
    T_WC = camera_pose_from_body(np.eye(4))
    for position, yaw in (((6.0, 0.0, 0.0), 0.0), ((8.0, 1.0, 0.5), 0.4)):
        T_WA = transform(position, quat_from_euler(0.0, 0.0, yaw))
        scene.set_actors([0], [T_WA])  # the board the corners sit on (its front face at x = -0.05)
        # Corners on the board's mid-plane are inside it: put them on its front face instead.
        detections = BeaconSensor(
            scene, [Beacon(f"gate/{i}", (-0.051, c[1], c[2]), actor=0) for i, c in enumerate(corners)], [CAMERA]
        ).detect(T_WC[None], T_WA[None])
        points_W = np.array([T_WA[:3, :3] @ (-0.051, c[1], c[2]) + T_WA[:3, 3] for c in corners])
        expected = opencv_pixels(points_W, T_WC, CAMERA)
        assert [d.id for d in detections] == ["gate/0", "gate/1", "gate/2", "gate/3"]
        np.testing.assert_allclose([(d.u, d.v) for d in detections], expected, atol=0.01)
    with pytest.raises(ConfigError, match="poses of the actors"):
        sensor.detect(T_WC[None])


def test_noise_statistics(device):
    scene = world(device)
    beacons = [Beacon(f"grid/{i:03d}", (10.0, y, z)) for i, (y, z) in enumerate(np.ndindex(20, 10))]
    beacons = [Beacon(b.id, (10.0, (b.position[1] - 10) * 0.3, (b.position[2] - 5) * 0.3)) for b in beacons]
    T_WC = camera_pose_from_body(np.eye(4))[None]
    clean = {d.id: d for d in BeaconSensor(scene, beacons, [CAMERA]).detect(T_WC)}
    noisy = BeaconSensor(
        scene, beacons, [CAMERA], noise=BeaconNoise(pixel_sigma=0.7, dropout=0.2, false_positives=3.0), seed=4
    )
    errors, kept, false = [], 0, 0
    for _ in range(50):
        for d in noisy.detect(T_WC):
            if d.id.startswith("false/"):
                false += 1
                assert np.isnan(d.range)
            else:
                kept += 1
                errors += [d.u - clean[d.id].u, d.v - clean[d.id].v]
    assert np.std(errors) == pytest.approx(0.7, rel=0.05)
    assert kept / (50 * len(clean)) == pytest.approx(0.8, abs=0.02)
    assert false / 50 == pytest.approx(3.0, abs=0.5)
    with pytest.raises(ConfigError, match="unique"):
        BeaconSensor(scene, [beacons[0], beacons[0]], [CAMERA])
