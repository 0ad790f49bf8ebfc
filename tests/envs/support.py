"""What the learning environments' tests share."""

from __future__ import annotations

from goggles.render import CameraModel

#: A small camera: the environments' observations at a size the CPU renders quickly.
CAMERA = CameraModel.from_fov(32, 24, 80.0)
