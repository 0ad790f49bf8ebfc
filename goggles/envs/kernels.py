"""Warp kernels of the learning environments: actions to commands, episode starts, observations,
rewards and camera poses, all on the simulator's device (one launch each for every environment)."""

import warp as wp

from goggles.dynamics.kernels import VehicleState
from goggles.dynamics.model import vec8
from goggles.render.projection import lens_coefficients
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.sensors.beacons import detect_beacon
from goggles.world.queries import ActorData
from goggles.world.splats import SplatData

wp.set_module_options(FORWARD_ONLY)


@wp.kernel
def commands_kernel(
    actions: wp.array2d(dtype=wp.float32),
    scale: vec8,
    offset: vec8,
    unit: wp.array(dtype=float),
    in_units: vec8,
    mask: wp.array(dtype=wp.int32),
    state: VehicleState,
):
    """command = offset + scale * action per column, the columns flagged ``in_units`` also multiplied
    by the vehicle's own unit (hover thrust or hover rotor speed: a randomised mass hovers at action
    0). Vehicles being reset (``mask``) keep their command."""
    i = wp.tid()
    if mask[i] != 0:
        return
    command = vec8()
    for j in range(actions.shape[1]):
        value = offset[j] + scale[j] * actions[i, j]
        if in_units[j] != 0.0:
            value = value * unit[i]
        command[j] = value
    state.command[i] = command


@wp.kernel
def draw_starts_kernel(
    mask: wp.array(dtype=wp.int32),
    seed: int,
    first_index: int,
    episode: wp.array(dtype=wp.int32),
    spawn: wp.vec3,
    spawn_radius: float,
    target_radius: float,
    position: wp.array(dtype=wp.vec3),
    attitude: wp.array(dtype=wp.quat),
    target: wp.array(dtype=wp.vec3),
    steps: wp.array(dtype=wp.int32),
):
    """A new episode's start and target for the vehicles being reset: the start uniform in a box of
    half-size ``spawn_radius`` around ``spawn`` with a random heading, the target uniform in a box of
    half-size ``target_radius`` around the start; drawn from (seed, environment, episode)."""
    i = wp.tid()
    if mask[i] == 0:
        return
    rng = wp.rand_init(seed + 7919, (first_index + i) * 65536 + episode[i])
    start = spawn + spawn_radius * wp.vec3(wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0))
    yaw = wp.randf(rng, -3.14159265, 3.14159265)
    steps[i] = 0
    position[i] = start
    attitude[i] = wp.quat_from_axis_angle(wp.vec3(0.0, 0.0, 1.0), yaw)
    target[i] = start + target_radius * wp.vec3(
        wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0)
    )


#: Columns of the state observation (see ``observe_kernel``).
STATE_SIZE = 24


@wp.kernel
def observe_kernel(state: VehicleState, target: wp.array(dtype=wp.vec3), out: wp.array2d(dtype=wp.float32)):
    """The state observation: target - position (world, m), velocity (world, m/s), the attitude as
    the body-to-world rotation matrix (row-major: continuous, where a quaternion's q / -q is not),
    body rates (rad/s), and the IMU's specific force (m/s^2) and rates (rad/s)."""
    i = wp.tid()
    e = target[i] - state.position[i]
    v = state.velocity[i]
    R = wp.quat_to_matrix(state.attitude[i])
    w = state.rates[i]
    a = state.imu_accel[i]
    g = state.imu_gyro[i]
    for j in range(3):
        out[i, j] = e[j]
        out[i, 3 + j] = v[j]
        out[i, 6 + 3 * j] = R[j, 0]
        out[i, 7 + 3 * j] = R[j, 1]
        out[i, 8 + 3 * j] = R[j, 2]
        out[i, 15 + j] = w[j]
        out[i, 18 + j] = a[j]
        out[i, 21 + j] = g[j]


@wp.kernel
def hover_reward_kernel(
    state: VehicleState,
    target: wp.array(dtype=wp.vec3),
    steps: wp.array(dtype=wp.int32),
    max_steps: int,
    max_distance: float,
    reset_mask: wp.array(dtype=wp.int32),
    reward: wp.array(dtype=wp.float32),
    terminated: wp.array(dtype=wp.bool),
    truncated: wp.array(dtype=wp.bool),
):
    """Reaching and holding a target: reward 1 / (1 + d^2) - 0.05 |rates| per step (d: distance to
    the target, m); a crash or straying ``max_distance`` from the target ends the episode, the time
    limit truncates it. Vehicles that were reset this step (next-step autoreset) report reward 0 and
    neither."""
    i = wp.tid()
    if reset_mask[i] != 0:
        reward[i] = 0.0
        terminated[i] = False
        truncated[i] = False
        return
    steps[i] = steps[i] + 1
    d = wp.length(target[i] - state.position[i])
    reward[i] = 1.0 / (1.0 + d * d) - 0.05 * wp.length(state.rates[i])
    ended = state.crashed[i] != 0 or d > max_distance
    terminated[i] = ended
    truncated[i] = (not ended) and steps[i] >= max_steps


@wp.kernel
def camera_poses_kernel(
    state: VehicleState,
    R_BC: wp.array(dtype=wp.mat33),
    p_BC: wp.vec3,
    R_WC: wp.array2d(dtype=wp.mat33),
    p_WC: wp.array2d(dtype=wp.vec3),
):
    """Every row of each vehicle's camera at the vehicle's pose (a global shutter); each vehicle's
    camera has its own mounting rotation (randomised)."""
    i, y = wp.tid()
    R_WB = wp.quat_to_matrix(state.attitude[i])
    R_WC[i, y] = R_WB * R_BC[i]
    p_WC[i, y] = state.position[i] + R_WB * p_BC


@wp.kernel
def depth_observation_kernel(
    status: wp.array3d(dtype=wp.int8),
    depth: wp.array3d(dtype=float),
    row_stride: int,
    row_offset: int,
    span: int,
    out: wp.array3d(dtype=wp.float32),
):
    """Depth in metres where the camera measured one, 0 elsewhere (no hit, too close, or invalidated
    by a depth model): finite values a network can take. Launched as the renderer launches its own
    (``Renderer.launch_rows``): ``span`` pixels of a row per thread."""
    i, k, block = wp.tid()
    y = row_offset + k * row_stride
    for j in range(span):
        x = block * span + j
        z = depth[i, y, x]
        out[i, y, x] = wp.where(int(status[i, y, x]) == 0 and wp.isfinite(z), z, 0.0)


@wp.kernel
def mask_from_done_kernel(
    terminated: wp.array(dtype=wp.bool), truncated: wp.array(dtype=wp.bool), mask: wp.array(dtype=wp.int32)
):
    """The environments that ended this step: reset at the next (next-step autoreset) or at once
    (same-step)."""
    i = wp.tid()
    mask[i] = wp.where(terminated[i] or truncated[i], 1, 0)


@wp.kernel
def draw_course_kernel(
    mask: wp.array(dtype=wp.int32),
    seed: int,
    first_index: int,
    episode: wp.array(dtype=wp.int32),
    nominal_position: wp.array(dtype=wp.vec3),
    nominal_yaw: wp.array(dtype=float),
    bounds: wp.array(dtype=wp.vec3),
    perturbation: wp.array(dtype=float),
    start: wp.vec3,
    start_yaw: float,
    spawn_radius: float,
    gate_position: wp.array2d(dtype=wp.vec3),
    gate_yaw: wp.array2d(dtype=float),
    next_gate: wp.array(dtype=wp.int32),
    position: wp.array(dtype=wp.vec3),
    attitude: wp.array(dtype=wp.quat),
    target: wp.array(dtype=wp.vec3),
    steps: wp.array(dtype=wp.int32),
    previous: wp.array(dtype=wp.vec3),
):
    """A new race for the vehicles being reset: every gate shifted uniformly within its bounds (dx, dy
    in m, dyaw in rad) times the environment's ``perturbation`` factor, the start within
    ``spawn_radius`` of the course's, heading along its yaw; drawn from (seed, environment,
    episode)."""
    i = wp.tid()
    if mask[i] == 0:
        return
    rng = wp.rand_init(seed + 104729, (first_index + i) * 65536 + episode[i])
    for k in range(gate_position.shape[1]):
        b = bounds[k] * perturbation[i]
        shift = wp.vec3(wp.randf(rng, -1.0, 1.0) * b[0], wp.randf(rng, -1.0, 1.0) * b[1], 0.0)
        gate_position[i, k] = nominal_position[k] + shift
        gate_yaw[i, k] = nominal_yaw[k] + wp.randf(rng, -1.0, 1.0) * b[2]
    jitter = wp.vec3(wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0))
    position[i] = start + spawn_radius * jitter
    previous[i] = position[i]
    attitude[i] = wp.quat_from_axis_angle(wp.vec3(0.0, 0.0, 1.0), start_yaw)
    next_gate[i] = 0
    target[i] = gate_position[i, 0]
    steps[i] = 0


@wp.func
def gate_local(p: wp.vec3, centre: wp.vec3, yaw: float) -> wp.vec3:
    """``p`` in a gate's frame (x through the opening, z up)."""
    d = p - centre
    c = wp.cos(yaw)
    s = wp.sin(yaw)
    return wp.vec3(c * d[0] + s * d[1], -s * d[0] + c * d[1], d[2])


@wp.func
def passes_gate(p: wp.vec3, centre: wp.vec3, yaw: float, opening: wp.vec2) -> bool:
    """The AlphaPilot pass rule: inside the bounding box of the opening's corners inflated by 0.1 m,
    and within 0.3 m of the gate plane."""
    c = wp.cos(yaw)
    s = wp.sin(yaw)
    w = opening[0] * 0.5
    h = opening[1] * 0.5
    half = wp.vec3(wp.abs(s) * w + 0.1, wp.abs(c) * w + 0.1, h + 0.1)  # the corners' box, inflated
    d = p - centre
    inside = wp.abs(d[0]) <= half[0] and wp.abs(d[1]) <= half[1] and wp.abs(d[2]) <= half[2]
    return inside and wp.abs(gate_local(p, centre, yaw)[0]) <= 0.3


@wp.func
def hits_frame(
    p: wp.vec3, centre: wp.vec3, yaw: float, opening: wp.vec2, bar: float, depth: float, radius: float
) -> bool:
    """The vehicle (a sphere of ``radius``) touches the gate's frame: within the bars' slab and their
    outer square, but not clear inside the opening."""
    q = gate_local(p, centre, yaw)
    w = opening[0] * 0.5
    h = opening[1] * 0.5
    if wp.abs(q[0]) > depth * 0.5 + radius:
        return False
    if wp.abs(q[1]) > w + bar + radius or wp.abs(q[2]) > h + bar + radius:
        return False
    return wp.abs(q[1]) > w - radius or wp.abs(q[2]) > h - radius


@wp.kernel
def race_reward_kernel(
    state: VehicleState,
    gate_position: wp.array2d(dtype=wp.vec3),
    gate_yaw: wp.array2d(dtype=float),
    opening: wp.array(dtype=wp.vec2),
    frame: wp.vec3,
    next_gate: wp.array(dtype=wp.int32),
    previous: wp.array(dtype=wp.vec3),
    steps: wp.array(dtype=wp.int32),
    max_steps: int,
    weights: wp.vec3,
    max_distance: float,
    reset_mask: wp.array(dtype=wp.int32),
    target: wp.array(dtype=wp.vec3),
    reward: wp.array(dtype=wp.float32),
    terminated: wp.array(dtype=wp.bool),
    truncated: wp.array(dtype=wp.bool),
):
    """Progress towards the next gate (the distance gained this step, m, times weights[0]), a bonus
    weights[1] per gate passed by the AlphaPilot rule, in order; touching any gate's frame (``frame``:
    bar width, depth, vehicle radius), crashing, or straying ``max_distance`` from the next gate costs
    weights[2] and ends the episode, as does the last gate (success); the course's time limit
    truncates it."""
    i = wp.tid()
    p = state.position[i]
    if reset_mask[i] != 0:
        reward[i] = 0.0
        terminated[i] = False
        truncated[i] = False
        return
    steps[i] = steps[i] + 1
    gates = gate_position.shape[1]
    k = next_gate[i]
    if k >= gates:  # finished (reset at the next step): nothing more to earn
        reward[i] = 0.0
        terminated[i] = True
        truncated[i] = False
        return
    g = gate_position[i, k]
    r = weights[0] * (wp.length(g - previous[i]) - wp.length(g - p))
    if passes_gate(p, g, gate_yaw[i, k], opening[k]):
        r = r + weights[1]
        k = k + 1
        next_gate[i] = k
    crashed = state.crashed[i] != 0
    for j in range(gates):
        if hits_frame(p, gate_position[i, j], gate_yaw[i, j], opening[j], frame[0], frame[1], frame[2]):
            crashed = True
    done = k >= gates
    if not done:
        target[i] = gate_position[i, k]
        if wp.length(gate_position[i, k] - p) > max_distance:
            crashed = True
    if crashed:
        r = r - weights[2]
    reward[i] = r
    previous[i] = p
    terminated[i] = crashed or done
    truncated[i] = not (crashed or done) and steps[i] >= max_steps


@wp.kernel
def draw_goal_kernel(
    mask: wp.array(dtype=wp.int32),
    seed: int,
    first_index: int,
    episode: wp.array(dtype=wp.int32),
    start: wp.vec3,
    start_radius: float,
    goal: wp.vec3,
    goal_radius: float,
    heading_jitter: float,
    position: wp.array(dtype=wp.vec3),
    attitude: wp.array(dtype=wp.quat),
    target: wp.array(dtype=wp.vec3),
    steps: wp.array(dtype=wp.int32),
    previous: wp.array(dtype=wp.vec3),
):
    """A new flight for the vehicles being reset: the start and the goal each uniform in a box of the
    given half-size, the vehicle facing the goal within +-``heading_jitter`` rad."""
    i = wp.tid()
    if mask[i] == 0:
        return
    rng = wp.rand_init(seed + 15485863, (first_index + i) * 65536 + episode[i])
    p = start + start_radius * wp.vec3(wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0))
    g = goal + goal_radius * wp.vec3(wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0), wp.randf(rng, -1.0, 1.0))
    yaw = wp.atan2(g[1] - p[1], g[0] - p[0]) + wp.randf(rng, -1.0, 1.0) * heading_jitter
    position[i] = p
    previous[i] = p
    attitude[i] = wp.quat_from_axis_angle(wp.vec3(0.0, 0.0, 1.0), yaw)
    target[i] = g
    steps[i] = 0


@wp.kernel
def goal_reward_kernel(
    state: VehicleState,
    target: wp.array(dtype=wp.vec3),
    previous: wp.array(dtype=wp.vec3),
    steps: wp.array(dtype=wp.int32),
    max_steps: int,
    weights: wp.vec3,
    reach: float,
    reset_mask: wp.array(dtype=wp.int32),
    reward: wp.array(dtype=wp.float32),
    terminated: wp.array(dtype=wp.bool),
    truncated: wp.array(dtype=wp.bool),
):
    """Progress towards the goal (distance gained this step, m, times weights[0]); reaching it (within
    ``reach`` m) earns weights[1] and ends the episode, a crash costs weights[2] and ends it; the time
    limit truncates it."""
    i = wp.tid()
    p = state.position[i]
    if reset_mask[i] != 0:
        reward[i] = 0.0
        terminated[i] = False
        truncated[i] = False
        return
    steps[i] = steps[i] + 1
    g = target[i]
    d = wp.length(g - p)
    r = weights[0] * (wp.length(g - previous[i]) - d)
    reached = d <= reach
    crashed = state.crashed[i] != 0
    if reached:
        r = r + weights[1]
    if crashed:
        r = r - weights[2]
    reward[i] = r
    previous[i] = p
    terminated[i] = reached or crashed
    truncated[i] = not (reached or crashed) and steps[i] >= max_steps


@wp.kernel
def place_gates_kernel(
    mask: wp.array(dtype=wp.int32),
    gate_position: wp.array2d(dtype=wp.vec3),
    gate_yaw: wp.array2d(dtype=float),
    shape: wp.array(dtype=wp.int32),
    shape_lower: wp.array(dtype=wp.vec3),
    shape_upper: wp.array(dtype=wp.vec3),
    actors: ActorData,
):
    """Place the gates of the environments being reset as the scene's actor instances i * G + k,
    with their world bounding boxes (the shape's box turned by the gate's yaw)."""
    i, k = wp.tid()
    if mask[i] == 0:
        return
    a = i * gate_position.shape[1] + k
    R = wp.quat_to_matrix(wp.quat_from_axis_angle(wp.vec3(0.0, 0.0, 1.0), gate_yaw[i, k]))
    p = gate_position[i, k]
    centre = 0.5 * (shape_lower[k] + shape_upper[k])
    half = 0.5 * (shape_upper[k] - shape_lower[k])
    reach = wp.vec3(
        wp.abs(R[0, 0]) * half[0] + wp.abs(R[0, 1]) * half[1] + wp.abs(R[0, 2]) * half[2],
        wp.abs(R[1, 0]) * half[0] + wp.abs(R[1, 1]) * half[1] + wp.abs(R[1, 2]) * half[2],
        wp.abs(R[2, 0]) * half[0] + wp.abs(R[2, 1]) * half[1] + wp.abs(R[2, 2]) * half[2],
    )
    middle = p + R * centre
    actors.shape[a] = shape[k]
    actors.R_WA[a] = R
    actors.p_WA[a] = p
    actors.lower[a] = middle - reach
    actors.upper[a] = middle + reach


@wp.kernel
def range_poses_kernel(
    state: VehicleState, R_BS: wp.mat33, R_WS: wp.array(dtype=wp.mat33), p_WS: wp.array(dtype=wp.vec3)
):
    """Each vehicle's range sensor pose: at its centre, turned by ``R_BS`` (beam along the sensor's +z)."""
    i = wp.tid()
    R_WS[i] = wp.quat_to_matrix(state.attitude[i]) * R_BS
    p_WS[i] = state.position[i]


@wp.kernel
def ranges_observation_kernel(
    raw: wp.array2d(dtype=float), min_range: float, max_range: float, out: wp.array2d(dtype=wp.float32)
):
    """REP 117 readings as finite values: no return (+inf) reads the maximum range, too close (-inf)
    the minimum."""
    i, z = wp.tid()
    r = raw[i, z]
    if r == wp.inf:
        r = max_range
    elif r == -wp.inf:
        r = min_range
    out[i, z] = r


@wp.kernel
def place_beacons_kernel(
    mask: wp.array(dtype=wp.int32),
    gate_position: wp.array2d(dtype=wp.vec3),
    gate_yaw: wp.array2d(dtype=float),
    beacons_G: wp.array2d(dtype=wp.vec3),
    beacons_W: wp.array2d(dtype=wp.vec3),
):
    """The beacons of the environments being reset: beacon j of gate k is number 4k + j, on the
    gate's front face (``beacons_G``, gate frame) carried by the gate's perturbed pose."""
    i, k, j = wp.tid()
    if mask[i] == 0:
        return
    R = wp.quat_to_matrix(wp.quat_from_axis_angle(wp.vec3(0.0, 0.0, 1.0), gate_yaw[i, k]))
    beacons_W[i, k * beacons_G.shape[1] + j] = gate_position[i, k] + R * beacons_G[k, j]


@wp.kernel
def observe_beacons_kernel(
    static_mesh: wp.uint64,
    actors: ActorData,
    splats: SplatData,
    candidates: wp.array2d(dtype=wp.int32),
    R_WC: wp.array2d(dtype=wp.mat33),
    p_WC: wp.array2d(dtype=wp.vec3),
    intrinsics: wp.vec4,
    lens: int,
    coefficients: lens_coefficients,
    size: wp.vec2i,
    beacons_W: wp.array2d(dtype=wp.vec3),
    out: wp.array3d(dtype=wp.float32),
    visible: wp.array2d(dtype=wp.bool),
):
    """Beacon b of environment i as its camera detects it: (u, v) pixels and range (m) when in front,
    inside the image and seen past the static scene and the environment's own actors (its
    ``candidates``: other environments' gates are not in its world), as ``goggles.sensors.beacons``
    detects it; zeros and not visible otherwise."""
    i, b = wp.tid()
    seen = detect_beacon(
        static_mesh,
        actors,
        splats,
        candidates[i],
        candidates.shape[1],
        -1,
        R_WC[i, 0],
        p_WC[i, 0],
        intrinsics,
        lens,
        coefficients,
        size,
        beacons_W[i, b],
    )
    for k in range(3):
        out[i, b, k] = seen[k]
    visible[i, b] = seen[2] > 0.0
