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


class TrajectoryWriter:
    """Writes the rows to the CSV as they are flown (a long flight needs no memory for its rows, and
    an interrupted one keeps what it flew); opened before the first step, so a bad path fails at once.

    Raises:
        ConfigError: the path cannot be written.
    """

    def __init__(self, path: Path, num_rotors: int):
        self.path, self.rows = Path(path), 0
        if self.path.is_dir():
            raise ConfigError(f"{self.path}: is a folder; give a .csv file for the trajectory")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="ascii", newline="")  # noqa: SIM115 (closed by close())
            self._file.write(",".join(trajectory_columns(num_rotors)) + "\n")
        except OSError as exc:
            raise ConfigError(f"cannot write the trajectory to {self.path}: {exc.strerror or exc}") from exc

    def write(self, rows: np.ndarray) -> None:
        """Append rows of ``trajectory_columns``."""
        try:
            np.savetxt(self._file, np.atleast_2d(rows), delimiter=",", fmt="%.9g")
        except OSError as exc:
            raise ConfigError(f"cannot write the trajectory to {self.path}: {exc.strerror or exc}") from exc
        self.rows += len(np.atleast_2d(rows))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
