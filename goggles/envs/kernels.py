"""Warp kernels of the learning environments: actions to commands, episode starts, observations,
rewards and camera poses, all on the simulator's device (one launch each for every environment)."""

import warp as wp

from goggles.dynamics.kernels import VehicleState
from goggles.dynamics.model import vec8

wp.set_module_options({"enable_backward": False})


@wp.kernel
def commands_kernel(
    actions: wp.array2d(dtype=wp.float32),
    scale: vec8,
    offset: vec8,
    hover_thrust: wp.array(dtype=float),
    thrust_column: int,
    mask: wp.array(dtype=wp.int32),
    state: VehicleState,
):
    """command = offset + scale * action per column; the collective-thrust column (or -1) is also
    multiplied by the vehicle's own hover thrust (a randomised mass hovers at action 0). Vehicles
    being reset (``mask``) keep their command."""
    i = wp.tid()
    if mask[i] != 0:
        return
    command = vec8()
    for j in range(actions.shape[1]):
        value = offset[j] + scale[j] * actions[i, j]
        if j == thrust_column:
            value = value * hover_thrust[i]
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
    status: wp.array3d(dtype=wp.int8), depth: wp.array3d(dtype=float), out: wp.array3d(dtype=wp.float32)
):
    """Depth in metres where the camera measured one, 0 elsewhere (no hit, too close): finite values
    a network can take."""
    i, y, x = wp.tid()
    out[i, y, x] = wp.where(int(status[i, y, x]) == 0, depth[i, y, x], 0.0)


@wp.kernel
def mask_from_done_kernel(
    terminated: wp.array(dtype=wp.bool), truncated: wp.array(dtype=wp.bool), mask: wp.array(dtype=wp.int32)
):
    """The environments that ended this step: reset at the next (next-step autoreset) or at once
    (same-step)."""
    i = wp.tid()
    mask[i] = wp.where(terminated[i] or truncated[i], 1, 0)
