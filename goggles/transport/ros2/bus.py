"""ROS 2 over DDS (Cyclone DDS), without ROS: the engine's outputs on their ROS 2 topics
(``topics.Ros2Topics``), and poses and commands from ROS 2 nodes as inputs. A bus like ZeroMQ's and
LCM's: ``publish(channel, bytes)`` takes the engine's encoded outputs, ``receive_inputs`` gives
(channel, bytes) inputs, so validation, counting and dropping stay where they are for every bus.

Inputs: ``<ns>/<vehicle>/pose`` (geometry_msgs/PoseStamped: a live vehicle's pose, as
mocap4r2 or vrpn_mocap publish), ``<ns>/<vehicle>/cmd_vel`` (geometry_msgs/Twist: world ENU velocity,
angular.z a yaw rate), ``<ns>/<vehicle>/cmd_rates`` (goggles_msgs/RatesThrust).

QoS as ROS 2: sensor data best effort, keep last 5; /tf reliable, keep last 100; /tf_static
reliable, transient local; /clock best effort, keep last 1; inputs read best effort (which matches
reliable and best-effort publishers). Payloads are XCDR1 CDR written by ``cdr``.
"""

from __future__ import annotations

import logging
import math
import threading

import numpy as np

import goggles_lcm
from goggles.checks import FLOAT32_MAX
from goggles.control_modes import ControlMode
from goggles.errors import ConfigError, require
from goggles.frames import quat_to_matrix
from goggles.runtime.failures import RepeatedFailure
from goggles.transport.ros2 import DISTROS, LOCALHOST_ONLY_CONFIG, Ros2Settings
from goggles.transport.ros2 import types as T
from goggles.transport.ros2.topics import CLOCK, SENSOR, TF, TF_STATIC, Ros2Topics
from goggles.transport.schema import MalformedMessage, decode_any, header

log = logging.getLogger(__name__)

#: The DDS type of each ROS 2 message type goggles writes.
DDS_TYPES = {
    "sensor_msgs/msg/Image": T.Image,
    "sensor_msgs/msg/CameraInfo": T.CameraInfo,
    "sensor_msgs/msg/Imu": T.Imu,
    "nav_msgs/msg/Odometry": T.Odometry,
    "tf2_msgs/msg/TFMessage": T.TFMessage,
    "rosgraph_msgs/msg/Clock": T.Clock,
    "goggles_msgs/msg/Beacons": T.Beacons,
    "dvs_msgs/msg/EventArray": T.EventArray,
    "sensor_msgs/msg/PointCloud2": T.PointCloud2,
    "diagnostic_msgs/msg/DiagnosticArray": T.DiagnosticArray,
    "geometry_msgs/msg/Vector3Stamped": T.Vector3Stamped,
}


class Ros2Bus:
    """Engine-side ROS 2: a DDS participant, a writer per output topic, readers for the inputs.

    Args:
        settings: namespace, domain and ROS 2 distribution.
        cameras, range_sensors, lidars: the run's (``RunConfig``), for topics, frames and sensor mounts.
        vehicles: names whose pose (``<ns>/<name>/pose``) and commands are read.
    """

    def __init__(self, settings: Ros2Settings, cameras=(), range_sensors=(), vehicles=(), lidars=()):
        require("cyclonedds", "ros2", "ROS 2 over DDS")
        from cyclonedds.core import Listener
        from cyclonedds.domain import Domain, DomainParticipant
        from cyclonedds.qos import Policy, Qos
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic
        from cyclonedds.util import duration

        if settings.distro not in DISTROS:
            raise ConfigError(f"[ros2] distro {settings.distro!r}: use one of {', '.join(DISTROS)}")
        if any(c.isspace() for c in settings.namespace):
            raise ConfigError(f"[ros2] namespace {settings.namespace!r} may not contain spaces")
        self.topics = Ros2Topics(settings, cameras, range_sensors, lidars)
        self._publish_failed = RepeatedFailure(log, "ros2: could not publish")
        try:
            # The domain's configuration, held as long as the participant: this machine only by default.
            self._domain = None if settings.expose else Domain(settings.domain_id, LOCALHOST_ONLY_CONFIG)
            self.participant = DomainParticipant(settings.domain_id)
        except Exception as exc:
            raise ConfigError(f"cannot join DDS domain {settings.domain_id}: {exc}") from exc
        xcdr1 = Policy.DataRepresentation(use_cdrv0_representation=True)
        reliable = Policy.Reliability.Reliable(duration(milliseconds=100))
        self._qos = {
            SENSOR: Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(5), xcdr1),
            TF: Qos(reliable, Policy.History.KeepLast(100), xcdr1),
            TF_STATIC: Qos(reliable, Policy.Durability.TransientLocal, Policy.History.KeepLast(1), xcdr1),
            CLOCK: Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(1), xcdr1),
            "input": Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(32), xcdr1),
        }
        range_type = T.RangeJazzy if settings.distro == "jazzy" else T.Range
        self._dds_types = {**DDS_TYPES, "sensor_msgs/msg/Range": range_type}
        self._writers: dict[str, object] = {}
        for message in self.topics.static_transforms():
            self._write(message)
        self._yaw: dict[str, float] = {}
        """Latest yaw of each vehicle (from its published state), for Twist commands."""
        self._yaw_target: dict[str, tuple[float, float]] = {}
        self._sim_time = 0.0
        self.malformed = 0
        """DDS input samples that could not be decoded."""
        self.arrived = threading.Event()
        """Set by DDS's thread when an input sample arrives (``wait``)."""
        listener = Listener(on_data_available=lambda _reader: self.arrived.set())
        inputs = [(name, "pose", T.PoseStamped) for name in vehicles]
        inputs += [(v, "cmd_vel", T.Twist) for v in vehicles] + [(v, "cmd_rates", T.RatesThrust) for v in vehicles]
        self._readers = []
        qos = self._qos["input"]
        for name, leaf, data_type in inputs:
            topic = Topic(self.participant, f"rt{self.topics.namespace}/{name}/{leaf}", data_type, qos=qos)
            reader = DataReader(self.participant, topic, qos=qos, listener=listener)
            self._readers.append((name, leaf, reader))

    # ------------------------------------------------------------------ outputs

    def _write(self, message) -> None:
        writer = self._writers.get(message.topic)
        data_type = self._dds_types[message.type_name]
        if writer is None:
            from cyclonedds.pub import DataWriter
            from cyclonedds.topic import Topic

            qos = self._qos[message.kind]
            topic = Topic(self.participant, "rt" + message.topic, data_type, qos=qos)
            writer = self._writers[message.topic] = DataWriter(self.participant, topic, qos=qos)
        writer.write(T.wire(data_type, message.cdr))

    def publish(self, channel: str, data, frame_buffer: bytearray | None = None) -> None:
        """An engine output (LCM-encoded, bytes-like) on its ROS 2 topic(s); anything else is not for ROS."""
        try:
            message = decode_any(data)
        except MalformedMessage:
            return
        try:
            if isinstance(message, goggles_lcm.vehicle_state_t):
                R = quat_to_matrix(message.orientation)
                self._yaw[message.vehicle] = float(np.arctan2(R[1, 0], R[0, 0]))
            if isinstance(message, (goggles_lcm.vehicle_state_t, goggles_lcm.clock_t)):
                self._sim_time = max(self._sim_time, message.header.utime * 1e-6)
            for ros_message in self.topics.convert(message):
                self._write(ros_message)
        except Exception as exc:  # a ROS peer must never stop the engine
            self._publish_failed.happened(f"{channel}: {exc}")

    # ------------------------------------------------------------------ inputs

    def wait(self, timeout_s: float) -> bool:
        """Block until an input sample arrives or ``timeout_s`` passes; True if one arrived."""
        arrived = self.arrived.wait(timeout_s)
        self.arrived.clear()
        return arrived

    def receive_inputs(self, limit: int = 64) -> list[tuple[str | None, bytes | str]]:
        """Up to ``limit`` inputs as (channel, LCM bytes); an undecodable sample as (None, why)."""
        out: list = []
        self.arrived.clear()
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
            if not (0 <= stamp.sec and 0 <= stamp.nanosec < 1_000_000_000):
                raise ValueError(f"stamp {stamp.sec} s {stamp.nanosec} ns is not a time (0 <= nanosec < 1e9)")
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
        if not abs(yaw_rate) <= FLOAT32_MAX:  # dropped before it enters the integral: it would stay NaN
            raise ValueError(f"Twist angular.z {yaw_rate} is not a finite yaw rate (in float32)")
        now = self._sim_time
        yaw, since = self._yaw_target.get(vehicle, (self._yaw.get(vehicle, 0.0), now))
        # An angle: kept in [-pi, pi], so that no rate, however large, leaves a target later rates cannot
        # move (1e30 rad absorbs any increment), and hours of turning keep their float32 precision.
        yaw = math.remainder(yaw + float(yaw_rate) * (now - since), math.tau)
        self._yaw_target[vehicle] = (yaw, now)
        return yaw

    def close(self) -> None:
        self._readers.clear()
        self._writers.clear()
        self.participant = None
        self._domain = None


def _command(vehicle: str, mode: ControlMode, values) -> bytes:
    message = goggles_lcm.command_t()
    message.header = header(0, 0)
    message.vehicle = vehicle
    message.mode = int(mode)
    message.values = [float(v) for v in values]
    message.num_values = len(message.values)
    return message.encode()
