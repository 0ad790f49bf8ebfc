"""ROS 2 messages as CDR bytes (XCDR1, little-endian), written directly from goggles' values.

This is the ROS 2 wire format (and a ROS 2 MCAP's payloads): a 4-byte encapsulation header
(``00 01 00 00``, CDR little-endian), then the fields in their message-definition order, each
aligned to its own size counted from the end of that header (8 for float64 in XCDR1); strings as a
uint32 length including the NUL, the bytes and the NUL; sequences as a uint32 count and the elements;
fixed arrays as the elements alone. Written here with ``struct`` (an image is one length and one
copy of its pixels); checked byte for byte against rosbags' serialiser in the tests.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

#: CDR little-endian, XCDR1 (what ROS 2's DDS RMWs and rosbag2 write).
ENCAPSULATION = b"\x00\x01\x00\x00"


class CdrWriter:
    """Appends aligned CDR fields; ``bytes()`` gives the message with its encapsulation header."""

    def __init__(self):
        self._parts: list[bytes] = [ENCAPSULATION]
        self._size = 0  # bytes after the encapsulation header (alignment counts from there)

    def _put(self, data: bytes) -> None:
        self._parts.append(data)
        self._size += len(data)

    def _align(self, n: int) -> None:
        pad = -self._size % n
        if pad:
            self._put(b"\0" * pad)

    def scalar(self, fmt: str, value) -> None:
        size = struct.calcsize(fmt)
        self._align(size)
        self._put(struct.pack("<" + fmt, value))

    def array(self, fmt: str, values: Sequence) -> None:
        """A fixed-size array: the elements, no count."""
        if len(values):
            self._align(struct.calcsize(fmt))
            self._put(struct.pack(f"<{len(values)}{fmt}", *values))

    def sequence(self, fmt: str, values: Sequence) -> None:
        """A sequence: uint32 count, then the elements."""
        self.scalar("I", len(values))
        self.array(fmt, values)

    def octets(self, data: bytes | memoryview) -> None:
        """A sequence<uint8> (image pixels): count and bytes, copied once."""
        self.scalar("I", len(data))
        self._put(bytes(data))

    def string(self, text: str) -> None:
        raw = text.encode()
        self.scalar("I", len(raw) + 1)
        self._put(raw + b"\0")

    def __bytes__(self) -> bytes:
        return b"".join(self._parts)


def stamp(w: CdrWriter, utime: int) -> None:
    """builtin_interfaces/Time from microseconds."""
    sec, micro = divmod(int(utime), 1_000_000)
    w.scalar("i", sec)
    w.scalar("I", micro * 1000)


def header(w: CdrWriter, utime: int, frame_id: str) -> None:
    stamp(w, utime)
    w.string(frame_id)


def image(utime: int, frame_id: str, width: int, height: int, encoding: str, step: int, data) -> bytes:
    """sensor_msgs/Image."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.scalar("I", height)
    w.scalar("I", width)
    w.string(encoding)
    w.scalar("B", 0)  # little-endian pixels
    w.scalar("I", step)
    w.octets(data)
    return bytes(w)


def camera_info(
    utime: int, frame_id: str, width: int, height: int, fx, fy, cx, cy, distortion, tx: float, model: str = "plumb_bob"
) -> bytes:
    """sensor_msgs/CameraInfo of distortion ``model`` (its coefficients ``distortion``); ``tx`` = -fx *
    baseline for a rectified stereo pair's right camera, else 0."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.scalar("I", height)
    w.scalar("I", width)
    w.string(model)
    w.sequence("d", list(distortion))
    w.array("d", [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0])
    w.array("d", [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    w.array("d", [fx, 0.0, cx, tx, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0])
    w.scalar("I", 0)  # binning
    w.scalar("I", 0)
    for _ in range(4):  # region of interest: the whole image
        w.scalar("I", 0)
    w.scalar("?", False)
    return bytes(w)


def imu(utime: int, frame_id: str, angular_velocity, linear_acceleration) -> bytes:
    """sensor_msgs/Imu without an orientation estimate (orientation_covariance[0] = -1, REP 145)."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.array("d", [0.0, 0.0, 0.0, 1.0])
    w.array("d", [-1.0] + [0.0] * 8)
    w.array("d", list(angular_velocity))
    w.array("d", [0.0] * 9)
    w.array("d", list(linear_acceleration))
    w.array("d", [0.0] * 9)
    return bytes(w)


def odometry(utime: int, frame_id: str, child_frame_id: str, position, orientation_wxyz, linear_B, angular_B) -> bytes:
    """nav_msgs/Odometry: pose in ``frame_id``, twist in ``child_frame_id`` (the body)."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.string(child_frame_id)
    w.array("d", list(position))
    w.array("d", _xyzw(orientation_wxyz))
    w.array("d", [0.0] * 36)
    w.array("d", list(linear_B))
    w.array("d", list(angular_B))
    w.array("d", [0.0] * 36)
    return bytes(w)


def range_(utime: int, frame_id: str, field_of_view: float, min_range: float, max_range: float, value: float,
           *, variance: float | None = None) -> bytes:  # fmt: skip
    """sensor_msgs/Range (infrared); ``variance`` is the field Jazzy added (None: Humble's layout)."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.scalar("B", 1)  # INFRARED: a time-of-flight sensor
    w.scalar("f", field_of_view)
    w.scalar("f", min_range)
    w.scalar("f", max_range)
    w.scalar("f", value)
    if variance is not None:
        w.scalar("f", variance)
    return bytes(w)


def tf_message(transforms: Sequence[tuple[int, str, str, Sequence[float], Sequence[float]]]) -> bytes:
    """tf2_msgs/TFMessage of (utime, parent, child, translation, rotation (w, x, y, z))."""
    w = CdrWriter()
    w.scalar("I", len(transforms))
    for utime, parent, child, translation, rotation_wxyz in transforms:
        header(w, utime, parent)
        w.string(child)
        w.array("d", list(translation))
        w.array("d", _xyzw(rotation_wxyz))
    return bytes(w)


#: sensor_msgs/PointField data types.
FLOAT32, UINT16 = 7, 4
#: The point layout of a LiDAR cloud: Velodyne's driver convention (ring, time in s from the scan's
#: start), which LiDAR odometry (LIO-SAM, FAST-LIO) and Autoware read; 2 bytes of padding.
POINT_FIELDS = (("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 12, FLOAT32),
                ("time", 16, FLOAT32), ("ring", 20, UINT16))  # fmt: skip
POINT_STEP = 24
POINT_DTYPE = np.dtype(
    {
        "names": [name for name, _, _ in POINT_FIELDS],
        "formats": ["<f4"] * 5 + ["<u2"],
        "offsets": [offset for _, offset, _ in POINT_FIELDS],
        "itemsize": POINT_STEP,
    }
)


def point_cloud(utime: int, frame_id: str, x, y, z, intensity, time, ring) -> bytes:
    """sensor_msgs/PointCloud2 of valid points (is_dense), one row."""
    points = np.zeros(len(x), POINT_DTYPE)
    for name, values in zip(("x", "y", "z", "intensity", "time", "ring"), (x, y, z, intensity, time, ring)):
        points[name] = values
    return _cloud(utime, frame_id, (1, len(points)), POINT_FIELDS, POINT_STEP, points.tobytes(), dense=True)


#: The point layout of a multizone range sensor's cloud: x, y, z (float32).
XYZ_FIELDS = (("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32))


def zone_cloud(utime: int, frame_id: str, xyz: np.ndarray) -> bytes:
    """sensor_msgs/PointCloud2 of a multizone range sensor: organised (rows x cols, one point per zone, as
    the zones lie), NaN where a zone measured nothing (so not dense). ``xyz``: (rows, cols, 3) metres."""
    data = np.ascontiguousarray(xyz, "<f4").tobytes()
    return _cloud(utime, frame_id, xyz.shape[:2], XYZ_FIELDS, 12, data, dense=False)


def _cloud(utime: int, frame_id: str, size: tuple[int, int], fields, step: int, data: bytes, *, dense: bool) -> bytes:
    """sensor_msgs/PointCloud2 of ``size`` (height, width) points of ``fields``, ``step`` bytes each."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.scalar("I", size[0])
    w.scalar("I", size[1])
    w.scalar("I", len(fields))
    for name, offset, datatype in fields:
        w.string(name)
        w.scalar("I", offset)
        w.scalar("B", datatype)
        w.scalar("I", 1)
    w.scalar("?", False)  # little-endian
    w.scalar("I", step)
    w.scalar("I", step * size[1])
    w.octets(data)
    w.scalar("?", dense)
    return bytes(w)


def vector3_stamped(utime: int, frame_id: str, vector) -> bytes:
    """geometry_msgs/Vector3Stamped."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.array("d", [float(v) for v in vector])
    return bytes(w)


def clock(utime: int) -> bytes:
    """rosgraph_msgs/Clock."""
    w = CdrWriter()
    stamp(w, utime)
    return bytes(w)


def beacons(utime: int, frame_id: str, ids: Sequence[str], u, v, ranges) -> bytes:
    """goggles_msgs/Beacons (``msg/Beacons.msg``)."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.scalar("I", len(ids))
    for beacon_id in ids:
        w.string(beacon_id)
    w.sequence("d", list(u))
    w.sequence("d", list(v))
    w.sequence("d", list(ranges))
    return bytes(w)


def diagnostic_array(utime: int, statuses: Sequence[tuple[int, str, str, str, Sequence[tuple[str, str]]]]) -> bytes:
    """diagnostic_msgs/DiagnosticArray: for each status its level (0 OK, 1 WARN, 2 ERROR, 3 STALE),
    name, message, hardware id and key/value pairs."""
    w = CdrWriter()
    header(w, utime, "")
    w.scalar("I", len(statuses))
    for level, name, message, hardware_id, values in statuses:
        w.scalar("B", level)
        w.string(name)
        w.string(message)
        w.string(hardware_id)
        w.scalar("I", len(values))
        for key, value in values:
            w.string(key)
            w.string(value)
    return bytes(w)


def event_array(utime: int, frame_id: str, width: int, height: int, events) -> bytes:
    """dvs_msgs/EventArray (``msg/dvs_msgs``) of ``events`` (``goggles.sensors.events.EVENTS``: x, y,
    t in ns, polarity), built as one array: each dvs_msgs/Event is uint16 x, uint16 y, int32 sec,
    uint32 nanosec, bool polarity, and CDR aligns its sec to 4 bytes, so every event after the first
    takes 16 bytes (x y, 2 bytes of padding, sec nanosec polarity, 1 byte of padding) and the first 14."""
    w = CdrWriter()
    header(w, utime, frame_id)
    w.scalar("I", height)
    w.scalar("I", width)
    n = len(events["t"])
    w.scalar("I", n)  # the sequence's count: its first event starts 4-aligned
    if n:
        sec, nanosec = np.divmod(np.asarray(events["t"], np.int64), 1_000_000_000)
        on = np.asarray(events["polarity"]) > 0
        block = np.zeros(16 * n, np.uint8)
        first = np.dtype(
            {
                "names": ["x", "y", "sec", "nanosec", "on"],
                "formats": ["<u2", "<u2", "<i4", "<u4", "u1"],
                "offsets": [0, 2, 4, 8, 12],
                "itemsize": 14,
            }
        )
        head = block[:14].view(first)
        head["x"], head["y"], head["sec"], head["nanosec"], head["on"] = (
            events["x"][0],
            events["y"][0],
            sec[0],
            nanosec[0],
            on[0],
        )
        if n > 1:
            rest = np.dtype(
                {
                    "names": ["x", "y", "sec", "nanosec", "on"],
                    "formats": ["<u2", "<u2", "<i4", "<u4", "u1"],
                    "offsets": [0, 2, 6, 10, 14],
                    "itemsize": 16,
                }
            )
            tail = block[14 : 14 + 16 * (n - 1)].view(rest)
            tail["x"], tail["y"], tail["sec"], tail["nanosec"], tail["on"] = (
                events["x"][1:],
                events["y"][1:],
                sec[1:],
                nanosec[1:],
                on[1:],
            )
        w._put(block[: 16 * n - 3].tobytes())  # the last event's trailing padding is not written
    return bytes(w)


def _xyzw(wxyz) -> list[float]:
    """ROS quaternions are (x, y, z, w); goggles' are (w, x, y, z)."""
    q = np.asarray(wxyz, dtype=np.float64)
    return [q[1], q[2], q[3], q[0]]
