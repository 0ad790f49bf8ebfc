"""The renderer: ray casting of batches of cameras against the world (``goggles.world``): Warp's BVH
on CUDA, Intel Embree on the CPU, one set of Warp kernels for every output.

Contract:
    * ``CameraModel`` holds intrinsics (pinhole + OpenCV distortion) and depth limits; it becomes a
      per-pixel ray table, so every camera model costs the same to trace (a LiDAR is a table too).
    * ``goggles.world.DeviceScene(static_scene, device)`` uploads a ``goggles.scene.StaticScene`` once
      (BVH build); the renderer, the sensors and the simulator all query it.
    * ``Renderer(device_scene, cameras, RenderSettings(outputs=..., backend=...), shadow_partner=...)`` owns every
      device buffer; ``render(T_WC[, T_WC_last_row])`` and ``render_exposure`` only launch and trace,
      and leave the outputs on the device (``buffers``); ``images()`` copies the asked outputs
      (depth, range, rgb, segmentation, normal, face, status) to the host.
    * Invalid depth follows REP 118: +inf nothing within max_depth, -inf closer than min_depth,
      NaN a stereo occlusion shadow.
"""

from goggles.render.camera import CameraModel, stereo_right_offset
from goggles.render.renderer import Images, Renderer
from goggles.render.settings import BACKENDS, OUTPUTS, PIXEL_ORDERS, SPLAT_PASSES, RenderSettings
from goggles.render.shading import Shading

__all__ = [
    "BACKENDS",
    "OUTPUTS",
    "PIXEL_ORDERS",
    "SPLAT_PASSES",
    "CameraModel",
    "Images",
    "RenderSettings",
    "Renderer",
    "Shading",
    "stereo_right_offset",
]
