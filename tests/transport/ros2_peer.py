"""A plain Cyclone DDS program (no goggles code): the ROS 2 peer of the ROS 2 tests, in its own process.

    python tests/ros2_peer.py listen DOMAIN SECONDS   -> one JSON line per received sample, then "done"
    python tests/ros2_peer.py pose DOMAIN NAME X Y Z   -> publishes a PoseStamped at 50 Hz until stdin closes
    python tests/ros2_peer.py twist DOMAIN NAME VZ [YAW_RATE] -> publishes a Twist at 20 Hz until stdin closes

Its message types are written here from the ROS 2 definitions, independently of goggles'.
"""

import hashlib
import json
import sys
import threading
import time
from dataclasses import dataclass

import cyclonedds.idl.types as t
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic


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
class Quaternion(IdlStruct, typename="geometry_msgs::msg::dds_::Quaternion_"):
    x: t.float64
    y: t.float64
    z: t.float64
    w: t.float64


@dataclass
class Point(IdlStruct, typename="geometry_msgs::msg::dds_::Point_"):
    x: t.float64
    y: t.float64
    z: t.float64


@dataclass
class Pose(IdlStruct, typename="geometry_msgs::msg::dds_::Pose_"):
    position: Point
    orientation: Quaternion


@dataclass
class PoseStamped(IdlStruct, typename="geometry_msgs::msg::dds_::PoseStamped_"):
    header: Header
    pose: Pose


@dataclass
class Twist(IdlStruct, typename="geometry_msgs::msg::dds_::Twist_"):
    linear: Vector3
    angular: Vector3


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
class PoseWithCovariance(IdlStruct, typename="geometry_msgs::msg::dds_::PoseWithCovariance_"):
    pose: Pose
    covariance: t.array[t.float64, 36]


@dataclass
class TwistWithCovariance(IdlStruct, typename="geometry_msgs::msg::dds_::TwistWithCovariance_"):
    twist: Twist
    covariance: t.array[t.float64, 36]


@dataclass
class Odometry(IdlStruct, typename="nav_msgs::msg::dds_::Odometry_"):
    header: Header
    child_frame_id: str
    pose: PoseWithCovariance
    twist: TwistWithCovariance


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
class Clock(IdlStruct, typename="rosgraph_msgs::msg::dds_::Clock_"):
    clock: Time


TOPICS = {
    "/goggles/quad0/stereo/left/image_depth": Image,
    "/goggles/quad0/stereo/left/camera_info": CameraInfo,
    "/goggles/quad0/stereo/right/camera_info": CameraInfo,
    "/goggles/quad0/imu": Imu,
    "/goggles/quad0/odom": Odometry,
    "/tf": TFMessage,
    "/tf_static": TFMessage,
    "/clock": Clock,
}


def summary(topic: str, sample, publication) -> dict:
    out = {"topic": topic, "type": type(sample).__name__}
    if publication is not None:
        qos = publication.qos
        out["reliability"] = type(qos[Policy.Reliability]).__name__
        out["durability"] = type(qos[Policy.Durability]).__name__ if Policy.Durability in qos else "Volatile"
        out["type_name"] = publication.type_name
    if isinstance(sample, Image):
        stamp = sample.header.stamp
        out.update(
            utime=stamp.sec * 1_000_000 + stamp.nanosec // 1000,
            encoding=sample.encoding,
            size=[sample.width, sample.height],
            sha=hashlib.sha256(bytes(sample.data)).hexdigest(),
            frame=sample.header.frame_id,
        )
    elif isinstance(sample, CameraInfo):
        out.update(p=list(sample.p), d=list(sample.d), model=sample.distortion_model, frame=sample.header.frame_id)
    elif isinstance(sample, TFMessage):
        out["frames"] = [[tr.header.frame_id, tr.child_frame_id] for tr in sample.transforms]
    elif isinstance(sample, Imu):
        out["accel_z"] = sample.linear_acceleration.z
    elif isinstance(sample, Odometry):
        out["z"] = sample.pose.pose.position.z
    return out


def listen(domain: int, seconds: float) -> None:
    participant = DomainParticipant(domain)
    best_effort = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(50))
    static = Qos(Policy.Reliability.Reliable(0), Policy.Durability.TransientLocal, Policy.History.KeepLast(1))
    readers = []
    for name, data_type in TOPICS.items():
        qos = static if name == "/tf_static" else best_effort
        readers.append((name, DataReader(participant, Topic(participant, "rt" + name, data_type), qos=qos)))
    print("ready", flush=True)
    deadline = time.time() + seconds
    while time.time() < deadline:
        for name, reader in readers:
            for sample in reader.take(N=50):
                publication = None
                matched = reader.get_matched_publications()
                if matched:
                    publication = reader.get_matched_publication_data(matched[0])
                print(json.dumps(summary(name, sample, publication)), flush=True)
        time.sleep(0.005)
    print("done", flush=True)


def publish(domain: int, name: str, kind: str, values: list[float]) -> None:
    participant = DomainParticipant(domain)
    if kind == "pose":
        topic = Topic(participant, f"rt/goggles/{name}/pose", PoseStamped)
        period = 0.02
    else:
        topic = Topic(participant, f"rt/goggles/{name}/cmd_vel", Twist)
        period = 0.05
    writer = DataWriter(participant, topic, qos=Qos(Policy.Reliability.Reliable(0), Policy.History.KeepLast(10)))
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    while not stop.is_set():
        now = time.time_ns()
        stamp = Time(now // 1_000_000_000, now % 1_000_000_000)
        if kind == "pose":
            x, y, z = values
            writer.write(PoseStamped(Header(stamp, "map"), Pose(Point(x, y, z), Quaternion(0.0, 0.0, 0.0, 1.0))))
        else:
            yaw_rate = values[1] if len(values) > 1 else 0.0
            writer.write(Twist(Vector3(0.0, 0.0, values[0]), Vector3(0.0, 0.0, yaw_rate)))
        time.sleep(period)


if __name__ == "__main__":
    mode, domain = sys.argv[1], int(sys.argv[2])
    if mode == "listen":
        listen(domain, float(sys.argv[3]))
    else:
        publish(domain, sys.argv[3], mode, [float(v) for v in sys.argv[4:]])
