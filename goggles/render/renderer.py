"""Renderer: a batch of cameras traced in one launch through the world (``goggles.world.DeviceScene``).

On CUDA one launch covers every pixel of every camera. On the CPU a Warp launch runs on one thread
but releases the GIL, so the image rows are interleaved across a pool of threads (row k goes to
thread k mod T, which balances sky rows against ground rows) and each thread launches its share.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles.errors import ConfigError
from goggles.render import invalid, kernels
from goggles.render.camera import CameraModel
from goggles.render.shading import Lighting, Shading
from goggles.world import DeviceScene

log = logging.getLogger(__name__)


@dataclass
class Images:
    """Host copies of one render, every array indexed [camera, row, column].

    depth and range follow REP 118: +inf nothing within max_depth, -inf closer than min_depth,
    NaN invalid (stereo shadow: the surface is hidden from the partner camera).
    """

    depth: np.ndarray
    """(n, H, W) float32 z-depth along the optical axis, metres."""
    range: np.ndarray
    """(n, H, W) float32 Euclidean distance from the camera centre, metres."""
    rgb: np.ndarray
    """(n, H, W, 3) uint8 shaded colour."""
    segmentation: np.ndarray
    """(n, H, W) int32 class id, 0 where nothing was hit."""
    normal_W: np.ndarray
    """(n, H, W, 3) float32 unit surface normal facing the camera, world frame; zero where nothing was hit."""
    face: np.ndarray
    """(n, H, W) int32 index of the static triangle hit, -1 where nothing was hit."""
    status: np.ndarray
    """(n, H, W) int8 pixel status: a ``kernels.STATUS_*`` code."""


class Renderer:
    """Renders a batch of same-size cameras against a DeviceScene, all in one launch per thread.

    Args:
        scene: the uploaded static scene; the renderer uses its device.
        cameras: intrinsics of each camera (same width and height; distortion may differ).
        shadow_partner: for each camera, the index of the camera that must also see a point for this
            camera's depth of it to be valid (a stereo rig's left camera names the right one), or -1.
        threads: CPU threads sharing a render; default all cores ($GOGGLES_RENDER_THREADS caps it).
            Ignored on CUDA.
        shading: lighting of the intensity image.
        sun_W: direction towards the sun, world frame (normalised here).
        ambient: fraction of light that does not depend on the sun, [0, 1].
        background_rgb: colour of pixels that hit nothing, [0, 1].
    """

    def __init__(
        self,
        scene: DeviceScene,
        cameras: Sequence[CameraModel],
        *,
        shadow_partner: Sequence[int] | None = None,
        threads: int | None = None,
        shading: Shading = Shading.SUN,
        sun_W: Sequence[float] = (0.35, 0.25, 0.9),
        ambient: float = 0.5,
        background_rgb: Sequence[float] = (0.62, 0.75, 0.90),
    ):
        if not cameras:
            raise ConfigError("a renderer needs at least one camera")
        width, height = cameras[0].width, cameras[0].height
        if any((c.width, c.height) != (width, height) for c in cameras):
            raise ConfigError("cameras rendered in one batch must share width and height; use one Renderer per size")
        n = len(cameras)
        partner = np.full(n, -1, np.int32) if shadow_partner is None else np.asarray(shadow_partner, np.int32)
        if partner.shape != (n,) or np.any((partner < -1) | (partner >= n)) or np.any(partner == np.arange(n)):
            raise ConfigError(f"shadow_partner {partner.tolist()} must give, per camera, another camera index or -1")
        _check_memory(scene.device, n * width * height, f"{n} camera(s) of {width}x{height}")
        self.scene = scene
        self.cameras = tuple(cameras)
        self._has_partners = bool(np.any(partner >= 0))
        self.width, self.height = width, height
        self.device = d = scene.device
        # $GOGGLES_RENDER_THREADS caps the default (batch replays run one process per core).
        default_threads = int(os.environ.get("GOGGLES_RENDER_THREADS", 0)) or os.cpu_count() or 1
        self.threads = 1 if d.is_cuda else max(1, min(threads or default_threads, height))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="goggles-render") if self.threads > 1 else None

        batch = kernels.CameraBatch()
        batch.rays_C = wp.array(np.stack([c.ray_directions() for c in cameras]), dtype=wp.vec3, device=d)
        batch.R_WC = wp.zeros(n, dtype=wp.mat33, device=d)
        batch.p_WC = wp.zeros(n, dtype=wp.vec3, device=d)
        batch.partner = wp.array(partner, dtype=wp.int32, device=d)
        batch.intrinsics = wp.array([(c.fx, c.fy, c.cx, c.cy) for c in cameras], dtype=wp.vec4, device=d)
        batch.distortion = wp.array([c.distortion for c in cameras], dtype=kernels.distortion5, device=d)
        batch.min_depth = wp.array([c.min_depth for c in cameras], dtype=float, device=d)
        batch.max_depth = wp.array([c.max_depth for c in cameras], dtype=float, device=d)
        self._cameras = batch

        light = Lighting()
        light.shading = int(shading)
        sun = np.asarray(sun_W, np.float64)
        light.sun_W = wp.vec3(*(sun / np.linalg.norm(sun)))
        light.ambient = float(ambient)
        light.background = wp.vec3(*background_rgb)
        self._light = light

        out = kernels.ImageBuffers()
        shape = (n, height, width)
        out.status = wp.zeros(shape, dtype=wp.int8, device=d)
        out.depth = wp.zeros(shape, dtype=float, device=d)
        out.range = wp.zeros(shape, dtype=float, device=d)
        out.rgb = wp.zeros((*shape, 3), dtype=wp.uint8, device=d)
        out.segmentation = wp.zeros(shape, dtype=wp.int32, device=d)
        out.normal_W = wp.zeros(shape, dtype=wp.vec3, device=d)
        out.face = wp.zeros(shape, dtype=wp.int32, device=d)
        self.buffers = out
        # Compile/load before any worker thread launches, so threads never race on a module load.
        wp.load_module(kernels, device=d)
        wp.load_module(invalid, device=d)

    @property
    def num_cameras(self) -> int:
        return len(self.cameras)

    def render(self, T_WC: np.ndarray) -> None:
        """Trace every camera from its pose; results stay in ``self.buffers`` on the device.

        Args:
            T_WC: (n, 4, 4) poses of the camera optical frames in the world, metres.

        Raises:
            ConfigError: if the poses have the wrong shape or are not finite rigid transforms.
        """
        T_WC = np.asarray(T_WC, dtype=np.float64)
        if T_WC.shape != (self.num_cameras, 4, 4) or not np.all(np.isfinite(T_WC)):
            raise ConfigError(f"camera poses must be a finite ({self.num_cameras}, 4, 4) array, got {T_WC.shape}")
        R = T_WC[:, :3, :3]
        if not np.allclose(R @ R.transpose(0, 2, 1), np.eye(3), atol=1e-5):
            raise ConfigError("camera poses must have orthonormal rotations")
        self._cameras.R_WC.assign(R.astype(np.float32))
        self._cameras.p_WC.assign(T_WC[:, :3, 3].astype(np.float32))

        self._launch_all(
            kernels.render_cameras_kernel, [self.scene.data, self.scene.actors, self._cameras, self._light]
        )
        if self._has_partners:
            self._launch_all(kernels.mark_stereo_shadow_kernel, [self._cameras])
        wp.launch(
            invalid.write_invalid_kernel,
            dim=(self.num_cameras, self.height, self.width),
            inputs=[self.buffers.status],
            outputs=[self.buffers.depth, self.buffers.range],
            device=self.device,
        )

    def _launch_all(self, kernel, inputs: list) -> None:
        """Launch ``kernel`` over every pixel: once on CUDA, once per thread on interleaved rows on the CPU."""
        if self._pool is None:
            self._launch(kernel, inputs, 1, 0)
        else:
            list(self._pool.map(lambda k: self._launch(kernel, inputs, self.threads, k), range(self.threads)))

    def _launch(self, kernel, inputs: list, stride: int, offset: int) -> None:
        rows = (self.height - offset + stride - 1) // stride
        wp.launch(
            kernel,
            dim=(self.num_cameras, rows, self.width),
            inputs=[*inputs, stride, offset],
            outputs=[self.buffers],
            device=self.device,
        )

    def images(self) -> Images:
        """Copy the last render to the host (copies: the next render does not change them)."""
        b = self.buffers
        return Images(
            depth=np.array(b.depth.numpy()),
            range=np.array(b.range.numpy()),
            rgb=np.array(b.rgb.numpy()),
            segmentation=np.array(b.segmentation.numpy()),
            normal_W=np.array(b.normal_W.numpy()),
            face=np.array(b.face.numpy()),
            status=np.array(b.status.numpy()),
        )

    def close(self) -> None:
        """Stop the CPU worker threads."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


#: Bytes a rendered pixel takes at its peak: ray table, every output on the device, their host copies
#: and the float64 temporaries of the ray table's construction.
BYTES_PER_PIXEL = 160


def available_memory(device) -> int | None:
    """Free bytes on ``device`` (CUDA: the GPU's; CPU: MemAvailable), or None if unknown."""
    if device.is_cuda:
        free = getattr(device, "free_memory", None)
        return int(free) if free else None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _check_memory(device, pixels: int, what: str) -> None:
    """Refuse a render whose buffers would not fit, before allocating any of them."""
    need = pixels * BYTES_PER_PIXEL
    free = available_memory(device)
    if free is not None and need > free:
        raise ConfigError(
            f"rendering {what} needs about {need / 2**30:.1f} GiB on {device}, but {free / 2**30:.1f} GiB is "
            "available: use fewer or smaller cameras"
        )
