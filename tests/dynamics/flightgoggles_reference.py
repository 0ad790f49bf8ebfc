"""An independent float64 model of FlightGoggles' multicopter, written from the equations and
figures in ``../shared/REFERENCE.md`` section 1 (not from goggles' code or presets), to check that
the ``fg-quad`` preset flies as FlightGoggles does.

Explicit Euler at 960 Hz, motor lag by Euler, IMU sampled after the step, rate mode = backward-Euler
gyro low-pass, PID on the filtered rate, inverse mixer. Quaternions (w, x, y, z); world ENU, body FLU.
"""

from __future__ import annotations

import numpy as np

MASS = 1.0
INERTIA = np.diag([0.0049, 0.0049, 0.0069])
ARM = 0.08
ROTORS = np.array([[ARM, ARM, 0.0], [-ARM, ARM, 0.0], [-ARM, -ARM, 0.0], [ARM, -ARM, 0.0]])
DIRECTION = np.array([-1.0, 1.0, -1.0, 1.0])  # sign of each rotor's yaw reaction torque on the body
TAU = 0.02
ROTOR_INERTIA = 6.62e-6
CF = 1.91e-6
CM = 2.6e-7
MAX_SPEED = 2200.0
DRAG = 0.1
AERO_MOMENT = 0.003
GRAVITY = 9.81
LPF_P, LPF_Q = 35530.5758439217, 266.572976289502
KP, KI, KD, INTEGRAL_LIMIT = 9.0, 3.0, 0.3, 1000.0
HOVER_SPEED = np.sqrt(MASS * GRAVITY / (4 * CF))


def _rotation(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _quat_times_vector(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q (x) (0, v)."""
    w, x, y, z = q
    a, b, c = v
    return np.array([-x * a - y * b - z * c, w * a + y * c - z * b, w * b + z * a - x * c, w * c + x * b - y * a])


class FlightGogglesQuad:
    def __init__(self, position, attitude=(1.0, 0.0, 0.0, 0.0), velocity=(0.0, 0.0, 0.0), rates=(0.0, 0.0, 0.0)):
        self.p = np.array(position, float)
        self.q = np.array(attitude, float) / np.linalg.norm(attitude)
        self.v = np.array(velocity, float)
        self.w = np.array(rates, float)
        self.rotors = np.full(4, HOVER_SPEED)
        self.accel = np.array([0.0, 0.0, GRAVITY])
        self.gyro = np.zeros(3)
        self.filtered = np.zeros(3)
        self.filtered_rate = np.zeros(3)
        self.integral = np.zeros(3)

    def _thrust_body(self, speeds: np.ndarray) -> np.ndarray:
        return np.array([0.0, 0.0, CF * np.sum(speeds * np.abs(speeds))])

    def step(self, speed_command: np.ndarray, dt: float = 1.0 / 960.0) -> None:
        """One explicit-Euler step with rotor speed commands, then an IMU sample."""
        command = np.clip(speed_command, 0.0, MAX_SPEED)
        rotor_accel = (command - self.rotors) / TAU
        thrusts = CF * self.rotors * np.abs(self.rotors)
        moment = np.zeros(3)
        momentum = INERTIA @ self.w
        for i in range(4):
            moment += np.cross(ROTORS[i], [0.0, 0.0, thrusts[i]])
            moment[2] += DIRECTION[i] * (CM * self.rotors[i] * abs(self.rotors[i]) + ROTOR_INERTIA * rotor_accel[i])
            momentum[2] += -DIRECTION[i] * ROTOR_INERTIA * self.rotors[i]
        moment -= np.linalg.norm(self.w) * AERO_MOMENT * self.w
        R = _rotation(self.q)
        v_dot = (
            np.array([0.0, 0.0, -GRAVITY])
            + (R @ self._thrust_body(self.rotors) - DRAG * np.linalg.norm(self.v) * self.v) / MASS
        )
        w_dot = np.linalg.solve(INERTIA, moment - np.cross(self.w, momentum))
        q_dot = 0.5 * _quat_times_vector(self.q, self.w)
        self.rotors = np.clip(self.rotors + dt * rotor_accel, 0.0, MAX_SPEED)
        self.p = self.p + dt * self.v
        self.v = self.v + dt * v_dot
        self.w = self.w + dt * w_dot
        self.q = self.q + dt * q_dot
        self.q /= np.linalg.norm(self.q)
        drag_body = _rotation(self.q).T @ (-DRAG * np.linalg.norm(self.v) * self.v)
        self.accel = (self._thrust_body(self.rotors) + drag_body) / MASS
        self.gyro = self.w.copy()

    def rate_step(self, thrust: float, rates: np.ndarray, dt: float = 1.0 / 960.0) -> np.ndarray:
        """One step of FlightGoggles' rate mode; returns the rotor speed commands it flew."""
        # Backward Euler of y'' = P (u - y) - Q y': solve the 2x2 implicit system.
        A = np.array([[1.0, -dt], [dt * LPF_P, 1.0 + dt * LPF_Q]])
        for axis in range(3):
            rhs = [self.filtered[axis], self.filtered_rate[axis] + dt * LPF_P * self.gyro[axis]]
            self.filtered[axis], self.filtered_rate[axis] = np.linalg.solve(A, rhs)
        error = np.asarray(rates, float) - self.filtered
        self.integral = np.clip(self.integral + dt * error, -INTEGRAL_LIMIT, INTEGRAL_LIMIT)
        alpha = KP * error + KI * self.integral - KD * self.filtered_rate
        wrench = np.concatenate([[thrust], INERTIA @ alpha])
        # Rows: collective thrust, roll, pitch and yaw moments per unit of w^2.
        mixer = np.array(
            [
                np.full(4, CF),
                CF * ROTORS[:, 1],
                -CF * ROTORS[:, 0],
                CM * DIRECTION,
            ]
        )
        command = np.sqrt(np.clip(np.linalg.solve(mixer, wrench), 0.0, None)).clip(0.0, MAX_SPEED)
        self.step(command, dt)
        return command
