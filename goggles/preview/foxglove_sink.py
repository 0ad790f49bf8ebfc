"""Live viewing in Foxglove: the engine's outputs as Foxglove schemas on a WebSocket server.

Images become RawImage (depth 32FC1, rgb8, segmentation 16UC1) with their CameraCalibration; vehicle
states, tracked poses and camera poses become FrameTransforms on ``/tf`` (``world`` -> ``<vehicle>``
and ``world`` -> ``<vehicle>/<camera>``). The world comes as glTF models (``goggles.preview.gltf``)
in SceneUpdates: the static scene once on ``/scene/static`` (encoded in a thread at start, and sent
again to each new subscriber), and every gate, prop, person and vehicle on ``/scene`` with each clock
message (10 Hz of sim time, at most 10 Hz of wall time): a person skinned as the cameras see them, a
vehicle as its airframe's model locked to its camera's frame. The server binds 127.0.0.1 unless told
otherwise. Connect Foxglove to ``ws://127.0.0.1:8765``.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

import goggles_lcm
from goggles.errors import ConfigError, require
from goggles.frames import matrix_to_quat
from goggles.preview.gltf import mesh_glb
from goggles.render.lenses import LENSES
from goggles.transport.endpoints import FOXGLOVE_PORT
from goggles.transport.schema import Encoding, MalformedMessage, decode_any

log = logging.getLogger(__name__)

#: Foxglove's name of each lens (its CameraCalibration knows plumb_bob and kannala_brandt, the OpenCV
#: fisheye); the others go by goggles' name, which Foxglove's panels do not undistort.
FOXGLOVE_DISTORTION_MODELS = {"pinhole": "plumb_bob", "fisheye": "kannala_brandt"}

_IMAGE_ENCODINGS = {
    Encoding.DEPTH_F32: ("32FC1", 4),
    Encoding.RANGE_F32: ("32FC1", 4),
    Encoding.RGB8: ("rgb8", 3),
    Encoding.SEGMENTATION_I32: ("16UC1", 2),
}


class FoxgloveSink:
    """A sink (``write(channel, data, log_time_ns)``, ``close()``) that serves a Foxglove WebSocket.

    Args:
        host: address to bind (127.0.0.1: this machine only).
        port: TCP port.
        scene_interval_s: least wall time between two updates of the actors (a fast simulation's clock
            messages would otherwise encode each person many times a second for a viewer at 60 Hz).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = FOXGLOVE_PORT, scene_interval_s: float = 0.1):
        require("foxglove", "viewing", "the Foxglove live view")
        import foxglove
        from foxglove.channels import (
            CameraCalibrationChannel,
            FrameTransformChannel,
            ImageAnnotationsChannel,
            PointCloudChannel,
            RawImageChannel,
            SceneUpdateChannel,
        )

        self._foxglove = foxglove
        self._channels = {
            "image": RawImageChannel,
            "calibration": CameraCalibrationChannel,
            "points": PointCloudChannel,
            "annotations": ImageAnnotationsChannel,
        }
        try:
            self.server = foxglove.start_server(
                name="goggles", host=host, port=port, server_listener=_listener(self._on_subscribe)
            )
        except (RuntimeError, OSError) as exc:  # foxglove's error for a port in use or a bad address
            raise ConfigError(f"cannot serve Foxglove on {host}:{port}: {exc}") from None
        self.port = self.server.port
        self._tf = FrameTransformChannel("/tf")
        self._described: dict[str, int] = {}
        """Per camera, the instant its calibration and frame were last logged: once per frame, however
        many images (depth, rgb, ...) it has then."""
        self._scene = SceneUpdateChannel("/scene")
        self._static_channel = SceneUpdateChannel("/scene/static")
        self._topics: dict[str, object] = {}
        self._actors = None
        self._sensor_pose = self._range_beams = None
        self.scene_interval_s = scene_interval_s
        self._last_scene = -float("inf")
        self._models: dict[int, tuple[object, bytes]] = {}
        """glTF of each rigid actor mesh shown last, by id (the mesh is held, so its id stays its own)."""
        self._shown: set[str] = set()
        """The scene entities the last update showed (one that left is deleted from the view)."""
        self._static = None
        """The static scene's SceneUpdate once encoded."""
        self._static_lock = threading.Lock()

    def set_scene(self, rig) -> None:
        """What the 3D view shows, read from ``rig`` (a ``goggles.rig.Rig``, or anything with the same
        four): its ``static`` scene (a ``StaticScene``, or None), encoded now in a thread; its
        ``viewed_actors()`` now; ``sensor_pose(name)``, a LiDAR's or range sensor's (4, 4) pose in the
        world now, or None, which places its scans; and ``range_beams(name)``, a range sensor's beam
        directions, which turn its readings into points."""
        self._actors, self._sensor_pose, self._range_beams = rig.viewed_actors, rig.sensor_pose, rig.range_beams
        static = rig.static
        if static is not None:
            threading.Thread(target=self._encode_static, args=(static,), name="foxglove-static", daemon=True).start()

    def _encode_static(self, static) -> None:
        from foxglove.messages import SceneEntity, SceneUpdate

        start = time.perf_counter()
        try:
            glb = mesh_glb(static)
        except Exception as exc:  # a viewer must never stop the engine
            log.warning("foxglove: could not encode the static scene %s: %s", static.name, exc)
            return
        log.info(
            "foxglove: static scene %s as glTF, %.1f MB in %.1f s",
            static.name,
            len(glb) / 1e6,
            time.perf_counter() - start,
        )
        entity = SceneEntity(frame_id="world", id=f"static/{static.name}", models=[_model(np.eye(4), glb)])
        with self._static_lock:
            self._static = SceneUpdate(entities=[entity])
            self._static_channel.log(self._static)

    def _on_subscribe(self, topic: str) -> None:
        """A viewer that subscribes to the static scene gets it now (it is sent once, not repeated)."""
        if topic == "/scene/static":
            with self._static_lock:
                if self._static is not None:
                    self._static_channel.log(self._static)

    def write(self, channel: str, data: bytes, log_time_ns: int) -> None:
        try:
            message = decode_any(data)
        except MalformedMessage:
            return
        try:
            if isinstance(message, goggles_lcm.image_t):
                self._image(channel, message, log_time_ns)
            elif isinstance(message, goggles_lcm.vehicle_state_t):
                self._transform("world", message.vehicle, message.position, message.orientation, log_time_ns)
            elif isinstance(message, goggles_lcm.pose_t):
                self._transform("world", message.name, message.position, message.orientation, log_time_ns)
            elif isinstance(message, goggles_lcm.lidar_t):
                self._points(channel, message, log_time_ns)
            elif isinstance(message, goggles_lcm.beacons_t):
                self._beacons(channel, message, log_time_ns)
            elif isinstance(message, goggles_lcm.imu_t):
                self._json(
                    channel,
                    log_time_ns,
                    linear_acceleration=_xyz(message.linear_acceleration),
                    angular_velocity=_xyz(message.angular_velocity),
                )
            elif isinstance(message, goggles_lcm.ranges_t):
                self._json(
                    channel,
                    log_time_ns,
                    ranges=[_finite(r) for r in message.ranges],
                    min_range=message.min_range,
                    max_range=message.max_range,
                )
                self._range_points(channel, message, log_time_ns)
            elif isinstance(message, goggles_lcm.collision_t):
                self._json(
                    channel,
                    log_time_ns,
                    other=message.other,
                    point=_xyz(message.point),
                    normal=_xyz(message.normal),
                    depth=message.depth,
                )
            elif isinstance(message, goggles_lcm.clock_t) and self._actors is not None:
                if time.monotonic() - self._last_scene >= self.scene_interval_s:
                    self._last_scene = time.monotonic()
                    self._publish_scene(log_time_ns)
        except Exception as exc:  # a viewer must never stop the engine
            log.warning("foxglove: could not show %s: %s", channel, exc)

    def _points(self, channel: str, scan, log_time_ns: int) -> None:
        """A LiDAR scan as a point cloud placed where the sensor was when the scan began (its points
        are in the sensor's frame), or in the sensor's own frame where that is not known."""
        T_WS = self._sensor_pose(scan.sensor) if self._sensor_pose is not None else None
        points = np.column_stack([scan.x, scan.y, scan.z, scan.intensity])
        frame = "world" if T_WS is not None else scan.sensor
        cloud = _point_cloud(self._stamp(log_time_ns), frame, np.eye(4) if T_WS is None else T_WS, "intensity", points)
        self._topic("points", f"/{channel}").log(cloud, log_time=log_time_ns)

    def _range_points(self, channel: str, readings, log_time_ns: int) -> None:
        """A range sensor's valid readings as points where its beams met the world (``/<channel>/points``:
        x, y, z in the sensor frame and the range, the cloud placed at the sensor's pose), when the
        engine says where the sensor is and where its beams point."""
        if self._sensor_pose is None or self._range_beams is None:
            return
        T_WS, beams = self._sensor_pose(readings.sensor), self._range_beams(readings.sensor)
        ranges = np.asarray(readings.ranges, np.float64)
        if T_WS is None or beams is None or len(beams) != len(ranges):
            return
        valid = np.isfinite(ranges)
        points = np.column_stack([beams[valid] * ranges[valid, None], ranges[valid]])
        cloud = _point_cloud(self._stamp(log_time_ns), "world", T_WS, "range", points)
        self._topic("points", f"/{channel}/points").log(cloud, log_time=log_time_ns)

    def _beacons(self, channel: str, detections, log_time_ns: int) -> None:
        """IR beacon detections as annotations over their camera's images: a circle and the beacon's id
        at each. Foxglove's pixel coordinates start at the top-left pixel's corner, OpenCV's (the
        detections') at its centre: half a pixel apart."""
        from foxglove.messages import CircleAnnotation, Color, ImageAnnotations, Point2, TextAnnotation

        stamp = self._stamp(log_time_ns)
        green, black = Color(r=0.1, g=1.0, b=0.2, a=1.0), Color(r=0.0, g=0.0, b=0.0, a=0.6)
        circles, texts = [], []
        for beacon, u, v in zip(detections.ids, detections.u, detections.v):
            at = Point2(x=u + 0.5, y=v + 0.5)
            circles.append(
                CircleAnnotation(timestamp=stamp, position=at, diameter=8.0, thickness=2.0, outline_color=green)
            )
            label = Point2(x=u + 6.5, y=v - 5.5)
            texts.append(
                TextAnnotation(
                    timestamp=stamp,
                    position=label,
                    text=beacon,
                    font_size=10.0,
                    text_color=green,
                    background_color=black,
                )
            )
        self._topic("annotations", f"/{channel}").log(
            ImageAnnotations(timestamp=stamp, circles=circles, texts=texts), log_time=log_time_ns
        )

    def _json(self, channel: str, log_time_ns: int, **fields) -> None:
        """Readings Foxglove has no schema for (IMU, ranges, collisions), as JSON a plot panel reads."""
        stamp = {"sec": log_time_ns // 1_000_000_000, "nsec": log_time_ns % 1_000_000_000}
        message, key = {"timestamp": stamp, **fields}, f"json:/{channel}"
        if key not in self._topics:  # its schema from its first message: Foxglove completes plot paths from it
            self._topics[key] = self._foxglove.Channel(f"/{channel}", schema=_json_schema(message))
        self._topics[key].log(message, log_time=log_time_ns)

    def _topic(self, kind: str, name: str):
        key = f"{kind}:{name}"
        if key not in self._topics:
            self._topics[key] = self._channels[kind](name)
        return self._topics[key]

    def _stamp(self, log_time_ns: int):
        from foxglove.messages import Timestamp

        return Timestamp(sec=log_time_ns // 1_000_000_000, nsec=log_time_ns % 1_000_000_000)

    def _image(self, channel: str, image, log_time_ns: int) -> None:
        from foxglove.messages import CameraCalibration, RawImage

        encoding, size = _IMAGE_ENCODINGS[Encoding(image.encoding)]
        pixels = bytes(image.data)
        if Encoding(image.encoding) == Encoding.SEGMENTATION_I32:
            # Foxglove shows 16-bit class images: ids past 65535 saturate there (not wrap onto others)
            pixels = np.clip(np.frombuffer(pixels, np.int32), 0, 65535).astype(np.uint16).tobytes()
        frame = image.camera
        stamp = self._stamp(log_time_ns)
        self._topic("image", f"/{channel}").log(
            RawImage(
                timestamp=stamp,
                frame_id=frame,
                width=image.width,
                height=image.height,
                encoding=encoding,
                step=image.width * size,
                data=pixels,
            ),
            log_time=log_time_ns,
        )
        if self._described.get(frame) == log_time_ns:
            return
        self._described[frame] = log_time_ns
        K = [image.fx, 0.0, image.cx, 0.0, image.fy, image.cy, 0.0, 0.0, 1.0]
        P = [image.fx, 0.0, image.cx, 0.0, 0.0, image.fy, image.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
        self._topic("calibration", f"/{image.camera}/calibration").log(
            CameraCalibration(
                timestamp=stamp,
                frame_id=frame,
                width=image.width,
                height=image.height,
                distortion_model=FOXGLOVE_DISTORTION_MODELS.get(image.lens, image.lens),
                D=list(image.distortion[: len(LENSES.get(image.lens, image.distortion))]),
                K=K,
                R=[1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0],
                P=P,
            ),
            log_time=log_time_ns,
        )
        self._transform("world", frame, image.position, image.orientation, log_time_ns)

    def _transform(self, parent: str, child: str, position, q_wxyz, log_time_ns: int) -> None:
        from foxglove.messages import FrameTransform, Quaternion, Vector3

        w, x, y, z = q_wxyz
        self._tf.log(
            FrameTransform(
                timestamp=self._stamp(log_time_ns),
                parent_frame_id=parent,
                child_frame_id=child,
                translation=Vector3(x=position[0], y=position[1], z=position[2]),
                rotation=Quaternion(x=x, y=y, z=z, w=w),
            ),
            log_time=log_time_ns,
        )

    def _publish_scene(self, log_time_ns: int) -> None:
        """Every actor as its model where it is; an actor gone since the last update (a removed prop, a
        person who left) is deleted from the view."""
        from foxglove.messages import (
            SceneEntity,
            SceneEntityDeletion,
            SceneEntityDeletionType,
            SceneUpdate,
        )

        stamp = self._stamp(log_time_ns)
        entities, models = [], {}
        actors = self._actors()
        for actor in actors:
            if actor.vertices is not None:  # deforming: encoded again each time
                glb = mesh_glb(actor.mesh, actor.vertices)
            else:
                key = id(actor.mesh)
                models[key] = self._models.get(key) or (actor.mesh, mesh_glb(actor.mesh))
                glb = models[key][1]
            entity = SceneEntity(
                timestamp=stamp,
                frame_id=actor.frame,
                frame_locked=actor.frame != "world",  # a vehicle follows its camera's frame between updates
                id=actor.name,
                models=[_model(actor.T_WA, glb)],
            )
            entities.append(entity)
        self._models = models
        shown = {actor.name for actor in actors}
        deletions = [
            SceneEntityDeletion(timestamp=stamp, type=SceneEntityDeletionType.MatchingId, id=name)
            for name in sorted(self._shown - shown)
        ]
        self._shown = shown
        self._scene.log(SceneUpdate(deletions=deletions, entities=entities), log_time=log_time_ns)

    def close(self) -> None:
        self.server.stop()


#: glTF binary's media type.
GLB = "model/gltf-binary"


def _pose(T: np.ndarray):
    """A Foxglove Pose of a (4, 4) rigid transform."""
    from foxglove.messages import Pose, Quaternion, Vector3

    q = matrix_to_quat(np.asarray(T)[:3, :3])
    return Pose(
        position=Vector3(x=float(T[0, 3]), y=float(T[1, 3]), z=float(T[2, 3])),
        orientation=Quaternion(x=float(q[1]), y=float(q[2]), z=float(q[3]), w=float(q[0])),
    )


def _model(T: np.ndarray, glb: bytes):
    """A glTF model placed at T (4, 4), at its own scale."""
    from foxglove.messages import ModelPrimitive, Vector3

    return ModelPrimitive(pose=_pose(T), scale=Vector3(x=1.0, y=1.0, z=1.0), data=glb, media_type=GLB)


def _xyz(values) -> dict:
    return {"x": float(values[0]), "y": float(values[1]), "z": float(values[2])}


def _point_cloud(stamp, frame_id: str, T: np.ndarray, value: str, points: np.ndarray):
    """A Foxglove point cloud of (n, 4) rows (x, y, z, ``value``) as float32, placed by ``T`` in ``frame_id``."""
    from foxglove.messages import PackedElementField, PackedElementFieldNumericType, PointCloud

    names = ("x", "y", "z", value)
    f32 = PackedElementFieldNumericType.Float32
    return PointCloud(
        timestamp=stamp,
        frame_id=frame_id,
        pose=_pose(T),
        point_stride=16,
        fields=[PackedElementField(name=n, offset=4 * i, type=f32) for i, n in enumerate(names)],
        data=np.asarray(points, np.float32).tobytes(),
    )


def _json_schema(value) -> dict:
    """The JSON schema of a message's shape: objects of numbers, strings and lists of numbers (or null)."""
    if isinstance(value, dict):
        return {"type": "object", "properties": {key: _json_schema(item) for key, item in value.items()}}
    if isinstance(value, list):
        return {"type": "array", "items": {"type": ["number", "null"]}}
    return {"type": "string"} if isinstance(value, str) else {"type": "number"}


def _finite(value: float) -> float | None:
    """JSON has no infinities or NaN: a reading beyond the range, too close or invalid is null."""
    return float(value) if np.isfinite(value) else None


def _listener(on_subscribe):
    """The server's listener, telling ``on_subscribe`` the topic a viewer subscribed to (foxglove's
    ServerListener gives every other callback)."""
    from foxglove.websocket import ServerListener

    class Subscriptions(ServerListener):
        def on_subscribe(self, client, channel) -> None:
            try:
                on_subscribe(channel.topic)
            except Exception as exc:  # a viewer must never stop the server
                log.warning("foxglove: subscription to %s: %s", channel.topic, exc)

    return Subscriptions()
