"""Live viewing in Foxglove: the engine's outputs as Foxglove schemas on a WebSocket server.

Images become RawImage (depth 32FC1, rgb8, segmentation 16UC1) with their CameraCalibration; vehicle
states, tracked poses and camera poses become FrameTransforms on ``/tf`` (world -> ``<vehicle>`` ->
``<vehicle>/<camera>``); gates and avatars become a SceneUpdate of cubes. The server binds 127.0.0.1
unless told otherwise. Connect Foxglove to ``ws://127.0.0.1:8765``.
"""

from __future__ import annotations

import logging

import numpy as np

import goggles_lcm
from goggles.errors import ConfigError, require
from goggles.frames import matrix_to_quat
from goggles.transport.schema import Encoding, MalformedMessage, decode_any

log = logging.getLogger(__name__)

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
        scene_entities: callable returning the current actors as (name, [(T_WA (4,4), size (3,))]) for the
            3D scene, or None.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 8765, scene_entities=None):
        require("foxglove", "viewing", "the Foxglove live view")
        import foxglove
        from foxglove.channels import (
            CameraCalibrationChannel,
            FrameTransformChannel,
            RawImageChannel,
            SceneUpdateChannel,
        )

        self._foxglove = foxglove
        self._channels = {"image": RawImageChannel, "calibration": CameraCalibrationChannel}
        try:
            self.server = foxglove.start_server(name="goggles", host=host, port=port)
        except (RuntimeError, OSError) as exc:  # foxglove's error for a port in use or a bad address
            raise ConfigError(f"cannot serve Foxglove on {host}:{port}: {exc}") from None
        self.port = self.server.port
        self._tf = FrameTransformChannel("/tf")
        self._scene = SceneUpdateChannel("/scene")
        self._topics: dict[str, object] = {}
        self._scene_entities = scene_entities
        self._last_scene = 0
        self._shown: set[str] = set()
        """The scene entities the last update showed (one that left is deleted from the view)."""

    def set_scene(self, scene_entities) -> None:
        """Where the 3D scene's actors come from (e.g. ``Engine.scene_boxes``)."""
        self._scene_entities = scene_entities

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
            elif isinstance(message, goggles_lcm.clock_t) and self._scene_entities is not None:
                self._publish_scene(log_time_ns)
        except Exception as exc:  # a viewer must never stop the engine
            log.warning("foxglove: could not show %s: %s", channel, exc)

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
            pixels = np.frombuffer(pixels, np.int32).astype(np.uint16).tobytes()
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
        K = [image.fx, 0.0, image.cx, 0.0, image.fy, image.cy, 0.0, 0.0, 1.0]
        P = [image.fx, 0.0, image.cx, 0.0, 0.0, image.fy, image.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
        self._topic("calibration", f"/{image.camera}/calibration").log(
            CameraCalibration(
                timestamp=stamp,
                frame_id=frame,
                width=image.width,
                height=image.height,
                distortion_model="plumb_bob",
                D=list(image.distortion),
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
        """Every actor as boxes; an actor gone since the last update (a removed prop, a person who
        left) is deleted from the view."""
        from foxglove.messages import (
            Color,
            CubePrimitive,
            Pose,
            Quaternion,
            SceneEntity,
            SceneEntityDeletion,
            SceneEntityDeletionType,
            SceneUpdate,
            Vector3,
        )

        entities, shown = [], set()
        for name, boxes in self._scene_entities():
            shown.add(name)
            cubes = []
            for T, size in boxes:
                q = matrix_to_quat(T[:3, :3])
                cubes.append(
                    CubePrimitive(
                        pose=Pose(
                            position=Vector3(x=T[0, 3], y=T[1, 3], z=T[2, 3]),
                            orientation=Quaternion(x=q[1], y=q[2], z=q[3], w=q[0]),
                        ),
                        size=Vector3(x=size[0], y=size[1], z=size[2]),
                        color=Color(r=1.0, g=0.5, b=0.0, a=0.8),
                    )
                )
            entities.append(SceneEntity(timestamp=self._stamp(log_time_ns), frame_id="world", id=name, cubes=cubes))
        deletions = [
            SceneEntityDeletion(timestamp=self._stamp(log_time_ns), type=SceneEntityDeletionType.MatchingId, id=name)
            for name in sorted(self._shown - shown)
        ]
        self._shown = shown
        self._scene.log(SceneUpdate(deletions=deletions, entities=entities), log_time=log_time_ns)

    def close(self) -> None:
        self.server.stop()
