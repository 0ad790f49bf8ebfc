"""A flown trajectory as a CSV table: one row per recorded physics step, every column named.

Columns: ``t, px, py, pz, vx, vy, vz, qw, qx, qy, qz, wx, wy, wz, acc_x, acc_y, acc_z, gyro_x, gyro_y,
gyro_z, rotor_0 ... rotor_<N-1>`` (world ENU, body FLU, quaternion (w, x, y, z), IMU specific force
and rate, rotor speeds in rad/s); ``goggles race --log`` reads the same layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from goggles.errors import ConfigError

STATE_COLUMNS = ["t", "px", "py", "pz", "vx", "vy", "vz", "qw", "qx", "qy", "qz", "wx", "wy", "wz"]
IMU_COLUMNS = ["acc_x", "acc_y", "acc_z", "gyro_x", "gyro_y", "gyro_z"]


def trajectory_columns(num_rotors: int) -> list[str]:
    return STATE_COLUMNS + IMU_COLUMNS + [f"rotor_{i}" for i in range(num_rotors)]


def trajectory_row(states, vehicle: int = 0) -> np.ndarray:
    """One row of ``trajectory_columns`` from a ``VehicleStates``."""
    s, i = states, vehicle
    return np.concatenate(
        [
            [s.time],
            s.position[i],
            s.velocity[i],
            s.attitude[i],
            s.rates[i],
            s.imu_accel[i],
            s.imu_gyro[i],
            s.rotor_speed[i],
        ]
    )


def write_trajectory(path: Path, table: np.ndarray, num_rotors: int) -> None:
    """Write the rows with their header line.

    Raises:
        ConfigError: the path cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give a .csv file for the trajectory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(path, table, delimiter=",", header=",".join(trajectory_columns(num_rotors)), comments="", fmt="%.9g")
    except OSError as exc:
        raise ConfigError(f"cannot write the trajectory to {path}: {exc.strerror or exc}") from exc
