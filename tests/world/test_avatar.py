"""Skinned avatars: linear blend skinning on the device, refit, and rendering of the moving body."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.frames import camera_pose_from_body, quat_from_axis_angle, transform
from goggles.render import CameraModel, Renderer
from goggles.scene.avatar import HUMAN_CLASS, SkeletonPose, SkinnedAvatar, avatar_shape, build_avatar_mesh
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

BONES = ("hips", "chest", "head", "shoulder", "upper_arm", "forearm")
PARENTS = (-1, 0, 1, 1, 3, 4)


def skeleton(arm_angle: float) -> SkeletonPose:
    """A person facing -x (towards a camera at the origin) at x = 4, raising the right arm (-y side)."""
    return SkeletonPose.from_arrays(BONES, PARENTS, *joints(arm_angle))


def joints(arm_angle: float) -> tuple[np.ndarray, np.ndarray]:
    """``skeleton``'s bone positions and orientations (w, x, y, z), as a mocap message carries them."""
    positions = np.array(
        [[4.0, 0, 1.0], [4.0, 0, 1.4], [4.0, 0, 1.7], [4.0, -0.2, 1.5], [4.0, -0.3, 1.5], [4.0, -0.3, 1.2]]
    )
    orientations = np.tile([1.0, 0, 0, 0], (6, 1))
    # Raise the upper arm about the x axis through the shoulder joint; the forearm follows.
    q = quat_from_axis_angle([1.0, 0.0, 0.0], -arm_angle)
    R = transform([0, 0, 0], q)[:3, :3]
    shoulder = positions[4]
    for j in (4, 5):
        positions[j] = shoulder + R @ (positions[j] - shoulder)
        orientations[j] = q
    return positions, orientations


@pytest.fixture
def scene_with_avatar(device):
    bind = skeleton(0.0)
    mesh = build_avatar_mesh(bind)
    wall = quad([[10, 10, -10], [10, -10, -10], [10, -10, 10], [10, 10, 10]])
    scene = DeviceScene(scene_of((wall, 1)), device, max_actors=2)
    index = scene.add_shape(avatar_shape("alice", mesh))
    avatar = SkinnedAvatar(mesh, bind, scene.shape_mesh(index))
    return scene, index, avatar, mesh


def test_skinning_moves_each_part_with_its_bone(scene_with_avatar):
    scene, index, avatar, mesh = scene_with_avatar
    raised = skeleton(np.pi / 2)
    avatar.pose(raised)
    points = scene.shape_mesh(index).points.numpy()
    M = raised.T_WJ @ np.linalg.inv(skeleton(0.0).T_WJ)
    rigid = mesh.bone_weight[:, 0] > 0.999
    for j in range(len(BONES)):
        on_bone = rigid & (mesh.bone_index[:, 0] == j)
        if on_bone.any():
            expected = mesh.vertices[on_bone] @ M[j, :3, :3].T + M[j, :3, 3]
            np.testing.assert_allclose(points[on_bone], expected, atol=1e-5)
    blended = ~rigid  # near a joint: between the two bones' motions
    a, b = mesh.bone_index[blended, 0], mesh.bone_index[blended, 1]
    w = mesh.bone_weight[blended]
    rest = np.c_[mesh.vertices[blended], np.ones(blended.sum())]
    expected = (
        w[:, :1] * np.einsum("vij,vj->vi", M[a], rest)[:, :3] + w[:, 1:] * np.einsum("vij,vj->vi", M[b], rest)[:, :3]
    )
    np.testing.assert_allclose(points[blended], expected, atol=1e-5)


def test_the_bounds_from_the_bones_contain_the_skinned_mesh(scene_with_avatar):
    """The bounds come from the bones' motions (no vertex read back): they must hold every vertex."""
    scene, index, avatar, _ = scene_with_avatar
    for angle in (0.0, np.pi / 3, np.pi * 0.8):
        bounds = avatar.pose(skeleton(angle))
        points = scene.shape_mesh(index).points.numpy()
        assert np.all(points >= bounds[0] - 1e-5) and np.all(points <= bounds[1] + 1e-5)
        tight = np.ptp(points, axis=0)
        assert np.all(bounds[1] - bounds[0] < tight + 0.5)  # conservative, but not loose


def test_the_raised_arm_changes_the_depth_image(scene_with_avatar):
    scene, index, avatar, _ = scene_with_avatar
    camera = CameraModel.from_fov(64, 64, 50.0)
    renderer = Renderer(scene, [camera])
    T_WC = camera_pose_from_body(transform([0.0, 0.0, 1.3], [1, 0, 0, 0]))[None]

    def look(angle):
        bounds = avatar.pose(skeleton(angle))
        scene.set_shape_bounds(index, bounds)
        scene.set_actors([index], [np.eye(4)])
        renderer.render(T_WC)
        return renderer.images()

    down, up = look(0.0), look(np.pi * 0.8)
    human_down = down.segmentation[0] == HUMAN_CLASS
    human_up = up.segmentation[0] == HUMAN_CLASS
    assert human_down.sum() > 50 and human_up.sum() > 50
    moved = human_down != human_up
    assert moved.sum() > 10  # the arm's pixels changed
    changed = np.abs(np.nan_to_num(down.depth[0], posinf=99) - np.nan_to_num(up.depth[0], posinf=99)) > 1.0
    assert changed.sum() > 10  # where the arm was the wall shows now, and the other way round
    assert np.all(np.abs(down.depth[0][human_down] - 3.9) < 0.3)  # the body is about 4 m away
    renderer.close()


def test_a_late_copy_of_a_skeleton_never_puts_the_arm_back(device):
    """A mocap bridge sends each skeleton on ZeroMQ and LCM, and a live engine reads both. The other
    bus's copy of the frame before, arriving after the newest, was kept as the newest: for a frame the
    person was drawn one mocap frame back. Through the input path, as bytes off the wire."""
    import goggles_lcm
    from goggles.engine.inputs import InputHandler
    from goggles.world.crowd import Crowd

    wall = quad([[10, 10, -10], [10, -10, -10], [10, -10, 10], [10, 10, 10]])
    scene = DeviceScene(scene_of((wall, 1)), device, max_actors=2)
    crowd = Crowd(scene, np.zeros((0, 4, 4)), build_interval=0.0)
    inputs = InputHandler([], {}, crowd)
    renderer = Renderer(scene, [CameraModel.from_fov(64, 64, 50.0)])
    T_WC = camera_pose_from_body(transform([0.0, 0.0, 1.3], [1, 0, 0, 0]))[None]

    def receive(arm_angle: float, utime: int) -> None:
        positions, orientations = joints(arm_angle)
        message = goggles_lcm.skeleton_t()
        message.header.utime = utime
        message.name, message.num_bones = "alice", len(BONES)
        message.bone_names, message.parents = list(BONES), list(PARENTS)
        message.positions, message.orientations = positions.tolist(), orientations.tolist()
        inputs.apply("skeleton/alice", message.encode())

    def person(now: float) -> np.ndarray:
        crowd.update(now)
        renderer.render(T_WC)
        return renderer.images().segmentation[0] == HUMAN_CLASS

    receive(0.0, 10_000_000)
    down = person(0.0)
    receive(np.pi * 0.8, 10_010_000)
    up = person(0.01)
    assert (down != up).sum() > 10  # the arm went up
    receive(np.pi * 0.8, 10_020_000)
    receive(np.pi * 0.8, 10_010_000)  # the other bus's copy of the frame before, late
    receive(0.0, 10_000_000)  # and an older one still
    assert np.array_equal(person(0.02), up)
    receive(0.0, 2_000_000)  # 8 s back: the bridge restarted, and is taken
    assert np.array_equal(person(0.03), down)
    renderer.close()


def test_a_skeleton_no_avatar_can_be_built_for_is_told_once_and_tried_again_when_its_bones_change(
    device, monkeypatch, caplog
):
    """The crowd's build failing raised out of the engine's loop and ended the run."""
    import goggles.world.crowd as crowd_module
    from goggles.errors import ConfigError
    from goggles.world.crowd import Crowd

    wall = quad([[10, 10, -10], [10, -10, -10], [10, -10, 10], [10, 10, 10]])
    crowd = Crowd(DeviceScene(scene_of((wall, 1)), device, max_actors=2), np.zeros((0, 4, 4)), build_interval=0.0)
    builds = []

    def failing(pose):
        builds.append(pose.bones)
        raise ConfigError("no room on the device")

    with monkeypatch.context() as patched:
        patched.setattr(crowd_module, "build_avatar_mesh", failing)
        for k in range(5):  # a mocap stream of it
            crowd.offer("alice", skeleton(0.0), 1_000 + k)
            crowd.update(0.01 * k)
    assert builds == [BONES] and crowd.avatars == {}
    assert caplog.text.count("skeleton alice is not shown: no room on the device") == 1
    crowd.offer("alice", skeleton(0.0), 2_000)
    crowd.update(0.1)
    assert crowd.avatars == {}  # the same bones: not tried again
    renamed = SkeletonPose(tuple(f"{b}_2" for b in BONES), PARENTS, skeleton(0.0).T_WJ)
    crowd.offer("alice", renamed, 3_000)
    crowd.update(0.2)
    assert "alice" in crowd.avatars  # a new skeleton under that name: built
