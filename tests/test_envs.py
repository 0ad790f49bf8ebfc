"""The learning environments: Gymnasium's checker, batched = single, autoreset of the ended only,
bad actions refused before any kernel, closed-form physics through the action mapping, domain
randomisation, and memory over 10 000 steps."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DroneEnv, DroneVectorEnv, HoverTask, Randomization  # noqa: E402
from goggles.errors import ConfigError  # noqa: E402
from goggles.paths import default_scene  # noqa: E402
from goggles.render import CameraModel  # noqa: E402
from goggles.scene import load_static_scene  # noqa: E402
from goggles.world import DeviceScene  # noqa: E402

CAMERA = CameraModel.from_fov(32, 24, 80.0)


@pytest.fixture(scope="module")
def arena():
    return load_static_scene(default_scene())


def test_single_view_passes_gymnasiums_env_checker(arena):
    from gymnasium.utils.env_checker import check_env

    env = DroneEnv(camera=CAMERA, scene=DeviceScene(arena, "cpu"), device="cpu")
    check_env(env, skip_render_check=True)
    env.close()


def test_spaces_and_tensor_observations(arena):
    env = DroneVectorEnv(3, camera=CAMERA, scene=DeviceScene(arena, "cpu"), device="cpu")
    observations, _ = env.reset(seed=0)
    assert env.single_action_space.shape == (4,) and env.action_space.shape == (3, 4)
    assert observations["state"].shape == (3, 24) and observations["state"].dtype == torch.float32
    assert observations["depth"].shape == (3, 24, 32) and torch.isfinite(observations["depth"]).all()
    assert observations["depth"].max() > 0.5  # the arena is in view
    assert env.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.NEXT_STEP
    env.close()


def _rollout(env, steps: int, actions_for):
    observations, _ = env.reset(seed=11)
    states, depths = [observations["state"].clone()], [observations["depth"].clone()]
    for k in range(steps):
        observations, *_ = env.step(actions_for(k))
        states.append(observations["state"].clone())
        depths.append(observations["depth"].clone())
    return torch.stack(states), torch.stack(depths)


def test_a_batch_replays_each_environment_alone(device, arena):
    """Environment 1 of a batch of 3 and a single environment seeded as environment 1 (first_env=1)
    give the same states and the same depth bytes, step for step."""
    scene = DeviceScene(arena, device)
    rng = np.random.default_rng(3)
    actions = torch.tensor(rng.uniform(-0.3, 0.3, (20, 3, 4)), dtype=torch.float32)
    batch = DroneVectorEnv(3, camera=CAMERA, scene=scene, device=device)
    dev = batch.torch_device
    states, depths = _rollout(batch, 20, lambda k: actions[k].to(dev))
    single = DroneVectorEnv(1, camera=CAMERA, scene=scene, device=device, first_env=1)
    alone_states, alone_depths = _rollout(single, 20, lambda k: actions[k, 1:2].to(dev))
    assert torch.equal(states[:, 1], alone_states[:, 0])
    assert depths[:, 1].cpu().numpy().tobytes() == alone_depths[:, 0].cpu().numpy().tobytes()
    assert not torch.equal(states[:, 0], states[:, 1])  # environments draw their own starts


def test_free_fall_at_zero_thrust_and_hover_at_zero_action():
    """Action thrust -1 commands zero collective thrust: the rotors spin down as a first-order lag
    to their minimum speed, w(t) = w_min + (w_hover - w_min) exp(-t / tau_down), and the vehicle falls
    with acceleration g ((w / w_hover)^2 - 1) (drag negligible over 0.25 s); action 0 is the vehicle's
    hover thrust: it holds its height."""
    env = DroneVectorEnv(2, task=HoverTask(spawn_radius=0.0, target_radius=0.0, max_distance=10.0), device="cpu")
    observations, _ = env.reset(seed=0)
    z0 = env.sim.states().position[:, 2].copy()
    action = torch.tensor([[-1.0, 0, 0, 0], [0.0, 0, 0, 0]])
    for _ in range(30):  # 30 x 8 physics steps = 0.25 s
        env.step(action)
    z = env.sim.states().position[:, 2]
    af = env.nominal
    t = np.linspace(0.0, 30 * 8 / 960, 20001)
    w = af.min_speed + (af.hover_speed - af.min_speed) * np.exp(-t / af.time_constant_down)
    acceleration = 9.81 * ((w / af.hover_speed) ** 2 - 1.0)
    velocity = np.concatenate([[0.0], np.cumsum((acceleration[1:] + acceleration[:-1]) / 2 * np.diff(t))])
    drop = np.sum((velocity[1:] + velocity[:-1]) / 2 * np.diff(t))
    assert z[0] - z0[0] == pytest.approx(drop, rel=0.03)
    assert abs(z[1] - z0[1]) < 0.01
    env.close()


def test_autoreset_touches_only_the_environments_that_ended():
    """Environment 0 falls (zero thrust) out of its 0.3 m box and ends; at the next step it returns its
    new episode's first observation while the others continue exactly as in a run where it never ended."""
    task = HoverTask(target_radius=0.0, max_distance=0.3)
    falling = DroneVectorEnv(3, task=task, device="cpu")
    steady = DroneVectorEnv(3, task=task, device="cpu")
    falling.reset(seed=4)
    steady.reset(seed=4)
    fall = torch.zeros(3, 4)
    fall[0, 0] = -1.0
    ended_at = None
    for k in range(200):
        observations, reward, terminated, truncated, _ = falling.step(fall)
        reference, *_ = steady.step(torch.zeros(3, 4))
        if ended_at is not None:
            assert reward[0] == 0 and not terminated[0] and not truncated[0]
            assert torch.allclose(observations["state"][0, :6], torch.zeros(6), atol=1e-6)  # at its target, at rest
            break
        assert torch.equal(observations["state"][1:], reference["state"][1:])
        if terminated[0]:
            assert not terminated[1:].any()
            ended_at = k
    assert ended_at is not None
    assert torch.equal(observations["state"][1:], reference["state"][1:])  # the reset left the others alone
    falling.close()
    steady.close()


def test_same_step_autoreset_returns_the_new_episode_and_keeps_the_last_observation():
    """Same-step: the step where environment 0 ends returns its new episode's first observation, its
    last one in info["final_obs"]; the others equal a run where it never ended, and step counting
    restarts (the new episode lasts as long as a fresh one)."""
    task = HoverTask(target_radius=0.0, max_distance=0.3, episode_s=0.6)
    same = gymnasium.vector.AutoresetMode.SAME_STEP
    falling = DroneVectorEnv(3, task=task, autoreset=same, device="cpu")
    steady = DroneVectorEnv(3, task=task, autoreset=same, device="cpu")
    assert falling.metadata["autoreset_mode"] == same
    falling.reset(seed=4)
    steady.reset(seed=4)
    fall = torch.zeros(3, 4)
    fall[0, 0] = -1.0
    steps = 0
    for _ in range(100):
        observations, reward, terminated, truncated, info = falling.step(fall)
        reference, *_ = steady.step(torch.zeros(3, 4))
        steps += 1
        assert torch.equal(observations["state"][1:], reference["state"][1:])
        if terminated[0]:
            break
    assert terminated[0] and not terminated[1:].any() and steps <= falling.max_steps
    final = info["final_obs"]["state"][0]
    assert final[:3].norm() > 0.3  # it had left its box, falling
    assert torch.allclose(observations["state"][0, :6], torch.zeros(6), atol=1e-6)  # anew: at its target, at rest
    assert info["_final_obs"].tolist() == [True, False, False]
    length = 0
    for _ in range(falling.max_steps):  # the new episode runs its full length: its step count restarted
        observations, reward, terminated, truncated, info = falling.step(torch.zeros(3, 4))
        length += 1
        if truncated[0]:
            break
    assert length == falling.max_steps and truncated[0] and reward[0] > 0.9
    falling.close()
    steady.close()


def test_state_observation_holds_the_attitude_as_a_rotation_matrix():
    """Columns 6..14 are R_WB row-major, checked against trimesh's quaternion matrix of the simulator's
    attitude; columns 0..2 are target - position."""
    from trimesh.transformations import quaternion_matrix

    env = DroneVectorEnv(4, device="cpu")
    env.reset(seed=2)
    for _ in range(5):
        observations, *_ = env.step(torch.tensor([[0.0, 1.0, -0.5, 0.3]] * 4))
    states = env.sim.states()
    state = observations["state"].numpy()
    for i in range(4):
        R = quaternion_matrix(states.attitude[i])[:3, :3]  # (w, x, y, z)
        np.testing.assert_allclose(state[i, 6:15].reshape(3, 3), R, atol=1e-5)
        np.testing.assert_allclose(state[i, :3], env._target.numpy()[i] - states.position[i], atol=1e-5)
    env.close()


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda n, dev: torch.full((n, 4), float("nan"), device=dev), "finite"),
        (lambda n, dev: torch.zeros((n, 3), device=dev), "shape"),
        (lambda n, dev: torch.zeros((n, 4), dtype=torch.int64, device=dev), "floating"),
        (lambda n, dev: np.zeros((n, 4), np.float32), "torch.Tensor"),
        (lambda n, dev: torch.zeros((n, 4), device="meta"), "are on meta"),
    ],
)
def test_bad_actions_are_refused_before_any_kernel_runs(device, bad, message):
    env = DroneVectorEnv(2, device=device)
    env.reset(seed=0)
    before = env.sim.step_count
    with pytest.raises(ConfigError, match=message):
        env.step(bad(2, env.torch_device))
    assert env.sim.step_count == before
    env.close()


def test_randomization_is_drawn_per_episode_reproducibly_and_flies(tmp_path):
    table = tmp_path / "dr.toml"
    table.write_text("[airframe]\nmass = { uniform = [0.7, 1.3] }\n[camera]\npitch_deg = { normal = [0.0, 3.0] }\n")
    randomization = Randomization.load(table)
    task = HoverTask(spawn_radius=0.0, target_radius=0.0, max_distance=10.0)
    env = DroneVectorEnv(4, task=task, randomization=randomization, device="cpu")
    _, info = env.reset(seed=2)
    mass = info["randomization"]["airframe.mass"]
    assert np.all((mass >= 0.7) & (mass <= 1.3)) and len(set(mass)) == 4
    assert [af.mass for af in env.sim.airframes] == pytest.approx(mass * env.nominal.mass)
    z0 = env.sim.states().position[:, 2].copy()
    for _ in range(60):  # 0.5 s at each vehicle's own hover thrust: every mass holds its height
        env.step(torch.zeros(4, 4))
    assert np.all(np.abs(env.sim.states().position[:, 2] - z0) < 0.02)
    _, again = env.reset(seed=2)
    assert np.array_equal(again["randomization"]["airframe.mass"], mass)
    env.close()


@pytest.mark.parametrize(
    "text, message",
    [
        ("[airframe]\nmas = { uniform = [0.9, 1.1] }\n", "unknown key 'mas'"),
        ("[wind]\nspeed = { uniform = [0, 1] }\n", "unknown table"),
        ("[airframe]\nmass = { uniform = [1.1, 0.9] }\n", "exceeds"),
        ("[airframe]\nmass = { gamma = [1, 2] }\n", "uniform"),
        ("[imu]\nnoise = { normal = [1.0] }\n", "two finite numbers"),
    ],
)
def test_bad_randomization_files_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "dr.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        Randomization.load(path)
    assert str(path) in str(error.value)


def test_memory_does_not_grow_over_ten_thousand_steps():
    from goggles.bench import _memory_kb

    env = DroneVectorEnv(4, task=HoverTask(episode_s=0.5), device="cpu")
    env.reset(seed=0)
    action = torch.zeros(4, 4)
    for _ in range(200):
        env.step(action)
    before = _memory_kb(env.device)
    for _ in range(10_000):
        env.step(action)
    assert env.sim.step_count >= 10_200 * 8
    assert _memory_kb(env.device) - before < 4096  # kB: nothing allocated per step
    env.close()


def test_memory_per_environment_counts_what_the_batch_owns(arena):
    """The benchmark's figure: the arrays an environment batch allocated, per environment, growing
    with the pixels and not with the shared scene (whose BVH alone is megabytes)."""
    from goggles.bench import owned_device_bytes

    scene = DeviceScene(arena, "cpu")
    small = DroneVectorEnv(4, camera=CameraModel.from_fov(32, 24, 80.0), scene=scene, device="cpu")
    large = DroneVectorEnv(4, camera=CameraModel.from_fov(64, 48, 80.0), scene=scene, device="cpu")
    per_small, per_large = (owned_device_bytes(e, shared=[scene]) / 4 for e in (small, large))
    pixels = 64 * 48
    # depth observation 4 B, rendered depth 4 B, status 1 B, the ray table 12 B per pixel at least
    assert 21 * pixels < per_large < 200 * pixels
    assert per_large - per_small > 21 * (pixels - 32 * 24)
    assert owned_device_bytes(scene) > 10 * per_large  # the scene is not in the figure
    small.close()
    large.close()
