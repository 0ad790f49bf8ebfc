"""The learning environments behind Gymnasium's API: its checkers, spaces, autoreset in every mode,
bad arguments, memory, devices and streams, registered ids and render modes."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DroneEnv, DroneVectorEnv, HoverTask, RaceTask, Randomization  # noqa: E402
from goggles.errors import ConfigError  # noqa: E402
from goggles.render import CameraModel  # noqa: E402
from goggles.world import DeviceScene  # noqa: E402
from tests.conftest import NO_CUDA, _require_cuda  # noqa: E402
from tests.envs.support import CAMERA  # noqa: E402


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
