"""The ROS 2 message types goggles speaks, as Cyclone DDS topic types (``pkg::msg::dds_::Type_``).

Outputs are written as CDR by ``goggles.transport.ros2.cdr`` and handed to the writer as they are
(``wire``); these definitions give DDS the type names and layouts (for matching and type discovery)
and decode the inputs, which are small.
"""

import struct
from dataclasses import dataclass

import cyclonedds.idl.types as t
from cyclonedds.idl import IdlStruct


@dataclass
class Time(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    sec: t.int32
    nanosec: t.uint32


@dataclass
class Header(IdlStruct, typename="std_msgs::msg::dds_::Header_"):
    stamp: Time
    frame_id: str


@dataclass
class Vector3(IdlStruct, typename="geometry_msgs::msg::dds_::Vector3_"):
    x: t.float64
    y: t.float64
    z: t.float64


@dataclass
class Vector3Stamped(IdlStruct, typename="geometry_msgs::msg::dds_::Vector3Stamped_"):
    header: Header
    vector: Vector3


@dataclass
class Point(IdlStruct, typename="geometry_msgs::msg::dds_::Point_"):
    x: t.float64
    y: t.float64
    z: t.float64


@dataclass
class Quaternion(IdlStruct, typename="geometry_msgs::msg::dds_::Quaternion_"):
    x: t.float64
    y: t.float64
    z: t.float64
    w: t.float64


@dataclass
class Pose(IdlStruct, typename="geometry_msgs::msg::dds_::Pose_"):
    position: Point
    orientation: Quaternion


@dataclass
class PoseStamped(IdlStruct, typename="geometry_msgs::msg::dds_::PoseStamped_"):
    header: Header
    pose: Pose


@dataclass
class PoseWithCovariance(IdlStruct, typename="geometry_msgs::msg::dds_::PoseWithCovariance_"):
    pose: Pose
    covariance: t.array[t.float64, 36]


@dataclass
class Twist(IdlStruct, typename="geometry_msgs::msg::dds_::Twist_"):
    linear: Vector3
    angular: Vector3


@dataclass
class TwistWithCovariance(IdlStruct, typename="geometry_msgs::msg::dds_::TwistWithCovariance_"):
    twist: Twist
    covariance: t.array[t.float64, 36]


@dataclass
class Transform(IdlStruct, typename="geometry_msgs::msg::dds_::Transform_"):
    translation: Vector3
    rotation: Quaternion


@dataclass
class TransformStamped(IdlStruct, typename="geometry_msgs::msg::dds_::TransformStamped_"):
    header: Header
    child_frame_id: str
    transform: Transform


@dataclass
class TFMessage(IdlStruct, typename="tf2_msgs::msg::dds_::TFMessage_"):
    transforms: t.sequence[TransformStamped]


@dataclass
class Image(IdlStruct, typename="sensor_msgs::msg::dds_::Image_"):
    header: Header
    height: t.uint32
    width: t.uint32
    encoding: str
    is_bigendian: t.uint8
    step: t.uint32
    data: t.sequence[t.uint8]


@dataclass
class RegionOfInterest(IdlStruct, typename="sensor_msgs::msg::dds_::RegionOfInterest_"):
    x_offset: t.uint32
    y_offset: t.uint32
    height: t.uint32
    width: t.uint32
    do_rectify: bool


@dataclass
class CameraInfo(IdlStruct, typename="sensor_msgs::msg::dds_::CameraInfo_"):
    header: Header
    height: t.uint32
    width: t.uint32
    distortion_model: str
    d: t.sequence[t.float64]
    k: t.array[t.float64, 9]
    r: t.array[t.float64, 9]
    p: t.array[t.float64, 12]
    binning_x: t.uint32
    binning_y: t.uint32
    roi: RegionOfInterest


@dataclass
class Imu(IdlStruct, typename="sensor_msgs::msg::dds_::Imu_"):
    header: Header
    orientation: Quaternion
    orientation_covariance: t.array[t.float64, 9]
    angular_velocity: Vector3
    angular_velocity_covariance: t.array[t.float64, 9]
    linear_acceleration: Vector3
    linear_acceleration_covariance: t.array[t.float64, 9]


@dataclass
class Odometry(IdlStruct, typename="nav_msgs::msg::dds_::Odometry_"):
    header: Header
    child_frame_id: str
    pose: PoseWithCovariance
    twist: TwistWithCovariance


@dataclass
class Range(IdlStruct, typename="sensor_msgs::msg::dds_::Range_"):
    """Humble's layout."""

    header: Header
    radiation_type: t.uint8
    field_of_view: t.float32
    min_range: t.float32
    max_range: t.float32
    range: t.float32


@dataclass
class RangeJazzy(IdlStruct, typename="sensor_msgs::msg::dds_::Range_"):
    """Jazzy added the variance."""

    header: Header
    radiation_type: t.uint8
    field_of_view: t.float32
    min_range: t.float32
    max_range: t.float32
    range: t.float32
    variance: t.float32


@dataclass
class PointField(IdlStruct, typename="sensor_msgs::msg::dds_::PointField_"):
    name: str
    offset: t.uint32
    datatype: t.uint8
    count: t.uint32


@dataclass
class PointCloud2(IdlStruct, typename="sensor_msgs::msg::dds_::PointCloud2_"):
    header: Header
    height: t.uint32
    width: t.uint32
    fields: t.sequence[PointField]
    is_bigendian: bool
    point_step: t.uint32
    row_step: t.uint32
    data: t.sequence[t.uint8]
    is_dense: bool


@dataclass
class Clock(IdlStruct, typename="rosgraph_msgs::msg::dds_::Clock_"):
    clock: Time


@dataclass
class Beacons(IdlStruct, typename="goggles_msgs::msg::dds_::Beacons_"):
    header: Header
    ids: t.sequence[str]
    u: t.sequence[t.float64]
    v: t.sequence[t.float64]
    range: t.sequence[t.float64]


@dataclass
class Event(IdlStruct, typename="dvs_msgs::msg::dds_::Event_"):
    x: t.uint16
    y: t.uint16
    ts: Time
    polarity: bool


@dataclass
class EventArray(IdlStruct, typename="dvs_msgs::msg::dds_::EventArray_"):
    header: Header
    height: t.uint32
    width: t.uint32
    events: t.sequence[Event]


@dataclass
class KeyValue(IdlStruct, typename="diagnostic_msgs::msg::dds_::KeyValue_"):
    key: str
    value: str


@dataclass
class DiagnosticStatus(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticStatus_"):
    level: t.uint8
    name: str
    message: str
    hardware_id: str
    values: t.sequence[KeyValue]


@dataclass
class DiagnosticArray(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticArray_"):
    header: Header
    status: t.sequence[DiagnosticStatus]


@dataclass
class RatesThrust(IdlStruct, typename="goggles_msgs::msg::dds_::RatesThrust_"):
    header: Header
    thrust: t.float64
    body_rates: Vector3


class ImageStamp(Image):
    """sensor_msgs/Image on the wire, decoded to its header alone (``header.stamp``, ``header.frame_id``):
    for Python readers that only need to know when a frame arrived (``goggles bench latency``), since
    decoding 300 KB of pixels as a sequence takes milliseconds in Python."""

    def __init__(self, header: Header):  # noqa: D107
        self.header = header

    @classmethod
    def deserialize(cls, data: bytes, has_header: bool = True, use_version_2=None) -> "ImageStamp":
        sec, nanosec, length = struct.unpack_from("<iII", data, 4)
        return cls(Header(Time(sec, nanosec), data[16 : 16 + length - 1].decode()))


def wire(data_type: type, payload: bytes):
    """A sample of ``data_type`` that a DataWriter sends as ``payload`` (CDR already written): the
    writer only asks a sample to serialise itself."""
    return _wire_types.setdefault(data_type, _wire_type(data_type))(payload)


def _wire_type(data_type: type) -> type:
    class Wire(data_type):
        def __init__(self, payload: bytes):  # noqa: D107 (no dataclass fields: just the bytes)
            self._payload = payload

        def serialize(self, buffer=None, endianness=None, use_version_2=None) -> bytes:
            return self._payload

    Wire.__name__ = f"Wire{data_type.__name__}"
    return Wire


_wire_types: dict[type, type] = {}
