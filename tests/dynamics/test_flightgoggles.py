"""fg-quad is FlightGoggles' vehicle: yaw direction from the reaction torques, gyroscopic precession,
the accelerometer as the instantaneous specific force, the backward-Euler gyro filter, and whole
flights against an independent float64 model of FlightGoggles' equations."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import warp as wp

from goggles.dynamics import GRAVITY, ControlMode, Integrator, MultirotorSim, SimulatorSettings, load_airframe
from goggles.dynamics.airframe import allocation_matrix
from goggles.dynamics.kernels import filter_response_kernel
from goggles.frames import quat_from_euler, quat_to_matrix
from tests.dynamics import flightgoggles_reference as ref

FG = load_airframe("fg-quad")
HEXA = load_airframe("hexa-550")
DT = 1.0 / 960.0


def quiet(airframe=FG, device=None, **settings) -> MultirotorSim:
    settings = SimulatorSettings(floor_z=None, disturbances=False, imu_noise=False, **settings)
    return MultirotorSim(airframe, 1, settings, device=device)


def test_fg_quad_is_flown_as_flightgoggles_flies_it():
    assert FG.integrator == Integrator.EULER
    assert quiet(FG).integrator == Integrator.EULER
    assert quiet(FG, integrator=Integrator.RK4).integrator == Integrator.RK4


@pytest.mark.parametrize("airframe", [FG, HEXA], ids=["fg-quad", "hexa-550"])
def test_yaw_turns_the_way_the_faster_rotors_drag_torque_pushes(device, airframe):
    """Speeding up the rotors whose drag torque on the body points along -z (a rotor turning
    counter-clockwise seen from above drags the body clockwise) yaws the body clockwise, r < 0; its
    yaw acceleration once the motors settle is sum(d_i cm w_i^2) / Jz (aerodynamic moment aside)."""
    sim = quiet(airframe, device=device)
    hover = airframe.hover_speed
    faster = np.where(airframe.rotor_spins < 0, 1.05 * hover, hover)
    sim.reset(position=[0, 0, 10], rotor_speed=hover)
    sim.set_command(ControlMode.ROTOR_SPEEDS, faster)
    sim.step(192)  # 0.2 s: the motors have settled (10 time constants)
    r0 = sim.states().rates[0, 2]
    sim.step(48)
    s = sim.states()
    r1 = s.rates[0, 2]
    assert r0 < 0 and r1 < r0, "the body must turn clockwise seen from above"
    cm = airframe.torque_coefficient
    torque = np.sum(airframe.rotor_spins * cm * s.rotor_speed[0] ** 2)
    assert torque < 0
    r_mid = 0.5 * (r0 + r1)
    aero = -abs(r_mid) * airframe.moment_coefficient[2] * r_mid  # -|W| Ca W about z
    expected = (torque + aero) / airframe.inertia[2, 2]
    assert (r1 - r0) / (48 * DT) == pytest.approx(expected, rel=0.02)


def test_fg_quad_spins_are_flightgoggles_spins():
    """FlightGoggles: rotor 0 (+x, +y) d = -1, rotor 1 (-x, +y) +1, rotor 2 (-x, -y) -1, rotor 3 (+x, -y) +1."""
    np.testing.assert_array_equal(np.sign(FG.rotor_positions[:, :2]), [[1, 1], [-1, 1], [-1, -1], [1, -1]])
    np.testing.assert_array_equal(FG.rotor_spins, [-1, 1, -1, 1])


@pytest.mark.parametrize("integrator", [Integrator.EULER, Integrator.RK4], ids=["euler", "rk4"])
def test_gyroscopic_precession_of_the_rotors(device, integrator):
    """Rotors 0 and 2 (turning counter-clockwise seen from above: angular momentum +z) faster than 1
    and 3: net rotor momentum h = 2 Jm (a - b) z. A roll rate p then gives the pitch acceleration
    -(W x h)_y / Jy = p h / Jy (positive: nose down), with no pitch torque from the rotors' thrust."""
    no_yaw_torque = allocation_matrix(FG.rotor_positions, FG.rotor_axes, FG.rotor_spins, 0.0)
    no_drag = dataclasses.replace(FG, moment_coefficient=np.zeros(3), torque_coefficient=0.0, allocation=no_yaw_torque)
    sim = quiet(no_drag, device=device, integrator=integrator)
    a, b = 1500.0, 700.0
    speeds = np.array([a, b, a, b])
    p = 3.0
    sim.reset(position=[0, 0, 10], rates=[p, 0, 0], rotor_speed=speeds)
    sim.set_command(ControlMode.ROTOR_SPEEDS, speeds)  # held: no rotor acceleration
    sim.step(1)
    h = 2 * FG.rotor_inertia * (a - b)
    pitch_acceleration = p * h / FG.inertia[1, 1]
    assert sim.states().rates[0, 1] / DT == pytest.approx(pitch_acceleration, rel=2e-3)


def _expected_specific_force(airframe, s) -> np.ndarray:
    """(thrust + R^T drag) / m from the state at the sample: thrust cf sum(w^2) along body z, drag
    -cd |v| v in the world."""
    thrust = np.array([0.0, 0.0, airframe.thrust_coefficient * np.sum(s.rotor_speed[0] ** 2)])
    drag = -airframe.drag_coefficient * np.linalg.norm(s.velocity[0]) * s.velocity[0]
    return (thrust + quat_to_matrix(s.attitude[0]).T @ drag) / airframe.mass


@pytest.mark.parametrize("integrator", [Integrator.EULER, Integrator.RK4], ids=["euler", "rk4"])
def test_accelerometer_is_the_specific_force_at_the_sample(device, integrator):
    hover = FG.hover_speed
    flights = {
        "hover": (dict(position=[0, 0, 5], rotor_speed=hover), [hover] * 4),
        "climb": (dict(position=[0, 0, 5], rotor_speed=hover), [1.1 * hover] * 4),
        "tilted, drag-dominated": (
            dict(
                position=[0, 0, 20],
                attitude=quat_from_euler(0.5, -0.3, 0.2),
                velocity=[12.0, -6.0, 3.0],
                rates=[1.0, -2.0, 0.5],
                rotor_speed=hover,
            ),
            [0.7 * hover, 1.2 * hover, 0.9 * hover, 1.1 * hover],
        ),
    }
    for name, (start, command) in flights.items():
        sim = quiet(device=device, integrator=integrator)
        sim.reset(**start)
        sim.set_command(ControlMode.ROTOR_SPEEDS, command)
        worst = 0.0
        for _ in range(96):
            sim.step(1)
            s = sim.states()
            worst = max(worst, np.abs(s.imu_accel[0] - _expected_specific_force(FG, s)).max())
        assert worst < 1e-4, f"{name}: accelerometer off by {worst:.2e} m/s^2"
        if name == "hover":
            np.testing.assert_allclose(s.imu_accel[0], [0, 0, GRAVITY], atol=1e-4)


def test_accelerometer_on_the_floor_reads_the_support():
    sim = MultirotorSim(FG, 1, SimulatorSettings(disturbances=False, imu_noise=False))
    sim.set_command(ControlMode.ROTOR_SPEEDS, [0.5 * FG.hover_speed] * 4)  # below hover: stays down
    for _ in range(20):
        sim.step(1)
        np.testing.assert_allclose(sim.states().imu_accel[0], [0, 0, GRAVITY], atol=1e-4)


def test_gyro_filter_steps_by_backward_euler(device):
    """The rate-mode low-pass against the backward-Euler solution of y'' = P (u - y) - Q y', solved as
    a linear system each step, and its settled value (unit DC gain)."""
    P, Q = FG.filter_p, FG.filter_q
    n = 200
    u = np.zeros((n, 3), np.float32)
    u[:, 0] = 1.0
    u[50:, 1] = -2.0
    u[:, 2] = np.sin(np.arange(n) * 0.3)
    out = wp.zeros(n, dtype=wp.vec3, device=device)
    wp.launch(
        filter_response_kernel,
        dim=1,
        inputs=[P, Q, DT, wp.array(u, dtype=wp.vec3, device=device)],
        outputs=[out],
        device=device,
    )
    got = out.numpy()
    A = np.array([[1.0, -DT], [DT * P, 1.0 + DT * Q]])
    state = np.zeros((3, 2))
    expected = np.zeros((n, 3))
    for k in range(n):
        for axis in range(3):
            state[axis] = np.linalg.solve(A, [state[axis, 0], state[axis, 1] + DT * P * u[k, axis]])
        expected[k] = state[:, 0]
    np.testing.assert_allclose(got, expected, atol=2e-5)
    assert got[-1, 0] == pytest.approx(1.0, abs=1e-3)
    assert got[-1, 1] == pytest.approx(-2.0, abs=1e-3)


def _compare(sim: MultirotorSim, model: ref.FlightGogglesQuad) -> dict:
    s = sim.states()
    dq = abs(float(np.dot(s.attitude[0], model.q)))
    return {
        "position": np.abs(s.position[0] - model.p).max(),
        "attitude_deg": np.degrees(2 * np.arccos(min(1.0, dq))),
        "rates": np.abs(s.rates[0] - model.w).max(),
        "accel": np.abs(s.imu_accel[0] - model.accel).max(),
    }


BOUNDS = {"position": 0.01, "attitude_deg": 0.5, "rates": 0.02, "accel": 0.02}


def _check(sim, model, worst):
    for key, value in _compare(sim, model).items():
        worst[key] = max(worst[key], value)


def test_open_loop_flight_matches_flightgoggles():
    """1.5 s from a tilted, fast, spinning start through rotor steps that yaw, roll and climb."""
    start = dict(
        position=[0.0, 0.0, 10.0],
        attitude=quat_from_euler(0.35, -0.2, 1.0),
        velocity=[5.0, -1.0, 0.5],
        rates=[0.5, -1.0, 2.0],
    )
    sim = quiet()
    sim.reset(**start, rotor_speed=ref.HOVER_SPEED)
    model = ref.FlightGogglesQuad(**start)
    h = ref.HOVER_SPEED
    schedule = [
        [1.05 * h, h, 1.05 * h, h],
        [1.1 * h, 0.9 * h, 1.2 * h, 0.95 * h],
        [0.8 * h, 1.3 * h, 0.9 * h, 1.25 * h],
        [1.3 * h] * 4,
        [2500.0, 0.0, 1800.0, 900.0],  # beyond the limits: clipped
    ]
    worst = dict.fromkeys(BOUNDS, 0.0)
    for command in schedule:
        sim.set_command(ControlMode.ROTOR_SPEEDS, command)
        for _ in range(288):  # 0.3 s each
            sim.step(1)
            model.step(np.array(command))
            _check(sim, model, worst)
    for key, bound in BOUNDS.items():
        assert worst[key] < bound, f"{key}: {worst[key]:.3g} > {bound}"


def test_rate_mode_matches_flightgoggles():
    """FlightGoggles' rate mode (LPF on the gyro, PID, inverse mixer) through rate and thrust steps."""
    sim = quiet()
    sim.reset(position=[0.0, 0.0, 10.0], rotor_speed=ref.HOVER_SPEED)
    model = ref.FlightGogglesQuad(position=[0.0, 0.0, 10.0])
    schedule = [(9.81, [2.0, 0.0, 0.0]), (14.0, [0.0, -3.0, 1.5]), (8.0, [-1.0, 1.0, -4.0]), (12.0, [0.0, 0.0, 0.0])]
    worst = dict.fromkeys(BOUNDS, 0.0)
    worst_command = 0.0
    for thrust, rates in schedule:
        sim.set_command(ControlMode.RATES, [thrust, *rates])
        for _ in range(384):  # 0.4 s each
            speeds_before = model.rotors.copy()
            command = model.rate_step(thrust, np.array(rates))
            sim.step(1)
            _check(sim, model, worst)
            # The commanded speeds, recovered from the Euler motor step w1 = w0 + dt (cmd - w0) / tau.
            flown = speeds_before + (sim.states().rotor_speed[0] - speeds_before) * (ref.TAU / DT)
            unclipped = (command > 1.0) & (command < ref.MAX_SPEED - 1.0)
            worst_command = max(worst_command, np.abs(flown - command)[unclipped].max(initial=0.0))
    for key, bound in BOUNDS.items():
        assert worst[key] < bound, f"{key}: {worst[key]:.3g} > {bound}"
    assert worst_command < 5.0, f"commanded rotor speeds off by {worst_command:.1f} rad/s"
