"""Warp kernels of the simulator: one thread per vehicle advances many physics steps in one launch."""

import warp as wp

from goggles.dynamics.control import RATES, commanded_rates, rotor_commands
from goggles.dynamics.model import (
    AirframeParams,
    CollisionResponse,
    Contact,
    OtherVehicles,
    Rigid,
    SimSettings,
    ground_effect_ratio,
    height_above_ground,
    integrate,
    nearest_other,
    on_floor,
    rest_on_floor,
    rotor_speeds_after,
    specific_force,
    vec8,
    vehicle_contact,
)
from goggles.dynamics.wind import (
    field_at,
    gusts_at,
    mean_wind,
    steady_of,
    turbulence_step,
    turbulence_velocity,
    vec5,
    w20_of,
)
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.world.queries import ActorData

#: Forward kernels only: no autodiff, a tenth of the compile time (CUDA 82 s -> 8 s).
wp.set_module_options(FORWARD_ONLY)

CRASH = wp.constant(int(CollisionResponse.CRASH))
RESET = wp.constant(int(CollisionResponse.RESET))


@wp.struct
class VehicleState:
    """Per-vehicle state arrays, each (n,)."""

    position: wp.array(dtype=wp.vec3)
    velocity: wp.array(dtype=wp.vec3)
    attitude: wp.array(dtype=wp.quat)
    rates: wp.array(dtype=wp.vec3)
    rotor_speed: wp.array(dtype=vec8)
    accel_bias: wp.array(dtype=wp.vec3)
    gyro_bias: wp.array(dtype=wp.vec3)
    imu_accel: wp.array(dtype=wp.vec3)
    """Latest IMU sample, IMU frame, m/s^2 (held between samples)."""
    imu_gyro: wp.array(dtype=wp.vec3)
    filter_y: wp.array(dtype=wp.vec3)
    """Rate-mode gyro low-pass filter state and its derivative."""
    filter_dy: wp.array(dtype=wp.vec3)
    integral: wp.array(dtype=wp.vec3)
    rng: wp.array(dtype=wp.uint32)
    mode: wp.array(dtype=wp.int32)
    command: wp.array(dtype=vec8)
    start_position: wp.array(dtype=wp.vec3)
    start_attitude: wp.array(dtype=wp.quat)
    crashed: wp.array(dtype=wp.int32)
    """1 after a crash with the CRASH response, until reset."""
    contact_step: wp.array(dtype=wp.int32)
    """Global step index of the first contact during the last launch, or -1."""
    contact_point: wp.array(dtype=wp.vec3)
    contact_normal: wp.array(dtype=wp.vec3)
    contact_depth: wp.array(dtype=float)
    contact_other: wp.array(dtype=wp.int32)
    """-1: the world; else the other vehicle's index in ``OtherVehicles``."""
    clock: wp.array(dtype=wp.int32)
    """(1,) the global index of the next physics step (on the device: recorded steps replay it)."""
    turbulence: wp.array(dtype=vec5)
    """Each vehicle's Dryden turbulence state (``goggles.dynamics.wind``)."""
    wind: wp.array(dtype=wp.vec3)
    """The air's velocity where the vehicle was at its last step, world, m/s."""


@wp.func
def randn3(rng: wp.uint32):
    """Three standard normal draws, and the advanced random state (Warp passes the state by value)."""
    a = wp.randn(rng)
    b = wp.randn(rng)
    c = wp.randn(rng)
    return wp.vec3(a, b, c), rng


@wp.func
def respond(
    state: VehicleState, i: int, step: int, af: AirframeParams, settings: SimSettings, contact: Contact, v: wp.vec3
) -> int:
    """Record ``contact`` if it is the vehicle's first since the host last read them
    (``MultirotorSim.contacts``), so none is lost between reads, or the first with another vehicle
    after one with the world (a vehicle resting on the ground touches it at every step, and must
    still hear another hit it). Returns the response to apply: 0 none, else the settings' response
    (approached faster than the crash speed: ``v`` is the vehicle's velocity relative to what it
    touched)."""
    if not contact.found:
        return 0
    if state.contact_step[i] < 0 or (contact.other >= 0 and state.contact_other[i] < 0):
        state.contact_step[i] = step
        state.contact_point[i] = contact.point
        state.contact_normal[i] = contact.normal
        state.contact_depth[i] = contact.depth
        state.contact_other[i] = contact.other
    if -wp.dot(v, contact.normal) > af.crash_speed:
        return settings.collision_response
    return 0


@wp.func
def record_contact(
    state: VehicleState,
    i: int,
    step: int,
    af: AirframeParams,
    settings: SimSettings,
    actors: ActorData,
    others: OtherVehicles,
    x: Rigid,
    elapsed: float,
) -> int:
    """Check the vehicle's shape against the world and the other vehicles (``elapsed`` seconds into
    the launch); returns the response to apply (``respond``)."""
    response = 0
    if settings.world_mesh != wp.uint64(0):
        response = respond(state, i, step, af, settings, vehicle_contact(af, settings, actors, x), x.v)
    if others.count > 0:
        met = nearest_other(af, others, others.first + i, x, elapsed)
        if met.found:
            relative = x.v - others.velocity[met.other]
            response = wp.max(response, respond(state, i, step, af, settings, met, relative))
    return response


@wp.func
def filter_step(P: float, Q: float, y: wp.vec3, dy: wp.vec3, u: wp.vec3, dt: float):
    """One backward-Euler step of the gyro low-pass y'' = P (u - y) - Q y' (FlightGoggles' LPF).

    Solving y1 = y0 + dt dy1 and dy1 = dy0 + dt (P (u - y1) - Q dy1) for (y1, dy1)."""
    det = 1.0 + Q * dt + P * dt * dt
    dy1 = (dy + (u - y) * (P * dt)) / det
    return y + dy1 * dt, dy1


@wp.kernel
def step_vehicles_kernel(
    airframes: wp.array(dtype=AirframeParams),
    settings: SimSettings,
    actors: ActorData,
    others: OtherVehicles,
    first: int,
    steps: int,
    state: VehicleState,
):
    """Advance vehicle ``first + tid`` by ``steps`` physics steps from the global step ``state.clock``
    (it decides which steps sample the IMU). Each vehicle has its own parameters (``airframes[i]``:
    domain randomisation draws them per vehicle)."""
    i = first + wp.tid()
    first_step = state.clock[0]
    af = airframes[i]
    x = Rigid()
    x.p = state.position[i]
    x.v = state.velocity[i]
    x.q = state.attitude[i]
    x.w = state.rates[i]
    rotors = state.rotor_speed[i]
    y = state.filter_y[i]
    dy = state.filter_dy[i]
    integral = state.integral[i]
    accel_bias = state.accel_bias[i]
    gyro_bias = state.gyro_bias[i]
    imu_accel = state.imu_accel[i]
    imu_gyro = state.imu_gyro[i]
    rng = state.rng[i]
    mode = state.mode[i]
    command = state.command[i]
    dt = settings.dt
    limit = wp.vec3(af.rate_integrator_limit)
    crashed = state.crashed[i]
    turbulence = state.turbulence[i]
    air = state.wind[i]
    steady = steady_of(settings.wind, i)
    w20 = w20_of(settings.wind, i)
    for k in range(steps):
        if crashed != 0:
            break  # a crashed vehicle stays where it stopped until reset
        # Rate-mode gyro filter on the latest IMU sample (backward Euler, as FlightGoggles), and the
        # PID integrator.
        y, dy = filter_step(af.filter_p, af.filter_q, y, dy, af.R_BI * imu_gyro, dt)
        if mode == RATES:
            integral = wp.min(wp.max(integral + (commanded_rates(af, command) - y) * dt, -limit), limit)
        w_cmd = rotor_commands(af, settings, mode, command, x.p, x.v, x.q, x.w, y, dy, integral)
        height = height_above_ground(settings, actors, x.p)
        ratio = ground_effect_ratio(settings.ground_effect, height, af.rotor_radius, af.arm_length)
        air = mean_wind(settings.wind, height, steady)
        if w20 > 0.0:
            passing = wp.length(x.v - air)
            turbulence, rng = turbulence_step(settings.wind, turbulence, height, passing, dt, rng)
            air += turbulence_velocity(turbulence, height, passing, steady, w20)
        if settings.wind.gust_count > 0 or settings.wind.vehicle_gusts != 0:
            air += gusts_at(settings.wind, i, float(first_step + k) * dt)
        if settings.wind.has_field != 0:
            air += field_at(settings.wind, x.p)
        force_noise = wp.vec3(0.0)
        moment_noise = wp.vec3(0.0)
        if settings.disturbances != 0:
            force_noise, rng = randn3(rng)
            moment_noise, rng = randn3(rng)
        force_noise_W = force_noise * af.force_sigma
        x = integrate(af, settings, x, rotors, w_cmd, ratio, force_noise_W, moment_noise * af.moment_sigma, air)
        supported = on_floor(settings, x)
        x = rest_on_floor(settings, x)
        rotors = rotor_speeds_after(af, settings, rotors, w_cmd)
        if settings.world_mesh != wp.uint64(0) or others.count > 0:
            response = record_contact(state, i, first_step + k + 1, af, settings, actors, others, x, dt * float(k + 1))
            if response == CRASH:
                crashed = 1
                x.v = wp.vec3(0.0)
                x.w = wp.vec3(0.0)
                rotors = vec8()
            elif response == RESET:
                x.p = state.start_position[i]
                x.q = state.start_attitude[i]
                x.v = wp.vec3(0.0)
                x.w = wp.vec3(0.0)
                rotors = vec8()
                integral = wp.vec3(0.0)
        if (first_step + k + 1) % settings.imu_decimation == 0:
            # The instantaneous specific force at the sample; held by the floor or stopped by a
            # crash, the support cancels gravity's pull instead.
            specific_force_B = specific_force(af, x, rotors, ratio, force_noise_W, air)
            if supported or crashed != 0:
                specific_force_B = wp.quat_rotate_inv(x.q, wp.vec3(0.0, 0.0, settings.gravity))
            if settings.imu_noise != 0:
                walk_a, rng = randn3(rng)
                walk_g, rng = randn3(rng)
                white_a, rng = randn3(rng)
                white_g, rng = randn3(rng)
                accel_bias += wp.cw_mul(af.accel_walk, walk_a)
                gyro_bias += wp.cw_mul(af.gyro_walk, walk_g)
                imu_accel = wp.transpose(af.R_BI) * specific_force_B + accel_bias + wp.cw_mul(af.accel_sigma, white_a)
                imu_gyro = wp.transpose(af.R_BI) * x.w + gyro_bias + wp.cw_mul(af.gyro_sigma, white_g)
            else:
                imu_accel = wp.transpose(af.R_BI) * specific_force_B + accel_bias
                imu_gyro = wp.transpose(af.R_BI) * x.w + gyro_bias
    state.position[i] = x.p
    state.velocity[i] = x.v
    state.attitude[i] = x.q
    state.rates[i] = x.w
    state.rotor_speed[i] = rotors
    state.filter_y[i] = y
    state.filter_dy[i] = dy
    state.integral[i] = integral
    state.accel_bias[i] = accel_bias
    state.gyro_bias[i] = gyro_bias
    state.imu_accel[i] = imu_accel
    state.imu_gyro[i] = imu_gyro
    state.rng[i] = rng
    state.crashed[i] = crashed
    state.turbulence[i] = turbulence
    state.wind[i] = air


@wp.kernel
def reset_vehicles_kernel(
    mask: wp.array(dtype=wp.int32),
    position: wp.array(dtype=wp.vec3),
    attitude: wp.array(dtype=wp.quat),
    rotor_speed: wp.array(dtype=float),
    seed: int,
    first_index: int,
    episode: wp.array(dtype=wp.int32),
    gravity: float,
    state: VehicleState,
):
    """Put the vehicles whose ``mask`` is set at rest at ``position``/``attitude`` with every rotor at
    ``rotor_speed`` (hover), clear their biases, filters and contacts, and give each a new random
    stream from (seed, first_index + vehicle, episode): an episode replays the same way whatever the
    others do, and in a batch that starts at another index."""
    i = wp.tid()
    if mask[i] == 0:
        return
    state.position[i] = position[i]
    state.start_position[i] = position[i]
    state.attitude[i] = attitude[i]
    state.start_attitude[i] = attitude[i]
    state.velocity[i] = wp.vec3(0.0)
    state.rates[i] = wp.vec3(0.0)
    spin = vec8()
    for r in range(8):
        spin[r] = rotor_speed[i]
    state.rotor_speed[i] = spin
    state.accel_bias[i] = wp.vec3(0.0)
    state.gyro_bias[i] = wp.vec3(0.0)
    state.imu_accel[i] = wp.quat_rotate_inv(attitude[i], wp.vec3(0.0, 0.0, gravity))
    state.imu_gyro[i] = wp.vec3(0.0)
    state.filter_y[i] = wp.vec3(0.0)
    state.filter_dy[i] = wp.vec3(0.0)
    state.integral[i] = wp.vec3(0.0)
    state.crashed[i] = 0
    state.contact_step[i] = -1
    state.turbulence[i] = vec5()
    state.wind[i] = wp.vec3(0.0)
    state.rng[i] = wp.rand_init(seed, (first_index + i) * 65536 + episode[i])
    episode[i] = episode[i] + 1


@wp.kernel
def advance_clock_kernel(steps: int, state: VehicleState):
    """After every vehicle's launch of ``steps`` steps."""
    state.clock[0] = state.clock[0] + steps


@wp.kernel
def seed_kernel(seed: int, out_rng: wp.array(dtype=wp.uint32)):
    """Independent, reproducible random streams per vehicle."""
    i = wp.tid()
    out_rng[i] = wp.rand_init(seed, i)


@wp.kernel
def set_commands_kernel(
    vehicles: wp.array(dtype=wp.int32), commands: wp.array(dtype=vec8), mode: int, state: VehicleState
):
    """The command and control mode of some vehicles (the others keep theirs). A vehicle that changes
    mode starts rate mode's integrator afresh: what it wound up on an earlier command of another mode
    must not steer it now."""
    k = wp.tid()
    i = vehicles[k]
    state.command[i] = commands[k]
    if state.mode[i] != mode:
        state.integral[i] = wp.vec3(0.0)
    state.mode[i] = mode


@wp.kernel
def ground_effect_kernel(
    model: int,
    rotor_radius: float,
    arm_length: float,
    heights: wp.array(dtype=float),
    out_ratio: wp.array(dtype=float),
):
    """Evaluate the simulator's ground-effect ratio at given heights (for tests and plots)."""
    i = wp.tid()
    out_ratio[i] = ground_effect_ratio(model, heights[i], rotor_radius, arm_length)


@wp.kernel
def filter_response_kernel(
    P: float, Q: float, dt: float, inputs: wp.array(dtype=wp.vec3), out_y: wp.array(dtype=wp.vec3)
):
    """Run the rate-mode gyro filter over an input sequence from rest (for tests and plots)."""
    y = wp.vec3(0.0)
    dy = wp.vec3(0.0)
    for k in range(inputs.shape[0]):
        y, dy = filter_step(P, Q, y, dy, inputs[k], dt)
        out_y[k] = y


#: Columns of the packed host copy of the state (``pack_states_kernel``), float64 so step indices stay exact.
PACKED_COLUMNS = 40
#: Columns of one IMU sample held on the device until the host takes a batch of them.
IMU_COLUMNS = 6


@wp.func
def put_vec3(out: wp.array2d(dtype=wp.float64), i: int, column: int, value: wp.vec3):
    out[i, column] = wp.float64(value[0])
    out[i, column + 1] = wp.float64(value[1])
    out[i, column + 2] = wp.float64(value[2])


@wp.kernel
def pack_states_kernel(state: VehicleState, out: wp.array2d(dtype=wp.float64)):
    """Everything the host reads of a vehicle, in one row, so one copy serves every reader of a step:
    position 0:3, velocity 3:6, attitude (x, y, z, w) 6:10, rates 10:13, rotor speeds 13:21,
    IMU accel 21:24, IMU gyro 24:27, crashed 27, contact step 28, contact point 29:32, normal 32:35,
    depth 35, the vehicle touched 36 (-1 the world), the air's velocity 37:40."""
    i = wp.tid()
    put_vec3(out, i, 0, state.position[i])
    put_vec3(out, i, 3, state.velocity[i])
    q = state.attitude[i]
    for k in range(4):
        out[i, 6 + k] = wp.float64(q[k])
    put_vec3(out, i, 10, state.rates[i])
    rotors = state.rotor_speed[i]
    for k in range(8):
        out[i, 13 + k] = wp.float64(rotors[k])
    put_vec3(out, i, 21, state.imu_accel[i])
    put_vec3(out, i, 24, state.imu_gyro[i])
    out[i, 27] = wp.float64(state.crashed[i])
    out[i, 28] = wp.float64(state.contact_step[i])
    put_vec3(out, i, 29, state.contact_point[i])
    put_vec3(out, i, 32, state.contact_normal[i])
    out[i, 35] = wp.float64(state.contact_depth[i])
    out[i, 36] = wp.float64(state.contact_other[i])
    put_vec3(out, i, 37, state.wind[i])


@wp.kernel
def posed_contacts_kernel(
    airframes: wp.array(dtype=AirframeParams),
    settings: SimSettings,
    actors: ActorData,
    poses: wp.array(dtype=wp.mat44),
    vehicles: wp.array(dtype=wp.int32),
    out: wp.array2d(dtype=wp.float64),
):
    """Where vehicles placed from outside (live, replay) touch the world at poses, pose ``i`` of
    vehicle ``vehicles[i]``, as the simulator's test finds it: found 0, point 1:4, normal 4:7, depth 7."""
    i = wp.tid()
    T = poses[i]
    x = Rigid()
    x.p = wp.vec3(T[0, 3], T[1, 3], T[2, 3])
    x.q = wp.quat_from_matrix(wp.mat33(T[0, 0], T[0, 1], T[0, 2], T[1, 0], T[1, 1], T[1, 2], T[2, 0], T[2, 1], T[2, 2]))
    contact = vehicle_contact(airframes[vehicles[i]], settings, actors, x)
    out[i, 0] = wp.float64(0.0)
    if contact.found:
        out[i, 0] = wp.float64(1.0)
        put_vec3(out, i, 1, contact.point)
        put_vec3(out, i, 4, contact.normal)
        out[i, 7] = wp.float64(contact.depth)


@wp.kernel
def share_states_kernel(airframes: wp.array(dtype=AirframeParams), state: VehicleState, others: OtherVehicles):
    """Where the batch's vehicles are as a launch begins, for every batch that meets them."""
    i = wp.tid()
    j = others.first + i
    others.position[j] = state.position[i]
    others.velocity[j] = state.velocity[i]
    others.radius[j] = airframes[i].meeting_radius


@wp.kernel
def record_imu_kernel(state: VehicleState, column: int, out: wp.array2d(dtype=wp.float64)):
    """The present IMU sample (accel, gyro) into the packed rows' sample queue at ``column``: samples
    wait on the device and reach the host with the next state copy."""
    i = wp.tid()
    put_vec3(out, i, column, state.imu_accel[i])
    put_vec3(out, i, column + 3, state.imu_gyro[i])
