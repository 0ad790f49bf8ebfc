"""Frames, quaternions and rigid transforms: the only place their conventions are defined.

Conventions (REP 103):
    * World frame W: ENU (x east, y north, z up).
    * Body frame B: FLU (x forward, y left, z up).
    * Camera optical frame C: x right, y down, z forward.
    * Quaternions are (w, x, y, z), Hamilton product, active rotation: ``v_W = R(q_WB) @ v_B``.
    * ``T_WB`` is the (4, 4) homogeneous transform taking body coordinates to world coordinates.
"""

from __future__ import annotations

import math

import numpy as np

from goggles.checks import finite_vector
from goggles.errors import ConfigError

#: Rotation taking camera-optical coordinates to body FLU coordinates (R_BC): optical z (forward) is
#: body x, optical x (right) is body -y, optical y (down) is body -z.
R_BODY_OPTICAL = np.array(
    [
        [0.0, 0.0, 1.0],
        [-1.0, 0.0, 0.0],
        [0.0, -1.0, 0.0],
    ]
)


def quat_normalize(q: np.ndarray) -> np.ndarray:
    """Unit quaternion(s) with non-negative w.

    Args:
        q: (..., 4) quaternion(s), (w, x, y, z).

    Returns:
        (..., 4) float64 unit quaternions.

    Raises:
        ConfigError: if a quaternion is not finite or has zero norm.
    """
    q = np.asarray(q, dtype=np.float64)
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    if not np.all(np.isfinite(q)) or np.any(norm < 1e-12):
        raise ConfigError(f"quaternion {q.tolist()} is not a finite, non-zero (w, x, y, z) quaternion")
    q = q / norm
    return np.where(q[..., :1] < 0.0, -q, q)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices of unit quaternions.

    Args:
        q: (..., 4) unit quaternion(s), (w, x, y, z).

    Returns:
        (..., 3, 3) float64 rotation matrices.
    """
    q = np.asarray(q, dtype=np.float64)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=-1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=-1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=-1),
        ],
        axis=-2,
    )


def matrices_to_quats(R: np.ndarray) -> np.ndarray:
    """``matrix_to_quat`` of every rotation of an (n, 3, 3) array at once: (n, 4) (w, x, y, z), w >= 0."""
    R = np.asarray(R, dtype=np.float64).reshape(-1, 3, 3)
    d0, d1, d2 = R[:, 0, 0], R[:, 1, 1], R[:, 2, 2]
    # Shepperd: the largest of 4w^2, 4x^2, 4y^2, 4z^2 gives a well-conditioned square root.
    squares = np.stack([1.0 + d0 + d1 + d2, 1.0 + d0 - d1 - d2, 1.0 - d0 + d1 - d2, 1.0 - d0 - d1 + d2], axis=1)
    largest = squares.argmax(axis=1)
    s = 2.0 * np.sqrt(np.maximum(squares[np.arange(len(R)), largest], 1e-300))
    a21, a12 = R[:, 2, 1] - R[:, 1, 2], R[:, 2, 1] + R[:, 1, 2]
    a02, a20 = R[:, 0, 2] - R[:, 2, 0], R[:, 0, 2] + R[:, 2, 0]
    a10, a01 = R[:, 1, 0] - R[:, 0, 1], R[:, 1, 0] + R[:, 0, 1]
    candidates = np.stack(
        [
            np.stack([0.25 * s, a21 / s, a02 / s, a10 / s], axis=1),
            np.stack([a21 / s, 0.25 * s, a01 / s, a20 / s], axis=1),
            np.stack([a02 / s, a01 / s, 0.25 * s, a12 / s], axis=1),
            np.stack([a10 / s, a20 / s, a12 / s, 0.25 * s], axis=1),
        ],
        axis=1,
    )
    q = candidates[np.arange(len(R)), largest]
    q *= np.where(q[:, :1] < 0.0, -1.0, 1.0)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def matrix_to_quat(R: np.ndarray) -> np.ndarray:
    """Unit quaternion (w, x, y, z), w >= 0, of a rotation matrix (Shepperd's method).

    Args:
        R: (3, 3) rotation matrix.

    Returns:
        (4,) float64 quaternion.
    """
    R = np.asarray(R, dtype=np.float64)
    trace = np.trace(R)
    if trace > 0.0:
        s = 2.0 * np.sqrt(1.0 + trace)
        q = [0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        q = [(R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s]
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        q = [(R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        q = [(R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s]
    return quat_normalize(np.array(q))


def quat_from_axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    """Quaternion (w, x, y, z) rotating by ``angle`` radians about ``axis`` (need not be unit)."""
    axis = np.asarray(axis, dtype=np.float64)
    axis = axis / np.linalg.norm(axis)
    return np.concatenate([[np.cos(angle / 2.0)], np.sin(angle / 2.0) * axis])


def quat_from_euler(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Quaternion (w, x, y, z) of intrinsic z-y'-x'' Euler angles (yaw, then pitch, then roll), radians."""
    R = (
        quat_to_matrix(quat_from_axis_angle([0, 0, 1], yaw))
        @ quat_to_matrix(quat_from_axis_angle([0, 1, 0], pitch))
        @ quat_to_matrix(quat_from_axis_angle([1, 0, 0], roll))
    )
    return matrix_to_quat(R)


def quat_yaw(q) -> float:
    """The heading (rad, about world z: the yaw of ``quat_from_euler``) of an attitude (w, x, y, z)."""
    w, x, y, z = (float(v) for v in q)
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def transform(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Homogeneous (4, 4) transform from a position (3,) and a quaternion (w, x, y, z)."""
    T = np.eye(4)
    T[:3, :3] = quat_to_matrix(quat_normalize(q))
    T[:3, 3] = np.asarray(p, dtype=np.float64)
    return T


def parse_pose(text: str) -> np.ndarray:
    """Parse ``"x,y,z,qw,qx,qy,qz"`` (metres, unit quaternion) into a (4, 4) transform.

    Raises:
        ConfigError: if the text does not hold seven finite numbers or the quaternion is degenerate.
    """
    try:
        values = finite_vector([float(v) for v in text.split(",")], 7)  # finite in float32, what renders
    except ValueError:
        values = None
    if values is None:
        raise ConfigError(f"pose {text!r} must be seven finite numbers 'x,y,z,qw,qx,qy,qz' (metres, unit quaternion)")
    norm = float(np.linalg.norm(values[3:]))
    if norm < 1e-6:
        raise ConfigError(f"pose {text!r}: the quaternion (qw,qx,qy,qz) is zero")
    if abs(norm - 1.0) > 1e-3:
        import logging

        logging.getLogger(__name__).warning("pose %r: quaternion of norm %.4g normalised to a unit one", text, norm)
    return transform(values[:3], values[3:])


def camera_pose_from_body(T_WB: np.ndarray, p_BC: np.ndarray | None = None) -> np.ndarray:
    """World pose of a camera optical frame (T_WC) mounted at ``p_BC`` in a body, looking along body +x."""
    T_BC = np.eye(4)
    T_BC[:3, :3] = R_BODY_OPTICAL
    if p_BC is not None:
        T_BC[:3, 3] = p_BC
    return np.asarray(T_WB, dtype=np.float64) @ T_BC


def look_at(eye: np.ndarray, target: np.ndarray) -> np.ndarray:
    """(4, 4) camera optical-frame pose at ``eye`` looking at ``target``, its image level (x right along
    the horizon; looking straight down, image right is east and image up north)."""
    eye, target = np.asarray(eye, np.float64), np.asarray(target, np.float64)
    forward = target - eye
    forward = forward / max(np.linalg.norm(forward), 1e-9)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right = right / np.linalg.norm(right) if np.linalg.norm(right) > 1e-9 else np.array([1.0, 0.0, 0.0])
    T = np.eye(4)
    T[:3, :3] = np.column_stack([right, np.cross(forward, right), forward])
    T[:3, 3] = eye
    return T


def overview_pose(lower: np.ndarray, upper: np.ndarray, vfov_deg: float = 60.0) -> np.ndarray:
    """Body pose (FLU) outside the box [lower, upper] looking at its centre from the -x side and
    above, far enough that a camera of ``vfov_deg`` sees the whole box: a first look at a bare mesh."""
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    centre = 0.5 * (lower + upper)
    radius = max(0.5 * float(np.linalg.norm(upper - lower)), 1e-3)
    distance = radius / np.sin(np.radians(vfov_deg) / 2.0) * 1.1
    direction = np.array([1.0, 0.0, -0.5]) / np.linalg.norm([1.0, 0.0, -0.5])  # forward and down
    x = direction
    y = np.cross([0.0, 0.0, 1.0], x)
    y /= np.linalg.norm(y)
    T = np.eye(4)
    T[:3, :3] = np.column_stack([x, y, np.cross(x, y)])
    T[:3, 3] = centre - distance * direction
    return T
