"""The multirotor model as Warp functions: motors, wrench, aerodynamics, ground effect, integrators.

Equations (FlightGoggles' multicopter dynamics, Guerra et al. 2019, and its C++ code), world ENU,
body FLU, Warp quaternions (x, y, z, w):
    rotor speed    w' = (w_cmd - w) / tau, tau_up or tau_down by direction; stepped by explicit Euler
                   under the Euler integrator (as FlightGoggles), exactly (exponential) under RK4
    rotor thrust   u_i = cf w_i |w_i| x ground-effect ratio
    body wrench    [F; M] = A u  +  [0; sum d_i a_i Jm dw_i/dt]
    p' = v
    v' = g + (R F + F_drag + F_noise) / m
    q' = 1/2 q (x) (0, W)
    W' = J^-1 (M + M_aero + M_noise - W x (J W + sum h_i)),   h_i = -d_i a_i Jm w_i
    accelerometer  (F + R^T (F_drag + F_noise)) / m at the sample: the instantaneous specific force

Spin convention (FlightGoggles' ``motorDirection``): d_i = +1 or -1 is the direction, along the
rotor axis a_i, of the rotor's drag (reaction) torque on the body. A rotor turns against the torque
it exerts on the body, so its own angular momentum h_i points the other way: -d_i a_i Jm w_i.
"""

from enum import IntEnum

import warp as wp

from goggles.checks import INT32_MAX
from goggles.dynamics.airframe import Integrator
from goggles.dynamics.wind import WindParams
from goggles.errors import ConfigError
from goggles.world.queries import ActorData, closest_hit, nearest_surface

vec6 = wp.types.vector(length=6, dtype=wp.float32)
vec8 = wp.types.vector(length=8, dtype=wp.float32)
mat68 = wp.types.matrix(shape=(6, 8), dtype=wp.float32)
mat86 = wp.types.matrix(shape=(8, 6), dtype=wp.float32)
mat38 = wp.types.matrix(shape=(3, 8), dtype=wp.float32)


class GroundEffect(IntEnum):
    NONE = 0
    CHEESEMAN_BENNETT = 1
    CONYERS = 2


class CollisionResponse(IntEnum):
    """What a crash (a contact approached faster than the airframe's crash speed) does."""

    IGNORE = 0
    """Report it, fly on through."""
    CRASH = 1
    """Report it, and the vehicle stops where it is (rotors off) until reset."""
    RESET = 2
    """Report it, and the vehicle is put back at rest at its start pose."""


EULER = wp.constant(int(Integrator.EULER))
CHEESEMAN_BENNETT = wp.constant(int(GroundEffect.CHEESEMAN_BENNETT))
CONYERS = wp.constant(int(GroundEffect.CONYERS))
#: Physics rates above this are refused: a microsecond step resolves every time constant modelled
#: (motors: tens of milliseconds) many times over, and a faster rate only makes a run crawl.
MAX_PHYSICS_RATE = 1e6
#: Physics rates below this are refused: a step of more than 0.1 s integrates the motors' lag unstably.
MIN_PHYSICS_RATE = 10.0


def steps_per_sample(physics_rate: float, rate: float) -> int | None:
    """Physics steps between two samples at ``rate`` Hz (an IMU's, a camera's), or None where ``rate``
    does not divide the physics rate, or the count is not 1 to int32's largest (a kernel's int32: 0
    or a wrapped count would divide by zero there). The one test, for run files and the simulator."""
    ratio = physics_rate / rate if rate > 0 else 0.0
    count = round(ratio) if 1 <= ratio <= INT32_MAX + 0.5 else 0
    return count if count >= 1 and abs(ratio - count) <= 1e-9 * ratio else None


def period_steps(physics_rate: float, rate: float, what: str) -> int:
    """Physics steps between two samples of ``what`` at ``rate`` Hz; a rate that does not divide the
    physics rate (possible in a RunConfig made in Python, not read from a file) is refused."""
    steps = steps_per_sample(physics_rate, rate)
    if steps is None:
        raise ConfigError(f"{what}: rate {rate:g} Hz does not divide the physics rate {physics_rate:g} Hz")
    return steps


#: Downward ray length for the ground-effect height when a world is given, m.
GROUND_RAY_LENGTH = wp.constant(100.0)
BOX = wp.constant(1)
#: m: a vehicle's centre nearer a surface than this is on it (float32 at 10 m resolves ~1 micron),
#: and its contact normal is the face's.
ON_SURFACE = wp.constant(1.0e-5)


@wp.struct
class AirframeParams:
    """One airframe on the device (see ``goggles.dynamics.airframe.Airframe`` for units)."""

    mass: float
    inertia: wp.mat33
    inertia_inv: wp.mat33
    allocation: mat68
    mixer: mat86
    """Pseudo-inverse of the allocation: body wrench -> rotor thrusts."""
    spin_axes: mat38
    """Column i = d_i * axis_i: direction of rotor i's reaction torque on the body (its angular
    momentum points the opposite way)."""
    cf: float
    tau_up: float
    tau_down: float
    min_speed: float
    max_speed: float
    rotor_inertia: float
    rotor_radius: float
    arm_length: float
    drag: float
    moment_coefficient: wp.vec3
    linear_drag: wp.vec3
    quadratic_drag: wp.vec3
    linear_moment_drag: wp.vec3
    quadratic_moment_drag: wp.vec3
    force_sigma: float
    """Per-step standard deviation of the stochastic force per axis, N (sqrt(density / dt))."""
    moment_sigma: float
    accel_sigma: wp.vec3
    """Per-IMU-sample white-noise standard deviations and bias random-walk steps."""
    gyro_sigma: wp.vec3
    accel_walk: wp.vec3
    gyro_walk: wp.vec3
    R_BI: wp.mat33
    """IMU mount: IMU frame -> body frame."""
    rate_kp: wp.vec3
    rate_ki: wp.vec3
    rate_kd: wp.vec3
    rate_integrator_limit: float
    max_rate: float
    filter_p: float
    filter_q: float
    k_position: wp.vec3
    k_velocity: wp.vec3
    k_attitude: wp.vec3
    k_rate: wp.vec3
    max_horizontal_acceleration: float
    max_vertical_acceleration: float
    collision_shape: int
    """0 sphere, 1 box."""
    collision_size: wp.vec3
    """Sphere radius (repeated) or box half extents, m."""
    crash_speed: float
    meeting_radius: float
    """The sphere the vehicle meets others as, m (``Airframe.meeting_radius``)."""


@wp.struct
class SimSettings:
    dt: float
    gravity: float
    integrator: int
    ground_effect: int
    floor_z: float
    floor_contact: int
    """1: the vehicle rests on the plane z = floor_z instead of falling through it."""
    world_mesh: wp.uint64
    """Static scene mesh (with the actors passed beside it) for ground-effect height and collisions;
    0: no world, the floor plane only."""
    collision_response: int
    imu_decimation: int
    disturbances: int
    imu_noise: int
    wind: WindParams
    """The air (``goggles.dynamics.wind``)."""


@wp.struct
class Rigid:
    """Rigid-body state (or its time derivative): p, v world; q body->world; w body rates."""

    p: wp.vec3
    v: wp.vec3
    q: wp.quat
    w: wp.vec3


@wp.func
def conyers_ratio(x: float, L: float, R: float) -> float:
    """Conyers' T_IGE / T_OGE fit; x = Z/R, L rotor spacing in mm, R rotor radius in mm."""
    p1 = -2.794e-7 * L * L + 3.761e-4 * L + 3.197e-5 * R * R - 7.5479e-3 * R + 0.3357119
    p2 = 5.3178e-6 * L * L - 7.1388e-3 * L - 6.703e-4 * R * R + 0.1643906 * R - 7.0388236
    p3 = -2.2529e-5 * L * L + 0.0219849 * L + 0.0104943 * R * R - 2.6402066 * R + 163.3198037
    p4 = 3.2426e-5 * L * L - 0.0289233 * L - 0.0156903 * R * R + 3.9426111 * R - 248.2897537
    p5 = -1.8056e-4 * L * L + 0.2518899 * L + 0.0458834 * R * R - 11.4527617 * R + 636.8788317
    q1 = 1.0736e-5 * L * L - 0.0231523 * L + 0.0053983 * R * R - 1.3630188 * R + 96.3637597
    q2 = -4.4379e-5 * L * L + 0.0780762 * L - 0.0024483 * R * R + 0.6141837 * R - 71.9829075
    q3 = -1.3482e-4 * L * L + 0.1883013 * L + 0.0359764 * R * R - 8.9660684 * R + 500.2544495
    numerator = (((p1 * x + p2) * x + p3) * x + p4) * x + p5
    return numerator / (((x + q1) * x + q2) * x + q3)


@wp.func
def ground_effect_ratio(model: int, height: float, rotor_radius: float, arm_length: float) -> float:
    """Thrust in ground effect over thrust out of it at ``height`` metres above the ground."""
    x = height / rotor_radius
    if model == CHEESEMAN_BENNETT:
        if x <= 0.25:
            return 1.0
        k = rotor_radius / (4.0 * height)
        return 1.0 / (1.0 - k * k)
    if model == CONYERS:
        if x < 0.25 or x > 10.0:
            return 1.0
        return conyers_ratio(x, 2.0 * arm_length * 1000.0, rotor_radius * 1000.0)
    return 1.0


@wp.func
def height_above_ground(settings: SimSettings, actors: ActorData, p: wp.vec3) -> float:
    """Distance below the vehicle to the world (a downward ray), or to the floor plane."""
    if settings.world_mesh != wp.uint64(0):
        hit = closest_hit(settings.world_mesh, actors, p, wp.vec3(0.0, 0.0, -1.0), GROUND_RAY_LENGTH)
        return hit.t
    return p[2] - settings.floor_z


@wp.struct
class Contact:
    found: bool
    point: wp.vec3
    """Nearest obstacle point touching the collision shape, world frame."""
    normal: wp.vec3
    """Unit, world frame, from the obstacle towards the vehicle."""
    depth: float
    """Penetration, m."""
    other: int
    """-1: the world; else the other vehicle's index in its ``OtherVehicles``."""


@wp.struct
class OtherVehicles:
    """The vehicles a batch meets (``goggles.dynamics.Swarm``: every vehicle of one world), as they
    were when the launch began: each is carried along its velocity through the launch (a launch spans
    one sensor period, so a neighbour's acceleration moves it millimetres from that line)."""

    position: wp.array(dtype=wp.vec3)
    velocity: wp.array(dtype=wp.vec3)
    radius: wp.array(dtype=float)
    """Each vehicle's collision sphere (a box: the sphere round it), m."""
    count: int
    """0: the batch meets no vehicle (its vehicles are in worlds of their own)."""
    first: int
    """The batch's own first index in the arrays (it skips itself)."""


@wp.func
def vehicle_contact(af: AirframeParams, settings: SimSettings, actors: ActorData, x: Rigid) -> Contact:
    """Contact of the vehicle's collision shape with the world (nearest-point query).

    A box is tested at the surface point nearest its centre (exact for convex obstacles near the box)."""
    contact = Contact()
    contact.found = False
    contact.other = -1
    near = nearest_surface(settings.world_mesh, actors, x.p, af.meeting_radius)  # the shape's bounding sphere
    if not near.found:
        return contact
    normal = near.face_normal_W  # the centre on the surface (a vehicle resting on its pad)
    if near.distance > ON_SURFACE:
        normal = (x.p - near.point_W) / near.distance
    depth = af.collision_size[0] - near.distance
    if near.inside:  # the centre is behind the surface: the way out is the other way, and deeper
        depth = af.collision_size[0] + near.distance
        if near.distance > ON_SURFACE:
            normal = -normal
    if af.collision_shape == BOX:
        q_B = wp.quat_rotate_inv(x.q, near.point_W - x.p)
        inside = af.collision_size - wp.vec3(wp.abs(q_B[0]), wp.abs(q_B[1]), wp.abs(q_B[2]))
        depth = wp.min(inside)
        if near.inside:
            depth = wp.max(depth, near.distance)
    if depth > 0.0:
        contact.found = True
        contact.point = near.point_W
        contact.normal = normal
        contact.depth = depth
    return contact


@wp.func
def nearest_other(af: AirframeParams, others: OtherVehicles, me: int, x: Rigid, elapsed: float) -> Contact:
    """The deepest overlap of the vehicle (index ``me`` in ``others``) with another vehicle's sphere,
    ``elapsed`` seconds into the launch; the point is on the other's sphere, the normal from it."""
    contact = Contact()
    contact.found = False
    contact.other = -1
    r = af.meeting_radius
    for j in range(others.count):
        if j == me:
            continue
        centre = others.position[j] + others.velocity[j] * elapsed
        offset = x.p - centre
        distance = wp.length(offset)
        depth = r + others.radius[j] - distance
        if depth > 0.0 and (not contact.found or depth > contact.depth):
            normal = wp.vec3(0.0, 0.0, 1.0)  # centres together: apart along +z
            if distance > 1.0e-9:
                normal = offset / distance
            contact.found = True
            contact.point = centre + normal * others.radius[j]
            contact.normal = normal
            contact.depth = depth
            contact.other = j
    return contact


@wp.func
def rotor_speeds_at(af: AirframeParams, w0: vec8, w_cmd: vec8, s: float):
    """Rotor speeds and accelerations ``s`` seconds into a step with a held command (exact lag)."""
    w = vec8()
    dw = vec8()
    for r in range(8):
        tau = af.tau_up
        if w_cmd[r] < w0[r]:
            tau = af.tau_down
        w[r] = w_cmd[r] + (w0[r] - w_cmd[r]) * wp.exp(-s / tau)
        dw[r] = (w_cmd[r] - w[r]) / tau
    return w, dw


@wp.func
def rotor_speeds_after(af: AirframeParams, settings: SimSettings, w0: vec8, w_cmd: vec8) -> vec8:
    """Rotor speeds at the end of a step: one explicit Euler step of the lag under the Euler
    integrator (FlightGoggles), the exact exponential otherwise; within the motor limits."""
    if settings.integrator != EULER:
        w, unused = rotor_speeds_at(af, w0, w_cmd, settings.dt)
        return w
    unused, dw = rotor_speeds_at(af, w0, w_cmd, 0.0)
    w = vec8()
    for r in range(8):
        w[r] = wp.clamp(w0[r] + dw[r] * settings.dt, af.min_speed, af.max_speed)
    return w


@wp.func
def thrusts(af: AirframeParams, w: vec8, ratio: float) -> vec8:
    u = vec8()
    for r in range(8):
        u[r] = af.cf * w[r] * wp.abs(w[r]) * ratio
    return u


@wp.func
def specific_force(
    af: AirframeParams, x: Rigid, w: vec8, ratio: float, force_noise_W: wp.vec3, air_W: wp.vec3
) -> wp.vec3:
    """Every non-gravitational force on the airborne vehicle over its mass, body frame: what an
    accelerometer at the centre of mass reads (rotor thrust, drag, stochastic force). The drag acts on
    the velocity relative to the air (``air_W``: the wind where the vehicle is, ``goggles.dynamics.wind``)."""
    wrench = af.allocation * thrusts(af, w, ratio)
    relative = x.v - air_W
    v_B = wp.quat_rotate_inv(x.q, relative)
    drag_B = -wp.cw_mul(af.linear_drag, v_B) - wp.cw_mul(af.quadratic_drag, wp.cw_mul(v_B, wp.abs(v_B)))
    F_W = -af.drag * wp.length(relative) * relative + force_noise_W
    return (wp.vec3(wrench[0], wrench[1], wrench[2]) + drag_B + wp.quat_rotate_inv(x.q, F_W)) / af.mass


@wp.func
def derivative(
    af: AirframeParams,
    settings: SimSettings,
    x: Rigid,
    w: vec8,
    dw: vec8,
    ratio: float,
    force_noise_W: wp.vec3,
    moment_noise_B: wp.vec3,
    air_W: wp.vec3,
) -> Rigid:
    """Time derivative of the rigid-body state given the rotor speeds and accelerations."""
    wrench = af.allocation * thrusts(af, w, ratio)
    M_B = wp.vec3(wrench[3], wrench[4], wrench[5]) + af.spin_axes * (dw * af.rotor_inertia)
    M_aero = -wp.length(x.w) * wp.cw_mul(af.moment_coefficient, x.w)
    M_aero -= wp.cw_mul(af.linear_moment_drag, x.w) + wp.cw_mul(af.quadratic_moment_drag, wp.cw_mul(x.w, wp.abs(x.w)))
    h_rotors = -(af.spin_axes * (w * af.rotor_inertia))
    M = M_B + M_aero + moment_noise_B - wp.cross(x.w, af.inertia * x.w + h_rotors)
    d = Rigid()
    d.p = x.v
    d.v = wp.vec3(0.0, 0.0, -settings.gravity) + wp.quat_rotate(
        x.q, specific_force(af, x, w, ratio, force_noise_W, air_W)
    )
    d.q = wp.mul(x.q, wp.quat(x.w[0], x.w[1], x.w[2], 0.0)) * 0.5
    d.w = af.inertia_inv * M
    return d


@wp.func
def advance(x: Rigid, d: Rigid, h: float) -> Rigid:
    y = Rigid()
    y.p = x.p + d.p * h
    y.v = x.v + d.v * h
    y.q = x.q + d.q * h
    y.w = x.w + d.w * h
    return y


@wp.func
def integrate(
    af: AirframeParams,
    settings: SimSettings,
    x: Rigid,
    w0: vec8,
    w_cmd: vec8,
    ratio: float,
    force_noise_W: wp.vec3,
    moment_noise_B: wp.vec3,
    air_W: wp.vec3,
) -> Rigid:
    """One physics step (explicit Euler or classic RK4); the quaternion is renormalised."""
    h = settings.dt
    w, dw = rotor_speeds_at(af, w0, w_cmd, 0.0)
    k1 = derivative(af, settings, x, w, dw, ratio, force_noise_W, moment_noise_B, air_W)
    y = advance(x, k1, h)
    if settings.integrator != EULER:
        w, dw = rotor_speeds_at(af, w0, w_cmd, 0.5 * h)
        k2 = derivative(af, settings, advance(x, k1, 0.5 * h), w, dw, ratio, force_noise_W, moment_noise_B, air_W)
        k3 = derivative(af, settings, advance(x, k2, 0.5 * h), w, dw, ratio, force_noise_W, moment_noise_B, air_W)
        w, dw = rotor_speeds_at(af, w0, w_cmd, h)
        k4 = derivative(af, settings, advance(x, k3, h), w, dw, ratio, force_noise_W, moment_noise_B, air_W)
        y.p = x.p + (k1.p + 2.0 * k2.p + 2.0 * k3.p + k4.p) * (h / 6.0)
        y.v = x.v + (k1.v + 2.0 * k2.v + 2.0 * k3.v + k4.v) * (h / 6.0)
        y.q = x.q + (k1.q + 2.0 * k2.q + 2.0 * k3.q + k4.q) * (h / 6.0)
        y.w = x.w + (k1.w + 2.0 * k2.w + 2.0 * k3.w + k4.w) * (h / 6.0)
    y.q = wp.normalize(y.q)
    return y


@wp.func
def on_floor(settings: SimSettings, x: Rigid) -> bool:
    """The floor plane holds the vehicle up this step: it reached the floor moving down."""
    return settings.floor_contact != 0 and x.p[2] <= settings.floor_z and x.v[2] < 0.0


@wp.func
def rest_on_floor(settings: SimSettings, x: Rigid) -> Rigid:
    """Keep a vehicle that reaches the floor plane on it: no sinking, no bouncing."""
    if settings.floor_contact != 0 and x.p[2] <= settings.floor_z:
        x.p = wp.vec3(x.p[0], x.p[1], settings.floor_z)
        if x.v[2] < 0.0:
            x.v = wp.vec3(0.0)
            x.w = wp.vec3(0.0)
    return x
