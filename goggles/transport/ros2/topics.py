"""Which ROS 2 topics, types and frames the engine's outputs become: one conversion, used by the live
DDS bus (``bus.Ros2Bus``) and by ROS 2 recordings (``goggles.logs.record``).

Topics (ROS names; on DDS ``rt/<name>``), under a namespace (default ``/goggles``):

    <ns>/<vehicle>/<camera>[/left|/right]/image_depth  sensor_msgs/Image 32FC1, metres, REP 118
    .../image_color, image_range, image_segmentation   rgb8, 32FC1 metres, 32SC1 class ids
    .../camera_info                                    sensor_msgs/CameraInfo (plumb_bob, equidistant, ...: the
                                                       lens, ``render.calibration.ROS_DISTORTION_MODELS``;
                                                       a rectified pair's right: P[3] = -fx B)
    .../beacons                                        goggles_msgs/Beacons
    .../events                                         dvs_msgs/EventArray (an event camera's packet, stamped
                                                       at its window's end; each event its own time)
    <ns>/<vehicle>/imu                                 sensor_msgs/Imu (body FLU axes, no orientation)
    <ns>/<vehicle>/odom                                nav_msgs/Odometry (ground truth, map -> base_link)
    <ns>/<vehicle>/wind                                geometry_msgs/Vector3Stamped (the air where it is, map frame)
    <ns>/<vehicle>/status                              diagnostic_msgs/DiagnosticArray (what goggles says of it:
                                                       ERROR crashed, WARN holding or other trouble, OK)
    <ns>/<vehicle>/fc                                  diagnostic_msgs/DiagnosticArray (its firmware's status: OK
                                                       armed, WARN not armed, ERROR in failsafe or stopped)
    <ns>/<vehicle>/<range sensor>                      sensor_msgs/Range (single-zone sensors)
    <ns>/<vehicle>/<range sensor>/points               sensor_msgs/PointCloud2 (multizone: rows x cols, NaN: none)
    <ns>/<vehicle>/<lidar>/points                      sensor_msgs/PointCloud2 (x y z intensity time ring)
    /tf, /tf_static, /clock                            map -> <vehicle>/base_link -> sensor frames; sim time

Frames (REP 103/105): ``map`` (world ENU), ``<vehicle>/base_link`` (FLU), ``<vehicle>/<camera>_optical_frame``
(z forward, x right, y down), ``<vehicle>/<range sensor>`` (x along the beam, as sensor_msgs/Range has it;
goggles' own sensor frame has the beam along z). Images are stamped with the instant they show (live: the
pose's time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import goggles_lcm
from goggles.frames import R_BODY_OPTICAL, matrix_to_quat, quat_to_matrix
from goggles.render.calibration import ROS_DISTORTION_MODELS
from goggles.render.lenses import LENSES
from goggles.transport.ros2 import Ros2Settings, cdr
from goggles.transport.schema import EVENT_DTYPE, Encoding

#: The fixed world frame (ENU), as REP 105 names it.
WORLD_FRAME = "map"

#: A range sensor's ROS frame in goggles' sensor frame: sensor_msgs/Range has the beam along x ("0 angle
#: corresponds to the x-axis of the sensor"), goggles along z. ROS x = sensor z, y = -sensor x, z = -sensor
#: y: the optical-to-FLU turn a camera has.
RANGE_FRAME_IN_SENSOR = np.eye(4)
RANGE_FRAME_IN_SENSOR[:3, :3] = R_BODY_OPTICAL.T

#: What each kind of topic is, for DDS QoS and for recordings.
SENSOR, TF, TF_STATIC, CLOCK = "sensor", "tf", "tf_static", "clock"

_IMAGE_TOPICS = {
    Encoding.DEPTH_F32: ("image_depth", "32FC1", 4),
    Encoding.RANGE_F32: ("image_range", "32FC1", 4),
    Encoding.RGB8: ("image_color", "rgb8", 3),
    Encoding.SEGMENTATION_I32: ("image_segmentation", "32SC1", 4),
}


def fc_diagnostic(m) -> tuple[int, str, str, str, list[tuple[str, str]]]:
    """A firmware's status (``fc_status_t``) as one diagnostic_msgs/DiagnosticStatus."""
    flags = " ".join(m.flags)
    if m.stopped:
        level, said = 2, "FC STOPPED"
    elif m.failsafe:
        level, said = 2, "FAILSAFE" + (" (receiver silent)" if m.receiver_silent else "")
    elif m.armed:
        level, said = 0, "armed"
    else:
        level, said = 1, f"disarmed ({flags or 'arming'})"
    values = [
        ("armed", str(m.armed).lower()),
        ("failsafe", str(m.failsafe).lower()),
        ("stopped", str(m.stopped).lower()),
        ("receiver_silent", str(m.receiver_silent).lower()),
        ("arming_disable_flags", flags),
    ]
    return level, f"{m.vehicle}/fc", said, "betaflight", values


def vehicle_diagnostic(m) -> tuple[int, str, str, str, list[tuple[str, str]]]:
    """What goggles says of a vehicle (``vehicle_status_t``) as one diagnostic_msgs/DiagnosticStatus:
    ERROR crashed, WARN holding or any other trouble, else OK."""
    level = 2 if m.crashed else 1 if m.holding or m.problem else 0
    values = [
        ("holding", str(m.holding).lower()),
        ("command_at", "" if m.command_at < 0 else f"{m.command_at:.3f}"),
        ("crashed", str(m.crashed).lower()),
    ]
    return level, f"{m.vehicle}/status", m.problem or "OK", "goggles", values


@dataclass(frozen=True)
class RosMessage:
    topic: str
    """ROS name, e.g. ``/goggles/quad0/imu``."""
    type_name: str
    """e.g. ``sensor_msgs/msg/Imu``."""
    kind: str
    """SENSOR, TF, TF_STATIC or CLOCK (its QoS)."""
    cdr: bytes


@dataclass(frozen=True)
class _Camera:
    path: str
    frame_id: str
    tx: float
    """CameraInfo P[3]: -fx * baseline for a stereo right camera, 0 otherwise."""


def base_link(vehicle: str) -> str:
    return f"{vehicle}/base_link"


def namespace_of(settings: Ros2Settings) -> str:
    """``/goggles`` from ``goggles``, ``/goggles/``, ``/goggles``; ``""`` for the root."""
    inner = settings.namespace.strip("/")
    return "/" + inner if inner else ""


class Ros2Topics:
    """The engine's outputs (LCM-encoded) as ROS 2 messages.

    Args:
        settings: namespace and ROS 2 distribution (Range's layout).
        cameras, range_sensors, lidars: the run's (``RunConfig``): topic names, frames, sensor mounts.
    """

    def __init__(self, settings: Ros2Settings, cameras=(), range_sensors=(), lidars=()):
        self.settings = settings
        self.namespace = ns = namespace_of(settings)
        self._cameras: dict[str, _Camera] = {}
        mounts = []
        for c in cameras:
            if c.baseline is None:
                eyes = [(c.eyes[0], "", c.T_BC, 0.0)]
            else:
                # A calibrated pair's raw images have no rectified P: their extrinsics are in /tf_static.
                tx = -c.model.fx * c.baseline if c.rectified else 0.0
                eyes = [(c.eyes[0], "/left", c.T_BC, 0.0), (c.eyes[1], "/right", c.T_BR, tx)]
            for channel_name, suffix, T_BC, tx in eyes:
                frame = f"{c.vehicle}/{channel_name}_optical_frame"
                self._cameras[f"{c.vehicle}/{channel_name}"] = _Camera(f"{ns}/{c.vehicle}/{c.name}{suffix}", frame, tx)
                mounts.append((base_link(c.vehicle), frame, T_BC))
        self._ranges = {}
        for r in range_sensors:
            frame = f"{r.vehicle}/{r.name}"
            beams = r.model.directions() @ RANGE_FRAME_IN_SENSOR[:3, :3]  # (rows, cols, 3) in the ROS frame
            self._ranges[f"{r.vehicle}/{r.name}"] = (frame, float(np.radians(max(r.model.fov_deg))), r.model, beams)
            mounts.append((base_link(r.vehicle), frame, r.T_BS @ RANGE_FRAME_IN_SENSOR))
        for lidar in lidars:
            mounts.append((base_link(lidar.vehicle), f"{lidar.vehicle}/{lidar.name}", lidar.T_BS))
        self._mounts = [(0, parent, child, T[:3, 3], matrix_to_quat(T[:3, :3])) for parent, child, T in mounts]
        self._info_sent: dict[str, int] = {}

    def static_transforms(self) -> list[RosMessage]:
        """``/tf_static``: each sensor's mount on its vehicle."""
        if not self._mounts:
            return []
        return [RosMessage("/tf_static", "tf2_msgs/msg/TFMessage", TF_STATIC, cdr.tf_message(self._mounts))]

    def convert(self, m) -> list[RosMessage]:
        """A decoded engine output as ROS 2 messages (none for what ROS has no topic for)."""
        ns = self.namespace
        if isinstance(m, goggles_lcm.image_t):
            camera = self._cameras.get(m.camera)
            kind = _IMAGE_TOPICS.get(m.encoding)
            if camera is None or kind is None:
                return []
            leaf, encoding, size = kind
            utime = m.pose_utime or m.header.utime  # the instant the image shows (live: the pose's time)
            pixels = cdr.image(utime, camera.frame_id, m.width, m.height, encoding, m.width * size, m.data)
            out = [RosMessage(f"{camera.path}/{leaf}", "sensor_msgs/msg/Image", SENSOR, pixels)]
            if self._info_sent.get(m.camera) != utime:  # once per frame, whatever the outputs
                self._info_sent[m.camera] = utime
                lens = m.lens if m.lens in LENSES else "pinhole"
                coefficients = m.distortion[: len(LENSES[lens])]
                model = ROS_DISTORTION_MODELS[lens]
                info = cdr.camera_info(
                    utime, camera.frame_id, m.width, m.height, m.fx, m.fy, m.cx, m.cy, coefficients, camera.tx, model
                )
                out.append(RosMessage(f"{camera.path}/camera_info", "sensor_msgs/msg/CameraInfo", SENSOR, info))
            return out
        if isinstance(m, goggles_lcm.events_t):
            camera = self._cameras.get(m.camera)
            if camera is None:
                return []
            records = np.frombuffer(m.data, EVENT_DTYPE)
            events = {"x": records["x"], "y": records["y"], "polarity": records["polarity"]}
            events["t"] = records["t"].astype(np.int64) + m.header.utime * 1000
            payload = cdr.event_array(m.end_utime, camera.frame_id, m.width, m.height, events)
            return [RosMessage(f"{camera.path}/events", "dvs_msgs/msg/EventArray", SENSOR, payload)]
        if isinstance(m, goggles_lcm.imu_t):
            payload = cdr.imu(m.header.utime, base_link(m.vehicle), m.angular_velocity, m.linear_acceleration)
            return [RosMessage(f"{ns}/{m.vehicle}/imu", "sensor_msgs/msg/Imu", SENSOR, payload)]
        if isinstance(m, goggles_lcm.vehicle_state_t):
            q = np.asarray(m.orientation)
            R_WB = quat_to_matrix(q)
            child = base_link(m.vehicle)
            odom = cdr.odometry(
                m.header.utime, WORLD_FRAME, child, m.position, q, R_WB.T @ np.asarray(m.velocity), m.angular_velocity
            )
            tf = cdr.tf_message([(m.header.utime, WORLD_FRAME, child, m.position, q)])
            return [
                RosMessage(f"{ns}/{m.vehicle}/odom", "nav_msgs/msg/Odometry", SENSOR, odom),
                RosMessage("/tf", "tf2_msgs/msg/TFMessage", TF, tf),
            ]
        if isinstance(m, goggles_lcm.fc_status_t):
            payload = cdr.diagnostic_array(m.header.utime, [fc_diagnostic(m)])
            return [RosMessage(f"{ns}/{m.vehicle}/fc", "diagnostic_msgs/msg/DiagnosticArray", SENSOR, payload)]
        if isinstance(m, goggles_lcm.wind_t):
            payload = cdr.vector3_stamped(m.header.utime, WORLD_FRAME, m.velocity)
            return [RosMessage(f"{ns}/{m.vehicle}/wind", "geometry_msgs/msg/Vector3Stamped", SENSOR, payload)]
        if isinstance(m, goggles_lcm.vehicle_status_t):
            payload = cdr.diagnostic_array(m.header.utime, [vehicle_diagnostic(m)])
            return [RosMessage(f"{ns}/{m.vehicle}/status", "diagnostic_msgs/msg/DiagnosticArray", SENSOR, payload)]
        if isinstance(m, goggles_lcm.pose_t) and m.valid:
            tf = cdr.tf_message([(m.header.utime, WORLD_FRAME, base_link(m.name), m.position, m.orientation)])
            return [RosMessage("/tf", "tf2_msgs/msg/TFMessage", TF, tf)]
        if isinstance(m, goggles_lcm.clock_t):
            return [RosMessage("/clock", "rosgraph_msgs/msg/Clock", CLOCK, cdr.clock(m.header.utime))]
        if isinstance(m, goggles_lcm.ranges_t) and m.sensor in self._ranges:
            frame, fov, model, beams = self._ranges[m.sensor]
            if m.num_ranges == 1:
                variance = model.sigma**2 if self.settings.distro == "jazzy" else None
                payload = cdr.range_(
                    m.header.utime, frame, fov, m.min_range, m.max_range, m.ranges[0], variance=variance
                )
                return [RosMessage(f"{ns}/{m.sensor}", "sensor_msgs/msg/Range", SENSOR, payload)]
            if beams.shape[0] * beams.shape[1] != m.num_ranges:
                return []
            ranges = np.asarray(m.ranges, np.float64).reshape(beams.shape[:2])
            xyz = np.where(np.isfinite(ranges)[..., None], beams * ranges[..., None], np.nan)
            cloud = cdr.zone_cloud(m.header.utime, frame, xyz)
            return [RosMessage(f"{ns}/{m.sensor}/points", "sensor_msgs/msg/PointCloud2", SENSOR, cloud)]
        if isinstance(m, goggles_lcm.lidar_t):
            cloud = cdr.point_cloud(m.header.utime, m.sensor, m.x, m.y, m.z, m.intensity, m.time, m.ring)
            return [RosMessage(f"{ns}/{m.sensor}/points", "sensor_msgs/msg/PointCloud2", SENSOR, cloud)]
        if isinstance(m, goggles_lcm.beacons_t) and m.camera in self._cameras:
            camera = self._cameras[m.camera]
            payload = cdr.beacons(m.header.utime, camera.frame_id, m.ids, m.u, m.v, m.range)
            return [RosMessage(f"{camera.path}/beacons", "goggles_msgs/msg/Beacons", SENSOR, payload)]
        return []
