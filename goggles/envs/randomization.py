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
    gust_speed = { uniform = [0.0, 6.0] }    # one 1-cosine gust per episode: its peak, m/s (0: none)
    gust_from_deg = { uniform = [0.0, 360.0] }
    gust_in_s = { uniform = [0.0, 5.0] }     # its start, after the episode's
    gust_duration_s = { uniform = [1.0, 3.0] }
    [looks]                         # each environment's camera's look (goggles.render.looks: every key)
    sun_elevation_deg = { uniform = [15.0, 75.0] }
    albedo = { normal = [1.0, 0.15] }        # factor per material and colour channel
    textures = "textures/"                   # a folder of images, relative to this file

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

from goggles.checks import read_toml
from goggles.distributions import Distribution, above_floor, floor_text, parse_distribution
from goggles.dynamics.airframe import Airframe, allocation_matrix
from goggles.errors import ConfigError
from goggles.render.looks import LooksSpec

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
    "wind": {
        "speed": 0.0,
        "from_deg": 0.0,
        "turbulence": 0.0,
        "gust_speed": 0.0,
        "gust_from_deg": 0.0,
        "gust_in_s": 0.0,
        "gust_duration_s": 2.0,
    },
}
#: The same by ``table.key`` name.
DEFAULTS = {f"{table}.{key}": value for table, keys in PARAMETERS.items() for key, value in keys.items()}


#: The floor of each bounded parameter: (value, whether the value itself is excluded).
FLOORS = {name: (0.0, True) for name in DEFAULTS if name.startswith("airframe.")} | {
    "imu.noise": (0.0, False),
    "gates.perturbation": (0.0, False),
    "wind.speed": (0.0, False),
    "wind.turbulence": (0.0, False),
    "wind.gust_speed": (0.0, False),
    "wind.gust_in_s": (0.0, False),
    "wind.gust_duration_s": (0.0, True),
}


@dataclass(frozen=True)
class Randomization:
    """What to draw per episode: ``"table.key"`` -> its distribution (the rest keep their default)."""

    distributions: dict[str, Distribution] = field(default_factory=dict)
    looks: LooksSpec | None = None
    """What each environment's camera looks like (``[looks]``: ``goggles.render.looks``), or None."""

    @classmethod
    def load(cls, path: str | Path) -> Randomization:
        path = Path(path)
        return cls.from_tables(read_toml(path, "randomisation file"), str(path), path.parent)

    @classmethod
    def from_tables(cls, tables: dict, where: str = "randomisation", folder: Path | None = None) -> Randomization:
        """Raises ConfigError naming ``where`` and the key for anything it cannot draw from (a
        ``[looks]`` texture folder is read relative to ``folder``)."""
        found, looks = {}, None
        for table, entries in tables.items():
            if table == "looks":
                looks = LooksSpec.from_table(entries, f"{where}: [looks]", folder)
                continue
            if table not in PARAMETERS:
                raise ConfigError(f"{where}: unknown table [{table}]; use one of {sorted([*PARAMETERS, 'looks'])}")
            if not isinstance(entries, dict):
                raise ConfigError(f"{where}: [{table}] must be a table")
            for key, spec in entries.items():
                if key not in PARAMETERS[table]:
                    raise ConfigError(f"{where}: [{table}] unknown key {key!r}; allowed: {sorted(PARAMETERS[table])}")
                name = f"{table}.{key}"
                found[name] = parse_distribution(spec, f"{where}: [{table}] {key}", FLOORS.get(name))
        return cls(found, looks)

    def draw(self, seed: int, environment: int, episode: int) -> dict[str, float]:
        """Every parameter's value for one episode of one environment (defaults where not randomised)."""
        rng = np.random.default_rng([seed, environment, episode])
        values = dict(DEFAULTS)
        for name, distribution in sorted(self.distributions.items()):
            values[name] = distribution.draw(rng)
        return values


def randomized_airframe(nominal: Airframe, values: dict[str, float]) -> Airframe:
    """The nominal airframe with the drawn factors applied (allocation rebuilt for the new torque
    to thrust ratio). Factors must stay above their floor (``FLOORS``), as ``Randomization`` draws them.

    Raises:
        ConfigError: a factor at or below its floor.
    """
    for name, floor in FLOORS.items():
        if not above_floor(values[name], floor):
            raise ConfigError(f"randomisation drew {name} = {values[name]:.3g}: must be {floor_text(floor)}")
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
