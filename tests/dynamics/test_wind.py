"""The air the vehicles fly through (``goggles.dynamics.wind``), against closed forms written here:
the drag balance of a vehicle in a steady crosswind (level and drifting, or holding its place and
tilted), the Dryden spectra and variances of MIL-F-8785C, the 1-cosine gust's shape, and the same
air for the same seed."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import warp as wp
from scipy import integrate, signal

from goggles.dynamics import ControlMode, MultirotorSim, SimulatorSettings, load_airframe
from goggles.dynamics.wind import (
    Gust,
    WindParams,
    WindSettings,
    dryden_scales,
    steady_of,
    turbulence_step,
    turbulence_velocity,
    vec5,
    w20_of,
    wind_params,
)
from goggles.errors import ConfigError
from goggles.frames import quat_to_matrix

QUIET = {"disturbances": False, "imu_noise": False, "floor_z": None}


def drag_force(airframe, velocity_air_W: np.ndarray, R_WB: np.ndarray) -> np.ndarray:
    """The airframe's drag (world) for a velocity relative to the air: body-frame linear and quadratic
    terms and the isotropic one, as its preset's file documents them."""
    v_B = R_WB.T @ velocity_air_W
    body = -np.asarray(airframe.linear_drag_body) * v_B - np.asarray(airframe.quadratic_drag_body) * v_B * np.abs(v_B)
    return R_WB @ body - airframe.drag_coefficient * np.linalg.norm(velocity_air_W) * velocity_air_W


@pytest.mark.parametrize("preset", ["fg-quad", "hexa-550"])
def test_a_level_vehicle_in_a_crosswind_is_pushed_by_its_drag_and_drifts_to_the_winds_speed(preset):
    airframe = load_airframe(preset)
    wind = WindSettings(speed=5.0, from_deg=270.0)  # from the west: towards +x (east)
    sim = MultirotorSim(airframe, 1, SimulatorSettings(wind=wind, **QUIET), device="cpu")
    sim.reset(position=[0.0, 0.0, 10.0], rotor_speed=airframe.hover_speed)
    sim.set_command(ControlMode.ROTOR_SPEEDS, [airframe.hover_speed] * airframe.num_rotors)
    sim.step(1)
    s = sim.states()
    assert np.allclose(s.wind[0], [5.0, 0.0, 0.0], atol=1e-5)
    expected = drag_force(airframe, -np.array([5.0, 0.0, 0.0]), np.eye(3)) / airframe.mass
    assert s.velocity[0][0] / sim.dt == pytest.approx(expected[0], rel=0.01)
    sim.step(960 * 20 - 1)  # 20 s: the air carries it along, as dv/dt = F(v - wind) / m says
    solved = integrate.solve_ivp(
        lambda t, v: drag_force(airframe, np.array([v[0] - 5.0, 0.0, 0.0]), np.eye(3))[:1] / airframe.mass,
        (0.0, 20.0),
        [0.0],
        rtol=1e-10,
        atol=1e-12,
    )
    # Within 0.5 %: the hexa's rotors at their hover speed also pitch it by ~3e-4 rad in 20 s.
    assert sim.states().velocity[0][0] == pytest.approx(solved.y[0, -1], rel=0.005)
    assert solved.y[0, -1] > 3.5


def test_a_vehicle_holding_its_place_in_a_crosswind_tilts_as_its_drag_balance_says():
    airframe = load_airframe("hexa-550")
    wind = WindSettings(speed=5.0, from_deg=180.0)  # from the south: towards +y
    sim = MultirotorSim(airframe, 1, SimulatorSettings(wind=wind, **QUIET), device="cpu")
    sim.reset(position=[0.0, 0.0, 10.0], rotor_speed=airframe.hover_speed)
    sim.set_command(ControlMode.POSITION, [0.0, 0.0, 10.0, 0.0])
    sim.step(960 * 20)
    s = sim.states()
    assert np.linalg.norm(s.velocity[0]) < 0.02 and np.allclose(s.wind[0], [0.0, 5.0, 0.0], atol=1e-5)
    R = quat_to_matrix(s.attitude[0])
    tilt = math.degrees(math.acos(R[2, 2]))
    # At rest in the air stream the thrust (body z) balances gravity and the drag of the air passing at
    # -5 m/s: body z along (m g z - F); F depends on the tilt through the body-frame terms.
    guess = np.eye(3)
    for _ in range(20):
        F = drag_force(airframe, np.array([0.0, -5.0, 0.0]), guess)
        z_B = np.array([0.0, 0.0, airframe.mass * 9.80665]) - F
        z_B /= np.linalg.norm(z_B)
        x_B = np.cross([0.0, 1.0, 0.0], z_B)
        x_B /= np.linalg.norm(x_B)
        guess = np.stack([x_B, np.cross(z_B, x_B), z_B], axis=1)
    expected = math.degrees(math.acos(guess[2, 2]))
    assert expected > 5.0 and tilt == pytest.approx(expected, abs=0.3)
    assert R[1, 2] < 0.0  # leaning into the wind: its thrust points against it


def dryden(sigma: float, length: float, speed: float, omega: np.ndarray, axis: str) -> np.ndarray:
    """MIL-F-8785C's one-sided Dryden spectra in rad/s (the integral over 0..inf is sigma^2)."""
    x = length * omega / speed
    if axis == "u":
        return sigma**2 * (2.0 * length / (math.pi * speed)) / (1.0 + x**2)
    return sigma**2 * (length / (math.pi * speed)) * (1.0 + 3.0 * x**2) / (1.0 + x**2) ** 2


@wp.kernel
def turbulence_kernel(
    wind: WindParams, height: float, speed: float, dt: float, steps: int, out: wp.array3d(dtype=float)
):
    i = wp.tid()
    rng = wp.rand_init(1234, i)
    z = vec5()
    for k in range(steps):
        z, rng = turbulence_step(wind, z, height, speed, dt, rng)
        v = turbulence_velocity(z, height, speed, steady_of(wind, 0), w20_of(wind, 0))
        out[i, k, 0] = v[0]
        out[i, k, 1] = v[1]
        out[i, k, 2] = v[2]


@pytest.mark.parametrize("intensity", ["light", "moderate", "severe"])
def test_the_turbulence_has_the_dryden_variances_and_spectra_of_mil_f_8785c(intensity):
    """1,024 independent vehicles' turbulence at 3 m (held to the model's 10 ft), passing at 15 m/s:
    each axis's variance and its one-sided spectrum (Welch) against the closed forms, over the band
    where 30 s of 240 Hz samples resolve them."""
    height, speed, dt, steps, count = 3.0, 15.0, 1.0 / 240.0, 240 * 60, 1024
    w20 = {"light": 15.0, "moderate": 30.0, "severe": 45.0}[intensity] * 0.514444
    sigma_uv, sigma_w, length_uv, length_w = dryden_scales(w20, height)
    # The closed forms, from MIL-F-8785C's low-altitude table (h in feet, held at 10 ft).
    h_ft = 10.0
    assert sigma_w == pytest.approx(0.1 * w20)
    assert sigma_uv == pytest.approx(sigma_w / (0.177 + 0.000823 * h_ft) ** 0.4)
    assert length_w == pytest.approx(h_ft * 0.3048) and length_uv == pytest.approx(
        h_ft / (0.177 + 0.000823 * h_ft) ** 1.2 * 0.3048
    )
    params = wind_params(WindSettings(speed=speed, from_deg=270.0, turbulence=intensity), "cpu")
    out = wp.zeros((count, steps, 3), dtype=float, device="cpu")
    wp.launch(turbulence_kernel, dim=count, inputs=[params, height, speed, dt, steps], outputs=[out], device="cpu")
    samples = out.numpy()[:, 240 * 30 :]  # the first half: from rest to the stationary state
    for axis, name, sigma, length in (
        (0, "u", sigma_uv, length_uv),
        (1, "v", sigma_uv, length_uv),
        (2, "w", sigma_w, length_w),
    ):
        assert samples[:, :, axis].var() == pytest.approx(sigma**2, rel=0.06), name
        f, psd = signal.welch(samples[:, :, axis], fs=1.0 / dt, nperseg=4096, axis=-1)
        psd = psd.mean(axis=0) / (2.0 * math.pi)  # per Hz -> per rad/s
        omega = 2.0 * math.pi * f
        tau = length / speed
        band = (omega > 3.0 / tau) & (omega < 20.0 / tau) & (omega < 2.0 * math.pi * 30.0)
        ratio = psd[band] / dryden(sigma, length, speed, omega[band], name)
        assert band.sum() >= 5 and np.median(ratio) == pytest.approx(1.0, abs=0.1), name
        assert ratio.min() > 0.75 and ratio.max() < 1.3, name


def test_a_gust_rises_to_its_peak_and_falls_back_as_one_minus_cosine():
    airframe = load_airframe("fg-quad")
    gust = Gust(start_s=0.5, duration_s=1.0, peak=(0.0, 3.0, -1.0))
    sim = MultirotorSim(airframe, 1, SimulatorSettings(wind=WindSettings(gusts=(gust,)), **QUIET), device="cpu")
    sim.reset(position=[0.0, 0.0, 10.0], rotor_speed=airframe.hover_speed)
    sim.set_command(ControlMode.POSITION, [0.0, 0.0, 10.0, 0.0])
    for _ in range(24):
        sim.step(96)
        t = sim.time - sim.dt  # the air of the last step, from its start
        since = t - 0.5
        shape = 0.5 * (1.0 - math.cos(2.0 * math.pi * since)) if 0.0 <= since <= 1.0 else 0.0
        assert np.allclose(sim.states().wind[0], np.array([0.0, 3.0, -1.0]) * shape, atol=1e-4), t


def test_the_same_seed_gives_the_same_air_and_each_vehicle_its_own():
    airframe = load_airframe("fg-quad")
    wind = WindSettings(speed=5.0, from_deg=90.0, turbulence="moderate", profile="power")
    flights = []
    for _ in range(2):
        sim = MultirotorSim(airframe, 2, SimulatorSettings(wind=wind, seed=7, **QUIET), device="cpu")
        sim.reset(position=[[0.0, 0.0, 2.0], [5.0, 0.0, 2.0]], rotor_speed=airframe.hover_speed)
        sim.set_command(ControlMode.POSITION, [[0.0, 0.0, 2.0, 0.0], [5.0, 0.0, 2.0, 0.0]])
        seen = []
        for _ in range(20):
            sim.step(48)
            seen.append(sim.states().wind.copy())
        flights.append(np.array(seen))
    assert flights[0].tobytes() == flights[1].tobytes()
    assert not np.allclose(flights[0][:, 0], flights[0][:, 1])  # each vehicle's turbulence its own
    # The power law: at 2 m the steady part is 5 (2 / 6.096)^(1/7) m/s towards -x (from the east).
    assert flights[0][:, :, 0].mean() == pytest.approx(-5.0 * (2.0 / 6.096) ** (1.0 / 7.0), abs=0.6)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"turbulence": "hurricane"}, "wind turbulence 'hurricane': use one of none, light, moderate, severe"),
        ({"speed": -1.0}, "wind speed must be 0 to 100 m/s"),
        ({"speed": float("nan")}, "wind speed must be a finite number"),
        ({"profile": "log", "roughness": 0.0}, "wind roughness must be above 0 m"),
        ({"gusts": (Gust(0.0, 0.0, (1.0, 0.0, 0.0)),)}, "wind gust 1: a start"),
    ],
)
def test_bad_wind_is_one_line(settings, said):
    with pytest.raises(ConfigError, match=said.replace("(", r"\(")):
        WindSettings(**settings)


def linear_field(tmp_path, **changes):
    """A field that is linear in the grid's coordinates, v_G(q) = A q + b, on a 5 x 4 x 3 grid placed by a
    turned and shifted frame (trilinear interpolation is exact for it); saved as a .npz."""
    A = np.array([[0.2, -0.1, 0.05], [0.0, 0.3, -0.2], [0.1, 0.0, 0.15]])
    b = np.array([1.0, -2.0, 0.5])
    origin, spacing = np.array([-1.0, 0.5, 0.0]), np.array([2.0, 1.5, 1.0])
    yaw = math.radians(30.0)
    frame = np.eye(4)
    frame[:3, :3] = [[math.cos(yaw), -math.sin(yaw), 0.0], [math.sin(yaw), math.cos(yaw), 0.0], [0.0, 0.0, 1.0]]
    frame[:3, 3] = [10.0, -5.0, 1.0]
    i, j, k = np.meshgrid(np.arange(5), np.arange(4), np.arange(3), indexing="ij")
    q = origin + np.stack([i, j, k], axis=-1) * spacing
    fields = {"velocity": q @ A.T + b, "origin": origin, "spacing": spacing, "frame": frame} | changes
    path = tmp_path / "field.npz"
    np.savez(path, **{k: v for k, v in fields.items() if v is not None})
    return path, A, b, frame


def test_a_gridded_field_is_interpolated_trilinearly_at_each_vehicle_in_its_frame(tmp_path):
    from goggles.dynamics.wind import WindField

    path, A, b, frame = linear_field(tmp_path)
    field = WindField.load(path)
    airframe = load_airframe("fg-quad")
    wind = WindSettings(speed=2.0, from_deg=0.0, field=field)  # a 2 m/s wind from the north besides
    rng = np.random.default_rng(3)
    q_inside = np.array([-1.0, 0.5, 0.0]) + rng.uniform(0.0, 1.0, (40, 3)) * np.array([8.0, 4.5, 2.0])
    q_outside = np.array([[-1.5, 1.0, 1.0], [4.0, 6.0, 1.0], [3.0, 2.0, 2.5]])
    q = np.concatenate([q_inside, q_outside])
    points = q @ frame[:3, :3].T + frame[:3, 3]
    sim = MultirotorSim(airframe, len(points), SimulatorSettings(wind=wind, **QUIET), device="cpu")
    sim.reset(position=points, rotor_speed=airframe.hover_speed)
    sim.set_command(ControlMode.ROTOR_SPEEDS, [airframe.hover_speed] * 4)
    sim.step(1)
    steady = np.array([0.0, -2.0, 0.0])
    expected = (q @ A.T + b) @ frame[:3, :3].T  # the grid's velocities turned into the world
    got = sim.states().wind
    assert np.allclose(got[: len(q_inside)], expected[: len(q_inside)] + steady, atol=2e-5)
    assert np.allclose(got[len(q_inside) :], steady, atol=1e-6)  # outside the grid: the steady wind alone


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"velocity": np.zeros((5, 4, 3))}, "'velocity' must be (nx, ny, nz, 3)"),
        ({"velocity": np.full((5, 4, 3, 3), np.nan)}, "'velocity' holds NaN"),
        ({"frame": None}, "no 'frame'"),
        ({"frame": np.diag([1.0, 1.0, -1.0, 1.0])}, "'frame' must be"),
        ({"spacing": np.array([1.0, 0.0, 1.0])}, "'spacing' must be"),
    ],
)
def test_a_bad_wind_field_is_one_line_naming_the_file_and_the_key(tmp_path, changes, said):
    from goggles.dynamics.wind import WindField

    path, *_ = linear_field(tmp_path, **changes)
    with pytest.raises(ConfigError, match=f"field.npz: {re.escape(said)}"):
        WindField.load(path)


def test_a_vehicles_own_gust_adds_to_the_runs():
    airframe = load_airframe("fg-quad")
    run_gust = Gust(start_s=0.5, duration_s=1.0, peak=(0.0, 2.0, 0.0))
    settings = SimulatorSettings(wind=WindSettings(gusts=(run_gust,)), **QUIET)
    sim = MultirotorSim(airframe, 2, settings, device="cpu")
    sim.reset(position=[[0.0, 0.0, 10.0], [5.0, 0.0, 10.0]], rotor_speed=airframe.hover_speed)
    sim.set_command(ControlMode.POSITION, [[0.0, 0.0, 10.0, 0.0], [5.0, 0.0, 10.0, 0.0]])
    sim.set_gusts([1], start_s=[0.25], duration_s=[2.0], peak=[[3.0, 0.0, 1.0]])
    for _ in range(24):
        sim.step(96)
        t = sim.time - sim.dt

        def cosine(since: float, duration: float) -> float:
            return 0.5 * (1.0 - math.cos(2.0 * math.pi * since / duration)) if 0.0 <= since <= duration else 0.0

        run = np.array([0.0, 2.0, 0.0]) * cosine(t - 0.5, 1.0)
        own = np.array([3.0, 0.0, 1.0]) * cosine(t - 0.25, 2.0)
        assert np.allclose(sim.states().wind[0], run, atol=1e-4), t
        assert np.allclose(sim.states().wind[1], run + own, atol=1e-4), t
    with pytest.raises(ConfigError, match="durations above 0"):
        sim.set_gusts([0], start_s=[0.0], duration_s=[0.0], peak=[[1.0, 0.0, 0.0]])
