"""Recorded device work (goggles.runtime.recorded_work): a recording replays exactly what running the same work
eagerly gives, call after call, so nothing it launches passes a per-call value by value, allocates,
or reads the device from the host. Warp records on the CPU too, so these run everywhere; on CUDA the
recordings are CUDA graphs."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from goggles.dynamics import ControlMode, MultirotorSim, SimulatorSettings, load_airframe
from goggles.runtime.recorded_work import RecordedWork
from goggles.scene import box_shape
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DroneVectorEnv, RaceTask, Randomization  # noqa: E402
from goggles.paths import default_scene  # noqa: E402
from goggles.render import CameraModel  # noqa: E402
from goggles.scene import load_static_scene  # noqa: E402
from goggles.sensors.ranges import VL53L5CX  # noqa: E402


@wp.kernel
def add_kernel(total: wp.array(dtype=float), amount: float):
    total[0] = total[0] + amount


def test_work_runs_eagerly_then_records_once_per_key_and_replays():
    total = wp.zeros(1, dtype=float, device="cpu")

    def launch(amount: float) -> None:
        wp.launch(add_kernel, dim=1, inputs=[total, amount], device="cpu")

    assert not RecordedWork(launch, "cpu").enabled  # by default only on CUDA
    work = RecordedWork(launch, "cpu", enabled=True)
    for amount in (1.0, 1.0, 1.0, 2.0, 2.0, 1.0):
        work(amount)
    assert total.numpy()[0] == 8.0  # every call ran once: eager, recorded + replayed, replayed
    assert work.recordings == 2  # one per amount (the amount is passed by value: it is the key)
    work.forget()
    work(1.0)
    work(1.0)
    assert total.numpy()[0] == 10.0 and work.recordings == 3


def _world(device):
    wall = quad([[3.5, 10, -1], [3.5, -10, -1], [3.5, -10, 10], [3.5, 10, 10]])
    floor = quad([[-10, -10, 0], [10, -10, 0], [10, 10, 0], [-10, 10, 0]])
    return DeviceScene(scene_of((wall, 1), (floor, 2)), device, shapes=[box_shape("crate", [1.0, 1.0, 3.0])])


def test_recorded_steps_equal_eager_steps_through_imu_samples_contacts_and_placed_actors(device):
    """Three vehicles fly at a wall with noise on, the IMU sampled every other step (an odd step count
    lands between samples), a crate placed in one's path half-way: every state and contact report of
    the recorded simulator equals the eager one's."""
    airframe = load_airframe("fg-quad")
    sims = []
    for recorded in (False, True):
        world = _world(device)
        sim = MultirotorSim(
            airframe, 3, SimulatorSettings(imu_rate=480.0, recorded=recorded, seed=7), device=device, world=world
        )
        sim.reset(position=[[0, 0, 1.5], [0, 2, 1.5], [0, -2, 1.5]], rotor_speed=airframe.hover_speed)
        sim.set_command(ControlMode.VELOCITY, [[3.0, 0, 0, 0], [4.0, 0, 0, 0], [2.0, 0, 0, 0]])
        sims.append(sim)
    contacts = [[], []]
    for call, steps in enumerate([1, 3, 3, 3, 8, 8, 8, 5] * 40):
        if call == 60:
            for sim in sims:
                T = np.eye(4)
                T[:3, 3] = [2.0, -2.0, 1.5]
                sim.world.set_actors([0], T[None])
        for sim, seen in zip(sims, contacts):
            sim.step(steps)
            seen += [(r.vehicle, r.step, tuple(r.point)) for r in sim.contacts()]
        eager, recorded = (s.states() for s in sims)
        for name in ("position", "velocity", "attitude", "rates", "imu_accel", "imu_gyro", "crashed"):
            np.testing.assert_array_equal(getattr(recorded, name), getattr(eager, name), err_msg=f"call {call}: {name}")
    assert contacts[0] == contacts[1] and {v for v, *_ in contacts[0]} == {0, 1, 2}  # the crate stopped vehicle 2
    assert sims[1]._recorded.recordings >= 4  # steps of 1, 3, 5, 8, and again once the crate was placed
    assert sims[0]._recorded.recordings == 0


@pytest.fixture(scope="module")
def arena():
    return load_static_scene(default_scene())


@pytest.mark.slow
@pytest.mark.parametrize("autoreset, backend", [("next", "warp"), ("same", "warp"), ("next", "bvh"), ("next", "auto")])
def test_recorded_environment_steps_equal_eager_steps(device, arena, autoreset, backend):
    """A race with every observation (depth with stereo noise, segmentation, rgb, ranges with noise,
    beacons), randomised airframes and short episodes: the recorded environment returns the eager one's
    observations, rewards and done flags byte for byte, through autoresets and a reseeded reset (with
    Embree on the CPU, the physics and resets are recorded and the observation runs eagerly)."""
    mode = {"next": gymnasium.vector.AutoresetMode.NEXT_STEP, "same": gymnasium.vector.AutoresetMode.SAME_STEP}
    randomization = Randomization.from_tables({"airframe": {"mass": {"uniform": [0.8, 1.2]}}})
    envs = [
        DroneVectorEnv(
            3,
            task=RaceTask(episode_s=0.05),
            camera=CameraModel.from_fov(32, 24, 90.0),
            camera_outputs=("depth", "segmentation", "rgb"),
            depth_model="d435",
            range_sensor=VL53L5CX,
            beacons=True,
            scene=DeviceScene(arena, device, max_actors=64),
            randomization=randomization,
            autoreset=mode[autoreset],
            backend=backend,
            recorded=recorded,
            device=device,
        )
        for recorded in (False, True)
    ]
    generator = torch.Generator().manual_seed(3)
    results = [env.reset(seed=1)[0] for env in envs]
    _assert_same(results, "reset")
    ended = 0
    for k in range(45):
        if k == 30:
            results = [env.reset(seed=9)[0] for env in envs]
            _assert_same(results, "reseeded reset")
            continue
        actions = (torch.rand(3, 4, generator=generator) * 0.4 - 0.2).to(envs[0].torch_device)
        results = [env.step(actions) for env in envs]
        (observations, *flags, info), (recorded_observations, *recorded_flags, recorded_info) = results
        _assert_same((observations, recorded_observations), f"step {k}")
        for name, a, b in zip(("reward", "terminated", "truncated"), flags, recorded_flags):
            assert torch.equal(a, b), f"step {k}: {name} differs"
        if autoreset == "same":
            _assert_same((info["final_obs"], recorded_info["final_obs"]), f"step {k}: final")
        ended += int((flags[1] | flags[2]).sum())
    assert ended >= 6  # several episodes ended and restarted on the way
    recorded = envs[1]
    assert recorded._physics_recorded.recordings >= 1 and recorded._restart_recorded.recordings >= 1
    assert (recorded._score_recorded.recordings >= 1) == (recorded.renderer.backend != "embree")
    for env in envs:
        env.close()


def _assert_same(pair, where: str) -> None:
    eager, recorded = pair
    for name in eager:
        assert torch.equal(eager[name], recorded[name]), f"{where}: {name} differs"
