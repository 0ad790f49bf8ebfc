"""A vehicle flown by flight-controller firmware: its sticks, the pilot that holds them when no one
else does, and the exchange that turns the vehicle's state into its rotors' speeds each FC tick.

The sticks are an RC transmitter's channels, 1000-2000 us in Betaflight's AETR order: roll, pitch,
throttle, yaw, then AUX1 (arm, high: armed) and AUX2 (angle mode, high: on), AUX3, AUX4. A client
sends them as a ``command_t`` in ``ControlMode.RC`` (eight values); until one does, goggles' own
``HoverPilot`` holds them: it first gives Betaflight's gyro-calibration stick command (so the
firmware calibrates on the vehicle's own IMU, its bias, at rest), waits for the firmware to allow
arming (Betaflight's arming-disable flags, asked over MSP), arms with the throttle low, then flies
angle mode, its throttle holding the height of the vehicle's first waypoint (the sticks a person's
thumbs would give; the attitude is the firmware's).
"""

from __future__ import annotations

import numpy as np

from goggles.errors import ConfigError
from goggles.firmware.betaflight import ARM_CHANNEL, RC_HIGH, RC_LOW, RC_MID, BetaflightSitl, fdm_packet

#: An RC command's values: roll, pitch, throttle, yaw, AUX1..AUX4 (us).
RC_VALUES = 8
#: Pilot: asks the firmware for its arming flags this often, s of sim time, while it is not armed.
ASK_EVERY_S = 0.05
#: Pilot: holds the arm switch low and the throttle low this long before arming, s.
ARM_AFTER_S = 0.2
#: Pilot: holds Betaflight's gyro-calibration stick command (throttle, yaw and pitch low) this long
#: first, s of sim time: the firmware calibrates on the vehicle's own IMU (its bias) at rest.
CALIBRATE_S = 0.3


def rc_channels(values) -> list[int]:
    """Sixteen channels from an RC command's values (the rest low), each within 1000..2000 us.

    Raises:
        ConfigError: not eight finite values.
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    if len(values) != RC_VALUES or not np.all(np.isfinite(values)):
        raise ConfigError(f"an RC command is {RC_VALUES} values (roll, pitch, throttle, yaw, AUX1-4, us)")
    channels = [int(round(min(max(v, RC_LOW), RC_HIGH))) for v in values]
    return channels + [RC_LOW] * (16 - len(channels))


class HoverPilot:
    """Arms when the firmware allows it, then holds the height ``height_m`` in angle mode."""

    def __init__(self, height_m: float):
        self.height = height_m
        self._asked_at = -1.0
        self._ready_since: float | None = None
        self.armed = False
        self.blocked: list[str] = []
        """What keeps the firmware from arming, by Betaflight's names (its last answer)."""
        self._integral = 0.0

    def sticks(self, t: float, z: float, vz: float, firmware: BetaflightSitl, dt: float) -> list[int]:
        channels = [RC_MID, RC_MID, RC_LOW, RC_MID, RC_LOW, RC_HIGH, RC_LOW, RC_LOW]
        if t < CALIBRATE_S:  # Betaflight's stick command: calibrate the gyro on the vehicle's own IMU at rest
            channels[1], channels[3] = RC_LOW, RC_LOW
            return channels + [RC_LOW] * 8
        if not self.armed:
            if t - self._asked_at >= ASK_EVERY_S:
                self._asked_at = t
                self.armed, self.blocked = firmware.status()
                # The switch goes up once nothing but the switch and the throttle stand in the way, and
                # down again while anything else does (the firmware calibrates its sensors meanwhile).
                if set(self.blocked) - {"ARM_SWITCH", "THROTTLE"}:
                    self._ready_since = None
                elif self._ready_since is None:
                    self._ready_since = t
            if not self.armed:
                if self._ready_since is not None and t - self._ready_since >= ARM_AFTER_S:
                    channels[ARM_CHANNEL] = RC_HIGH
                return channels + [RC_LOW] * 8
        channels[ARM_CHANNEL] = RC_HIGH
        error = self.height - z
        self._integral = float(np.clip(self._integral + error * dt, -2.0, 2.0))
        throttle = 1500.0 + 250.0 * error - 120.0 * vz + 40.0 * self._integral
        channels[2] = int(round(np.clip(throttle, 1050.0, 1950.0)))
        return channels + [RC_LOW] * 8


class FirmwareLink:
    """One simulated vehicle and its firmware: each FC tick, its state in, its rotor speeds out."""

    def __init__(self, firmware: BetaflightSitl, min_speed: float, max_speed: float, height_m: float):
        self.firmware = firmware
        self.min_speed, self.max_speed = min_speed, max_speed
        self.pilot = HoverPilot(height_m)
        self.rc: list[int] | None = None
        """Sticks from a client (``ControlMode.RC``); None: the pilot's."""
        self.ticks = 0

    def set_sticks(self, values) -> None:
        self.rc = rc_channels(values)

    def step(self, t: float, states, row: int, dt: float) -> np.ndarray:
        """Rotor speeds (rad/s, the airframe's rotor order) for the vehicle at sim time ``t``."""
        s = states
        rc = self.rc
        if rc is None:
            rc = self.pilot.sticks(t, float(s.position[row, 2]), float(s.velocity[row, 2]), self.firmware, dt)
        state = fdm_packet(t, s.imu_gyro[row], s.imu_accel[row], s.attitude[row], s.velocity[row], s.position[row])
        outputs = self.firmware.exchange(t, state, rc)
        self.ticks += 1
        speeds = np.zeros(len(self.firmware.motors))
        for motor, rotor in enumerate(self.firmware.motors):
            speeds[rotor] = self.min_speed + outputs[motor] * (self.max_speed - self.min_speed)
        return speeds

    def close(self) -> None:
        self.firmware.close()
