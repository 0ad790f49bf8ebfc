"""The tasks: race gates perturbed per environment and episode, AlphaPilot's pass rule and rewards,
penalties, a depth flight through the arena, and settings checked where they are made."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DepthFlightTask, DroneVectorEnv, HoverTask, RaceTask  # noqa: E402
from goggles.errors import ConfigError  # noqa: E402
from goggles.world import DeviceScene  # noqa: E402


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
