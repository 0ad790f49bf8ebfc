"""Domain randomisation: drawn per environment and episode, reproducibly, within its bounds."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DroneVectorEnv, HoverTask, RaceTask, Randomization  # noqa: E402
from goggles.errors import ConfigError  # noqa: E402


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
        ("[weather]\nspeed = { uniform = [0, 1] }\n", "unknown table"),
        ("[wind]\nspeed = { uniform = [-1, 1] }\n", r"\[wind\] speed: uniform low -1 must be >= 0"),
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
