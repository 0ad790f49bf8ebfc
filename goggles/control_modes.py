"""The control modes a vehicle accepts (``command_t.mode``) and how many values each reads: part of
the wire protocol, so clients use it without loading the simulator."""

from __future__ import annotations

from enum import IntEnum

from goggles.checks import member


class ControlMode(IntEnum):
    ROTOR_SPEEDS = 0
    ROTOR_THRUSTS = 1
    RATES = 2
    ATTITUDE = 3
    VELOCITY = 4
    POSITION = 5
    RC = 6
    """A flight controller's sticks (a vehicle flown by firmware): roll, pitch, throttle, yaw, AUX1-4, us."""


#: Number of command values each mode reads (the rest of the 8-vector is ignored).
COMMAND_SIZE = {
    ControlMode.ROTOR_SPEEDS: None,  # one per rotor
    ControlMode.ROTOR_THRUSTS: None,
    ControlMode.RATES: 4,
    ControlMode.ATTITUDE: 5,
    ControlMode.VELOCITY: 4,
    ControlMode.POSITION: 4,
    ControlMode.RC: 8,
}


#: Command values beyond this magnitude act as this magnitude: every controller saturates its motors long
#: before (1e6 rad/s, N, m, m/s), and a finite value near float32's limit would otherwise overflow inside the
#: controller's arithmetic (inf times a zero inertia term is NaN: no thrust at all instead of full thrust).
COMMAND_LIMIT = 1e6


def control_mode(value) -> ControlMode:
    """``value`` as a ControlMode: one, its number, or its name (any case)."""
    return member(ControlMode, value, "control mode")
