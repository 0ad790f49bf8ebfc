"""The learning environments: Gymnasium's checker, batched = single, autoreset of the ended only,
bad actions refused before any kernel, closed-form physics through the action mapping, domain
randomisation, and memory over 10 000 steps."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DepthFlightTask, DroneEnv, DroneVectorEnv, HoverTask, RaceTask, Randomization  # noqa: E402
from goggles.errors import ConfigError  # noqa: E402
from goggles.paths import default_scene  # noqa: E402
from goggles.render import CameraModel, RenderSettings  # noqa: E402
from goggles.scene import load_static_scene  # noqa: E402
from goggles.world import DeviceScene  # noqa: E402
from tests.conftest import NO_CUDA, _require_cuda  # noqa: E402

CAMERA = CameraModel.from_fov(32, 24, 80.0)


@pytest.fixture(scope="module")
def arena():
    return load_static_scene(default_scene())


def _step_until_environment_0_ends(env, actions, limit: int):
    """Step ``actions`` until environment 0's episode ends or ``limit`` steps have gone: the last step's outputs."""
    for _ in range(limit):
        outputs = env.step(actions)
        if outputs[2][0]:
            break
    return outputs


def test_single_view_passes_gymnasiums_env_checker(arena):
    from gymnasium.utils.env_checker import check_env

    env = DroneEnv(camera=CAMERA, scene=DeviceScene(arena, "cpu"), device="cpu")
    check_env(env, skip_render_check=True)
    env.close()


def test_every_observation_and_rotor_actions_pass_gymnasiums_env_checker(arena):
    from gymnasium.utils.env_checker import check_env

    from goggles.sensors.ranges import VL53L5CX

    env = DroneEnv(
        task=RaceTask(),
        camera=CAMERA,
        camera_outputs=("depth", "segmentation", "rgb"),
        depth_model="d435",
        range_sensor=VL53L5CX,
        beacons=True,
        scene=DeviceScene(arena, "cpu", max_actors=64),
        control="rotors",
        device="cpu",
    )
    check_env(env, skip_render_check=True)
    observations, _ = env.reset(seed=0)
    assert set(observations) == {"state", "depth", "segmentation", "rgb", "ranges", "beacons", "beacon_mask"}
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


@pytest.mark.parametrize("depth_model", [None, "d435"])
def test_a_batch_replays_each_environment_alone(device, arena, depth_model):
    """Environment 1 of a batch of 3 and a single environment seeded as environment 1 (first_env=1)
    give the same states and the same depth bytes, step for step (with a depth model's noise too)."""
    scene = DeviceScene(arena, device)
    rng = np.random.default_rng(3)
    actions = torch.tensor(rng.uniform(-0.3, 0.3, (20, 3, 4)), dtype=torch.float32)
    batch = DroneVectorEnv(3, camera=CAMERA, depth_model=depth_model, scene=scene, device=device)
    dev = batch.torch_device
    states, depths = _rollout(batch, 20, lambda k: actions[k].to(dev))
    single = DroneVectorEnv(1, camera=CAMERA, depth_model=depth_model, scene=scene, device=device, first_env=1)
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


@pytest.mark.parametrize("airframe, rotors", [("fg-quad", 4), ("hexa-550", 6)])
def test_rotor_speed_actions_one_per_rotor_in_units_of_hover_speed(airframe, rotors):
    """``control="rotors"``: one action per rotor, 0 the vehicle's hover speed (it holds its height),
    -1 zero speed (the motors spin down as a first-order lag: the same fall as zero thrust)."""
    task = HoverTask(spawn_radius=0.0, target_radius=0.0, max_distance=10.0)
    env = DroneVectorEnv(2, task=task, airframe=airframe, control="rotors", device="cpu")
    assert env.single_action_space.shape == (rotors,)
    env.reset(seed=0)
    z0 = env.sim.states().position[:, 2].copy()
    action = torch.zeros(2, rotors)
    action[0] = -1.0
    for _ in range(30):
        env.step(action)
    states = env.sim.states()
    af = env.nominal
    np.testing.assert_allclose(states.rotor_speed[1], af.hover_speed, rtol=1e-3)
    assert abs(states.position[1, 2] - z0[1]) < 0.01
    t = np.linspace(0.0, 30 * 8 / 960, 20001)
    w = af.min_speed + (af.hover_speed - af.min_speed) * np.exp(-t / af.time_constant_down)
    acceleration = 9.81 * ((w / af.hover_speed) ** 2 - 1.0)
    velocity = np.concatenate([[0.0], np.cumsum((acceleration[1:] + acceleration[:-1]) / 2 * np.diff(t))])
    assert states.position[0, 2] - z0[0] == pytest.approx(
        np.sum((velocity[1:] + velocity[:-1]) / 2 * np.diff(t)), rel=0.03
    )
    with pytest.raises(ConfigError, match=f"shape \\(2, {rotors}\\)"):
        env.step(torch.zeros(2, 4 if rotors != 4 else 6))
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


def test_same_step_autoreset_keeps_the_ended_episodes_info_in_final_info():
    """As Gymnasium's own vector environments do: the info of the episode that ended (here its
    randomisation draw) in info["final_info"], the new episode's in info."""
    task = HoverTask(target_radius=0.0, max_distance=0.3, episode_s=0.6)
    randomization = Randomization.from_tables({"airframe": {"mass": {"uniform": [0.9, 1.1]}}})
    env = DroneVectorEnv(
        3, task=task, randomization=randomization, autoreset=gymnasium.vector.AutoresetMode.SAME_STEP, device="cpu"
    )
    _, info = env.reset(seed=4)
    drawn = info["randomization"]["airframe.mass"].copy()
    fall = torch.zeros(3, 4)
    fall[0, 0] = -1.0
    _, _, terminated, _, info = _step_until_environment_0_ends(env, fall, 100)
    assert terminated[0] and info["_final_info"].tolist() == [True, False, False]
    assert np.array_equal(info["final_info"]["randomization"]["airframe.mass"], drawn)
    now = info["randomization"]["airframe.mass"]
    assert now[0] != drawn[0] and np.array_equal(now[1:], drawn[1:])  # a new draw for the new episode only
    assert env.sim.airframes[0].mass == pytest.approx(now[0] * env.nominal.mass)
    env.close()


def test_gymnasiums_numpy_wrappers_take_the_torch_environment_through_array_conversion():
    """RecordEpisodeStatistics and the other NumPy-only vector wrappers work behind Gymnasium's
    ArrayConversion (torch -> NumPy), as the README says: the episode's return is the sum of the
    rewards the environment gave, and its length the number of its steps."""
    pytest.importorskip("array_api_compat")
    from gymnasium.wrappers.vector import ArrayConversion, RecordEpisodeStatistics

    task = HoverTask(target_radius=0.0, max_distance=0.3, episode_s=0.6)
    env = RecordEpisodeStatistics(ArrayConversion(DroneVectorEnv(2, task=task, device="cpu"), torch, np))
    observations, _ = env.reset(seed=4)
    assert isinstance(observations["state"], np.ndarray)
    fall = np.zeros((2, 4), np.float32)
    fall[0, 0] = -1.0
    returns, steps = 0.0, 0
    for _ in range(100):
        _, reward, terminated, _, info = env.step(fall)
        assert isinstance(reward, np.ndarray)
        returns += float(reward[0])
        steps += 1
        if terminated[0]:
            break
    assert info["_episode"].tolist() == [True, False]
    assert info["episode"]["l"][0] == steps and info["episode"]["r"][0] == pytest.approx(returns, rel=1e-6)
    env.close()


@pytest.mark.parametrize("mask_kind", ["numpy", "torch"])
def test_autoreset_disabled_leaves_an_ended_episode_to_the_callers_reset_mask(device, arena, mask_kind):
    """Disabled autoreset (Gymnasium's reset_mask): environment 0 ends and keeps falling, step after
    step, until ``reset(options={"reset_mask": ...})`` starts it anew; that reset returns the others'
    observations untouched (a camera's too, not a new draw of its noise), and they fly on exactly as in
    a run where nothing ended."""
    task = HoverTask(target_radius=0.0, max_distance=0.3)
    disabled = gymnasium.vector.AutoresetMode.DISABLED
    scene = DeviceScene(arena, device)
    kwargs = {"task": task, "camera": CAMERA, "depth_model": "d435", "scene": scene, "device": device}
    falling = DroneVectorEnv(3, autoreset=disabled, **kwargs)
    steady = DroneVectorEnv(3, **kwargs)
    assert falling.metadata["autoreset_mode"] == disabled
    falling.reset(seed=4)
    steady.reset(seed=4)
    fall = torch.zeros(3, 4, device=falling.torch_device)
    fall[0, 0] = -1.0
    ended, climb = 0, []
    for _ in range(200):
        observations, reward, terminated, truncated, _ = falling.step(fall)
        reference, *_ = steady.step(torch.zeros_like(fall))
        assert torch.equal(observations["state"][1:], reference["state"][1:])
        ended += bool(terminated[0])
        climb += [float(observations["state"][0, 5])] if ended else []
        fall[0, 0] = 1.0 if ended else -1.0  # once ended, full thrust: an ended episode still obeys
        if ended == 4:
            break
    assert ended == 4 and not terminated[1:].any()  # it ended, and went on ending: no autoreset
    assert np.all(np.diff(climb, 2) > 0.01)  # braking its fall as its motors spin up (free fall: ~0)
    assert observations["state"][0, :3].norm() > 0.3
    before = {name: value.clone() for name, value in observations.items()}
    mask = terminated.cpu().numpy().copy() if mask_kind == "numpy" else terminated.clone()
    observations, info = falling.reset(options={"reset_mask": mask})
    assert torch.allclose(observations["state"][0, :6].cpu(), torch.zeros(6), atol=1e-6)  # anew: at its target, at rest
    for name, value in observations.items():
        assert torch.equal(value[1:], before[name][1:]), name
    for _ in range(5):
        observations, *_ = falling.step(torch.zeros_like(fall))
        reference, *_ = steady.step(torch.zeros_like(fall))
        assert torch.equal(observations["state"][1:], reference["state"][1:])
    falling.close()
    steady.close()


def test_a_reset_mask_leaves_the_others_pending_next_step_autoreset():
    """Next-step autoreset with a reset_mask: environment 0 has ended (its reset due at the next step)
    when the caller resets environment 1; environment 0 still starts anew at that next step."""
    task = HoverTask(target_radius=0.0, max_distance=0.3)
    env = DroneVectorEnv(3, task=task, device="cpu")
    env.reset(seed=4)
    fall = torch.zeros(3, 4)
    fall[0, 0] = -1.0
    observations, reward, terminated, truncated, _ = _step_until_environment_0_ends(env, fall, 200)
    assert terminated[0]
    env.reset(options={"reset_mask": np.array([False, True, False])})
    observations, reward, terminated, truncated, _ = env.step(fall)
    assert reward[0] == 0 and torch.allclose(observations["state"][0, :6], torch.zeros(6), atol=1e-6)
    env.close()


@pytest.mark.parametrize(
    ("seed", "options", "message"),
    [
        (None, {"reset_mask": np.array([True, False])}, r"\(3,\) bool array or tensor"),
        (None, {"reset_mask": np.array([1, 0, 0])}, "bool array"),
        (None, {"reset_mask": [True, False, False]}, r"bool array or tensor, got list$"),
        (None, {"reset_mask": np.zeros(3, bool)}, "resets nothing"),
        (1, {"reset_mask": np.ones(3, bool)}, "without a reset_mask"),
        (None, {"mask": np.ones(3, bool)}, "reset options \\['mask'\\] unknown"),
        ([1, 2, 3], None, "seed must be one integer"),
        (-1, None, "seed must be one integer from 0 to 4294967295"),
        (2**32 + 1, None, "seed must be one integer from 0 to 4294967295"),  # would be seed 1's streams
        (None, "reset_mask", "reset options must be a dict"),
    ],
)
def test_bad_reset_arguments_are_clear_errors(seed, options, message):
    env = DroneVectorEnv(3, device="cpu")
    env.reset(seed=0)
    with pytest.raises(ConfigError, match=message):
        env.reset(seed=seed, options=options)
    env.close()


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
        np.testing.assert_allclose(state[i, :3], env.episodes.target.numpy()[i] - states.position[i], atol=1e-5)
    env.close()


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda n, dev: torch.full((n, 4), float("nan"), device=dev), "finite"),
        (lambda n, dev: torch.zeros((n, 3), device=dev), "shape"),
        (lambda n, dev: torch.zeros((n, 4), dtype=torch.int64, device=dev), "floating"),
        (lambda n, dev: [[0.0] * 4] * n, "torch.Tensor on .* or a NumPy array, got list"),
        (lambda n, dev: np.full((n, 4), np.inf, np.float32), "finite"),
        (lambda n, dev: np.zeros((n, 5), np.float64), "shape"),
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


def test_the_shipped_randomization_file_draws_every_parameter_within_its_bounds():
    """``assets/randomization.toml`` (the README's example) reads, names every parameter there is, and
    its draws keep to the file's uniform bounds."""
    from goggles.envs.randomization import DEFAULTS
    from goggles.paths import default_randomization

    randomization = Randomization.load(default_randomization())
    assert set(randomization.distributions) == set(DEFAULTS)
    for episode in range(20):
        values = randomization.draw(7, 0, episode)
        assert 0.85 <= values["airframe.mass"] <= 1.15 and 0.5 <= values["imu.noise"] <= 2.0
        assert values["airframe.motor_time_constant"] > 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("[airframe]\nmas = { uniform = [0.9, 1.1] }\n", "unknown key 'mas'"),
        ("[wind]\nspeed = { uniform = [0, 1] }\n", "unknown table"),
        ("[airframe]\nmass = { uniform = [1.1, 0.9] }\n", "exceeds"),
        ("[airframe]\nmass = { gamma = [1, 2] }\n", "uniform"),
        ("[imu]\nnoise = { normal = [1.0] }\n", "two finite numbers"),
        ("[airframe]\nmass = { uniform = [0.0, 1.1] }\n", r"\[airframe\] mass: uniform low 0 must be > 0"),
        ("[airframe]\ninertia = { normal = [-0.1, 0.5] }\n", r"\[airframe\] inertia: normal mean -0.1 must be > 0"),
        ("[gates]\nperturbation = { uniform = [-1, 1] }\n", r"\[gates\] perturbation: uniform low -1 must be >= 0"),
    ],
)
def test_bad_randomization_files_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "dr.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        Randomization.load(path)
    assert str(path) in str(error.value)


def test_a_normal_reaching_below_a_factors_floor_is_truncated_there():
    """A normal on a factor that must stay positive is drawn again below 0 (no draw can fail a reset
    mid-training): the draws follow scipy's truncated normal, mean and spread."""
    from scipy.stats import truncnorm

    mean, std = 0.3, 0.5
    randomization = Randomization.from_tables({"airframe": {"mass": {"normal": [mean, std]}}})
    draws = np.array([randomization.draw(7, env, 0)["airframe.mass"] for env in range(20000)])
    reference = truncnorm((0.0 - mean) / std, np.inf, loc=mean, scale=std)
    assert draws.min() > 0
    assert abs(draws.mean() - reference.mean()) < 4 * reference.std() / np.sqrt(len(draws))
    assert draws.std() == pytest.approx(reference.std(), rel=0.03)


@pytest.mark.slow
def test_memory_does_not_grow_over_ten_thousand_steps():
    from goggles.bench.measure import _memory_kb

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
    from goggles.bench.measure import owned_device_bytes

    scene = DeviceScene(arena, "cpu")
    small = DroneVectorEnv(4, camera=CameraModel.from_fov(32, 24, 80.0), scene=scene, device="cpu")
    large = DroneVectorEnv(4, camera=CameraModel.from_fov(64, 48, 80.0), scene=scene, device="cpu")
    per_small, per_large = (owned_device_bytes(e, shared=[scene]) / 4 for e in (small, large))
    pixels = 64 * 48
    # depth observation 4 B, rendered depth 4 B, status 1 B per pixel at least (the ray table is shared by
    # cameras of one model, and Embree's hit rows exist with that backend only)
    assert 9 * pixels < per_large < 200 * pixels
    assert per_large - per_small > 9 * (pixels - 32 * 24)
    assert owned_device_bytes(scene) > 10 * per_large  # the scene is not in the figure
    small.close()
    large.close()


# ---------------------------------------------------------------- tasks: racing and depth flight


def _position_action(target, scale=5.0):
    """The position-control action (N, 4) that commands ``target`` (N, 3), yaw 0."""
    target = torch.as_tensor(np.asarray(target, np.float32))
    return torch.cat([target / scale, torch.zeros(len(target), 1)], dim=1)


def test_race_gates_are_perturbed_per_environment_and_episode_within_their_bounds():
    from goggles.paths import default_course
    from goggles.scene.gates import load_course

    course = load_course(default_course())
    nominal = np.array([g.position for g in course.gates])
    bounds = np.array([g.perturbation for g in course.gates])
    env = DroneVectorEnv(8, task=RaceTask(), device="cpu")
    env.reset(seed=5)
    race = env._prepared
    first = race.gate_position.numpy().copy()
    shift = first - nominal
    assert np.all(np.abs(shift[..., :2]) <= bounds[:, :2] + 1e-5) and np.all(np.abs(shift[..., 2]) < 1e-5)
    assert np.all(np.abs(race.gate_yaw.numpy() - [g.yaw for g in course.gates]) <= bounds[:, 2] + 1e-5)
    assert len({tuple(np.round(s.ravel(), 5)) for s in shift}) == 8  # every environment its own course
    again = DroneVectorEnv(8, task=RaceTask(), device="cpu")
    again.reset(seed=5)
    np.testing.assert_array_equal(again._prepared.gate_position.numpy(), first)  # reproducible by seed
    again.reset(seed=6)
    assert not np.allclose(again._prepared.gate_position.numpy(), first)
    fixed = DroneVectorEnv(2, task=RaceTask(perturb=False), device="cpu")
    fixed.reset(seed=5)
    np.testing.assert_allclose(fixed._prepared.gate_position.numpy(), np.stack([nominal] * 2), atol=1e-6)
    for e in (env, again, fixed):
        e.close()


def test_race_rewards_progress_and_each_gate_by_the_alphapilot_rule():
    """Flown through the first gate under position control, a vehicle earns the distance it gained
    towards the gate each step and the gate bonus exactly at the step the judge of ``goggles race``
    counts the gate; its target then becomes the second gate."""
    from goggles.race import passes
    from goggles.scene.gates import Gate

    task = RaceTask(perturb=False, spawn_radius=0.0, progress=1.0, gate=10.0, crash=10.0)
    env = DroneVectorEnv(1, task=task, control="position", device="cpu")
    observations, _ = env.reset(seed=0)
    race = env._prepared
    gates = race.gate_position.numpy()[0]
    gate = Gate("gate1", tuple(gates[0]), float(race.gate_yaw.numpy()[0, 0]), (1.6, 1.6), (0, 0, 0))
    previous = env.sim.states().position[0].copy()
    passed_at = None
    for k in range(200):
        observations, reward, terminated, truncated, _ = env.step(_position_action([[5.0, 0.0, 1.8]]))
        p = env.sim.states().position[0].copy()
        gained = np.linalg.norm(gates[0] - previous) - np.linalg.norm(gates[0] - p)
        if passed_at is None and passes(gate, p):
            passed_at = k
            assert float(reward[0]) == pytest.approx(gained + 10.0, abs=1e-4)
            np.testing.assert_allclose(observations["state"][0, :3].numpy(), gates[1] - p, atol=1e-4)
            break
        assert float(reward[0]) == pytest.approx(gained, abs=1e-4) and not terminated[0]
        previous = p
    assert passed_at is not None
    assert int(race.next_gate.numpy()[0]) == 1
    env.close()


def test_race_ends_with_a_penalty_on_touching_a_gate_frame():
    task = RaceTask(perturb=False, spawn_radius=0.0, crash=10.0)
    env = DroneVectorEnv(1, task=task, control="position", device="cpu")
    env.reset(seed=0)
    gate = env._prepared.gate_position.numpy()[0, 0]
    bar = gate + np.array([0.0, 0.8 + 0.075, 0.0])  # the left bar's centre line
    for _ in range(300):
        _, reward, terminated, _, _ = env.step(_position_action([bar + [2.0, 0.0, 0.0]]))
        if terminated[0]:
            break
    p = env.sim.states().position[0]
    assert terminated[0] and float(reward[0]) < -9.0
    assert abs(p[0] - gate[0]) < 0.075 + 0.25 + 0.1  # at the gate's plane, not before
    env.close()


@pytest.mark.slow
def test_depth_flight_crosses_the_arena_through_its_obstacles(arena):
    """The default start and goal have the arena's obstacles between them (checked by casting the
    straight lines against the scene with trimesh); flying into one crashes and ends the episode with
    the penalty; the reward is the progress towards the goal."""
    import trimesh

    scene = DeviceScene(arena, "cpu")
    env = DroneVectorEnv(64, task=DepthFlightTask(), control="velocity", scene=scene, device="cpu")
    env.reset(seed=1)
    e = env.episodes
    starts, goals = e.start_position.numpy(), e.target.numpy()
    direction = goals - starts
    length = np.linalg.norm(direction, axis=1)
    mesh = trimesh.Trimesh(arena.vertices, arena.faces, process=False)
    hits, rays, _ = mesh.ray.intersects_location(starts, direction / length[:, None], multiple_hits=False)
    blocked = np.zeros(64, bool)
    blocked[rays] = np.linalg.norm(hits - starts[rays], axis=1) < length[rays]
    assert blocked.mean() > 0.3
    heading = np.degrees(np.arctan2(direction[:, 1], direction[:, 0]))
    yaw = np.degrees(2 * np.arctan2(e.start_attitude.numpy()[:, 2], e.start_attitude.numpy()[:, 3]))
    assert np.all(np.abs((yaw - heading + 180) % 360 - 180) <= 20.0 + 1e-3)  # facing the goal

    # Straight at the goal at 3 m/s: a blocked line ends in a crash, the others gain ground each step.
    toward = torch.as_tensor(direction / length[:, None] / 1.0, dtype=torch.float32)  # full speed (3 m/s)
    actions = torch.cat([toward, torch.zeros(64, 1)], dim=1)
    previous = env.sim.states().position.copy()
    ended = np.zeros(64, bool)
    crashed = np.zeros(64, bool)
    for _ in range(int(8.0 * 120)):
        _, reward, terminated, truncated, _ = env.step(actions)
        states = env.sim.states()
        gained = np.linalg.norm(goals - previous, axis=1) - np.linalg.norm(goals - states.position, axis=1)
        live = ~ended & ~terminated.numpy()
        np.testing.assert_allclose(reward.numpy()[live], gained[live], atol=1e-4)
        crashed |= ~ended & terminated.numpy() & states.crashed
        ended |= terminated.numpy() | truncated.numpy()
        previous = states.position.copy()
        if ended.all():
            break
    assert crashed[blocked].mean() > 0.5  # most blocked lines end on an obstacle
    env.close()


def test_each_environment_sees_its_own_race_gates(arena):
    """With a camera, every environment's perturbed gates are in its depth image and nobody else's:
    each image equals a trimesh ray cast (Embree through trimesh, an independent tracer) of the arena
    plus that environment's own gate frames, and the gates are what several of its pixels see."""
    import trimesh

    from goggles.frames import transform
    from goggles.scene.gates import gate_bars

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


def test_a_race_flown_through_every_gate_ends_in_success():
    """Flown through the course's approach, centre and exit points of each gate (velocity commands
    from a proportional law), the race passes all six gates in order and ends at the last, with its
    bonus and no crash penalty."""
    from goggles.paths import default_course
    from goggles.race import course_waypoints
    from goggles.scene.gates import load_course

    env = DroneVectorEnv(1, task=RaceTask(perturb=False, spawn_radius=0.0), control="velocity", device="cpu")
    env.reset(seed=0)
    points = [p[:3] for p in course_waypoints(load_course(default_course()))]
    k, passed = 0, []
    for _ in range(60 * 120):
        p = env.sim.states().position[0]
        while k < len(points) - 1 and np.linalg.norm(points[k] - p) < 0.4:
            k += 1
        velocity = np.clip(1.5 * (points[k] - p), -2.5, 2.5) / 3.0
        _, reward, terminated, truncated, _ = env.step(torch.tensor([[*velocity, 0.0]], dtype=torch.float32))
        passed.append(int(env._prepared.next_gate.numpy()[0]))
        if terminated[0] or truncated[0]:
            break
    assert terminated[0] and not truncated[0]
    assert passed[-1] == 6 and sorted(set(passed)) == list(range(7))  # one gate at a time, in order
    assert float(reward[0]) > 5.0  # the last gate's bonus, no crash penalty
    env.close()


def test_gate_poses_randomised_per_episode_from_the_randomisation_file():
    """``[gates] perturbation``: a factor on the course's perturbation bounds drawn per environment and
    episode: 0 keeps the nominal course, 2 reaches past the course's own bounds; reported in info."""
    from goggles.paths import default_course
    from goggles.scene.gates import load_course

    course = load_course(default_course())
    nominal = np.array([g.position for g in course.gates])
    bounds = np.array([g.perturbation for g in course.gates])
    shifts = {}
    for factor in (0.0, 2.0):
        randomization = Randomization.from_tables({"gates": {"perturbation": {"uniform": [factor, factor]}}})
        env = DroneVectorEnv(16, task=RaceTask(), randomization=randomization, device="cpu")
        _, info = env.reset(seed=3)
        assert np.all(info["randomization"]["gates.perturbation"] == factor)
        shifts[factor] = np.abs(env._prepared.gate_position.numpy() - nominal)[..., :2]
        env.close()
    assert np.all(shifts[0.0] < 1e-6)
    assert np.all(shifts[2.0] <= 2 * bounds[:, :2] + 1e-5) and np.any(shifts[2.0] > bounds[:, :2])
    with pytest.raises(ConfigError, match=r"\[gates\] perturbation: uniform low -1 must be >= 0"):
        Randomization.from_tables({"gates": {"perturbation": {"uniform": [-1.0, -1.0]}}})


def test_a_device_this_machine_lacks_is_a_clear_error():
    import warp as wp

    if wp.is_cuda_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="device cuda: no CUDA device is available on this machine"):
        DroneVectorEnv(1, device="cuda")


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("num_envs", 2.5, "num_envs must be an integer >= 1, got 2.5"),
        ("num_envs", "4", "num_envs must be an integer >= 1"),
        ("num_envs", True, "num_envs must be an integer >= 1"),
        ("physics_per_action", 2.5, "physics_per_action must be an integer >= 1"),
        ("physics_per_action", 2**32 + 8, "physics_per_action must be an integer >= 1"),  # int32 in the kernel
        ("seed", -1, "seed must be an integer from 0 to 4294967295"),
        ("seed", 2**32 + 5, "seed must be an integer from 0 to 4294967295"),  # would be seed 5's streams
        ("first_env", 2**31, "first_env must be an integer from 0 to 2147483646"),
        ("first_env", -1, "first_env must be an integer from 0"),
        ("device", "cpu:3", "device 'cpu:3' is not a Warp device here; devices: \\['cpu'"),
        ("device", 0, "device 0: a Warp device name"),
        ("airframe", 5, "airframe 5: a preset name"),
        ("task", "hover", "task must be a task such as HoverTask()"),
        ("task", HoverTask, "task must be a task object, such as HoverTask\\(\\), not the class HoverTask"),
        ("randomization", {"airframe": {}}, "randomization must be a Randomization or the path"),
        ("randomization", "/nowhere/dr.toml", "/nowhere/dr.toml: randomisation file not found"),
        ("range_sensor", "vl53l1x", "range_sensor 'vl53l1x': a preset \\(flightgoggles-altimeter, vl53l5cx\\)"),
        ("range_sensor", 5, r"range_sensor 5: a preset \(flightgoggles-altimeter, vl53l5cx\) or a RangeSensorModel"),
        ("scene", "arena", "scene must be a goggles.world.DeviceScene, got str"),
        ("camera", (64, 48), "camera must be a goggles.render.CameraModel, got tuple"),
        ("camera_outputs", None, "camera_outputs None: one or more of depth, segmentation, rgb"),
        ("camera_outputs", ("depth", "stereo"), "camera_outputs \\('depth', 'stereo'\\): one or more of"),
        ("depth_model", 5, "depth_model must be a preset name or a StereoDepthModel"),
        ("recorded", "no", "recorded must be True, False or None"),  # a string would record
    ],
)
def test_bad_constructor_arguments_are_one_clear_error_each(arena, argument, value, message):
    """What a person may pass by mistake (a float count, a seed beyond 32 bits, a name where an object
    goes, a device this machine lacks) is a ConfigError naming the argument, not a TypeError from deep
    inside or a value silently wrapped by a kernel's 32-bit argument."""
    camera = {"camera": CAMERA, "scene": DeviceScene(arena, "cpu")} if argument.startswith(("camera", "depth")) else {}
    scene = {"scene": DeviceScene(arena, "cpu")} if argument == "range_sensor" else {}
    arguments = {"num_envs": 2, "device": "cpu", **camera, **scene, argument: value}
    with pytest.raises(ConfigError, match=message):
        DroneVectorEnv(**arguments)


def test_the_single_view_refuses_an_action_that_is_not_its_numbers():
    """A string was NumPy's ValueError, None "shape (1, 1)"; NaN is the vector environment's refusal."""
    env = DroneEnv(device="cpu")
    env.reset(seed=0)
    for action in ("x", None, [0.0, 0.0, 0.0], np.zeros((2, 4)), [[0.0, 0.0], [0.0, 0.0]]):
        with pytest.raises(ConfigError, match="an action must be 4 numbers"):
            env.step(action)
    with pytest.raises(ConfigError, match="actions must be finite"):
        env.step([np.nan, 0.0, 0.0, 0.0])
    assert env.step([0.0, 0.0, 0.0, 0.0])[0]["state"].shape == (24,) and env.step(np.zeros((1, 4)))[1] > 0
    env.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: HoverTask(episode_s=-1.0), "HoverTask: settings: 'episode_s' must be a finite number > 0 \\(s\\)"),
        (lambda: HoverTask(max_distance=0.0), "'max_distance' must be a finite number > 0"),
        (lambda: HoverTask(spawn=(1.0, 2.0)), "'spawn' must be a list of 3 finite numbers"),
        (lambda: HoverTask(spawn_radius=float("nan")), "'spawn_radius' must be a finite number >= 0"),
        (lambda: DepthFlightTask(goal=(1.0, 2.0, "x")), "DepthFlightTask: settings: 'goal' must be a list of 3"),
        (lambda: DepthFlightTask(reach=0.0), "'reach' must be a finite number > 0"),
        (lambda: RaceTask(episode_s=0.0), "RaceTask: settings: 'episode_s' must be a finite number > 0"),
        (lambda: RaceTask(perturb=1), "'perturb' must be true or false"),
        (lambda: RaceTask(course=5), "'course' must be a course file's path"),
        (lambda: RaceTask(crash=1e39), "beyond float32's range"),
    ],
)
def test_a_tasks_bad_setting_is_refused_where_it_is_made(make, message):
    """A negative episode length truncated every episode at its first step, a zero max_distance ended
    them at once, silently; a short vector or a string was a ValueError from Warp at the first reset."""
    with pytest.raises(ConfigError, match=message):
        make()


def test_numpy_integers_and_names_are_taken_where_python_ones_are(arena, tmp_path):
    """What NumPy hands out (np.int64 counts and seeds) works as Python's ints do; a range sensor's
    preset name, one camera output's name and a randomisation file's path stand for their objects."""
    from goggles.sensors.ranges import VL53L5CX

    (tmp_path / "dr.toml").write_text("[airframe]\nmass = { uniform = [0.9, 1.1] }\n")
    env = DroneVectorEnv(
        np.int64(2),
        seed=np.uint32(7),
        physics_per_action=np.int32(4),
        camera=CAMERA,
        camera_outputs="depth",
        range_sensor="vl53l5cx",
        randomization=tmp_path / "dr.toml",
        scene=DeviceScene(arena, "cpu"),
        device="cpu",
    )
    observations, info = env.reset(seed=np.int64(3))
    assert env.num_envs == 2 and type(env.num_envs) is int and env.range_sensor is VL53L5CX
    assert observations["depth"].shape == (2, CAMERA.height, CAMERA.width) and observations["ranges"].shape == (2, 64)
    assert np.all((info["randomization"]["airframe.mass"] >= 0.9) & (info["randomization"]["airframe.mass"] <= 1.1))
    env.close()


@wp.kernel
def _busy_kernel(loops: int, out: wp.array(dtype=float)):
    """Keeps Warp's stream busy for a while: a long chain of dependent arithmetic."""
    i = wp.tid()
    x = float(i)
    for _ in range(loops):
        x = wp.sin(x) + 1.0
    out[i] = x


@NO_CUDA
@pytest.mark.parametrize("mode", ["next", "same"])
def test_a_caller_on_a_torch_stream_of_its_own_reads_each_steps_observations(arena, mode):
    """A policy on its own torch stream (not the default one Warp's streams follow) reads the
    observations, rewards and final observations of the step it asked for, though Warp's stream is
    still busy when ``step`` returns; the reference steps on the default stream."""
    _require_cuda("cuda:0")
    autoreset = {"next": gymnasium.vector.AutoresetMode.NEXT_STEP, "same": gymnasium.vector.AutoresetMode.SAME_STEP}
    task = HoverTask(max_distance=0.3, episode_s=0.3)  # short episodes: resets happen
    envs = [
        DroneVectorEnv(
            16, task=task, camera=CAMERA, scene=DeviceScene(arena, "cuda:0"), autoreset=autoreset[mode], device="cuda:0"
        )
        for _ in range(2)
    ]
    generator = torch.Generator().manual_seed(3)
    actions = [(torch.rand(20, 16, 4, generator=generator) * 2.0 - 1.0)[i].to("cuda:0") for i in range(20)]
    busy = wp.zeros(1, dtype=float, device="cuda:0")

    def run(env, on_stream: bool) -> list[torch.Tensor]:
        seen = []
        observations, _ = env.reset(seed=5)
        seen.append(observations["state"].clone())
        for action in actions:
            if on_stream:  # Warp's stream is busy for tens of milliseconds before each step's work
                wp.launch(_busy_kernel, dim=1, inputs=[2_000_000], outputs=[busy], device="cuda:0")
            observations, reward, terminated, truncated, info = env.step(action)
            seen += [observations["state"].clone(), observations["depth"].clone(), reward.clone(), terminated.clone()]
            if "final_obs" in info:
                seen.append(info["final_obs"]["state"].clone())
        return seen

    expected = run(envs[0], on_stream=False)
    stream = torch.cuda.Stream("cuda:0")
    with torch.cuda.stream(stream):
        got = run(envs[1], on_stream=True)
    stream.synchronize()
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
    for env in envs:
        env.close()


def test_a_numpy_action_from_the_action_space_steps_like_the_same_tensor():
    """``env.step(env.action_space.sample())``, the first thing a Gymnasium user tries, steps."""
    runs = []
    for as_tensor in (False, True):
        env = DroneVectorEnv(3, device="cpu")
        env.action_space.seed(4)
        env.reset(seed=1)
        for _ in range(3):
            action = env.action_space.sample()
            assert isinstance(action, np.ndarray)
            observations, *_ = env.step(torch.from_numpy(action) if as_tensor else action)
        runs.append(observations["state"].clone())
        env.close()
    assert torch.equal(runs[0], runs[1])


def test_the_tasks_are_gymnasium_ids_single_and_batched():
    """``gymnasium.make`` and ``make_vec`` (the batched environment, not N copies of the single one),
    with keyword arguments passed through; the same seed gives the same first observation either way."""
    import gymnasium

    single = gymnasium.make("goggles/Hover-v0", device="cpu")
    assert isinstance(single.unwrapped, DroneEnv)
    first, _ = single.reset(seed=3)
    single.step(single.action_space.sample())
    single.close()
    batch = gymnasium.make_vec("goggles/Hover-v0", num_envs=4, device="cpu", control="velocity")
    assert isinstance(batch, DroneVectorEnv) and batch.num_envs == 4 and batch.action_size == 4
    observations, _ = batch.reset(seed=3)
    np.testing.assert_array_equal(observations["state"][0].numpy(), first["state"])
    batch.close()
    depth = gymnasium.make_vec("goggles/DepthFlight-v0", num_envs=2, device="cpu")  # the arena, a depth camera
    observations, _ = depth.reset(seed=0)
    assert tuple(observations["depth"].shape) == (2, 48, 64) and float(observations["depth"].max()) > 0.0
    depth.close()
    race = gymnasium.make_vec("goggles/Race-v0", num_envs=2, device="cpu")
    assert isinstance(race.task, RaceTask)
    race.close()


def test_render_mode_rgb_array_shows_each_vehicle_from_behind_over_a_tiled_floor(device):
    """``render_mode="rgb_array"``: one (H, W, 3) uint8 frame per environment from a chase camera
    (``chase.BEHIND_M`` behind the vehicle along its heading, ``chase.ABOVE_M`` above, looking at
    it). Where there is no scene, the floor is chequered in 2 m tiles: where a pixel's ray meets
    z = 0 (a ray-plane intersection from that camera), the tile's parity says light or dark, and the
    frame says the same. Environment 1 of the batch renders as a single environment seeded as it."""
    from goggles.envs.chase import ABOVE_M, BEHIND_M
    from goggles.frames import quat_to_matrix

    width, height = 64, 48
    env = DroneVectorEnv(3, render_mode="rgb_array", render_size=(width, height), device=device)
    assert env.metadata["render_modes"] == ["rgb_array"] and env.metadata["render_fps"] == 120.0
    env.reset(seed=5)
    for _ in range(5):
        env.step(torch.zeros((3, 4), device=env.torch_device))
    frames = env.render()
    assert len(frames) == 3 and all(f.shape == (height, width, 3) and f.dtype == np.uint8 for f in frames)
    states, targets = env.sim.states(), env.episodes.target.numpy()
    f = (height / 2) / np.tan(np.radians(30.0))
    u, v = np.meshgrid(np.arange(width) - (width - 1) / 2, np.arange(height) - (height - 1) / 2)
    for i, frame in enumerate(frames):
        p = states.position[i].astype(np.float64)
        heading = quat_to_matrix(states.attitude[i])[:, 0] * [1, 1, 0]
        eye = p - BEHIND_M * heading / np.linalg.norm(heading) + [0, 0, ABOVE_M]
        forward = (p - eye) / np.linalg.norm(p - eye)
        right = np.cross(forward, [0, 0, 1.0])
        right /= np.linalg.norm(right)
        rays = forward + (u[..., None] * right + v[..., None] * np.cross(forward, right)) / f
        down = rays[..., 2] < -0.05
        t = np.where(down, -eye[2] / np.where(down, rays[..., 2], -1.0), 0.0)
        hit = eye + t[..., None] * rays
        tile = hit[..., :2] / 2.0
        edge = np.abs(tile - np.round(tile)).min(-1) * 2.0 < 0.2  # near a tile's edge: either colour
        unit = rays / np.linalg.norm(rays, axis=-1, keepdims=True)
        seen_near = [  # how close each pixel's ray passes to the vehicle, to the target
            np.linalg.norm(np.cross(unit, point - eye), axis=-1) for point in (p, targets[i].astype(np.float64))
        ]
        sun = np.array([0.35, 0.25, 0.9]) / np.linalg.norm([0.35, 0.25, 0.9])  # the Renderer's default sun
        shaded_near = [  # how far each pixel's floor point lies from the vehicle's shadow, the target's
            np.linalg.norm(hit[..., :2] - (point[:2] - point[2] / sun[2] * sun[:2]), axis=-1)
            for point in (p, targets[i])
        ]
        # Left out: the vehicle's and the target's pixels and shadows, and the far tiles a pixel blurs.
        judged = down & ~edge & (np.minimum(*seen_near) > 0.6) & (np.minimum(*shaded_near) > 0.6) & (t < 12.0)
        light = (np.floor(tile).sum(-1) % 2 == 0)[judged]
        brightness = frame.astype(float).mean(-1)[judged]
        assert judged.sum() > 200 and light.any() and (~light).any()
        threshold = 0.5 * (brightness[light].mean() + brightness[~light].mean())
        assert brightness[light].mean() > brightness[~light].mean() + 30
        assert np.mean((brightness > threshold) == light) > 0.995
        assert tuple(frame[2, width // 2]) == tuple(frames[0][2, width // 2])  # the sky, alike in every view
    alone = DroneVectorEnv(1, render_mode="rgb_array", render_size=(width, height), device=device, first_env=1)
    alone.reset(seed=5)
    for _ in range(5):
        alone.step(torch.zeros((1, 4), device=alone.torch_device))
    assert alone.render()[0].tobytes() == frames[1].tobytes()
    env.step(torch.ones((3, 4), device=env.torch_device))
    assert env.render()[0].tobytes() != frames[0].tobytes()  # a new frame for a new state
    env.close()
    alone.close()


def test_render_modes_gymnasium_knows(arena):
    """No render mode: ``render()`` warns and gives None, as Gymnasium's environments do; a mode that
    is not ``rgb_array``, or a size that is not two pixel counts, is one clear error. ``gymnasium.make``
    passes the mode (its checker renders); with a scene and a camera the frames show that scene."""
    from gymnasium.utils.env_checker import check_env

    env = DroneVectorEnv(2, device="cpu")
    with pytest.warns(UserWarning, match="render_mode='rgb_array'"):
        assert env.render() is None
    env.close()
    with pytest.raises(ConfigError, match="render_mode 'human': use 'rgb_array'"):
        DroneVectorEnv(1, render_mode="human", device="cpu")
    for size in ((64,), (64, 0), (64.5, 48), "64x48", (64, 10**6)):
        with pytest.raises(ConfigError, match="render_size must be"):
            DroneVectorEnv(1, render_mode="rgb_array", render_size=size, device="cpu")
    single = gymnasium.make("goggles/Hover-v0", render_mode="rgb_array", render_size=(40, 30), device="cpu")
    assert single.render_mode == "rgb_array"
    check_env(single.unwrapped, skip_render_check=False)
    single.reset(seed=1)
    assert single.render().shape == (30, 40, 3)
    single.close()
    collected = gymnasium.make("goggles/Hover-v0", render_mode="rgb_array_list", render_size=(40, 30), device="cpu")
    collected.reset(seed=1)  # Gymnasium's RenderCollection: every frame since the last render()
    collected.step(collected.action_space.sample())
    frames = collected.render()
    assert len(frames) == 2 and all(frame.shape == (30, 40, 3) for frame in frames)
    collected.close()
    scene = DeviceScene(arena, "cpu")
    seen = DroneVectorEnv(1, camera=CAMERA, scene=scene, render_mode="rgb_array", render_size=(40, 30), device="cpu")
    seen.reset(seed=1)
    bare = DroneVectorEnv(1, render_mode="rgb_array", render_size=(40, 30), device="cpu")
    bare.reset(seed=1)
    assert seen.render()[0].tobytes() != bare.render()[0].tobytes()  # the arena, not the tiled floor
    seen.close()
    bare.close()


def test_a_race_shows_each_environments_own_gates_without_a_scene():
    """Race-v0 has no scene (no camera): the view places each environment's gates of this episode
    itself (``RaceTask.shown``), each view its own (perturbed per environment): orange frames in the
    picture, environment 1 of a batch as a single environment seeded as it."""
    size = (64, 48)
    batch = DroneVectorEnv(3, task=RaceTask(), render_mode="rgb_array", render_size=size, device="cpu")
    batch.reset(seed=2)
    frames = batch.render()
    alone = DroneVectorEnv(1, task=RaceTask(), render_mode="rgb_array", render_size=size, device="cpu", first_env=1)
    alone.reset(seed=2)
    assert alone.render()[0].tobytes() == frames[1].tobytes()
    for frame in frames:  # the gates' colour, lit: red over green over blue
        rgb = frame.astype(int)
        assert np.count_nonzero((rgb[..., 0] > rgb[..., 1] + 40) & (rgb[..., 1] > rgb[..., 2] + 20)) > 30
    assert frames[0].tobytes() != frames[1].tobytes()
    batch.close()
    alone.close()
