"""A ROS 2 recording read back as goggles' own messages: what a replay needs to fly the recording
again (a vehicle's odometry becomes its state; a ``geometry_msgs/PoseStamped`` on ``…/<name>/pose``,
goggles' own input topic and what mocap drivers publish, a pose of ``<name>``; a transform from
``map`` to ``<name>/base_link`` a pose of ``<name>``, for bodies with neither)."""

from __future__ import annotations

import numpy as np

import goggles_lcm
from goggles.frames import quat_to_matrix
from goggles.transport.ros2 import types as T
from goggles.transport.ros2.topics import WORLD_FRAME
from goggles.transport.schema import header

BASE_LINK = "/base_link"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"


def _utime(stamp) -> int:
    return stamp.sec * 1_000_000 + stamp.nanosec // 1000


def body_with_own_poses(topic: str, type_name: str) -> str | None:
    """``quad0`` of ``/goggles/quad0/odom`` or of a PoseStamped ``/vrpn_mocap/quad0/pose``: a body whose
    poses come from that topic (its transforms on ``/tf`` are then skipped); else None."""
    if topic.endswith("/odom") or (topic.endswith("/pose") and type_name == POSE_STAMPED):
        return topic.rsplit("/", 2)[-2] or None
    return None


def goggles_messages(topic: str, type_name: str, cdr: bytes, with_own_poses: set) -> list[tuple[str, bytes]]:
    """(channel, LCM bytes) of one recorded ROS 2 message of type ``type_name``; ``with_own_poses``:
    bodies whose poses come from their odometry or pose topic (their transforms are skipped)."""
    if topic.endswith("/odom"):
        odom = T.Odometry.deserialize(cdr)
        if not odom.child_frame_id.endswith(BASE_LINK):
            return []
        vehicle = odom.child_frame_id[: -len(BASE_LINK)]
        pose, twist = odom.pose.pose, odom.twist.twist
        q = [pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z]
        message = goggles_lcm.vehicle_state_t()
        message.header = header(_utime(odom.header.stamp), 0)
        message.vehicle = vehicle
        message.position = [pose.position.x, pose.position.y, pose.position.z]
        message.velocity = list(quat_to_matrix(np.array(q)) @ [twist.linear.x, twist.linear.y, twist.linear.z])
        message.orientation = q
        message.angular_velocity = [twist.angular.x, twist.angular.y, twist.angular.z]
        message.num_rotors = 0
        message.rotor_speeds = []
        message.crashed = False
        return [(f"{vehicle}/state", message.encode())]
    name = body_with_own_poses(topic, type_name)
    if name is not None:  # a PoseStamped, read as the live bus reads one
        sample = T.PoseStamped.deserialize(cdr)
        pose = sample.pose
        return [(f"pose/{name}", _pose(name, _utime(sample.header.stamp), pose.position, pose.orientation))]
    if topic == "/tf":
        out = []
        for transform in T.TFMessage.deserialize(cdr).transforms:
            child = transform.child_frame_id
            if transform.header.frame_id != WORLD_FRAME or not child.endswith(BASE_LINK):
                continue
            name = child[: -len(BASE_LINK)]
            if name in with_own_poses:
                continue
            stamp, moved = _utime(transform.header.stamp), transform.transform
            out.append((f"pose/{name}", _pose(name, stamp, moved.translation, moved.rotation)))
        return out
    return []


def _pose(name: str, utime: int, position, orientation) -> bytes:
    message = goggles_lcm.pose_t()
    message.header = header(utime, 0)
    message.name = name
    message.position = [position.x, position.y, position.z]
    message.orientation = [orientation.w, orientation.x, orientation.y, orientation.z]
    message.valid = True
    return message.encode()
