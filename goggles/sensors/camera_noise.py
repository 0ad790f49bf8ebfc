"""A camera's pixels, not a pinhole's: photons become electrons with shot noise, the readout adds read
noise, the ADC quantises, and the lens darkens the corners.

Each colour value the renderer shades is taken as the irradiance (1 = the pixel's full well); the
electrons it collects are Poisson-distributed (shot noise), the readout adds Gaussian read noise,
the gain maps the full well onto the ADC's range, and the ADC rounds to its bits; the image keeps 8
bits. So the noise variance in ADC units follows the photon transfer curve, var = g·mean + (g·σ_read)²
(g the gain in DN per electron). Natural vignetting darkens a pixel by cos⁴ of its ray's angle to the
optical axis, scaled by the lens's strength (cos⁴ is a rectilinear lens's law; rays past 90 degrees
of a fisheye are taken as fully darkened, and a fisheye's rim is darker than the law: lower
``vignetting`` for one). Applied on the device right after the render, seeded per
frame.
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
class CameraNoiseModel:
    name: str
    full_well_e: float
    """Electrons at saturation (irradiance 1)."""
    read_noise_e: float
    """Temporal dark noise, electrons RMS."""
    adc_bits: int
    vignetting: float
    """0: none; 1: the full natural cos⁴ falloff."""
    source: str


#: A global-shutter machine-vision camera (Sony IMX264-class, as in FLIR Blackfly S and Basler ace): EMVA
#: 1288 reports of those cameras give ≈ 10.4 ke- saturation and ≈ 2.3 e- temporal dark noise, 12-bit ADC;
#: vignetting of a typical C-mount lens at full aperture (half the natural falloff).
GLOBAL_SHUTTER = CameraNoiseModel(
    "global-shutter", 10_400.0, 2.3, 12, 0.5, "EMVA 1288 data of IMX264 cameras (FLIR Blackfly S)"
)
#: A small-pixel rolling-shutter CMOS (IMX219-class, phone and Raspberry Pi cameras): a few thousand
#: electrons of full well, a few of read noise, 10-bit ADC, a wide lens's strong vignetting. Orders of
#: magnitude: confirm against your sensor's datasheet.
SMALL_PIXEL = CameraNoiseModel("small-pixel", 4_500.0, 3.0, 10, 1.0, "typical small-pixel CMOS (orders of magnitude)")

PRESETS = {m.name: m for m in (GLOBAL_SHUTTER, SMALL_PIXEL)}


def camera_noise_model(name: str) -> CameraNoiseModel:
    if name not in PRESETS:
        raise ConfigError(f"camera noise model {name!r}: choose one of {sorted(PRESETS)}")
    return PRESETS[name]


@wp.kernel
def camera_noise_kernel(
    rays_C: wp.array3d(dtype=wp.vec3),
    ray_table: wp.array(dtype=wp.int32),
    full_well: wp.array(dtype=float),
    read_noise: wp.array(dtype=float),
    full_scale: wp.array(dtype=float),
    vignetting: wp.array(dtype=float),
    normal_table: wp.array(dtype=float),
    draws: wp.array(dtype=wp.int64),
    streams: wp.array(dtype=wp.int32),
    row_stride: int,
    row_offset: int,
    span: int,
    rgb: wp.array4d(dtype=wp.uint8),
):
    """Expose, read out and digitise ``span`` pixels of a row (rows as ``Renderer.launch_rows`` gives)."""
    c, k, block = wp.tid()
    y = row_offset + k * row_stride
    well = full_well[c]
    if well <= 0.0:
        return  # an ideal camera
    width = rgb.shape[2]
    read = read_noise[c]
    scale = full_scale[c]
    seed = draw_seed(draws, streams[c])
    table = ray_table[c]
    for column in range(span):
        x = block * span + column
        cos_theta = wp.max(rays_C[table, y, x][2], 0.0)  # rays past 90 degrees: fully darkened
        falloff = 1.0 - vignetting[c] * (1.0 - cos_theta * cos_theta * cos_theta * cos_theta)
        state = wp.rand_init(seed, y * width + x)
        # Three standard normals from one random word: three 10-bit indices into a table of the normal
        # distribution's quantiles (an image's noise needs no finer draws, and this costs no logarithm).
        bits = int(wp.randi(state))
        normals = wp.vec3(
            normal_table[bits & 1023], normal_table[(bits >> 10) & 1023], normal_table[(bits >> 20) & 1023]
        )
        # The three channels read before any is written: their chains of divisions and roundings then
        # overlap (a store to the image between them would keep the next read waiting).
        shaded = wp.vec3(float(rgb[c, y, x, 0]), float(rgb[c, y, x, 1]), float(rgb[c, y, x, 2]))
        exposed = wp.vec3(0.0)
        for channel in range(3):
            mean = shaded[channel] / 255.0 * falloff * well
            if mean < 50.0:  # Poisson where it is visibly not Gaussian; then read noise
                electrons = float(wp.poisson(state, mean)) + read * normals[channel]
            else:  # shot and read noise as one Gaussian of variance mean + read^2
                electrons = mean + wp.sqrt(mean + read * read) * normals[channel]
            dn = wp.clamp(wp.round(electrons / well * scale), 0.0, scale)  # the ADC
            exposed[channel] = wp.round(dn / scale * 255.0)
        rgb[c, y, x, 0] = wp.uint8(exposed[0])
        rgb[c, y, x, 1] = wp.uint8(exposed[1])
        rgb[c, y, x, 2] = wp.uint8(exposed[2])


class CameraNoise(FrameNoise):
    """Applies camera noise models to a renderer's colour, per camera of its batch (None: left ideal).
    ``streams``: each camera's noise stream (``draws.stream_of`` its name); None: the cameras' indices.
    Each ``apply`` draws the next frame's noise; ``at(key)`` chooses the frame (its sim time)."""

    def __init__(self, models, renderer, seed: int = 0, streams=None):
        super().__init__(renderer, seed, range(len(models)) if streams is None else streams)
        device = renderer.device
        self.active = any(m is not None for m in models)
        self._well = wp.array([m.full_well_e if m else 0.0 for m in models], dtype=float, device=device)
        self._read = wp.array([m.read_noise_e if m else 0.0 for m in models], dtype=float, device=device)
        self._scale = wp.array([2.0**m.adc_bits - 1.0 if m else 255.0 for m in models], dtype=float, device=device)
        self._vignetting = wp.array([m.vignetting if m else 0.0 for m in models], dtype=float, device=device)
        self._normals = wp.array(_normal_quantiles(1024), dtype=float, device=device)
        load_kernels(camera_noise_kernel.module, device)

    def apply(self) -> None:
        """Expose the renderer's last colour image in place."""
        if not self.active:
            return
        r = self._renderer
        noise = [self._well, self._read, self._scale, self._vignetting, self._normals]
        self._launch(camera_noise_kernel, [r.rays_C, r.ray_table, *noise], [r.buffers.rgb])


def _normal_quantiles(count: int) -> np.ndarray:
    """The standard normal's quantiles at (i + 0.5) / count, scaled to unit variance exactly."""
    from statistics import NormalDist

    inverse = NormalDist().inv_cdf
    table = np.array([inverse((i + 0.5) / count) for i in range(count)])
    return (table / table.std()).astype(np.float32)
