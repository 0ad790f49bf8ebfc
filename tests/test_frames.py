"""Frame conventions: quaternions (w, x, y, z), body FLU to optical, pose parsing."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from goggles.errors import ConfigError
from goggles.frames import (
    R_BODY_OPTICAL,
    camera_pose_from_body,
    matrix_to_quat,
    parse_pose,
    quat_from_axis_angle,
    quat_from_euler,
    quat_normalize,
    quat_to_matrix,
    quat_yaw,
)

unit = st.floats(-1.0, 1.0, allow_nan=False)


@given(st.tuples(unit, unit, unit, unit).filter(lambda q: np.linalg.norm(q) > 0.1))
def test_quaternion_matrix_round_trip(q):
    q = quat_normalize(q)
    R = quat_to_matrix(q)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(R) == pytest.approx(1.0)
    back = matrix_to_quat(R)
    assert np.allclose(back, q, atol=1e-9) or np.allclose(back, -q, atol=1e-9)  # q and -q: one rotation


def test_yaw_turns_x_towards_y():
    R = quat_to_matrix(quat_from_axis_angle([0, 0, 1], np.pi / 2))
    np.testing.assert_allclose(R @ [1, 0, 0], [0, 1, 0], atol=1e-12)


def test_identity_body_camera_looks_along_world_x():
    T_WC = camera_pose_from_body(np.eye(4))
    np.testing.assert_allclose(T_WC[:3, :3] @ [0, 0, 1], [1, 0, 0])  # optical z forward = world +x
    np.testing.assert_allclose(T_WC[:3, :3] @ [1, 0, 0], [0, -1, 0])  # optical x right = world -y
    np.testing.assert_allclose(T_WC[:3, :3] @ [0, 1, 0], [0, 0, -1])  # optical y down = world -z
    assert np.linalg.det(R_BODY_OPTICAL) == pytest.approx(1.0)


def test_parse_pose():
    T = parse_pose("1,2,3,0,0,0,2")  # quaternion normalised; z turned 180 deg
    np.testing.assert_allclose(T[:3, 3], [1, 2, 3])
    np.testing.assert_allclose(T[:3, :3] @ [1, 0, 0], [-1, 0, 0], atol=1e-12)
    for bad in ["1,2,3", "1,2,3,nan,0,0,1", "a,b,c,d,e,f,g", "0,0,0,0,0,0,0"]:
        with pytest.raises(ConfigError):
            parse_pose(bad)


def test_many_matrices_to_quaternions_at_once_against_scipy():
    from scipy.spatial.transform import Rotation

    from goggles.frames import matrices_to_quats

    R = Rotation.random(5000, random_state=7)
    expected = R.as_quat()[:, [3, 0, 1, 2]]  # scipy's (x, y, z, w) as goggles' (w, x, y, z)
    expected *= np.where(expected[:, :1] < 0, -1.0, 1.0)
    np.testing.assert_allclose(matrices_to_quats(R.as_matrix()), expected, atol=1e-12)
    turned = Rotation.from_rotvec([[np.pi, 0, 0], [0, np.pi, 0], [0, 0, np.pi]]).as_matrix()  # w = 0: no trace branch
    np.testing.assert_allclose(np.abs(matrices_to_quats(turned)), np.eye(4)[1:], atol=1e-12)


def test_quat_yaw_is_the_yaw_quat_from_euler_was_given():
    """The heading the firmware pilot and an abandoned vehicle's hold read back from an attitude."""
    for roll, pitch, yaw in ((0.0, 0.0, 0.0), (0.1, -0.2, -3.0), (-0.4, 0.3, 1.2), (0.2, 0.1, 3.1)):
        assert quat_yaw(quat_from_euler(roll, pitch, yaw)) == pytest.approx(yaw, abs=1e-9)
