"""The vector environment's ``control="betaflight"``: Betaflight's real SITL flies each environment, the
actions its sticks in angle mode; every episode armed before its first observation; the same seed and
actions give the same flights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from goggles.envs.vector import DroneVectorEnv
from goggles.errors import ConfigError
from goggles.frames import quat_to_matrix


def roll_deg(attitude) -> float:
    R = quat_to_matrix(attitude)
    return float(np.degrees(np.arctan2(R[2, 1], R[2, 2])))


def fly(env, steps: int, roll_stick: float = 0.0, throttle: float = 0.0):
    """``steps`` actions: environment 1 given ``roll_stick``, both ``throttle``; the states after each."""
    seen = []
    for _ in range(steps):
        actions = torch.zeros(env.num_envs, 4)
        actions[:, 2] = throttle
        actions[1, 0] = roll_stick
        env.step(actions)
        s = env.sim.states()
        seen.append(np.concatenate([s.position.ravel(), s.attitude.ravel()]))
    return np.array(seen)


@pytest.mark.slow
def test_each_environment_flies_its_own_firmware_through_the_sticks(firmware_available, tmp_path):
    diff = tmp_path / "tune.txt"
    diff.write_text("set angle_limit = 45\n")
    env = DroneVectorEnv(2, control="betaflight", betaflight=diff, device="cpu", seed=3)
    try:
        _, info = env.reset()
        assert info["firmware"]["armed"].all() and not info["firmware"]["failsafe"].any()
        start = env.sim.states().position.copy()
        seen = fly(env, 60, roll_stick=1.0)  # 0.5 s: environment 1 full right, environment 0 centred
        s = env.sim.states()
        assert abs(roll_deg(s.attitude[1]) - 45.0) < 5.0  # angle mode: the tune's limit
        assert abs(roll_deg(s.attitude[0])) < 3.0
        assert s.position[1, 1] < start[1, 1] - 0.1  # rolled right: moving to -y (FLU)
        fly(env, 120)  # centred: back level
        assert abs(roll_deg(env.sim.states().attitude[1])) < 5.0
        height = env.sim.states().position[:, 2].copy()
        fly(env, 60, throttle=0.6)  # throttle up: both climb
        assert (env.sim.states().position[:, 2] > height + 0.2).all()
        assert np.isfinite(seen).all()

        # A new episode for environment 1 only: disarmed, held, armed again before its first observation.
        env.reset(options={"reset_mask": np.array([False, True])})
        assert env._firmware.links[1].report().armed
        assert abs(roll_deg(env.sim.states().attitude[1])) < 1.0
    finally:
        env.close()
    assert all(link.firmware.process is None for link in env._firmware.links)  # every SITL stopped


@pytest.mark.slow
def test_the_same_seed_and_sticks_give_the_same_flights(firmware_available):
    flights = []
    for _ in range(2):
        env = DroneVectorEnv(2, control="betaflight", device="cpu", seed=11)
        try:
            env.reset()
            flights.append(np.concatenate([fly(env, 40, roll_stick=0.5, throttle=0.2), fly(env, 20)]))
        finally:
            env.close()
    assert flights[0].tobytes() == flights[1].tobytes()


@pytest.mark.slow
def test_a_firmware_that_cannot_arm_is_named_with_what_keeps_it(firmware_available, tmp_path):
    diff = tmp_path / "armed-elsewhere.txt"
    diff.write_text("aux 0 0 3 1700 2100 0 0\n")  # ARM on AUX4, which nothing raises
    env = DroneVectorEnv(1, control="betaflight", betaflight=diff, device="cpu")
    try:
        with pytest.raises(ConfigError, match="environment 0: Betaflight did not arm within 5 s.*AUX1"):
            env.reset()
    finally:
        env.close()


def test_firmware_settings_without_the_firmware_control_are_refused(tmp_path):
    with pytest.raises(ConfigError, match='betaflight= is for control="betaflight"'):
        DroneVectorEnv(1, control="rates", betaflight=tmp_path / "tune.txt", device="cpu")
    with pytest.raises(ConfigError, match="tune.txt not found"):
        DroneVectorEnv(1, control="betaflight", betaflight=tmp_path / "tune.txt", device="cpu")
