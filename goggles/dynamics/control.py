"""Flight controllers as Warp functions, run inside the physics loop at the physics rate.

Each controller turns a command (see ``ControlMode``) into rotor speed commands:
    * ROTOR_SPEEDS: rad/s per rotor, clamped to the motor limits.
    * ROTOR_THRUSTS: N per rotor -> sqrt(T / cf).
    * RATES (FlightGoggles rate mode): [thrust N, p, q, r rad/s]; the IMU gyro is low-pass filtered
      (y'' = P (u - y) - Q y'), a PID gives an angular acceleration alpha, M = J alpha, and the
      inverse mixer gives rotor speeds.
    * ATTITUDE (Lee geometric): [thrust N, qw, qx, qy, qz].
    * VELOCITY: [vx, vy, vz m/s, yaw rad] world frame.
    * POSITION: [x, y, z m, yaw rad] world frame.
The geometric controllers read the true state (ground truth); rate mode reads the simulated IMU.
Command values are taken within +-COMMAND_LIMIT (the attitude quaternion by its direction), so a huge
finite command saturates the motors as a real controller would.
"""

import warp as wp

from goggles.control_modes import COMMAND_LIMIT, COMMAND_SIZE, ControlMode
from goggles.dynamics.model import AirframeParams, SimSettings, vec6, vec8

__all__ = ["COMMAND_SIZE", "ControlMode", "commanded_rates", "rotor_commands"]


ROTOR_SPEEDS = wp.constant(int(ControlMode.ROTOR_SPEEDS))
ROTOR_THRUSTS = wp.constant(int(ControlMode.ROTOR_THRUSTS))
RATES = wp.constant(int(ControlMode.RATES))
ATTITUDE = wp.constant(int(ControlMode.ATTITUDE))
POSITION = wp.constant(int(ControlMode.POSITION))
LIMIT = wp.constant(COMMAND_LIMIT)


@wp.func
def clamp_speeds(af: AirframeParams, w: vec8) -> vec8:
    out = vec8()
    for r in range(8):
        out[r] = wp.clamp(w[r], af.min_speed, af.max_speed)
    return out


@wp.func
def speeds_for_thrusts(af: AirframeParams, u: vec8) -> vec8:
    w = vec8()
    for r in range(8):
        w[r] = wp.sqrt(wp.max(u[r], 0.0) / af.cf)
    return clamp_speeds(af, w)


@wp.func
def mix(af: AirframeParams, thrust: float, moment: wp.vec3) -> vec8:
    """Rotor speeds for a collective thrust (N, body z) and a body moment (N m): inverse mixer."""
    return speeds_for_thrusts(af, af.mixer * vec6(0.0, 0.0, thrust, moment[0], moment[1], moment[2]))


@wp.func
def attitude_moment(af: AirframeParams, q: wp.quat, w: wp.vec3, R_d: wp.mat33) -> wp.vec3:
    """Lee's attitude law: M = J (-k_R e_R - k_W e_W) + W x J W, with W_d = 0."""
    R = wp.quat_to_matrix(q)
    E = (wp.transpose(R_d) * R - wp.transpose(R) * R_d) * 0.5
    e_R = wp.vec3(E[2, 1], E[0, 2], E[1, 0])
    alpha = -wp.cw_mul(af.k_attitude, e_R) - wp.cw_mul(af.k_rate, w)
    return af.inertia * alpha + wp.cross(w, af.inertia * w)


@wp.func
def attitude_for_acceleration(a_W: wp.vec3, yaw: float) -> wp.mat33:
    """Desired attitude whose body z is along ``a_W`` and whose heading is ``yaw``."""
    b3 = wp.normalize(a_W)
    b2 = wp.normalize(wp.cross(b3, wp.vec3(wp.cos(yaw), wp.sin(yaw), 0.0)))
    b1 = wp.cross(b2, b3)
    return wp.matrix_from_cols(b1, b2, b3)


@wp.func
def translation_control(
    af: AirframeParams,
    settings: SimSettings,
    x_p: wp.vec3,
    x_v: wp.vec3,
    q: wp.quat,
    w: wp.vec3,
    e_p: wp.vec3,
    v_d: wp.vec3,
    yaw: float,
) -> vec8:
    """Lee's position/velocity law with bounded acceleration: rotor speeds for position error ``e_p``
    (zero in velocity mode) and desired velocity ``v_d``."""
    a = -wp.cw_mul(af.k_position, e_p) - wp.cw_mul(af.k_velocity, x_v - v_d)
    horizontal = wp.sqrt(a[0] * a[0] + a[1] * a[1])
    if horizontal > af.max_horizontal_acceleration:
        a = wp.vec3(
            a[0] * af.max_horizontal_acceleration / horizontal, a[1] * af.max_horizontal_acceleration / horizontal, a[2]
        )
    a_z = wp.clamp(a[2], -0.8 * settings.gravity, af.max_vertical_acceleration)
    f_W = wp.vec3(a[0], a[1], a_z + settings.gravity) * af.mass
    thrust = wp.max(wp.dot(f_W, wp.quat_rotate(q, wp.vec3(0.0, 0.0, 1.0))), 0.0)
    return mix(af, thrust, attitude_moment(af, q, w, attitude_for_acceleration(f_W, yaw)))


@wp.func
def commanded_rates(af: AirframeParams, command: vec8) -> wp.vec3:
    """Rate mode's body rates (command values 2-4), each within the airframe's ``max_rate``."""
    top = af.max_rate
    return wp.vec3(wp.clamp(command[1], -top, top), wp.clamp(command[2], -top, top), wp.clamp(command[3], -top, top))


@wp.func
def rate_control(
    af: AirframeParams, thrust: float, rates_d: wp.vec3, y: wp.vec3, dy: wp.vec3, integral: wp.vec3
) -> vec8:
    """FlightGoggles rate mode: PID on the filtered gyro ``y`` (derivative on measurement)."""
    alpha = wp.cw_mul(af.rate_kp, rates_d - y) + wp.cw_mul(af.rate_ki, integral) - wp.cw_mul(af.rate_kd, dy)
    return mix(af, thrust, af.inertia * alpha)


@wp.func
def rotor_commands(
    af: AirframeParams,
    settings: SimSettings,
    mode: int,
    command: vec8,
    p: wp.vec3,
    v: wp.vec3,
    q: wp.quat,
    w: wp.vec3,
    y: wp.vec3,
    dy: wp.vec3,
    integral: wp.vec3,
) -> vec8:
    """Rotor speed commands of the vehicle's controller for this physics step."""
    if mode == ROTOR_SPEEDS:
        return clamp_speeds(af, command)
    if mode == ROTOR_THRUSTS:
        return speeds_for_thrusts(af, command)
    if mode == ATTITUDE:
        # By its direction: scaled by its largest component first, so no square overflows.
        q_raw = wp.quat(command[2], command[3], command[4], command[1])
        largest = wp.max(wp.max(wp.abs(q_raw[0]), wp.abs(q_raw[1])), wp.max(wp.abs(q_raw[2]), wp.abs(q_raw[3])))
        q_d = wp.normalize(q_raw / largest)
        thrust = wp.clamp(command[0], -LIMIT, LIMIT)
        return mix(af, thrust, attitude_moment(af, q, w, wp.quat_to_matrix(q_d)))
    c = vec8()
    for k in range(8):
        c[k] = wp.clamp(command[k], -LIMIT, LIMIT)
    if mode == RATES:
        return rate_control(af, c[0], commanded_rates(af, command), y, dy, integral)
    target = wp.vec3(c[0], c[1], c[2])
    if mode == POSITION:
        return translation_control(af, settings, p, v, q, w, p - target, wp.vec3(0.0), c[3])
    return translation_control(af, settings, p, v, q, w, wp.vec3(0.0), target, c[3])
