"""The message schema: LCM types (``goggles_lcm``, generated from ``transport/lcm/*.lcm``), channel
names, decoding by fingerprint, and validation of inputs.

Channels (the same names on LCM and ZeroMQ):
    outputs  ``clock``, ``<vehicle>/state``, ``<vehicle>/imu``, ``<vehicle>/<camera>/depth``,
             ``<vehicle>/<camera>/rgb``, ``<vehicle>/<camera>/range``, ``<vehicle>/<camera>/segmentation``,
             ``<vehicle>/<camera>/events`` (events_t), ``<vehicle>/collision``
    inputs   ``<vehicle>/command`` (command_t), ``pose/<body>`` (pose_t), ``skeleton/<name>`` (skeleton_t),
             ``scene/edit`` (scene_edit_t); lockstep requests (step_t) on the ZeroMQ control socket
"""

from __future__ import annotations

import math
import time
from enum import IntEnum
from io import BytesIO

import numpy as np

import goggles_lcm
from goggles.checks import FLOAT32_MAX

#: Every goggles message type, by its 8-byte LCM fingerprint.
TYPES = {
    t._get_packed_fingerprint(): t
    for t in (
        goggles_lcm.beacons_t,
        goggles_lcm.clock_t,
        goggles_lcm.collision_t,
        goggles_lcm.command_t,
        goggles_lcm.edit_result_t,
        goggles_lcm.events_t,
        goggles_lcm.fc_status_t,
        goggles_lcm.header_t,
        goggles_lcm.image_t,
        goggles_lcm.imu_t,
        goggles_lcm.lidar_t,
        goggles_lcm.pose_t,
        goggles_lcm.ranges_t,
        goggles_lcm.scene_edit_t,
        goggles_lcm.skeleton_t,
        goggles_lcm.step_t,
        goggles_lcm.vehicle_state_t,
        goggles_lcm.vehicle_status_t,
        goggles_lcm.wind_t,
    )
}

#: Inputs larger than this are dropped unread (poses and commands are a few hundred bytes); the
#: ZeroMQ input sockets enforce it as ZMQ_MAXMSGSIZE, before the frame is received.
MAX_INPUT_BYTES = 1 << 20
#: Longest channel name accepted on an input, bytes (LCM's own limit is 63).
MAX_CHANNEL_BYTES = 256
#: Most bones of a skeleton input (human mocap skeletons have 20-80), and longest bone name.
MAX_BONES = 256
MAX_BONE_NAME = 64
#: The largest encoded skeleton those limits allow (name, parent, position, orientation per bone):
#: a larger one is refused before it is decoded, which would take long.
MAX_SKELETON_BYTES = 1024 + MAX_BONES * (4 + MAX_BONE_NAME + 1 + 4 + 3 * 8 + 4 * 8)
#: Longest actor or prop name in a scene edit.
MAX_EDIT_NAME = 64
#: Most physics steps one lockstep request may ask for (at 960 Hz, about three hours of sim time).
MAX_STEPS = 10_000_000
#: The latest time stamp an input may carry, µs: the last instant a ROS 2 stamp (int32 seconds) holds,
#: 2038-01-19 in wall time. Every output made from an input carries its stamp (a live image its pose's),
#: and one beyond this fails to publish on ROS 2 and to be written to a ROS 2 recording, frame after frame.
MAX_UTIME = (2**31 - 1) * 1_000_000 + 999_999
#: ``scene_edit_t.action`` of each edit.
EDIT_ACTIONS = {"spawn": 0, "move": 1, "remove": 2}


class Encoding(IntEnum):
    """``image_t.encoding``: what the bytes of an image are."""

    DEPTH_F32 = 0
    RANGE_F32 = 1
    RGB8 = 2
    SEGMENTATION_I32 = 3


#: One event of an ``events_t`` packet's ``data``: ``numpy.frombuffer(packet.data, EVENT_DTYPE)``.
EVENT_DTYPE = np.dtype(
    {
        "names": ["x", "y", "t", "polarity"],
        "formats": ["<u2", "<u2", "<i4", "i1"],
        "offsets": [0, 2, 4, 8],
        "itemsize": 12,
    }
)


class MalformedMessage(ValueError):
    """An input that cannot be decoded or fails validation; the engine counts and drops it."""


def header(utime: int, seq: int) -> goggles_lcm.header_t:
    h = goggles_lcm.header_t()
    h.utime = int(utime)
    h.wall_utime = time.time_ns() // 1000
    h.seq = int(seq)
    return h


def decode_any(data):
    """Decode any goggles message (bytes-like: bytes, a memoryview of a received frame) by its fingerprint.

    Raises:
        MalformedMessage: unknown fingerprint or truncated/garbled bytes.
    """
    view = memoryview(data).cast("B")
    message_type = TYPES.get(view[:8].tobytes())
    if message_type is None:
        raise MalformedMessage(f"unknown message type (fingerprint {view[:8].tobytes().hex()})")
    try:
        return message_type.decode(BytesIO(view.tobytes()) if len(view) < LARGE_MESSAGE else _FieldReader(view))
    except Exception as exc:  # lcm-gen decoders raise struct.error, ValueError, UnicodeDecodeError...
        raise MalformedMessage(f"cannot decode {message_type.__name__}: {exc}") from exc


#: Bytes from which a message is decoded field by field from its buffer instead of from a copy.
LARGE_MESSAGE = 1 << 16


class _FieldReader:
    """What lcm-gen decoders read from, over a buffer: each read copies only that field, so an image's
    pixels are copied once, into its ``data`` (a copy of the whole message first, then the field,
    cost a 640x480 depth image two copies more). BytesIO is faster for small messages."""

    __slots__ = ("_at", "_view")

    def __init__(self, view: memoryview):
        self._view, self._at = view, 0

    def read(self, size: int = -1) -> bytes:
        start = self._at
        self._at = len(self._view) if size < 0 else min(start + size, len(self._view))
        return self._view[start : self._at].tobytes()


def decode_input(data: bytes, expected: type):
    """Decode an input of a known type and validate it (finite numbers, unit-able quaternions).

    Raises:
        MalformedMessage: the reason it was dropped.
    """
    if len(data) > MAX_INPUT_BYTES:
        raise MalformedMessage(f"{len(data)} bytes is over the {MAX_INPUT_BYTES}-byte input limit")
    if expected is goggles_lcm.skeleton_t and len(data) > MAX_SKELETON_BYTES:
        raise MalformedMessage(
            f"a skeleton of {len(data)} bytes: over {MAX_BONES} bones of names up to {MAX_BONE_NAME}"
        )
    message = decode_any(data)
    if not isinstance(message, expected):
        raise MalformedMessage(f"expected {expected.__name__}, got {type(message).__name__}")
    _validate(message)
    return message


def _finite(values, what: str) -> None:
    """Finite in float32, the precision every input is used in (1e39 is a finite double, not a float)."""
    if not all(math.isfinite(v) and abs(v) <= FLOAT32_MAX for v in values):
        raise MalformedMessage(f"{what} has non-finite values (in float32, the precision inputs are used in)")


def _quaternion(values, what: str) -> None:
    _finite(values, what)
    if math.sqrt(sum(v * v for v in values)) < 1e-6:
        raise MalformedMessage(f"{what} is a zero quaternion")


def _validate(message) -> None:
    stamp = getattr(getattr(message, "header", None), "utime", 0)
    if not 0 <= stamp <= MAX_UTIME:
        raise MalformedMessage(f"time stamp {stamp} µs is not within 0 to {MAX_UTIME} (2038, ROS 2's last second)")
    if isinstance(message, (goggles_lcm.pose_t, goggles_lcm.vehicle_state_t)):  # a state: a replayed pose
        _finite(message.position, "pose position")
        _quaternion(message.orientation, "pose orientation")
    elif isinstance(message, goggles_lcm.command_t):
        _finite(message.values, "command values")
        if not 0 <= message.mode <= 6:
            raise MalformedMessage(f"command mode {message.mode} is not 0..6")
    elif isinstance(message, goggles_lcm.skeleton_t):
        if message.num_bones > MAX_BONES:
            raise MalformedMessage(f"skeleton of {message.num_bones} bones; at most {MAX_BONES}")
        if any(len(name) > MAX_BONE_NAME for name in message.bone_names):
            raise MalformedMessage(f"skeleton bone names must be at most {MAX_BONE_NAME} characters")
        for i in range(message.num_bones):
            _finite(message.positions[i], f"bone {i} position")
            _quaternion(message.orientations[i], f"bone {i} orientation")
    elif isinstance(message, goggles_lcm.scene_edit_t):
        if message.action not in EDIT_ACTIONS.values():
            raise MalformedMessage(f"scene edit action {message.action} is not 0 (spawn), 1 (move) or 2 (remove)")
        if not 0 < len(message.actor) <= MAX_EDIT_NAME or len(message.asset) > MAX_EDIT_NAME:
            raise MalformedMessage(f"scene edit actor and asset names must be 1 to {MAX_EDIT_NAME} characters")
        _finite(message.position, "scene edit position")
        _quaternion(message.orientation, "scene edit orientation")
    elif isinstance(message, goggles_lcm.step_t) and not 0 < message.steps <= MAX_STEPS:
        raise MalformedMessage(f"step request for {message.steps} steps; ask for 1 to {MAX_STEPS:,}")
