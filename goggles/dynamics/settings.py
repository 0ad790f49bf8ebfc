"""How a simulator simulates: its step, integrator, floor, collisions, IMU and noise. One frozen,
hashable value per simulator, checked once when it is made."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from goggles.checks import FLOAT32_MAX, MAX_SEED, is_number, is_whole, member
from goggles.dynamics.airframe import Integrator
from goggles.dynamics.model import MAX_PHYSICS_RATE, MIN_PHYSICS_RATE, CollisionResponse, GroundEffect
from goggles.dynamics.wind import WindSettings
from goggles.errors import ConfigError


@dataclass(frozen=True)
class SimulatorSettings:
    """Args (each a field):
    dt: physics step, s (FlightGoggles: 1/960).
    integrator: explicit Euler or RK4; None: the airframe's own (``fg-quad``: Euler, as FlightGoggles).
    ground_effect: none, Cheeseman-Bennett or Conyers.
    floor_z: height of the floor plane, m; the vehicles rest on it (None: no floor, free fall).
    collisions: what a crash does (a contact approached faster than the airframe's crash speed).
    imu_rate: IMU samples per second; must divide the physics rate. None: every physics step.
    imu_mount: rotation of the IMU frame in the body frame (R_BI), 9 numbers row-major or (3, 3);
        None: aligned.
    disturbances: stochastic force and moment on (the airframe's spectral densities).
    imu_noise: IMU white noise and bias random walk on.
    imu_queue: IMU samples ``record_imu`` can hold on the device before ``take_imu``.
    seed: seed of every random stream (per vehicle, reproducible on one device).
    threads: CPU threads sharing a step call; default all cores. Ignored on CUDA.
    actors: collide with the world's placed actors too (False: its static mesh only, as the learning
        environments, whose actors belong to one environment each, do).
    recorded: replay each step count's launches from a recording (``goggles.runtime.recorded_work``:
        a CUDA graph); None: on CUDA. The same states either way.
    wind: the air the vehicles fly through (``goggles.dynamics.wind.WindSettings``: steady wind,
        Dryden turbulence, gusts); None: still air.
    """

    dt: float = 1.0 / 960.0
    integrator: Integrator | None = None
    ground_effect: GroundEffect = GroundEffect.NONE
    floor_z: float | None = 0.0
    collisions: CollisionResponse = CollisionResponse.CRASH
    imu_rate: float | None = None
    imu_mount: tuple[float, ...] | None = None
    disturbances: bool = True
    imu_noise: bool = True
    imu_queue: int = 1
    seed: int = 0
    threads: int | None = None
    actors: bool = True
    recorded: bool | None = None
    wind: WindSettings | None = None

    def __post_init__(self):
        for name in ("disturbances", "imu_noise", "actors"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.wind is not None and not isinstance(self.wind, WindSettings):
            raise ConfigError(f"wind must be a goggles.dynamics.wind.WindSettings or None, got {self.wind!r}")
        if self.floor_z is not None and not (is_number(self.floor_z) and abs(self.floor_z) <= FLOAT32_MAX):
            raise ConfigError(f"floor_z must be a finite height in m or None (no floor), got {self.floor_z!r}")
        object.__setattr__(self, "ground_effect", member(GroundEffect, self.ground_effect, "ground_effect"))
        object.__setattr__(self, "collisions", member(CollisionResponse, self.collisions, "collisions"))
        if self.integrator is not None:
            object.__setattr__(self, "integrator", member(Integrator, self.integrator, "integrator"))
        if not is_whole(self.seed, 0, MAX_SEED):  # beyond 32 bits, seeds would alias
            raise ConfigError(f"seed must be an integer from 0 to {MAX_SEED}, got {self.seed!r}")
        if not is_whole(self.imu_queue, 1, 64):
            raise ConfigError(f"imu_queue must be 1..64 samples, got {self.imu_queue}")
        if not (is_number(self.dt) and 1.0 / MAX_PHYSICS_RATE <= self.dt <= 1.0 / MIN_PHYSICS_RATE):
            raise ConfigError(
                f"physics step dt={self.dt:g} s must be in [{1.0 / MAX_PHYSICS_RATE:g}, {1.0 / MIN_PHYSICS_RATE:g}] "
                f"({MIN_PHYSICS_RATE:g} Hz to {MAX_PHYSICS_RATE:g} Hz)"
            )
        if self.threads is not None and not is_whole(self.threads, 1):
            raise ConfigError(f"threads must be a whole number >= 1 or None, got {self.threads!r}")
        if self.imu_mount is not None:
            mount = np.asarray(self.imu_mount, dtype=np.float64).reshape(-1)
            if mount.shape != (9,) or not np.allclose(
                mount.reshape(3, 3) @ mount.reshape(3, 3).T, np.eye(3), atol=1e-6
            ):
                raise ConfigError("imu_mount must be a 3x3 rotation matrix (IMU frame -> body frame)")
            object.__setattr__(self, "imu_mount", tuple(float(v) for v in mount))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "dt", float(self.dt))
