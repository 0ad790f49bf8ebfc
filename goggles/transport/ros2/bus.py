"""ROS 2 over DDS (Cyclone DDS), without ROS: the engine's outputs as standard ROS 2 topics, and
poses and commands from ROS 2 nodes as inputs. A bus like ZeroMQ's and LCM's: ``publish(channel,
bytes)`` takes the engine's encoded outputs, ``receive_inputs`` gives (channel, bytes) inputs, so
validation, counting and dropping stay where they are for every bus.

Topics (ROS names; on the wire ``rt/<name>``), under a namespace (default ``/goggles``):

    <ns>/<vehicle>/<camera>/<left|right>/image_depth   sensor_msgs/Image 32FC1, metres, REP 118
    <ns>/<vehicle>/<camera>/image_color                sensor_msgs/Image rgb8 (also image_range 32FC1,
                                                       image_segmentation 32SC1)
    <ns>/<vehicle>/<camera>/camera_info                sensor_msgs/CameraInfo (plumb_bob; right: P[3] = -fx B)
    <ns>/<vehicle>/<camera>/beacons                    goggles_msgs/Beacons
    <ns>/<vehicle>/imu                                 sensor_msgs/Imu (body FLU, no orientation)
    <ns>/<vehicle>/odom                                nav_msgs/Odometry (ground truth, map -> base_link)
    <ns>/<vehicle>/<range sensor>                      sensor_msgs/Range (single-zone sensors)
    /tf, /tf_static, /clock                            map -> <vehicle>/base_link -> optical frames; sim time
    inputs: <ns>/<name>/pose (geometry_msgs/PoseStamped), <ns>/<vehicle>/cmd_vel (geometry_msgs/Twist),
            <ns>/<vehicle>/cmd_rates (goggles_msgs/RatesThrust)

QoS as ROS 2: sensor data best effort, keep last 5; /tf reliable, keep last 100; /tf_static reliable,
transient local; /clock best effort, keep last 1. Payloads are XCDR1 CDR written by ``cdr``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

import goggles_lcm
from goggles.control_modes import ControlMode
from goggles.errors import ConfigError, require
from goggles.frames import matrix_to_quat
from goggles.render import stereo_right_offset
from goggles.transport.ros2 import DISTROS, Ros2Settings, cdr
from goggles.transport.ros2 import types as T
from goggles.transport.schema import Encoding, MalformedMessage, decode_any, header

log = logging.getLogger(__name__)

#: The fixed world frame (ENU), as REP 105 names it.
WORLD_FRAME = "map"

_IMAGE_TOPICS = {
    Encoding.DEPTH_F32: ("image_depth", "32FC1", 4),
    Encoding.RANGE_F32: ("image_range", "32FC1", 4),
    Encoding.RGB8: ("image_color", "rgb8", 3),
    Encoding.SEGMENTATION_I32: ("image_segmentation", "32SC1", 4),
}


@dataclass(frozen=True)
class _CameraTopic:
    path: str
    """``<ns>/<vehicle>/<camera>[/left|/right]``."""
    frame_id: str
    tx: float
    """CameraInfo P[3]: -fx * baseline for a stereo right camera, 0 otherwise."""


def base_link(vehicle: str) -> str:
    return f"{vehicle}/base_link"


class Ros2Bus:
    """Engine-side ROS 2: a DDS participant, a writer per output topic, readers for the inputs.

    Args:
        settings: namespace, domain and ROS 2 distribution.
        cameras, range_sensors, vehicles: the run's (``RunConfig``), for topic names, frames and the
            static transforms of the sensor mounts.
        extra_poses: more bodies whose ``<ns>/<name>/pose`` becomes a pose input (tracked objects).
    """

    def __init__(self, settings: Ros2Settings, cameras=(), range_sensors=(), vehicles=(), extra_poses=()):
        require("cyclonedds", "ros2", "ROS 2 over DDS")
        from cyclonedds.domain import DomainParticipant
        from cyclonedds.qos import Policy, Qos
        from cyclonedds.util import duration

        if settings.distro not in DISTROS:
            raise ConfigError(f"[ros2] distro {settings.distro!r}: use one of {', '.join(DISTROS)}")
        namespace = "/" + settings.namespace.strip("/") if settings.namespace.strip("/") else ""
        if any(c.isspace() for c in namespace):
            raise ConfigError(f"[ros2] namespace {settings.namespace!r} may not contain spaces")
        self.settings = settings
        self.namespace = namespace
        try:
            self.participant = DomainParticipant(settings.domain_id)
        except Exception as exc:
            raise ConfigError(f"cannot join DDS domain {settings.domain_id}: {exc}") from exc
        xcdr1 = Policy.DataRepresentation(use_cdrv0_representation=True)
        self._qos = {
            "sensor": Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(5), xcdr1),
            "tf": Qos(Policy.Reliability.Reliable(duration(milliseconds=100)), Policy.History.KeepLast(100), xcdr1),
            "tf_static": Qos(
                Policy.Reliability.Reliable(duration(milliseconds=100)),
                Policy.Durability.TransientLocal,
                Policy.History.KeepLast(1),
                xcdr1,
            ),
            "clock": Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(1), xcdr1),
            "input": Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(32), xcdr1),
        }
        self._writers: dict[str, object] = {}
        self._range_type = T.RangeJazzy if settings.distro == "jazzy" else T.Range
        self._cameras: dict[str, _CameraTopic] = {}
        statics = []
        for c in cameras:
            if c.baseline is None:
                eyes = [(c.name, "", c.T_BC, 0.0)]
            else:
                T_BR = c.T_BC @ stereo_right_offset(c.baseline)
                eyes = [
                    (f"{c.name}_left", "/left", c.T_BC, 0.0),
                    (f"{c.name}_right", "/right", T_BR, -c.model.fx * c.baseline),
                ]
            for channel_name, suffix, T_BC, tx in eyes:
                frame = f"{c.vehicle}/{channel_name}_optical_frame"
                self._cameras[f"{c.vehicle}/{channel_name}"] = _CameraTopic(
                    f"{namespace}/{c.vehicle}/{c.name}{suffix}", frame, tx
                )
                statics.append((base_link(c.vehicle), frame, T_BC))
        self._ranges = {}
        for r in range_sensors:
            frame = f"{r.vehicle}/{r.name}"
            self._ranges[f"{r.vehicle}/{r.name}"] = (frame, float(np.radians(max(r.model.fov_deg))), r.model)
            statics.append((base_link(r.vehicle), frame, r.T_BS))
        self._static = [(0, parent, child, T[:3, 3], matrix_to_quat(T[:3, :3])) for parent, child, T in statics]
        if self._static:
            self._write("/tf_static", T.TFMessage, "tf_static", cdr.tf_message(self._static))
        self._camera_info_sent: dict[str, int] = {}
        self._yaw: dict[str, float] = {}
        """Latest yaw of each vehicle (from its published state), for Twist commands."""
        self._yaw_target: dict[str, tuple[float, float]] = {}
        self._sim_time = 0.0
        self._readers = []
        self.malformed = 0
        """DDS input samples that could not be decoded."""
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        inputs = [(name, "pose", T.PoseStamped) for name in (*vehicles, *extra_poses)]
        inputs += [(v, "cmd_vel", T.Twist) for v in vehicles] + [(v, "cmd_rates", T.RatesThrust) for v in vehicles]
        for name, leaf, data_type in inputs:
            topic = Topic(self.participant, f"rt{namespace}/{name}/{leaf}", data_type, qos=self._qos["input"])
            self._readers.append((name, leaf, DataReader(self.participant, topic, qos=self._qos["input"])))

    # ------------------------------------------------------------------ outputs

    def _write(self, ros_topic: str, data_type: type, qos: str, payload: bytes) -> None:
        writer = self._writers.get(ros_topic)
        if writer is None:
            from cyclonedds.pub import DataWriter
            from cyclonedds.topic import Topic

            topic = Topic(self.participant, "rt" + ros_topic, data_type, qos=self._qos[qos])
            writer = self._writers[ros_topic] = DataWriter(self.participant, topic, qos=self._qos[qos])
        writer.write(T.wire(data_type, payload))

    def publish(self, channel: str, data: bytes) -> None:
        """An engine output (LCM-encoded) as its ROS 2 topic(s); anything else is not for ROS."""
        try:
            message = decode_any(data)
        except MalformedMessage:
            return
        try:
            self._publish(channel, message)
        except Exception as exc:  # a ROS peer must never stop the engine
            log.warning("ros2: could not publish %s: %s", channel, exc)

    def _publish(self, channel: str, m) -> None:
        ns = self.namespace
        if isinstance(m, goggles_lcm.image_t):
            camera = self._cameras.get(m.camera)
            kind = _IMAGE_TOPICS.get(m.encoding)
            if camera is None or kind is None:
                return
            leaf, encoding, size = kind
            utime = m.header.utime
            self._write(
                f"{camera.path}/{leaf}",
                T.Image,
                "sensor",
                cdr.image(utime, camera.frame_id, m.width, m.height, encoding, m.width * size, m.data),
            )
            if self._camera_info_sent.get(m.camera) != utime:  # once per frame, whatever the outputs
                self._camera_info_sent[m.camera] = utime
                info = cdr.camera_info(
                    utime, camera.frame_id, m.width, m.height, m.fx, m.fy, m.cx, m.cy, m.distortion, camera.tx
                )
                self._write(f"{camera.path}/camera_info", T.CameraInfo, "sensor", info)
        elif isinstance(m, goggles_lcm.imu_t):
            payload = cdr.imu(m.header.utime, base_link(m.vehicle), m.angular_velocity, m.linear_acceleration)
            self._write(f"{ns}/{m.vehicle}/imu", T.Imu, "sensor", payload)
        elif isinstance(m, goggles_lcm.vehicle_state_t):
            from scipy.spatial.transform import Rotation

            q = np.asarray(m.orientation)
            R_WB = Rotation.from_quat([q[1], q[2], q[3], q[0]]).as_matrix()
            self._yaw[m.vehicle] = float(np.arctan2(R_WB[1, 0], R_WB[0, 0]))
            self._sim_time = max(self._sim_time, m.header.utime * 1e-6)
            child = base_link(m.vehicle)
            odom = cdr.odometry(
                m.header.utime, WORLD_FRAME, child, m.position, q, R_WB.T @ np.asarray(m.velocity), m.angular_velocity
            )
            self._write(f"{ns}/{m.vehicle}/odom", T.Odometry, "sensor", odom)
            tf = cdr.tf_message([(m.header.utime, WORLD_FRAME, child, m.position, q)])
            self._write("/tf", T.TFMessage, "tf", tf)
        elif isinstance(m, goggles_lcm.pose_t) and m.valid:
            tf = cdr.tf_message([(m.header.utime, WORLD_FRAME, base_link(m.name), m.position, m.orientation)])
            self._write("/tf", T.TFMessage, "tf", tf)
        elif isinstance(m, goggles_lcm.clock_t):
            self._sim_time = max(self._sim_time, m.header.utime * 1e-6)
            self._write("/clock", T.Clock, "clock", cdr.clock(m.header.utime))
        elif isinstance(m, goggles_lcm.ranges_t) and m.sensor in self._ranges and m.num_ranges == 1:
            frame, fov, model = self._ranges[m.sensor]
            variance = model.sigma**2 if self._range_type is T.RangeJazzy else None
            payload = cdr.range_(m.header.utime, frame, fov, m.min_range, m.max_range, m.ranges[0], variance=variance)
            self._write(f"{ns}/{m.sensor}", self._range_type, "sensor", payload)
        elif isinstance(m, goggles_lcm.beacons_t):
            camera = self._cameras.get(m.camera)
            if camera is not None:
                payload = cdr.beacons(m.header.utime, camera.frame_id, m.ids, m.u, m.v, m.range)
                self._write(f"{camera.path}/beacons", T.Beacons, "sensor", payload)

    # ------------------------------------------------------------------ inputs

    def receive_inputs(self, limit: int = 64) -> list[tuple[str | None, bytes | str]]:
        """Up to ``limit`` inputs as (channel, LCM bytes); an undecodable sample as (None, why)."""
        out: list = []
        for name, leaf, reader in self._readers:
            if len(out) >= limit:
                break
            try:
                samples = reader.take(N=limit - len(out))
            except Exception as exc:  # a malformed sample: counted and dropped
                self.malformed += 1
                out.append((None, f"ros2 {leaf} of {name}: {exc}"))
                continue
            for sample in samples:
                try:
                    out.append(self._to_input(name, leaf, sample))
                except (AttributeError, TypeError, ValueError) as exc:
                    out.append((None, f"ros2 {leaf} of {name}: {exc}"))
        return out

    def _to_input(self, name: str, leaf: str, sample) -> tuple[str, bytes]:
        if leaf == "pose":
            stamp, pose = sample.header.stamp, sample.pose
            message = goggles_lcm.pose_t()
            message.header = header(stamp.sec * 1_000_000 + stamp.nanosec // 1000, 0)
            message.name = name
            message.position = [pose.position.x, pose.position.y, pose.position.z]
            q = pose.orientation
            message.orientation = [q.w, q.x, q.y, q.z]
            message.valid = True
            return f"pose/{name}", message.encode()
        if leaf == "cmd_vel":
            values = [sample.linear.x, sample.linear.y, sample.linear.z, self._yaw_setpoint(name, sample.angular.z)]
            return f"{name}/command", _command(name, ControlMode.VELOCITY, values)
        rates = sample.body_rates
        return f"{name}/command", _command(name, ControlMode.RATES, [sample.thrust, rates.x, rates.y, rates.z])

    def _yaw_setpoint(self, vehicle: str, yaw_rate: float) -> float:
        """The velocity mode's yaw target from a Twist's yaw rate: integrated in sim time from the
        vehicle's yaw when the first Twist came."""
        now = self._sim_time
        yaw, since = self._yaw_target.get(vehicle, (self._yaw.get(vehicle, 0.0), now))
        yaw += float(yaw_rate) * (now - since)
        self._yaw_target[vehicle] = (yaw, now)
        return yaw

    def close(self) -> None:
        self._readers.clear()
        self._writers.clear()
        self.participant = None


def _command(vehicle: str, mode: ControlMode, values) -> bytes:
    message = goggles_lcm.command_t()
    message.header = header(0, 0)
    message.vehicle = vehicle
    message.mode = int(mode)
    message.values = [float(v) for v in values]
    message.num_values = len(message.values)
    return message.encode()
