"""Depth as a stereo camera measures it: the error lives in the disparity.

A stereo camera measures the disparity d = f·B/Z (pixels; f the focal length in pixels, B the
baseline in metres) and reports Z = f·B/d. So the model works on d: Gaussian subpixel noise of
σ_d pixels, rounding to the device's subpixel step, and invalid pixels where d leaves what the
device can measure — beyond its disparity search range (closer than f·B/range: −inf, REP 118) or
below one subpixel step (too far to tell from infinity: +inf). The depth error that follows grows
with the square of depth, σ_Z = Z²·σ_d/(f·B), as real stereo cameras' does. The camera's own limits
still hold after the noise (REP 118): a measured depth beyond its ``max_depth`` reads +inf, closer than
its ``min_depth`` −inf. Applied on the device right after the render (no host copy), drawn per
camera and frame (``goggles.sensors.draws``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles.errors import ConfigError
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.runtime.progress import load_kernels
from goggles.sensors.draws import FrameNoise, draw_seed

wp.set_module_options(FORWARD_ONLY)


@dataclass(frozen=True)
class StereoDepthModel:
    name: str
    baseline_m: float
    """Baseline of the device (used for a mono depth camera; a stereo rig uses its own)."""
    subpixel_sigma_px: float
    """σ_d, RMS disparity noise, pixels."""
    subpixel_step_px: float
    """The disparity's resolution, pixels (0: continuous)."""
    search_range_px: float
    """The largest disparity searched, pixels: sets the minimum depth f·B/range (inf: none)."""
    source: str


#: Intel RealSense D435: B = 50 mm; σ_d ≈ 0.08 px typical (Intel, "Tuning depth cameras for best
#: performance"); subpixel step 1/32 px (Intel, "Subpixel linearity improvement for D400", rev. 1.3);
#: disparity search range 126 px by default (D400 datasheet: min-Z = f·B/126).
D435 = StereoDepthModel("d435", 0.050, 0.08, 1.0 / 32.0, 126.0, "Intel D400 datasheet and white papers")
#: Intel RealSense D455: the same D4 vision processor with B = 95 mm (D400 datasheet).
D455 = StereoDepthModel("d455", 0.095, 0.08, 1.0 / 32.0, 126.0, "Intel D400 datasheet and white papers")
#: Exact depth (FlightGoggles' depth camera): no noise, no quantisation, no search limit.
IDEAL = StereoDepthModel("ideal", 0.0, 0.0, 0.0, float("inf"), "an ideal camera")

PRESETS = {m.name: m for m in (D435, D455, IDEAL)}


def stereo_depth_model(name: str) -> StereoDepthModel:
    if name not in PRESETS:
        raise ConfigError(f"depth model {name!r}: choose one of {sorted(PRESETS)}")
    return PRESETS[name]


@wp.kernel
def stereo_depth_kernel(
    focal_baseline: wp.array(dtype=float),
    sigma: wp.array(dtype=float),
    step: wp.array(dtype=float),
    search: wp.array(dtype=float),
    limits: wp.array(dtype=wp.vec2),
    draws: wp.array(dtype=wp.int64),
    streams: wp.array(dtype=wp.int32),
    row_stride: int,
    row_offset: int,
    span: int,
    depth: wp.array3d(dtype=float),
):
    """Re-measure each valid depth through its disparity (rows as ``Renderer.launch_rows`` gives)."""
    c, k, block = wp.tid()
    y = row_offset + k * row_stride
    fb = focal_baseline[c]
    if fb <= 0.0:
        return  # no model on this camera
    width = depth.shape[2]
    seed = draw_seed(draws, streams[c])
    near, far = limits[c][0], limits[c][1]
    for column in range(span):
        x = block * span + column
        z = depth[c, y, x]
        if not wp.isfinite(z):
            continue  # already invalid (REP 118 values stay)
        d = fb / z
        if sigma[c] > 0.0:
            state = wp.rand_init(seed, y * width + x)
            d = d + sigma[c] * wp.randn(state)
        q = step[c]
        if q > 0.0:
            d = wp.round(d / q) * q
        measured = fb / d
        if d > search[c] or measured < near:
            depth[c, y, x] = -wp.inf
        elif d < wp.max(q, 1.0e-6) or measured > far:
            depth[c, y, x] = wp.inf
        else:
            depth[c, y, x] = measured


class StereoDepth(FrameNoise):
    """Applies stereo depth models to a renderer's depth, per camera of its batch.

    Args:
        models: per camera, a model or None (left exact).
        renderer: the ``goggles.render.Renderer`` whose depth is re-measured (its cameras' fx).
        baselines: per camera, the rig's baseline in metres, or None (a mono camera: the model's).
        seed: seed of the noise.
        streams: per camera, its noise stream (``draws.stream_of`` its name, or an environment's
            index); None: the cameras' indices from ``first_camera`` (a slice of a larger batch draws
            exactly that slice's noise).

    Each ``apply`` draws the next frame's noise; ``at(key)`` chooses the frame (its sim time).
    """

    def __init__(self, models, renderer, baselines, seed: int = 0, first_camera: int = 0, streams=None):
        fb, sigma, step, search = [], [], [], []
        for model, camera, baseline in zip(models, renderer.cameras, baselines):
            f = camera.fx
            if model is None or model is IDEAL:
                model, f = IDEAL, 0.0  # fb = 0: the kernel leaves this camera alone
            fb.append(f * (baseline if baseline is not None else model.baseline_m))
            sigma.append(model.subpixel_sigma_px)
            step.append(model.subpixel_step_px)
            search.append(model.search_range_px)
        if streams is None:
            streams = range(int(first_camera), int(first_camera) + len(fb))
        super().__init__(renderer, seed, streams)
        device = renderer.device
        self.active = any(v > 0 for v in fb)
        self._fb = wp.array(fb, dtype=float, device=device)
        self._sigma = wp.array(sigma, dtype=float, device=device)
        self._step = wp.array(step, dtype=float, device=device)
        self._search = wp.array(np.minimum(search, 3.0e38), dtype=float, device=device)
        limits = [(c.min_depth, min(c.max_depth, 3.0e38)) for c in renderer.cameras]
        self._limits = wp.array(limits, dtype=wp.vec2, device=device)
        load_kernels(stereo_depth_kernel.module, device)

    def apply(self) -> None:
        """Re-measure the renderer's last depth image in place."""
        if not self.active:
            return
        r = self._renderer
        inputs = [self._fb, self._sigma, self._step, self._search, self._limits]
        self._launch(stereo_depth_kernel, inputs, [r.buffers.depth])
