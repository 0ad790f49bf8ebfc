"""A vehicle flown by flight-controller firmware: its sticks, the pilot that holds them when no one
else does, and the exchange that turns the vehicle's state into its rotors' speeds each FC tick.

The sticks are an RC transmitter's channels, 1000-2000 us in goggles' order: roll, pitch, throttle,
yaw, then AUX1 (arm, high: armed) and AUX2 (angle mode, high: on), AUX3, AUX4 (the firmware gets them
in its channel map's order). A client sends them as a ``command_t`` in ``ControlMode.RC`` (eight
values); until one does, goggles' own ``HoverPilot`` holds them: it first gives Betaflight's
gyro-calibration stick command (so the firmware calibrates on the vehicle's own IMU, its bias, at
rest), waits for the firmware to allow arming (its arming-disable flags, as its last status said),
arms with the throttle low, then flies angle mode, holding the position and heading of the vehicle's
first waypoint from goggles' state of the vehicle (the sticks a person's thumbs would give; the
attitude is the firmware's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from goggles.errors import ConfigError
from goggles.firmware.betaflight import ARM_CHANNEL, RC_HIGH, RC_LOW, RC_MID, BetaflightSitl, fdm_packet
from goggles.frames import quat_yaw

#: An RC command's values: roll, pitch, throttle, yaw, AUX1..AUX4 (us).
RC_VALUES = 8
#: Pilot: holds the arm switch low and the throttle low this long before arming, s.
ARM_AFTER_S = 0.2
#: Pilot: holds Betaflight's gyro-calibration stick command (throttle, yaw and pitch low) this long
#: first, s of sim time: the firmware calibrates on the vehicle's own IMU (its bias) at rest.
CALIBRATE_S = 0.3
#: Pilot: the horizontal position loop (1/s^2, 1/s, 1/s^3) and the most it tilts, degrees.
POSITION_GAIN, VELOCITY_GAIN, POSITION_INTEGRAL, MAX_TILT_DEG = 1.2, 1.8, 0.15, 20.0
#: Pilot: the heading loop, stick us per radian of heading error, and its most.
HEADING_GAIN, MAX_YAW_STICK = 300.0, 150.0
#: A client's sticks are the receiver's for this long (s of sim time) after they last came; then the
#: receiver hears nothing (no pulses on any channel) and the firmware's own failsafe acts, as over a
#: lost radio link (Betaflight: RXLOSS, then its failsafe procedure: by default it drops and disarms).
RC_TIMEOUT_S = 0.5
#: Betaflight's default rates (Actual: 70 deg/s at the centre, 670 at full stick, no expo): angle mode
#: tilts by angle_limit * rate(stick) / 670, so the pilot inverts this curve for the tilt it wants.
CENTER_RATE, MAX_RATE = 70.0, 670.0
GRAVITY = 9.80665


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


def tilt_stick(angle_deg: float, angle_limit_deg: float) -> int:
    """The stick (us) that asks angle mode for ``angle_deg`` of tilt on Betaflight's default rates."""
    f = max(-1.0, min(1.0, angle_deg / angle_limit_deg)) * MAX_RATE  # the rate the stick must ask for
    spread = MAX_RATE - CENTER_RATE
    x = (-CENTER_RATE + math.sqrt(CENTER_RATE**2 + 4.0 * spread * abs(f))) / (2.0 * spread)
    return int(round(RC_MID + 500.0 * math.copysign(x, f)))


class HoverPilot:
    """Arms when the firmware allows it, then holds ``hold`` (x, y, z, yaw) in angle mode. ``start``: the
    sim time its work begins (it first gives the calibration stick command, disarmed, from then)."""

    def __init__(self, hold, angle_limit_deg: float = 60.0, start: float = 0.0):
        self.hold = np.asarray(hold, float)
        self.start = start
        self.angle_limit = angle_limit_deg
        self._ready_since: float | None = None
        self.armed = False
        self._height_integral = 0.0
        self._integral = np.zeros(2)

    def sticks(self, t: float, position, velocity, attitude, firmware: BetaflightSitl, dt: float) -> list[int]:
        channels = [RC_MID, RC_MID, RC_LOW, RC_MID, RC_LOW, RC_HIGH, RC_LOW, RC_LOW]
        t -= self.start
        if t < CALIBRATE_S:  # Betaflight's stick command: calibrate the gyro on the vehicle's own IMU at rest
            channels[1], channels[3] = RC_LOW, RC_LOW
            return channels + [RC_LOW] * 8
        status = firmware.status
        self.armed = bool(status and status.armed)
        if not self.armed:
            # The switch goes up once nothing but the switch and the throttle stand in the way, and down
            # again while anything else does (the firmware calibrates its sensors meanwhile).
            blocked = set(status.flags) if status else {"UNKNOWN"}
            if blocked - {"ARM_SWITCH", "THROTTLE"}:
                self._ready_since = None
            elif self._ready_since is None:
                self._ready_since = t
            if self._ready_since is not None and t - self._ready_since >= ARM_AFTER_S:
                channels[ARM_CHANNEL] = RC_HIGH
            return channels + [RC_LOW] * 8
        channels[ARM_CHANNEL] = RC_HIGH
        position, velocity = np.asarray(position, float), np.asarray(velocity, float)
        error = self.hold[2] - position[2]
        if abs(error) < 0.5:  # integrated near the height only: a climb does not wind it up
            self._height_integral = float(np.clip(self._height_integral + error * dt, -2.0, 2.0))
        throttle = 1500.0 + 250.0 * error - 120.0 * velocity[2] + 40.0 * self._height_integral
        channels[2] = int(round(np.clip(throttle, 1050.0, 1950.0)))
        # Position: the acceleration that brings it back, as a tilt in the heading's frame.
        miss = self.hold[:2] - position[:2]
        if np.hypot(*miss) < 1.0:
            self._integral = np.clip(self._integral + miss * dt, -3.0, 3.0)
        accel = POSITION_GAIN * miss - VELOCITY_GAIN * velocity[:2] + POSITION_INTEGRAL * self._integral
        yaw = quat_yaw(attitude)
        forward = math.cos(yaw) * accel[0] + math.sin(yaw) * accel[1]
        left = -math.sin(yaw) * accel[0] + math.cos(yaw) * accel[1]
        pitch = max(-MAX_TILT_DEG, min(MAX_TILT_DEG, math.degrees(math.atan2(forward, GRAVITY))))
        roll = max(-MAX_TILT_DEG, min(MAX_TILT_DEG, math.degrees(math.atan2(left, GRAVITY))))
        channels[1] = tilt_stick(pitch, self.angle_limit)  # pitch stick up: nose down, forward
        channels[0] = tilt_stick(-roll, self.angle_limit)  # roll stick right: to the right, -y
        turn = math.remainder(self.hold[3] - yaw, math.tau)  # yaw stick right turns the nose right (-z)
        channels[3] = int(round(RC_MID - max(-MAX_YAW_STICK, min(MAX_YAW_STICK, HEADING_GAIN * turn))))
        return channels + [RC_LOW] * 8


#: A firmware's report goes out when it changes, and at least this often (s of sim time).
REPORT_EVERY_S = 1.0


@dataclass(frozen=True)
class FirmwareReport:
    """What a vehicle's firmware says of itself, and what goggles' link to it knows (``<vehicle>/fc``)."""

    armed: bool
    failsafe: bool
    """Its own failsafe (RX loss, the failsafe switch), its receiver silent, or the firmware stopped."""
    stopped: bool
    receiver_silent: bool
    flags: tuple[str, ...]
    """What keeps it from arming (Betaflight's names)."""


class FirmwareLink:
    """One simulated vehicle and its firmware: each FC tick, its state in, its rotor speeds out."""

    def __init__(
        self, firmware: BetaflightSitl, min_speed: float, max_speed: float, hold, rc_timeout: float = RC_TIMEOUT_S
    ):
        self.firmware = firmware
        self.min_speed, self.max_speed = min_speed, max_speed
        self.pilot = HoverPilot(hold, firmware.angle_limit)
        self.rc: list[int] | None = None
        """Sticks from a client (``ControlMode.RC``); None: the pilot's."""
        self.rc_timeout = rc_timeout
        """s of sim time a client's sticks last; 0: for ever."""
        self.silent = False
        """The client's sticks timed out: the receiver hears nothing."""
        self._rc_at: float | None = None
        self._fresh = False
        self.ticks = 0
        self.failsafe_at: float | None = None
        """Sim time its first failsafe began (kept: the status line says so to the end)."""
        self._reported: tuple[float, FirmwareReport] | None = None

    def set_sticks(self, values) -> None:
        self.rc = rc_channels(values)
        self._fresh = True

    def step(self, t: float, states, row: int, dt: float) -> np.ndarray:
        """Rotor speeds (rad/s, the airframe's rotor order) for the vehicle from sim time ``t`` to ``t + dt``."""
        s = states
        rc = self.rc
        if self._fresh or self._rc_at is None:
            self._rc_at, self._fresh = t, False
        self.silent = rc is not None and self.rc_timeout > 0 and t - self._rc_at > self.rc_timeout + 1e-9
        if self.silent:
            rc = [0] * 16
        elif rc is None:
            rc = self.pilot.sticks(t, s.position[row], s.velocity[row], s.attitude[row], self.firmware, dt)
        state = fdm_packet(t, s.imu_gyro[row], s.imu_accel[row], s.attitude[row], s.velocity[row], s.position[row])
        outputs = self.firmware.exchange(t, t + dt, state, rc)
        self.ticks += 1
        if self.failsafe_at is None and self.report().failsafe:
            self.failsafe_at = t
        speeds = np.zeros(len(self.firmware.motors))
        for motor, rotor in enumerate(self.firmware.motors):
            speeds[rotor] = self.min_speed + outputs[motor] * (self.max_speed - self.min_speed)
        return speeds

    def report(self) -> FirmwareReport:
        status = self.firmware.status
        stopped = self.firmware.lost
        failsafe = stopped or self.silent or bool(status and status.failsafe)
        return FirmwareReport(
            armed=bool(status and status.armed) and not stopped,
            failsafe=failsafe,
            stopped=stopped,
            receiver_silent=self.silent,
            flags=status.flags if status else (),
        )

    def due_report(self, t: float) -> FirmwareReport | None:
        """Its report where it changed since the last one handed out, or ``REPORT_EVERY_S`` passed."""
        report = self.report()
        if self._reported is not None and self._reported[1] == report and t - self._reported[0] < REPORT_EVERY_S:
            return None
        self._reported = (t, report)
        return report

    def problem(self) -> str | None:
        """What the status line says of it: stopped, in failsafe (kept once it was), or not armed and why."""
        said = []
        if self.firmware.lost:
            said.append(f"FC STOPPED ({self.firmware.why_lost}; motors off)")
        report = self.report()
        if report.receiver_silent:
            said.append("RC SILENT (sticks timed out)")
        if self.failsafe_at is not None and not self.firmware.lost:
            now = " ".join(f for f in report.flags if f in ("FAILSAFE", "RXLOSS", "BOXFAILSAFE"))
            said.append(f"FAILSAFE at {self.failsafe_at:.2f} s" + (f" ({now})" if now else " (over)"))
        if not said and self.rc is None and not report.armed:
            said.append(f"DISARMED ({' '.join(report.flags) or 'arming'})")
        return ", ".join(said) or None

    def close(self) -> None:
        self.firmware.close()
