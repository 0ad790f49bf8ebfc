"""Actions through the physics, against closed forms: free fall, hover at action 0, rotor speeds
in units of hover speed, and the attitude as a rotation matrix in the state observation."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gymnasium = pytest.importorskip("gymnasium")

from goggles.envs import DroneVectorEnv, HoverTask  # noqa: E402
from goggles.errors import ConfigError  # noqa: E402


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


def test_an_environments_vehicle_flies_through_the_wind_it_is_given():
    """A crosswind pushes every environment's vehicle downwind, each with turbulence of its own."""
    import torch

    from goggles.dynamics.wind import WindSettings
    from goggles.envs.vector import DroneVectorEnv

    still, windy = (
        DroneVectorEnv(2, control="velocity", device="cpu", seed=4, wind=wind)
        for wind in (None, WindSettings(speed=6.0, from_deg=270.0, turbulence="light"))
    )
    try:
        for env in (still, windy):
            env.reset()
            for _ in range(60):  # hold still (velocity 0) for half a second
                env.step(torch.zeros(2, 4))
        air = windy.sim.states().wind
        assert np.all(air[:, 0] > 2.0) and not np.allclose(air[0], air[1])
        assert np.allclose(still.sim.states().wind, 0.0)
        # Its controller fights the drag, but lags: the windy ones were carried along +x.
        assert np.all(windy.sim.states().velocity[:, 0] > still.sim.states().velocity[:, 0] + 0.05)
    finally:
        still.close()
        windy.close()


def test_each_environment_draws_its_own_wind_per_episode_and_reports_it(tmp_path):
    import torch

    from goggles.envs.vector import DroneVectorEnv

    spec = tmp_path / "windy.toml"
    spec.write_text("[wind]\nspeed = { uniform = [2.0, 8.0] }\nfrom_deg = { uniform = [0.0, 360.0] }\n")
    env = DroneVectorEnv(3, control="velocity", device="cpu", seed=9, randomization=spec)
    try:
        _, info = env.reset()
        speeds, bearings = info["randomization"]["wind.speed"], info["randomization"]["wind.from_deg"]
        assert len(set(np.round(speeds, 6))) == 3 and np.all((speeds >= 2.0) & (speeds <= 8.0))
        env.step(torch.zeros(3, 4))
        towards = -np.stack([np.sin(np.radians(bearings)), np.cos(np.radians(bearings)), np.zeros(3)], axis=1)
        assert np.allclose(env.sim.states().wind, towards * speeds[:, None], atol=1e-4)  # uniform, no turbulence
        _, info = env.reset()  # a new episode: new air
        assert not np.allclose(info["randomization"]["wind.speed"], speeds)
    finally:
        env.close()


def test_each_environment_meets_its_own_gust_timed_from_its_episodes_start(tmp_path):
    """``[wind] gust_*``: one 1-cosine gust per environment and episode, from the bearing drawn, starting
    ``gust_in_s`` after that environment's episode began (a masked reset later starts its own later)."""
    import torch

    from goggles.envs.vector import DroneVectorEnv

    spec = tmp_path / "gusty.toml"
    spec.write_text(
        "[wind]\ngust_speed = { uniform = [4.0, 4.0] }\ngust_from_deg = { uniform = [90.0, 90.0] }\n"
        "gust_in_s = { uniform = [0.25, 0.25] }\ngust_duration_s = { uniform = [0.5, 0.5] }\n"
    )
    env = DroneVectorEnv(2, control="velocity", device="cpu", seed=2, randomization=spec)
    dt = env.sim.dt * env.physics_per_action  # 1/120 s per step

    def air_after(steps: int) -> np.ndarray:
        for _ in range(steps):
            env.step(torch.zeros(2, 4))
        return env.sim.states().wind

    def expected(since: float) -> np.ndarray:  # the last physics step's air, from its start
        t = since - env.sim.dt - 0.25
        return np.array([-4.0, 0.0, 0.0]) * (0.5 * (1.0 - np.cos(2 * np.pi * t / 0.5)) if 0 <= t <= 0.5 else 0.0)

    try:
        _, info = env.reset()
        assert np.all(info["randomization"]["wind.gust_speed"] == 4.0)
        assert np.allclose(air_after(24), expected(24 * dt), atol=1e-4)  # 0.2 s: before it
        air = air_after(6)  # 0.25 s: it begins
        assert np.allclose(air, expected(30 * dt), atol=1e-4)
        air = air_after(30)  # 0.5 s: its peak, blowing west (from the east)
        assert np.allclose(air, expected(60 * dt), atol=1e-4) and air[0, 0] < -3.9
        env.reset(options={"reset_mask": np.array([False, True])})  # env 1 starts again at 0.5 s
        air = air_after(60)  # 1.0 s: env 0's is over, env 1's at its peak
        assert np.allclose(air[0], 0.0, atol=1e-4)
        assert np.allclose(air[1], expected(60 * dt), atol=1e-4)
    finally:
        env.close()
