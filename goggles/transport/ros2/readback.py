"""A ROS 2 recording read back as goggles' own messages: what a replay needs to fly the recording
again (a vehicle's odometry becomes its state; a transform from ``map`` to ``<name>/base_link``
becomes a pose of ``<name>``, for bodies without odometry, as live ones)."""

from __future__ import annotations

import numpy as np

import goggles_lcm
from goggles.frames import quat_to_matrix
from goggles.transport.ros2 import types as T
from goggles.transport.ros2.topics import WORLD_FRAME
from goggles.transport.schema import header

BASE_LINK = "/base_link"


def _utime(stamp) -> int:
    return stamp.sec * 1_000_000 + stamp.nanosec // 1000


def goggles_messages(topic: str, cdr: bytes, with_odometry: set[str]) -> list[tuple[str, bytes]]:
    """(channel, LCM bytes) of one recorded ROS 2 message; ``with_odometry``: bodies whose poses come
    from their odometry (their transforms are skipped)."""
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
    if topic == "/tf":
        out = []
        for transform in T.TFMessage.deserialize(cdr).transforms:
            child = transform.child_frame_id
            if transform.header.frame_id != WORLD_FRAME or not child.endswith(BASE_LINK):
                continue
            name = child[: -len(BASE_LINK)]
            if name in with_odometry:
                continue
            t, r = transform.transform.translation, transform.transform.rotation
            message = goggles_lcm.pose_t()
            message.header = header(_utime(transform.header.stamp), 0)
            message.name = name
            message.position = [t.x, t.y, t.z]
            message.orientation = [r.w, r.x, r.y, r.z]
            message.valid = True
            out.append((f"pose/{name}", message.encode()))
        return out
    return []
