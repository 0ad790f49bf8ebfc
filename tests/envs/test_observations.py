"""Camera, range and beacon observations against independent renders and the engine's sensors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DroneVectorEnv, RaceTask  # noqa: E402
from goggles.errors import ConfigError  # noqa: E402
from goggles.render import CameraModel, RenderSettings  # noqa: E402
from goggles.world import DeviceScene  # noqa: E402
from tests.envs.support import CAMERA  # noqa: E402


def test_each_environment_sees_its_own_race_gates(arena):
    """With a camera, every environment's perturbed gates are in its depth image and nobody else's:
    each image equals a trimesh ray cast (Embree through trimesh, an independent tracer) of the arena
    plus that environment's own gate frames, and the gates are what several of its pixels see."""
    import dataclasses

    import trimesh

    from goggles.frames import transform
    from goggles.scene.gates import gate_bars

    arena = dataclasses.replace(arena, splats=None)  # meshes only: trimesh knows no Gaussian splats
    scene = DeviceScene(arena, "cpu", max_actors=64)
    camera = CameraModel.from_fov(48, 36, 90.0)
    env = DroneVectorEnv(3, task=RaceTask(spawn_radius=0.0), camera=camera, scene=scene, device="cpu")
    observations, _ = env.reset(seed=3)
    race, depth = env._prepared, observations["depth"].numpy()
    states = env.sim.states()
    static = trimesh.Trimesh(arena.vertices, arena.faces, process=False)
    rays_C = camera.ray_directions().reshape(-1, 3)
    gate_pixels = []
    for i in range(3):
        bars = []
        for k in range(race.gate_position.shape[1]):
            T_WG = transform(
                race.gate_position.numpy()[i, k],
                [np.cos(race.gate_yaw.numpy()[i, k] / 2), 0, 0, np.sin(race.gate_yaw.numpy()[i, k] / 2)],
            )
            for size, centre in gate_bars((1.6, 1.6)):
                bar = trimesh.creation.box(extents=size, transform=transform(centre, [1.0, 0, 0, 0]))
                bars.append(bar.apply_transform(T_WG))
        gates = trimesh.util.concatenate(bars)
        R_WB = transform([0, 0, 0], states.attitude[i])[:3, :3]
        R_WC = R_WB @ env._R_BC.numpy()[i]
        origins = np.tile(states.position[i], (len(rays_C), 1))
        directions = rays_C @ R_WC.T
        expected = np.full(len(rays_C), np.inf)
        on_gate = np.zeros(len(rays_C), bool)
        for mesh, is_gate in ((static, False), (gates, True)):
            hits, index, _ = mesh.ray.intersects_location(origins, directions, multiple_hits=False)
            t = np.linalg.norm(hits - origins[index], axis=1)
            nearer = t < expected[index]
            expected[index[nearer]] = t[nearer]
            on_gate[index[nearer]] = is_gate
        expected = (expected * rays_C[:, 2]).reshape(36, 48)
        seen = np.isfinite(expected) & (expected > camera.min_depth) & (expected < camera.max_depth)
        agree = np.isclose(depth[i][seen], expected[seen], rtol=1e-3)
        assert agree.mean() > 0.99, f"environment {i}: {np.count_nonzero(~agree)} pixels differ"
        assert on_gate.reshape(36, 48)[seen].sum() >= 20
        gate_pixels.append(on_gate.reshape(36, 48) & seen)
    assert not np.array_equal(gate_pixels[0], gate_pixels[1])  # each its own perturbed gates
    with pytest.raises(ConfigError, match="max_actors >= 300"):
        DroneVectorEnv(50, task=RaceTask(), camera=camera, scene=DeviceScene(arena, "cpu"), device="cpu")
    env.close()


@pytest.mark.slow
def test_only_an_environments_own_gates_shade_its_rgb(device, arena):
    """Each environment's camera sees its own gates only, and only they may cast shadows in its image:
    environment 1 of a batch of 3 and one environment seeded as environment 1 render the same rgb
    bytes. The shadows were tested against every placed gate, so the other environments' perturbed
    gates shaded the ground in its view (328 of 96x72 pixels)."""
    camera = CameraModel.from_fov(96, 72, 90.0)
    images = []
    for n, first in ((3, 0), (1, 1)):
        env = DroneVectorEnv(
            n,
            task=RaceTask(spawn_radius=0.0),
            camera=camera,
            camera_outputs=("depth", "rgb"),
            scene=DeviceScene(arena, device, max_actors=64),
            device=device,
            first_env=first,
        )
        observations, _ = env.reset(seed=3)
        images.append(observations["rgb"][1 - first].cpu().numpy().copy())
        env.close()
    together, alone = images
    assert together.tobytes() == alone.tobytes(), f"{np.count_nonzero((together != alone).any(-1))} pixels differ"


def test_segmentation_observations_show_what_each_camera_sees(arena):
    """``camera_outputs=("depth", "segmentation")``: class ids where depth measured something, 0 where
    nothing was hit; a race gate's pixels carry the gate class."""
    from goggles.scene.gates import GATE_CLASS

    scene = DeviceScene(arena, "cpu", max_actors=64)
    env = DroneVectorEnv(
        2,
        task=RaceTask(spawn_radius=0.0),
        camera=CameraModel.from_fov(48, 36, 90.0),
        camera_outputs=("depth", "segmentation"),
        scene=scene,
        device="cpu",
    )
    observations, _ = env.reset(seed=3)
    assert env.single_observation_space["segmentation"].dtype == np.int32
    segmentation, depth = observations["segmentation"].numpy(), observations["depth"].numpy()
    assert segmentation.shape == (2, 36, 48) and observations["segmentation"].dtype == torch.int32
    assert np.all(segmentation[depth > 0] > 0) and np.all(segmentation[depth == 0] == 0)
    assert (segmentation == GATE_CLASS).sum(axis=(1, 2)).min() >= 20
    with pytest.raises(ConfigError, match="camera_outputs"):
        DroneVectorEnv(1, camera=CAMERA, camera_outputs=("normal_W",), scene=scene, device="cpu")
    env.close()


def test_rgb_observations_equal_the_renderers_image_from_the_same_pose(arena):
    """``rgb``: (N, H, W, 3) uint8, lit by the sun, equal to what a Renderer draws from each vehicle's
    camera pose (a render the ordinary way, from host poses)."""
    from goggles.frames import transform
    from goggles.render import Renderer, Shading

    scene = DeviceScene(arena, "cpu")
    env = DroneVectorEnv(2, camera=CAMERA, camera_outputs=("rgb",), scene=scene, device="cpu")
    observations, _ = env.reset(seed=4)
    rgb = observations["rgb"].numpy().copy()
    assert rgb.shape == (2, 24, 32, 3) and rgb.dtype == np.uint8 and "depth" not in observations
    states = env.sim.states()
    poses = []
    for i in range(2):
        T_WB = transform(states.position[i], states.attitude[i])
        T_WC = np.eye(4)
        T_WC[:3, :3], T_WC[:3, 3] = T_WB[:3, :3] @ env._R_BC.numpy()[i], states.position[i]
        poses.append(T_WC)
    reference = Renderer(scene, [CAMERA] * 2, RenderSettings(outputs={"rgb"}, shading=Shading.SUN))
    reference.render(np.stack(poses))
    expected = reference.images().rgb
    assert np.abs(rgb.astype(int) - expected).max() <= 1 and rgb.std() > 5
    reference.close()
    env.close()


def test_depth_model_noise_grows_with_the_square_of_depth(arena):
    """``depth_model="d435"``: against the exact depth of the same poses, the error divided by the
    disparity model's sigma_Z = Z^2 sigma_d / (f B) has unit spread where the disparity is over a pixel
    (quantisation adds 1 %), and only pixels far enough for the disparity to fall under a quantisation
    step read 0."""
    from goggles.sensors.stereo_depth import D435

    scene = DeviceScene(arena, "cpu")
    camera = CameraModel.from_fov(160, 120, 80.0, max_depth=200.0)
    noisy = DroneVectorEnv(8, camera=camera, depth_model="d435", scene=scene, device="cpu")
    exact = DroneVectorEnv(8, camera=camera, scene=scene, device="cpu")
    measured, truth = noisy.reset(seed=2)[0]["depth"].numpy(), exact.reset(seed=2)[0]["depth"].numpy()
    fb = camera.fx * D435.baseline_m
    both = (measured > 0) & (truth > 0) & (truth < fb / 1.0)  # disparity above 1 px: the linear regime
    z = truth[both]
    normalised = (measured[both] - z) / (z**2 * D435.subpixel_sigma_px / fb)
    assert both.sum() > 2_000 and 0.9 < normalised.std() < 1.1
    # Invalid (0) only where the noisy disparity can fall under one quantisation step: far away.
    lost = truth[(measured == 0) & (truth > 0)]
    assert lost.size > 0 and np.all(lost > fb / (D435.subpixel_step_px + 5 * D435.subpixel_sigma_px))
    noisy.close()
    exact.close()


def test_range_observations_measure_the_ground_below_each_vehicle(arena):
    """``range_sensor``: a downward beam per vehicle reads its height over the arena, as a trimesh ray
    cast straight down finds it (exact without noise); a noisy multizone sensor keeps the batch equal
    to each environment alone."""
    import trimesh

    from goggles.sensors.ranges import VL53L5CX, RangeSensorModel

    scene = DeviceScene(arena, "cpu")
    exact = RangeSensorModel("exact-altimeter", 1, 1, (0.0, 0.0), 0.0, 20.0, 0.0)
    env = DroneVectorEnv(6, range_sensor=exact, scene=scene, device="cpu")
    observations, _ = env.reset(seed=5)
    for _ in range(10):
        observations, *_ = env.step(torch.tensor([[0.2, 0.5, -0.3, 0.1]] * 6))
    states = env.sim.states()
    mesh = trimesh.Trimesh(arena.vertices, arena.faces, process=False)
    down = np.array([quaternion_about(q) @ [0.0, 0.0, -1.0] for q in states.attitude])
    hits, index, _ = mesh.ray.intersects_location(states.position, down, multiple_hits=False)
    expected = np.full(6, 20.0)
    expected[index] = np.linalg.norm(hits - states.position[index], axis=1)
    assert observations["ranges"].shape == (6, 1)
    np.testing.assert_allclose(observations["ranges"].numpy()[:, 0], expected, rtol=1e-4)
    env.close()

    batch = DroneVectorEnv(3, range_sensor=VL53L5CX, scene=scene, device="cpu")
    alone = DroneVectorEnv(1, range_sensor=VL53L5CX, scene=scene, device="cpu", first_env=2)
    together, single = batch.reset(seed=1)[0]["ranges"], alone.reset(seed=1)[0]["ranges"]
    assert together.shape == (3, 64) and torch.equal(together[2], single[0])
    assert torch.all((together >= VL53L5CX.min_range) & (together <= VL53L5CX.max_range))
    batch.close()
    alone.close()


def quaternion_about(q) -> np.ndarray:
    """R_WB of a (w, x, y, z) quaternion, by trimesh."""
    from trimesh.transformations import quaternion_matrix

    return quaternion_matrix(q)[:3, :3]


def test_beacon_observations_match_the_engines_beacon_sensor(arena):
    """``beacons=True`` with a race: each environment's gate beacons as its camera detects them equal
    what ``goggles.sensors.beacons.BeaconSensor`` (the engine's detector) reports for a world holding
    that environment's gates alone, pixel positions checked against OpenCV's projection; slots are
    fixed (beacon j of gate k in slot 4k + j) and padded with zeros where nothing is seen."""
    import cv2

    from goggles.frames import transform
    from goggles.scene.gates import gate_shape
    from goggles.sensors.beacons import BeaconSensor
    from goggles.world import Beacon

    scene = DeviceScene(arena, "cpu", max_actors=64)
    camera = CameraModel.from_fov(160, 120, 90.0)
    env = DroneVectorEnv(3, task=RaceTask(spawn_radius=0.0), camera=camera, beacons=True, scene=scene, device="cpu")
    observations, _ = env.reset(seed=7)
    seen, mask = observations["beacons"].numpy(), observations["beacon_mask"].numpy()
    race, states = env._prepared, env.sim.states()
    assert seen.shape == (3, 24, 3) and mask.shape == (3, 24) and mask.sum(axis=1).min() >= 4
    assert np.all(seen[~mask] == 0)
    for i in range(3):
        own = DeviceScene(arena, "cpu", shapes=[gate_shape((1.6, 1.6))], max_actors=6)
        gates = [
            transform(race.gate_position.numpy()[i, k], [np.cos(y / 2), 0, 0, np.sin(y / 2)])
            for k, y in enumerate(race.gate_yaw.numpy()[i])
        ]
        own.set_actors([0] * 6, np.stack(gates))
        positions = race.beacons_W.numpy()[i]
        beacons = [Beacon(f"b{b:02d}", tuple(positions[b])) for b in range(24)]
        T_WC = np.eye(4)
        T_WC[:3, :3] = transform([0, 0, 0], states.attitude[i])[:3, :3] @ env._R_BC.numpy()[i]
        T_WC[:3, 3] = states.position[i]
        detections = {int(d.id[1:]): d for d in BeaconSensor(own, beacons, [camera]).detect(T_WC[None])}
        assert set(detections) == set(np.flatnonzero(mask[i]))
        for b, d in detections.items():
            np.testing.assert_allclose(seen[i, b], [d.u, d.v, d.range], rtol=1e-4, atol=1e-3)
        rvec, _ = cv2.Rodrigues(T_WC[:3, :3].T)
        tvec = -T_WC[:3, :3].T @ T_WC[:3, 3]
        K = np.array([[camera.fx, 0, camera.cx], [0, camera.fy, camera.cy], [0, 0, 1]])
        uv, _ = cv2.projectPoints(positions[mask[i]].astype(np.float64), rvec, tvec, K, np.array(camera.distortion))
        np.testing.assert_allclose(seen[i, mask[i], :2], uv[:, 0], atol=1e-2)
    with pytest.raises(ConfigError, match="beacons need a camera"):
        DroneVectorEnv(1, beacons=True, device="cpu")
    env.close()


def test_event_frames_count_each_pixels_threshold_crossings_since_the_last_step(arena):
    """``events``: (N, 2, H, W) ON and OFF counts. After a reset each pixel's reference is its level, so
    the next step's counts are floor(|L1 - L0| / C) of the two colour observations' log luminance
    (L = ln(I + eps), Rec. 709), ON where it rose; the episode's first observation has none."""
    from goggles.sensors.events import EventCameraModel

    scene = DeviceScene(arena, "cpu")
    c = 0.15
    env = DroneVectorEnv(
        2,
        camera=CAMERA,
        camera_outputs=("rgb", "events"),
        event_camera=EventCameraModel(c, c),
        scene=scene,
        control="velocity",
        physics_per_action=96,  # 10 Hz: room to turn
        device="cpu",
    )
    observations, _ = env.reset(seed=2)
    assert observations["events"].shape == (2, 2, 24, 32) and float(observations["events"].sum()) == 0.0

    def level(rgb):
        luminance = (rgb.astype(np.float64) @ np.array([0.2126, 0.7152, 0.0722])) / 255.0
        return np.log(luminance + 1e-3)

    before = level(observations["rgb"].numpy())
    action = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, -1.0]])  # turn both, opposite ways
    observations, *_ = env.step(action)
    after = level(observations["rgb"].numpy())
    counts = observations["events"].numpy()
    change = after - before
    expected_on = np.floor(np.maximum(change, 0.0) / c + 1e-4)
    expected_off = np.floor(np.maximum(-change, 0.0) / c + 1e-4)
    near_a_step = np.abs(np.abs(change) / c - np.round(np.abs(change) / c)) < 1e-3  # float32 at a threshold
    assert counts.sum() > 50
    np.testing.assert_array_equal(counts[:, 0][~near_a_step], expected_on[~near_a_step])
    np.testing.assert_array_equal(counts[:, 1][~near_a_step], expected_off[~near_a_step])
    env.close()
