"""Airframes: rigid body, rotor layout, motors, aerodynamics, noise and controller gains, from presets.

A preset is a small TOML file (``goggles/dynamics/presets/<name>.toml``, or any path) whose every
number has a unit. Physical parameters have no silent defaults: a missing key is an error naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np

from goggles.checks import FLOAT32_MAX, Table, finite_vector, read_toml
from goggles.errors import ConfigError

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
PRESET_NAMES = tuple(sorted(p.stem for p in PRESETS_DIR.glob("*.toml") if p.stem != "imu"))
"""The airframes that ship with goggles, by name."""
#: Most rotors an airframe may have (the kernels use fixed-size vectors).
MAX_ROTORS = 8

#: The largest body rate rate mode takes where an airframe file names none, rad/s: Betaflight's largest
#: configurable rate, 1998 deg/s (what racing quads are flown at, at most).
DEFAULT_MAX_RATE = math.radians(1998.0)


class Integrator(IntEnum):
    EULER = 0
    """Explicit Euler, the motor lag included (FlightGoggles' default)."""
    RK4 = 1
    """Classic fourth-order Runge-Kutta, with the motor lag solved exactly over each step."""


class CollisionShape(IntEnum):
    SPHERE = 0
    BOX = 1


@dataclass(frozen=True)
class ImuNoise:
    """Continuous-time IMU noise densities per axis (discrete sigma = density / sqrt(dt))."""

    accel_noise: tuple[float, float, float]
    """m/s^2/sqrt(Hz)."""
    gyro_noise: tuple[float, float, float]
    """rad/s/sqrt(Hz)."""
    accel_bias_walk: tuple[float, float, float]
    """m/s^3/sqrt(Hz): the bias moves by N(0, (walk * sqrt(dt))^2) per sample."""
    gyro_bias_walk: tuple[float, float, float]
    """rad/s^2/sqrt(Hz)."""


@dataclass(frozen=True)
class Airframe:
    """Everything the simulator needs about one vehicle type. Arrays are float64, SI units, body FLU."""

    name: str
    mass: float
    """kg."""
    inertia: np.ndarray
    """(3, 3) kg m^2 about the centre of mass."""
    rotor_positions: np.ndarray
    """(N, 3) m, rotor hubs in the body frame."""
    rotor_axes: np.ndarray
    """(N, 3) unit thrust directions in the body frame."""
    rotor_spins: np.ndarray
    """(N,) +1 or -1: the direction (along the axis) of the rotor's drag torque on the body."""
    thrust_coefficient: float
    """N/(rad/s)^2: thrust = cf * w|w|."""
    torque_coefficient: float
    """N m/(rad/s)^2: drag torque = cm * w|w|."""
    time_constant_up: float
    """s, motor lag while speeding up."""
    time_constant_down: float
    """s, motor lag while slowing down."""
    min_speed: float
    """rad/s."""
    max_speed: float
    """rad/s."""
    rotor_inertia: float
    """kg m^2."""
    rotor_radius: float
    """m (ground effect)."""
    drag_coefficient: float
    """N/(m/s)^2, FlightGoggles world-frame quadratic drag."""
    moment_coefficient: np.ndarray
    """(3,) N m/(rad/s)^2, FlightGoggles aerodynamic moment."""
    linear_drag_body: np.ndarray
    quadratic_drag_body: np.ndarray
    linear_moment_drag: np.ndarray
    quadratic_moment_drag: np.ndarray
    force_density: float
    """N^2 s, stochastic force spectral density per axis."""
    moment_density: float
    """(N m)^2 s."""
    imu: ImuNoise
    rate_kp: np.ndarray
    rate_ki: np.ndarray
    rate_kd: np.ndarray
    rate_integrator_limit: float
    filter_p: float
    filter_q: float
    k_position: np.ndarray
    k_velocity: np.ndarray
    k_attitude: np.ndarray
    k_rate: np.ndarray
    max_horizontal_acceleration: float
    max_vertical_acceleration: float
    allocation: np.ndarray
    """(6, N) rotor thrusts (N) -> body wrench [F; M] about the centre of mass."""
    collision_shape: CollisionShape
    collision_size: np.ndarray
    """(3,) m: the sphere's radius (repeated) or the box's half extents, body frame."""
    crash_speed: float
    """m/s: contacts approached faster than this are crashes; slower ones are only reported."""
    integrator: Integrator = Integrator.RK4
    """The integrator the airframe's parameters were identified with (``[simulation] integrator``);
    a simulator uses it unless told otherwise."""
    max_rate: float = DEFAULT_MAX_RATE
    """rad/s: the largest body rate rate mode takes (``[rate_controller] max_rate``); a command beyond
    it is taken as it (its integrator would otherwise wind up on rates no airframe reaches)."""

    @property
    def num_rotors(self) -> int:
        return len(self.rotor_positions)

    @property
    def hover_speed(self) -> float:
        """rad/s per rotor that holds the vehicle in level hover (planar, upward rotors)."""
        lift = self.allocation[2].sum()
        return float(np.sqrt(self.mass * 9.81 / (lift * self.thrust_coefficient)))

    @property
    def meeting_radius(self) -> float:
        """m: the sphere it meets other vehicles as (``goggles.dynamics.Swarm``): its collision
        sphere, or the sphere round its collision box."""
        if self.collision_shape == CollisionShape.BOX:
            return float(np.linalg.norm(self.collision_size))
        return float(self.collision_size[0])

    @property
    def arm_length(self) -> float:
        """m, mean distance of the rotor hubs from the centre (Conyers ground effect)."""
        return float(np.linalg.norm(self.rotor_positions[:, :2], axis=1).mean())


def allocation_matrix(positions: np.ndarray, axes: np.ndarray, spins: np.ndarray, cm_over_cf: float) -> np.ndarray:
    """Wrench per unit rotor thrust: column i = [a_i; r_i x a_i + spin_i (cm/cf) a_i].

    Args:
        positions: (N, 3) rotor hubs, m, body frame.
        axes: (N, 3) unit thrust directions.
        spins: (N,) +1 or -1.
        cm_over_cf: torque / thrust coefficient ratio, m.

    Returns:
        (6, N) float64.
    """
    moments = np.cross(positions, axes) + (spins * cm_over_cf)[:, None] * axes
    return np.concatenate([axes.T, moments.T])


def load_airframe(name_or_path: str | Path) -> Airframe:
    """Load a preset by name (``fg-quad``, ``hexa-550``) or from a TOML path.

    Raises:
        ConfigError: naming the file and the missing or bad key.
    """
    if not isinstance(name_or_path, (str, Path)):
        raise ConfigError(f"airframe {name_or_path!r}: a preset name {list(PRESET_NAMES)} or a .toml path")
    path = Path(name_or_path)
    if path.suffix and not path.is_file():
        raise ConfigError(f"airframe file {path} not found")
    if not path.suffix:
        if str(name_or_path) not in PRESET_NAMES:
            raise ConfigError(
                f"airframe preset {name_or_path!r} not found; known presets: {list(PRESET_NAMES)}, or give a .toml path"
            )
        path = PRESETS_DIR / f"{name_or_path}.toml"
    return _airframe(path, read_toml(path, "airframe preset"))


def load_imu_preset(name: str) -> ImuNoise:
    """IMU noise preset by name: ``flightgoggles``, ``vn-100``, ``bmi088``."""
    data = read_toml(PRESETS_DIR / "imu.toml", "IMU preset")
    if name not in data:
        raise ConfigError(f"IMU preset {name!r} unknown; known: {sorted(data)}")
    table = Table(PRESETS_DIR / "imu.toml", f"[{name}]", data[name])
    return ImuNoise(
        *(
            tuple(table.vector(k, 3, minimum=0.0))
            for k in ("accel_noise", "gyro_noise", "accel_bias_walk", "gyro_bias_walk")
        )
    )


_KEYS = {
    "body": {"mass", "inertia"},
    "motors": {
        "thrust_coefficient",
        "torque_coefficient",
        "time_constant_up",
        "time_constant_down",
        "min_speed",
        "max_speed",
        "rotor_inertia",
        "rotor_radius",
    },
    "aerodynamics": {
        "drag_coefficient",
        "moment_coefficient",
        "linear_drag_body",
        "quadratic_drag_body",
        "linear_moment_drag",
        "quadratic_moment_drag",
    },
    "disturbance": {"force_density", "moment_density"},
    "imu": {"preset"},
    "rate_controller": {"kp", "ki", "kd", "integrator_limit", "filter_p", "filter_q", "max_rate"},
    "geometric_controller": {
        "k_position",
        "k_velocity",
        "k_attitude",
        "k_rate",
        "max_horizontal_acceleration",
        "max_vertical_acceleration",
    },
    "rotor": {"position", "axis", "spin"},
    "collision": {"shape", "radius", "half_extents", "crash_speed"},
    "allocation": set(),
    "simulation": {"integrator"},
}


def _check_unknown_keys(path: Path, data: dict) -> None:
    for table, value in data.items():
        if table not in _KEYS:
            raise ConfigError(f"{path}: unknown table {table!r}; known: {sorted(_KEYS)}")
        entries = value if table == "rotor" and isinstance(value, list) else [value] if isinstance(value, dict) else []
        for entry in entries:
            unknown = sorted(set(entry) - _KEYS[table])
            if unknown:
                raise ConfigError(f"{path}: [{table}]: unknown key {unknown[0]!r}; allowed: {sorted(_KEYS[table])}")


def _airframe(path: Path, data: dict) -> Airframe:
    _check_unknown_keys(path, data)
    body = Table(path, "[body]", data.get("body", {}))
    motors = Table(path, "[motors]", data.get("motors", {}))
    aero = Table(path, "[aerodynamics]", data.get("aerodynamics", {}))
    noise = Table(path, "[disturbance]", data.get("disturbance", {}))
    rate = Table(path, "[rate_controller]", data.get("rate_controller", {}))
    lee = Table(path, "[geometric_controller]", data.get("geometric_controller", {}))
    imu = Table(path, "[imu]", data.get("imu", {}))
    collision = Table(path, "[collision]", data.get("collision", {}))
    shape_name = collision.get("shape", required=True)
    if shape_name not in ("sphere", "box"):
        raise ConfigError(f"{path}: [collision]: 'shape' must be 'sphere' or 'box', got {shape_name!r}")
    if shape_name == "sphere":
        collision_size = np.full(3, collision.number("radius", positive=True))
    else:
        collision_size = collision.vector("half_extents", 3, minimum=1e-6)

    mass = body.number("mass", positive=True)
    inertia_value = body.get("inertia", required=True)
    moments = finite_vector(inertia_value, 3)  # None unless 3 finite numbers
    rows = [finite_vector(row, 3) for row in inertia_value] if isinstance(inertia_value, list) else []
    if moments is not None:
        inertia = np.diag(moments)
    elif len(rows) == 3 and all(row is not None for row in rows):
        inertia = np.stack(rows)
    else:
        inertia = np.zeros(0)
    if inertia.shape != (3, 3) or not np.allclose(inertia, inertia.T) or np.any(np.linalg.eigvalsh(inertia) <= 0):
        raise ConfigError(
            f"{path}: [body]: 'inertia' must be 3 positive principal moments or a symmetric positive "
            f"definite 3x3 matrix, kg m^2; got {inertia_value!r}"
        )

    rotors = data.get("rotor", [])
    if not isinstance(rotors, list) or not 1 <= len(rotors) <= MAX_ROTORS:
        raise ConfigError(
            f"{path}: needs 1 to {MAX_ROTORS} [[rotor]] tables, found {len(rotors) if isinstance(rotors, list) else 0}"
        )
    positions, axes, spins = [], [], []
    for i, entry in enumerate(rotors):
        rotor = Table(path, f"[[rotor]] #{i + 1}", entry)
        positions.append(rotor.vector("position", 3))
        axis = rotor.vector("axis", 3) if "axis" in entry else np.array([0.0, 0.0, 1.0])
        if np.linalg.norm(axis) < 1e-9:
            raise ConfigError(f"{path}: [[rotor]] #{i + 1}: 'axis' must be a non-zero vector")
        axes.append(axis / np.linalg.norm(axis))
        spin = rotor.get("spin", required=True)
        if spin not in (1, -1):
            raise ConfigError(f"{path}: [[rotor]] #{i + 1}: 'spin' must be 1 or -1, got {spin!r}")
        spins.append(float(spin))
    positions, axes, spins = np.array(positions), np.array(axes), np.array(spins)

    cf = motors.number("thrust_coefficient", positive=True)
    cm = motors.number("torque_coefficient", minimum=0.0)
    min_speed = motors.number("min_speed", minimum=0.0)
    max_speed = motors.number("max_speed", positive=True)
    if max_speed <= min_speed:
        raise ConfigError(f"{path}: [motors]: 'max_speed' {max_speed} must exceed 'min_speed' {min_speed}")
    allocation = allocation_matrix(positions, axes, spins, cm / cf)
    if "allocation" in data:
        allocation = np.asarray(data["allocation"], dtype=np.float64)
        if allocation.shape != (6, len(rotors)) or not np.all(np.abs(allocation) <= FLOAT32_MAX):
            raise ConfigError(f"{path}: 'allocation' must be a 6 x {len(rotors)} matrix (rows Fx Fy Fz Mx My Mz)")
    if np.linalg.matrix_rank(allocation[2:]) < 4:
        norms = np.linalg.norm(allocation[2:], axis=1)
        vanishing = [axis for axis, norm in zip(("thrust", "roll", "pitch", "yaw"), norms) if norm < 1e-9 * norms.max()]
        why = f": {' and '.join(vanishing)} next to nothing" if vanishing else ""
        if "yaw" in vanishing and "allocation" not in data:
            why += f", torque_coefficient / thrust_coefficient = {cm / cf:.3g} m"
        raise ConfigError(
            f"{path}: the rotors cannot produce independent thrust, roll, pitch and yaw (allocation rank < 4{why})"
        )

    simulation = data.get("simulation", {})
    integrator_name = simulation.get("integrator", "rk4") if isinstance(simulation, dict) else None
    if integrator_name not in ("euler", "rk4"):
        raise ConfigError(f"{path}: [simulation]: 'integrator' must be 'euler' or 'rk4', got {integrator_name!r}")

    return Airframe(
        name=path.stem,
        mass=mass,
        inertia=inertia,
        rotor_positions=positions,
        rotor_axes=axes,
        rotor_spins=spins,
        thrust_coefficient=cf,
        torque_coefficient=cm,
        time_constant_up=motors.number("time_constant_up", positive=True),
        time_constant_down=motors.number("time_constant_down", positive=True),
        min_speed=min_speed,
        max_speed=max_speed,
        rotor_inertia=motors.number("rotor_inertia", minimum=0.0),
        rotor_radius=motors.number("rotor_radius", positive=True),
        drag_coefficient=aero.number("drag_coefficient", minimum=0.0),
        moment_coefficient=aero.vector("moment_coefficient", 3, minimum=0.0),
        linear_drag_body=aero.vector("linear_drag_body", 3, minimum=0.0),
        quadratic_drag_body=aero.vector("quadratic_drag_body", 3, minimum=0.0),
        linear_moment_drag=aero.vector("linear_moment_drag", 3, minimum=0.0),
        quadratic_moment_drag=aero.vector("quadratic_moment_drag", 3, minimum=0.0),
        force_density=noise.number("force_density", minimum=0.0),
        moment_density=noise.number("moment_density", minimum=0.0),
        imu=load_imu_preset(str(imu.get("preset", required=True))),
        rate_kp=rate.vector("kp", 3, minimum=0.0),
        rate_ki=rate.vector("ki", 3, minimum=0.0),
        rate_kd=rate.vector("kd", 3, minimum=0.0),
        rate_integrator_limit=rate.number("integrator_limit", minimum=0.0),
        filter_p=rate.number("filter_p", positive=True),
        filter_q=rate.number("filter_q", positive=True),
        k_position=lee.vector("k_position", 3, minimum=0.0),
        k_velocity=lee.vector("k_velocity", 3, minimum=0.0),
        k_attitude=lee.vector("k_attitude", 3, minimum=0.0),
        k_rate=lee.vector("k_rate", 3, minimum=0.0),
        max_horizontal_acceleration=lee.number("max_horizontal_acceleration", positive=True),
        max_vertical_acceleration=lee.number("max_vertical_acceleration", positive=True),
        allocation=allocation,
        collision_shape=CollisionShape.SPHERE if shape_name == "sphere" else CollisionShape.BOX,
        collision_size=collision_size,
        crash_speed=collision.number("crash_speed", minimum=0.0),
        integrator=Integrator[integrator_name.upper()],
        max_rate=rate.number("max_rate", DEFAULT_MAX_RATE, positive=True),
    )
