"""The simulator against closed forms: hover, motor lag, free fall, terminal velocity, RK4 order,
angular momentum, ground effect, IMU at rest and its Allan deviation, and the controllers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import warp as wp

from goggles.dynamics import (
    GRAVITY,
    ControlMode,
    GroundEffect,
    Integrator,
    MultirotorSim,
    SimulatorSettings,
    load_airframe,
)
from goggles.dynamics.kernels import ground_effect_kernel
from goggles.errors import ConfigError
from goggles.frames import quat_from_axis_angle, quat_to_matrix

FG = load_airframe("fg-quad")
HEXA = load_airframe("hexa-550")


def quiet(airframe=FG, n=1, device=None, world=None, **settings) -> MultirotorSim:
    """A simulator with disturbances and IMU noise off (closed forms need determinism)."""
    settings.setdefault("disturbances", False)
    settings.setdefault("imu_noise", False)
    return MultirotorSim(airframe, n, SimulatorSettings(**settings), device=device, world=world)


def test_hover_speed_holds_still(device):
    for airframe in (FG, HEXA):
        expected = np.sqrt(airframe.mass * GRAVITY / (airframe.num_rotors * airframe.thrust_coefficient))
        assert airframe.hover_speed == pytest.approx(expected)
        sim = quiet(airframe, device=device, floor_z=None)
        sim.reset(position=[0, 0, 5], rotor_speed=expected)
        sim.set_command(ControlMode.ROTOR_SPEEDS, [expected] * airframe.num_rotors)
        sim.step(2 * 960)
        s = sim.states()
        np.testing.assert_allclose(s.position[0], [0, 0, 5], atol=2e-4)
        np.testing.assert_allclose(s.attitude[0], [1, 0, 0, 0], atol=1e-5)
        np.testing.assert_allclose(s.imu_accel[0], [0, 0, GRAVITY], atol=2e-3)


@pytest.mark.parametrize("airframe", [FG, HEXA], ids=["fg-quad", "hexa-550"])
@pytest.mark.parametrize("integrator", [Integrator.RK4, Integrator.EULER], ids=["rk4", "euler"])
def test_motor_step_rise_and_fall_time_constants(device, airframe, integrator):
    """Step response of the first-order lag: w_cmd (1 - exp(-t / tau)) under RK4 (solved exactly), and
    FlightGoggles' explicit-Euler recursion w_cmd (1 - (1 - dt / tau)^k) under Euler; likewise down."""

    def decay(k: int, tau: float, dt: float) -> float:
        return np.exp(-k * dt / tau) if integrator == Integrator.RK4 else (1.0 - dt / tau) ** k

    sim = quiet(airframe, device=device, integrator=integrator)  # on the floor: below hover thrust
    target = 0.6 * airframe.hover_speed
    sim.set_command(ControlMode.ROTOR_SPEEDS, [target] * airframe.num_rotors)
    for k in range(1, 49):
        sim.step(1)
        expected = target * (1 - decay(k, airframe.time_constant_up, sim.dt))
        np.testing.assert_allclose(sim.states().rotor_speed[0], expected, rtol=1e-5)
    start = sim.states().rotor_speed[0, 0]
    sim.set_command(ControlMode.ROTOR_SPEEDS, [0.0] * airframe.num_rotors)
    for k in range(1, 49):
        sim.step(1)
        expected = start * decay(k, airframe.time_constant_down, sim.dt)
        np.testing.assert_allclose(sim.states().rotor_speed[0], expected, rtol=1e-4)


def test_free_fall(device):
    """RK4 is exact for constant acceleration; explicit Euler (FlightGoggles) lags by g t dt / 2."""
    no_drag = dataclasses.replace(FG, drag_coefficient=0.0)
    sim = quiet(no_drag, device=device, floor_z=None, integrator=Integrator.RK4)
    euler = quiet(no_drag, device=device, floor_z=None, integrator=Integrator.EULER)
    euler.reset(position=[1, 2, 100])
    euler.step(960)
    assert euler.states().position[0, 2] == pytest.approx(100 - 0.5 * GRAVITY * (1 - 1 / 960), abs=2e-4)
    sim.reset(position=[1, 2, 100])
    sim.step(960)
    s = sim.states()
    np.testing.assert_allclose(s.position[0], [1, 2, 100 - 0.5 * GRAVITY], atol=1e-3)
    np.testing.assert_allclose(s.velocity[0], [0, 0, -GRAVITY], atol=1e-4)
    np.testing.assert_allclose(s.imu_accel[0], [0, 0, 0], atol=1e-3)  # free fall: no specific force


def test_quadratic_drag_fall_and_terminal_velocity(device):
    """m v' = -m g + cd v^2: v(t) = -v_t tanh(g t / v_t), v_t = sqrt(m g / cd)."""
    sim = quiet(device=device, floor_z=None, integrator=Integrator.RK4)
    sim.reset(position=[0, 0, 1000])
    v_t = np.sqrt(FG.mass * GRAVITY / FG.drag_coefficient)
    for t in (0.5, 1.0, 2.0, 6.0):
        sim.step(int(round(t * 960)) - sim.step_count)
        assert sim.states().velocity[0, 2] == pytest.approx(-v_t * np.tanh(GRAVITY * t / v_t), rel=1e-4)
    assert sim.states().velocity[0, 2] == pytest.approx(-v_t, rel=2e-3)


def _tumble(device, integrator, dt):
    """Attitude and rates after 0.5 s of torque-free tumbling of an asymmetric body (rotors off), fast
    enough (40 rad/s) that truncation error, not float32 round-off, dominates at coarse steps."""
    asymmetric = dataclasses.replace(FG, inertia=np.diag([0.004, 0.007, 0.010]), moment_coefficient=np.zeros(3))
    sim = quiet(asymmetric, device=device, floor_z=None, integrator=integrator, dt=dt)
    sim.reset(position=[0, 0, 100], rates=[40.0, 3.0, 20.0])
    sim.step(int(round(0.5 / dt)))
    s = sim.states()
    return np.concatenate([s.attitude[0] * np.sign(s.attitude[0, 0]), s.rates[0]]), asymmetric, s


def test_rk4_error_shrinks_sixteenfold_when_dt_halves(device):
    reference, _, _ = _tumble(device, Integrator.RK4, 1 / 3840)
    errors = [np.abs(_tumble(device, Integrator.RK4, dt)[0] - reference).max() for dt in (1 / 60, 1 / 120)]
    assert 10.0 < errors[0] / errors[1] < 24.0, errors
    euler = [np.abs(_tumble(device, Integrator.EULER, dt)[0] - reference).max() for dt in (1 / 1920, 1 / 3840)]
    assert 1.6 < euler[0] / euler[1] < 2.5, euler  # first order


def test_angular_momentum_is_conserved_without_torques(device):
    _, airframe, _ = _tumble(device, Integrator.RK4, 1 / 960)  # the asymmetric body, torque-free
    sim = quiet(airframe, device=device, floor_z=None, integrator=Integrator.RK4)
    sim.reset(position=[0, 0, 100], rates=[12.0, 1.5, 6.0])
    L0 = airframe.inertia @ [12.0, 1.5, 6.0]
    for _ in range(4):
        sim.step(480)
        s = sim.states()
        L = quat_to_matrix(s.attitude[0]) @ airframe.inertia @ s.rates[0]
        np.testing.assert_allclose(L, L0, rtol=0, atol=2e-5 * np.linalg.norm(L0))


def _conyers(x, L, R):
    p = [
        -2.794e-7 * L**2 + 3.761e-4 * L + 3.197e-5 * R**2 - 7.5479e-3 * R + 0.3357119,
        5.3178e-6 * L**2 - 7.1388e-3 * L - 6.703e-4 * R**2 + 0.1643906 * R - 7.0388236,
        -2.2529e-5 * L**2 + 0.0219849 * L + 0.0104943 * R**2 - 2.6402066 * R + 163.3198037,
        3.2426e-5 * L**2 - 0.0289233 * L - 0.0156903 * R**2 + 3.9426111 * R - 248.2897537,
        -1.8056e-4 * L**2 + 0.2518899 * L + 0.0458834 * R**2 - 11.4527617 * R + 636.8788317,
    ]
    q = [
        1.0736e-5 * L**2 - 0.0231523 * L + 0.0053983 * R**2 - 1.3630188 * R + 96.3637597,
        -4.4379e-5 * L**2 + 0.0780762 * L - 0.0024483 * R**2 + 0.6141837 * R - 71.9829075,
        -1.3482e-4 * L**2 + 0.1883013 * L + 0.0359764 * R**2 - 8.9660684 * R + 500.2544495,
    ]
    ratio = (p[0] * x**4 + p[1] * x**3 + p[2] * x**2 + p[3] * x + p[4]) / (x**3 + q[0] * x**2 + q[1] * x + q[2])
    return np.where((x >= 0.25) & (x <= 10.0), ratio, 1.0)


def test_ground_effect_ratios_equal_the_formulas(device):
    R, arm = FG.rotor_radius, FG.arm_length
    heights = np.array([0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.4, 0.7, 1.5], np.float32)
    expected = {
        GroundEffect.NONE: np.ones_like(heights),
        GroundEffect.CHEESEMAN_BENNETT: np.where(heights / R > 0.25, 1 / (1 - (R / (4 * heights)) ** 2), 1.0),
        GroundEffect.CONYERS: _conyers(heights / R, 2 * arm * 1000, R * 1000),
    }
    assert 1.05 < expected[GroundEffect.CONYERS][2] < 1.6  # the fit is a sensible ratio near the ground
    for model, ratio in expected.items():
        out = wp.zeros(len(heights), dtype=float, device=device)
        wp.launch(
            ground_effect_kernel,
            dim=len(heights),
            inputs=[int(model), R, arm, wp.array(heights, dtype=float, device=device)],
            outputs=[out],
            device=device,
        )
        np.testing.assert_allclose(out.numpy(), ratio, rtol=2e-5)


def test_ground_effect_lifts_a_hovering_vehicle(device):
    """At hover speed 2R above the floor, Cheeseman-Bennett thrust accelerates it up at (ratio - 1) g."""
    height = 2 * FG.rotor_radius
    sim = quiet(device=device, floor_z=0.0, ground_effect=GroundEffect.CHEESEMAN_BENNETT)
    sim.reset(position=[0, 0, height], rotor_speed=FG.hover_speed)
    sim.set_command(ControlMode.ROTOR_SPEEDS, [FG.hover_speed] * 4)
    sim.step(1)
    ratio = 1 / (1 - (1 / 8) ** 2)
    assert sim.states().imu_accel[0, 2] == pytest.approx(ratio * GRAVITY, rel=1e-4)


def test_imu_at_rest_and_mount_rotation(device):
    sim = quiet(device=device)
    sim.step(100)
    np.testing.assert_allclose(sim.states().imu_accel[0], [0, 0, GRAVITY], atol=1e-4)
    turned = quat_to_matrix(quat_from_axis_angle([1, 0, 0], np.pi / 2))  # IMU x along body x, IMU y up
    sim = quiet(device=device, imu_mount=turned)
    sim.reset(rates=[0, 0, 0])
    sim.step(100)
    np.testing.assert_allclose(sim.states().imu_accel[0], [0, GRAVITY, 0], atol=1e-4)


def _allan_deviation(samples: np.ndarray, rate: float, tau: float) -> float:
    """Overlapping Allan deviation of (k, n) rate samples at averaging time tau, pooled over columns."""
    m = int(round(tau * rate))
    theta = np.cumsum(samples, axis=0) / rate
    d = theta[2 * m :] - 2 * theta[m:-m] + theta[: -2 * m]
    return float(np.sqrt(np.mean(d**2) / (2 * tau**2)))


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["vn-100", "flightgoggles"])
def test_imu_allan_deviation_matches_preset(device, preset):
    """At tau = 1 s: sigma^2 = N^2 / tau + K^2 tau / 3 (white noise N, bias random walk K)."""
    from goggles.dynamics import load_imu_preset

    airframe = dataclasses.replace(FG, imu=load_imu_preset(preset))
    sim = MultirotorSim(
        airframe, 32, SimulatorSettings(imu_rate=160.0, disturbances=False, imu_noise=True, seed=3), device=device
    )
    accel, gyro = [], []
    for _ in range(int(40 * 160)):  # 40 s of samples on each of 32 IMUs at rest
        sim.step(6)
        s = sim.states()
        accel.append(s.imu_accel[:, 0])
        gyro.append(s.imu_gyro[:, 2])
    noise = load_imu_preset(preset)
    for samples, N, K in (
        (accel, noise.accel_noise[0], noise.accel_bias_walk[0]),
        (gyro, noise.gyro_noise[2], noise.gyro_bias_walk[2]),
    ):
        expected = np.sqrt(N**2 + K**2 / 3)
        assert _allan_deviation(np.array(samples), 160.0, 1.0) == pytest.approx(expected, rel=0.10)


def test_rate_controller_tracks_a_roll_rate_step():
    """Agile rate gains (hexa-550 preset): 1 rad/s roll-rate step reached within 0.1 s, overshoot < 20 %."""
    sim = MultirotorSim(HEXA, 1, SimulatorSettings(floor_z=None, seed=1), device="cpu")
    sim.reset(position=[0, 0, 10], rotor_speed=HEXA.hover_speed)
    thrust = HEXA.mass * GRAVITY
    sim.set_command(ControlMode.RATES, [thrust, 0, 0, 0])
    sim.step(96)
    sim.set_command(ControlMode.RATES, [thrust, 1.0, 0, 0])
    roll_rate = []
    for _ in range(288):  # 0.3 s
        sim.step(1)
        roll_rate.append(sim.states().rates[0, 0])
    roll_rate = np.array(roll_rate)
    first = np.argmax(roll_rate >= 0.9)
    assert roll_rate[first] >= 0.9 and (first + 1) * sim.dt <= 0.1, f"90 % at {(first + 1) * sim.dt:.3f} s"
    assert roll_rate.max() < 1.2
    assert np.abs(roll_rate[-48:] - 1.0).max() < 0.1


def test_flightgoggles_rate_mode_settles_on_the_command():
    """fg-quad keeps FlightGoggles' gains (Kp 9, Ki 3, Kd 0.3): slower, but it settles on the rate."""
    sim = MultirotorSim(FG, 1, SimulatorSettings(floor_z=None, seed=1), device="cpu")
    sim.reset(position=[0, 0, 10], rotor_speed=FG.hover_speed)
    sim.set_command(ControlMode.RATES, [FG.mass * GRAVITY, 0.0, 0.0, 0.5])
    sim.step(960)
    assert sim.states().rates[0, 2] == pytest.approx(0.5, abs=0.05)


def test_a_wild_rate_command_leaves_nothing_wound_up_for_later_commands():
    """0.3 s of rates of +-1e6 rad/s, then 4 s of velocity flight, then a gentle rates command: it
    yawed at 24 rad/s and climbed 3.6 m/s (the integrator wound up on rates no airframe reaches and
    outlived the mode change). Rates are taken within the airframe's ``max_rate`` and a mode change
    starts the integrator afresh: the vehicle then does what a fresh one does."""
    thrust = FG.mass * GRAVITY

    def flown(wild: bool):
        sim = MultirotorSim(
            FG, 1, SimulatorSettings(floor_z=None, seed=1, disturbances=False, imu_noise=False), device="cpu"
        )
        sim.reset(position=[0, 0, 50], rotor_speed=FG.hover_speed)
        if wild:
            sim.set_command(ControlMode.RATES, [thrust, 1e6, -1e6, 1e6])
            sim.step(288)
            sim.set_command(ControlMode.VELOCITY, [0.0, 0.0, 0.0, 0.0])
            sim.step(3840)
        else:
            sim.set_command(ControlMode.VELOCITY, [0.0, 0.0, 0.0, 0.0])
            sim.step(960)
        sim.set_command(ControlMode.RATES, [thrust, 0.0, 0.0, 1.0])
        sim.step(960)
        s = sim.states()
        return float(s.rates[0, 2]), float(s.velocity[0, 2])

    (yaw_rate, climb), (fresh_yaw_rate, fresh_climb) = flown(True), flown(False)
    assert yaw_rate == pytest.approx(fresh_yaw_rate, abs=0.05) and abs(fresh_yaw_rate - 1.0) < 0.2
    assert abs(climb - fresh_climb) < 0.1


@pytest.mark.parametrize("airframe", [FG, HEXA], ids=["fg-quad", "hexa-550"])
def test_position_controller_flies_to_and_holds_a_setpoint(device, airframe):
    sim = MultirotorSim(airframe, 1, SimulatorSettings(seed=7), device=device)  # disturbances and IMU noise on
    sim.set_command(ControlMode.POSITION, [2.0, 0.0, 2.0, 0.3])
    sim.step(4 * 960)
    worst = 0.0
    for _ in range(40):  # then hold for 2 s
        sim.step(48)
        worst = max(worst, np.linalg.norm(sim.states().position[0] - [2.0, 0.0, 2.0]))
    assert worst < 0.05
    s = sim.states()
    yaw = np.arctan2(
        2 * (s.attitude[0, 0] * s.attitude[0, 3] + s.attitude[0, 1] * s.attitude[0, 2]),
        1 - 2 * (s.attitude[0, 2] ** 2 + s.attitude[0, 3] ** 2),
    )
    assert yaw == pytest.approx(0.3, abs=0.02)


def test_velocity_and_attitude_controllers(device):
    sim = MultirotorSim(FG, 1, SimulatorSettings(seed=2), device=device)
    sim.reset(position=[0, 0, 5])
    sim.set_command(ControlMode.VELOCITY, [1.0, -0.5, 0.2, 0.0])
    sim.step(3 * 960)
    np.testing.assert_allclose(sim.states().velocity[0], [1.0, -0.5, 0.2], atol=0.08)
    tilt = quat_from_axis_angle([1, 0, 0], 0.2)
    sim.set_command(ControlMode.ATTITUDE, [FG.mass * GRAVITY, *tilt])
    sim.step(480)
    np.testing.assert_allclose(sim.states().attitude[0], tilt, atol=0.01)


def test_a_huge_finite_command_saturates_the_motors_instead_of_cutting_them(device):
    """3e38 is a float32 a client may send; the controller's arithmetic once overflowed to NaN on it
    (inf x a zero inertia term) and every rotor went to its minimum: the vehicle fell."""
    hover = FG.mass * GRAVITY

    def flown(mode, values, steps=96):
        sim = quiet(device=device, floor_z=None)
        sim.reset(position=[0, 0, 10], rotor_speed=FG.hover_speed)
        sim.set_command(mode, values)
        sim.step(steps)
        return sim.states()

    # A full roll-rate demand, taken as the airframe's largest rate: the rotors of one side run up, the
    # others down, as the same command at max_rate does.
    rolled = flown(ControlMode.RATES, [hover, 3e38, 0.0, 0.0], steps=48)
    speeds = np.sort(rolled.rotor_speed[0])
    assert speeds[2] > 1.4 * FG.hover_speed and speeds[1] < 0.6 * FG.hover_speed
    assert rolled.rates[0, 0] > 5.0
    at_most = flown(ControlMode.RATES, [hover, FG.max_rate, 0.0, 0.0], steps=48)
    np.testing.assert_array_equal(rolled.rotor_speed, at_most.rotor_speed)
    # Climb at the largest speed: the controller's bounded vertical acceleration, not a fall.
    for mode in (ControlMode.VELOCITY, ControlMode.POSITION):
        climbed = flown(mode, [0.0, 0.0, 3e38, 0.0])
        assert climbed.velocity[0, 2] > 0.5 * FG.max_vertical_acceleration * 96 * 1 / 960, mode.name
    # A quaternion is a direction: (3e38, 3e38, 0, 0) is the 90 degree roll that (1, 1, 0, 0) is.
    huge = flown(ControlMode.ATTITUDE, [hover, 3e38, 3e38, 0.0, 0.0])
    unit = flown(ControlMode.ATTITUDE, [hover, 1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(huge.attitude, unit.attitude, atol=1e-6)
    assert abs(huge.rates[0, 0]) > 0.5


def test_per_rotor_thrust_interface(device):
    sim = quiet(device=device, floor_z=None)
    sim.reset(position=[0, 0, 5], rotor_speed=FG.hover_speed)
    sim.set_command(ControlMode.ROTOR_THRUSTS, [FG.mass * GRAVITY / 4] * 4)
    sim.step(960)
    np.testing.assert_allclose(sim.states().position[0], [0, 0, 5], atol=1e-3)


def test_same_seed_same_flight_and_batches_are_independent(device):
    def fly(n, seed):
        sim = MultirotorSim(FG, n, SimulatorSettings(seed=seed), device=device)
        sim.set_command(ControlMode.POSITION, [1.0, 1.0, 1.5, 0.0])
        sim.step(960)
        return sim.states()

    a, b, c = fly(1, 5), fly(1, 5), fly(1, 6)
    assert np.array_equal(a.position, b.position) and np.array_equal(a.imu_accel, b.imu_accel)
    assert not np.array_equal(a.position, c.position)
    batch = fly(3, 5)
    assert np.array_equal(batch.position[0], a.position[0])  # vehicle 0's streams do not depend on the batch
    assert not np.array_equal(batch.position[1], batch.position[0])


def test_bad_commands_and_presets_are_refused(tmp_path):
    sim = quiet()
    with pytest.raises(ConfigError, match="finite"):
        sim.set_command(ControlMode.POSITION, [0.0, np.nan, 1.0, 0.0])
    with pytest.raises(ConfigError, match="shape"):
        sim.set_command(ControlMode.RATES, [1.0, 2.0])
    with pytest.raises(ConfigError, match="IMU rate"):
        MultirotorSim(FG, 1, SimulatorSettings(imu_rate=700.0))
    with pytest.raises(ConfigError, match="not found"):
        load_airframe("no-such-vehicle")
    text = (load_airframe.__globals__["PRESETS_DIR"] / "fg-quad.toml").read_text()
    (tmp_path / "typo.toml").write_text(text.replace("mass = 1.0", "mas = 1.0"))
    with pytest.raises(ConfigError, match=r"typo.toml: \[body\]: unknown key 'mas'"):
        load_airframe(tmp_path / "typo.toml")
    (tmp_path / "neg.toml").write_text(text.replace("max_speed = 2200.0", "max_speed = -5.0"))
    with pytest.raises(ConfigError, match="'max_speed' must be a finite number > 0"):
        load_airframe(tmp_path / "neg.toml")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"num_vehicles": 2.0}, "num_vehicles must be an integer >= 1, got 2.0"),
        ({"seed": 2**32 + 5}, "seed must be an integer from 0 to 4294967295"),  # seed 5's streams otherwise
        ({"seed": -1}, "seed must be an integer from 0 to 4294967295"),
        ({"num_vehicles": 2**30}, "simulating 1073741824 vehicles needs about 2048.0 GiB on .*: simulate fewer"),
    ],
)
def test_counts_and_seeds_a_kernel_would_wrap_are_refused(arguments, message):
    with pytest.raises(ConfigError, match=message):
        count = arguments.pop("num_vehicles", 1)
        MultirotorSim(FG, count, SimulatorSettings(**arguments))


def test_the_simulators_methods_refuse_what_they_cannot_use_and_keep_the_state():
    """A reset, a command or an airframe the simulator cannot use is one ConfigError naming the
    argument, and a refused reset leaves the vehicles as they were (the position was set before the
    rotor speeds were checked). Velocities beyond float32 became infinity, rotor speeds above the
    motors' maximum and vehicle index 0.5 (vehicle 0) were taken; names work where a user would
    write them (a control mode's, an airframe preset's), and so do indices in a tensor."""
    import torch

    sim = MultirotorSim("fg-quad", 2, SimulatorSettings(seed=1))
    sim.reset(position=[1.0, 2.0, 3.0])
    refused = {
        "velocity must be finite .in float32.": lambda: sim.reset(position=[0, 0, 0], velocity=[1e40, 0, 0]),
        "position must be numbers, got 'x'": lambda: sim.reset(position="x"),
        "rotor_speed must be 0 to the airframe's max_speed .2200 rad/s.": lambda: sim.reset(rotor_speed=2500.0),
        "rotor_speed must be 0 to": lambda: sim.reset(position=[0, 0, 0], rotor_speed=-1.0),
        r"control mode 'SPEED': one of ROTOR_SPEEDS \(0\)": lambda: sim.set_command("SPEED", [1, 2, 3, 4]),
        "control mode 9: one of": lambda: sim.set_command(9, [1, 2, 3, 4]),
        r"vehicles must be indices 0..1, got \[0.5\]": lambda: sim.set_command("rates", [1, 0, 0, 0], vehicles=[0.5]),
        r"vehicles must be indices 0..1, got \['a'\]": lambda: sim.set_airframes([FG], ["a"]),
        "airframes are Airframes": lambda: sim.set_airframes(["fg-quad", "fg-quad"]),
        "floor_z must be a finite height": lambda: MultirotorSim(FG, 1, SimulatorSettings(floor_z=float("nan"))),
        "floor_z must be a finite height in m or None .no floor., got True": lambda: MultirotorSim(
            FG, 1, SimulatorSettings(floor_z=True)
        ),
        "imu_noise must be True or False, got 'no'": lambda: MultirotorSim(FG, 1, SimulatorSettings(imu_noise="no")),
        "world must be a goggles.world.DeviceScene": lambda: MultirotorSim(FG, 1, world="arena"),
        "ground_effect 'ground': one of NONE": lambda: MultirotorSim(FG, 1, SimulatorSettings(ground_effect="ground")),
        "airframe preset 'fg-quadd' not found": lambda: MultirotorSim("fg-quadd"),
    }
    for message, call in refused.items():
        with pytest.raises(ConfigError, match=message):
            call()
    np.testing.assert_array_equal(sim.states().position, [[1, 2, 3], [1, 2, 3]])  # as it was
    assert np.all(sim.states().velocity == 0)
    sim.set_command("rates", [9.81, 0, 0, 0], vehicles=torch.tensor([1]))
    sim.set_command(ControlMode.POSITION, [0, 0, 1, 0], vehicles=np.array([0]))
    assert (
        MultirotorSim(FG, 1, SimulatorSettings(ground_effect="conyers")).settings.ground_effect == GroundEffect.CONYERS
    )


def test_a_rate_divides_the_physics_rate_by_one_test_for_run_files_and_the_simulator():
    """The run file's check and the simulator's were twins with different tolerances."""
    from goggles.dynamics.model import steps_per_sample

    assert steps_per_sample(960.0, 240.0) == 4 and steps_per_sample(1.0 / (1.0 / 960.0), 240.0) == 4
    assert steps_per_sample(960.0, 960.0 / (2**31 - 1)) == 2**31 - 1
    for rate in (700.0, 961.0, 960.0 / 2**31, 0.0, -240.0, float("nan"), 1e39):
        assert steps_per_sample(960.0, rate) is None
        with pytest.raises(ConfigError, match="must divide the physics rate"):
            MultirotorSim(FG, 1, SimulatorSettings(imu_rate=rate))


def test_a_step_count_is_a_whole_number_a_kernel_can_loop_over():
    """``step(2**32 + 1)`` looped once in the kernel (its int32 count) while the books said 2**32 + 1;
    ``step(2.5)`` stepped twice and counted 2.5."""
    sim = MultirotorSim(FG, np.int64(2), SimulatorSettings(seed=np.uint32(1)))
    for steps in (2**32 + 1, 2.5, -1, True):
        with pytest.raises(ConfigError, match="steps must be an integer from 0 to 2147483647"):
            sim.step(steps)
    assert sim.step_count == 0
    sim.step(0)
    sim.step(np.int64(3))
    assert sim.step_count == 3 and sim.states().time == pytest.approx(3 * sim.dt)


def test_ground_effect_height_from_a_scene_mesh(device):
    """A downward ray into a mesh gives the same height as the floor plane at the same place."""
    from goggles.world import DeviceScene
    from tests.conftest import quad, scene_of

    plane = DeviceScene(scene_of((quad([[-50, -50, 0.0], [50, -50, 0], [50, 50, 0], [-50, 50, 0]]), 1)), device)
    height = 2 * FG.rotor_radius
    sim = quiet(device=device, floor_z=None, world=plane, ground_effect=GroundEffect.CHEESEMAN_BENNETT)
    sim.reset(position=[0, 0, height], rotor_speed=FG.hover_speed)
    sim.set_command(ControlMode.ROTOR_SPEEDS, [FG.hover_speed] * 4)
    sim.step(1)
    assert sim.states().imu_accel[0, 2] == pytest.approx(GRAVITY / (1 - (1 / 8) ** 2), rel=1e-4)


def test_disturbance_spectral_densities(device):
    """White force density S_F makes velocity a random walk: Var(v) = S_F T / m^2 (no drag, level);
    white moment density S_M makes body rates one: Var(w) = S_M T / J^2 (rotors off, no aero moment)."""
    force_only = dataclasses.replace(FG, drag_coefficient=0.0, moment_density=0.0)
    sim = MultirotorSim(force_only, 512, SimulatorSettings(floor_z=None, imu_noise=False, seed=11), device=device)
    sim.reset(position=[0, 0, 100], rotor_speed=FG.hover_speed)
    sim.set_command(ControlMode.ROTOR_SPEEDS, [FG.hover_speed] * 4)
    sim.step(960)
    variance = sim.states().velocity[:, :2].var()
    assert variance == pytest.approx(FG.force_density * 1.0 / FG.mass**2, rel=0.1)

    moment_only = dataclasses.replace(FG, force_density=0.0, moment_coefficient=np.zeros(3))
    sim = MultirotorSim(moment_only, 512, SimulatorSettings(floor_z=None, imu_noise=False, seed=12), device=device)
    sim.reset(position=[0, 0, 100])
    sim.step(480)
    rates = sim.states().rates
    J = np.diag(FG.inertia)
    for axis in range(3):
        assert rates[:, axis].var() == pytest.approx(FG.moment_density * 0.5 / J[axis] ** 2, rel=0.15)
