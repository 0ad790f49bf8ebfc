"""Domain randomisation drawn per episode from a TOML table: scale factors on the airframe and the
IMU noise, offsets on the camera mounting.

    [airframe]                      # factors on the nominal value
    mass = { uniform = [0.85, 1.15] }
    inertia = { uniform = [0.85, 1.15] }
    motor_time_constant = { normal = [1.0, 0.1] }
    thrust_coefficient = { uniform = [0.9, 1.1] }
    torque_coefficient = { uniform = [0.9, 1.1] }
    drag = { uniform = [0.5, 1.5] }
    [imu]
    noise = { uniform = [0.5, 2.0] }   # factor on the noise densities and bias walks
    [camera]
    pitch_deg = { normal = [0.0, 2.0] }   # added to the mounting pitch (positive: nose up)
    [gates]
    perturbation = { uniform = [0.5, 1.5] }   # factor on a race's gate perturbation bounds
    [wind]                          # each environment's own steady wind and turbulence (goggles.dynamics.wind)
    speed = { uniform = [0.0, 8.0] }         # m/s at the reference height
    from_deg = { uniform = [0.0, 360.0] }    # the compass bearing it blows from
    turbulence = { uniform = [0.0, 30.0] }   # MIL-F-8785C's W20, knots (15 light, 30 moderate, 45 severe)

Each environment draws from its own stream (seed, environment, episode), so an episode is the same
whatever the other environments do. Factors have a floor: the airframe's must stay above 0 and the
noise and perturbation factors at 0 or above. A uniform range must lie above it (checked when the
file is read), and a normal is truncated there (drawn again), so no draw mid-training can fail.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from goggles.checks import finite_vector, read_toml
from goggles.dynamics.airframe import Airframe, allocation_matrix
from goggles.errors import ConfigError

#: Every randomisable value: table -> key -> value when the table leaves it out (1: the nominal
#: airframe, 0: no camera offset).
PARAMETERS = {
    "airframe": {
        "mass": 1.0,
        "inertia": 1.0,
        "motor_time_constant": 1.0,
        "thrust_coefficient": 1.0,
        "torque_coefficient": 1.0,
        "drag": 1.0,
    },
    "imu": {"noise": 1.0},
    "camera": {"pitch_deg": 0.0},
    "gates": {"perturbation": 1.0},
    "wind": {"speed": 0.0, "from_deg": 0.0, "turbulence": 0.0},
}
#: The same by ``table.key`` name.
DEFAULTS = {f"{table}.{key}": value for table, keys in PARAMETERS.items() for key, value in keys.items()}


#: The floor of each bounded parameter: (value, whether the value itself is excluded).
FLOORS = {name: (0.0, True) for name in DEFAULTS if name.startswith("airframe.")} | {
    "imu.noise": (0.0, False),
    "gates.perturbation": (0.0, False),
    "wind.speed": (0.0, False),
    "wind.turbulence": (0.0, False),
}


def _above_floor(value: float, floor: tuple[float, bool]) -> bool:
    bound, excluded = floor
    return value > bound or (value == bound and not excluded)


def _floor_text(floor: tuple[float, bool]) -> str:
    return f"{'>' if floor[1] else '>='} {floor[0]:g}"


@dataclass(frozen=True)
class Distribution:
    kind: str
    """'uniform' (low, high) or 'normal' (mean, standard deviation)."""
    a: float
    b: float
    floor: tuple[float, bool] | None = None
    """Draws at or below it are drawn again (see ``FLOORS``); a uniform range lies above it."""

    def admits(self, value: float) -> bool:
        return self.floor is None or _above_floor(value, self.floor)

    def draw(self, rng: np.random.Generator) -> float:
        while True:  # a normal's mean is admitted, so each draw is admitted with probability >= 1/2
            value = float(rng.uniform(self.a, self.b) if self.kind == "uniform" else rng.normal(self.a, self.b))
            if self.admits(value):
                return value


@dataclass(frozen=True)
class Randomization:
    """What to draw per episode: ``"table.key"`` -> its distribution (the rest keep their default)."""

    distributions: dict[str, Distribution] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> Randomization:
        path = Path(path)
        return cls.from_tables(read_toml(path, "randomisation file"), str(path))

    @classmethod
    def from_tables(cls, tables: dict, where: str = "randomisation") -> Randomization:
        """Raises ConfigError naming ``where`` and the key for anything it cannot draw from."""
        found = {}
        for table, entries in tables.items():
            if table not in PARAMETERS:
                raise ConfigError(f"{where}: unknown table [{table}]; use one of {sorted(PARAMETERS)}")
            if not isinstance(entries, dict):
                raise ConfigError(f"{where}: [{table}] must be a table")
            for key, spec in entries.items():
                if key not in PARAMETERS[table]:
                    raise ConfigError(f"{where}: [{table}] unknown key {key!r}; allowed: {sorted(PARAMETERS[table])}")
                name = f"{table}.{key}"
                found[name] = _distribution(spec, f"{where}: [{table}] {key}", FLOORS.get(name))
        return cls(found)

    def draw(self, seed: int, environment: int, episode: int) -> dict[str, float]:
        """Every parameter's value for one episode of one environment (defaults where not randomised)."""
        rng = np.random.default_rng([seed, environment, episode])
        values = dict(DEFAULTS)
        for name, distribution in sorted(self.distributions.items()):
            values[name] = distribution.draw(rng)
        return values


def _distribution(spec, where: str, floor: tuple[float, bool] | None) -> Distribution:
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in ("uniform", "normal"):
        raise ConfigError(f"{where} must be {{ uniform = [low, high] }} or {{ normal = [mean, std] }}")
    kind, bounds = next(iter(spec.items()))
    pair = finite_vector(bounds, 2)
    if pair is None:
        raise ConfigError(f"{where}: {kind} needs two finite numbers, got {bounds!r}")
    if kind == "uniform" and pair[0] > pair[1]:
        raise ConfigError(f"{where}: uniform low {pair[0]} exceeds high {pair[1]}")
    if kind == "normal" and pair[1] < 0:
        raise ConfigError(f"{where}: normal standard deviation {pair[1]} is negative")
    distribution = Distribution(kind, float(pair[0]), float(pair[1]), floor)
    if not distribution.admits(distribution.a):
        first = "low" if kind == "uniform" else "mean"
        raise ConfigError(f"{where}: {kind} {first} {pair[0]:g} must be {_floor_text(floor)}")
    return distribution


def randomized_airframe(nominal: Airframe, values: dict[str, float]) -> Airframe:
    """The nominal airframe with the drawn factors applied (allocation rebuilt for the new torque
    to thrust ratio). Factors must stay above their floor (``FLOORS``), as ``Randomization`` draws them.

    Raises:
        ConfigError: a factor at or below its floor.
    """
    for name, floor in FLOORS.items():
        if not _above_floor(values[name], floor):
            raise ConfigError(f"randomisation drew {name} = {values[name]:.3g}: must be {_floor_text(floor)}")
    cf = nominal.thrust_coefficient * values["airframe.thrust_coefficient"]
    cm = nominal.torque_coefficient * values["airframe.torque_coefficient"]
    tau, drag, noise = values["airframe.motor_time_constant"], values["airframe.drag"], values["imu.noise"]
    imu = nominal.imu
    return dataclasses.replace(
        nominal,
        mass=nominal.mass * values["airframe.mass"],
        inertia=nominal.inertia * values["airframe.inertia"],
        thrust_coefficient=cf,
        torque_coefficient=cm,
        allocation=allocation_matrix(nominal.rotor_positions, nominal.rotor_axes, nominal.rotor_spins, cm / cf),
        time_constant_up=nominal.time_constant_up * tau,
        time_constant_down=nominal.time_constant_down * tau,
        drag_coefficient=nominal.drag_coefficient * drag,
        linear_drag_body=nominal.linear_drag_body * drag,
        quadratic_drag_body=nominal.quadratic_drag_body * drag,
        imu=dataclasses.replace(
            imu,
            accel_noise=tuple(np.multiply(imu.accel_noise, noise)),
            gyro_noise=tuple(np.multiply(imu.gyro_noise, noise)),
            accel_bias_walk=tuple(np.multiply(imu.accel_bias_walk, noise)),
            gyro_bias_walk=tuple(np.multiply(imu.gyro_bias_walk, noise)),
        ),
    )
