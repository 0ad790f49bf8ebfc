"""ROS 2 message definitions in the ``ros2msg`` format (a type's .msg text, then each dependency's
after a ``MSG:`` line): the schemas of a ROS 2 MCAP recording. Standard types come from rosbags'
copy of the ROS 2 definitions; the others from ``msg/<package>/`` (goggles_msgs, and dvs_msgs for
event cameras)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from goggles.errors import require

MSG = Path(__file__).resolve().parent / "msg"


@cache
def typestore(distro: str):
    """rosbags' ROS 2 type store of ``distro`` with the packages of ``msg/`` added."""
    require("rosbags", "ros2", "ROS 2 recordings")
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY if distro == "jazzy" else Stores.ROS2_HUMBLE)
    for path in sorted(MSG.glob("*/*.msg")):  # Event before EventArray: a type before its users
        store.register(get_types_from_msg(path.read_text(encoding="utf-8"), f"{path.parent.name}/msg/{path.stem}"))
    return store


@cache
def message_definition(type_name: str, distro: str = "humble") -> str:
    """The ros2msg text of ``type_name`` (e.g. ``sensor_msgs/msg/Image``)."""
    text, _ = typestore(distro).generate_msgdef(type_name, ros_version=2)
    return text
