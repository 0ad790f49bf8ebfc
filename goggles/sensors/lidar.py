"""LiDAR: spinning multi-beam sensors (Ouster, Velodyne) and a non-repetitive rosette (Livox), traced
by the renderer as a camera whose "pixels" are the sensor's rays.

A spinning sensor fires all its beams at one azimuth, then the next, over one revolution per scan;
a rosette sensor draws a pattern that shifts from scan to scan. Each point is measured at its own
time during the scan, from where the sensor is then (no de-skew, as the real sensors report), so a
moving sensor's scan is smeared as its motion predicts. The renderer's rows are the firing times
(azimuths, or rosette points) and its columns the beams; ranges follow REP 117 (+inf beyond max
range, -inf closer than min range); intensity is the surface's albedo (each face's mean,
``SceneData.face_reflectivity``) times the cosine of incidence. Each valid range carries Gaussian
noise of the datasheet's 1σ range precision (``range_sigma``), drawn per beam and scan as every
sensor's noise is (``goggles.sensors.draws``: a function of the seed, the sensor and the scan's time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles import checks
from goggles.errors import ConfigError
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.runtime.progress import load_kernels
from goggles.sensors.draws import NoiseDraws, draw_state

wp.set_module_options(FORWARD_ONLY)

#: The golden ratio's fractional part and its square root's: irrational steps, so a rosette never repeats.
_STEP_A, _STEP_B = 0.6180339887498949, 0.7548776662466927
#: A rosette's points are traced in rows of this many, each row from one pose (0.5 ms apart at
#: 200k points/s): rows of one point would cost a thread launch each.
ROSETTE_ROW = 100
#: A rosette's pattern repeats after this many scans (29 hours at 10 Hz): the pattern's index stays
#: exact in float64 however long the sensor's clock has run (live mode's is the wall clock).
ROSETTE_SCANS = 2**20


@dataclass(frozen=True)
class LidarModel:
    name: str
    elevations_deg: tuple[float, ...]
    """Spinning: each beam's elevation; rosette: (lowest, highest)."""
    columns: int
    """Spinning: azimuths per revolution; rosette: points per scan."""
    rate_hz: float
    min_range: float
    max_range: float
    pattern: str = "spin"
    source: str = ""
    range_sigma: float = 0.0
    """1σ range noise of a valid return, m (the datasheet's range precision; 0: exact)."""

    @property
    def beams(self) -> int:
        """Columns of the renderer's table: the beams of a spinning sensor, a row of a rosette."""
        return len(self.elevations_deg) if self.pattern == "spin" else ROSETTE_ROW

    @property
    def points_per_scan(self) -> int:
        return len(self.elevations_deg) * self.columns if self.pattern == "spin" else self.columns

    def rays(self, scan: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Directions (rows, beams, 3) in the sensor frame (x forward, z up) and the firing time of each
        row, seconds from the start of the scan (rows, ). A rosette's rows are runs of ``ROSETTE_ROW``
        consecutive points."""
        rows = np.arange(self.columns)
        times = rows / (self.columns * self.rate_hz)
        if self.pattern == "spin":
            azimuth = 2.0 * np.pi * rows / self.columns  # counter-clockwise from +x, seen from above
            elevation = np.radians(np.asarray(self.elevations_deg))[None, :]
            azimuth = azimuth[:, None]
        else:  # rosette: irrational steps in azimuth and elevation, shifted each scan
            k = rows + scan * self.columns
            azimuth = (2.0 * np.pi * ((k * _STEP_A) % 1.0))[:, None]
            low, high = np.radians(self.elevations_deg)
            swing = 0.5 - 0.5 * np.cos(2.0 * np.pi * ((k * _STEP_B) % 1.0))
            elevation = (low + (high - low) * swing)[:, None]
        directions = np.stack(
            np.broadcast_arrays(
                np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)
            ),
            axis=-1,
        )
        if self.pattern != "spin":  # (points, 1, 3) -> runs of ROSETTE_ROW points, timed at their first
            if self.columns % ROSETTE_ROW:
                raise ConfigError(f"LiDAR {self.name}: a rosette's points per scan must be a multiple of {ROSETTE_ROW}")
            directions = directions.reshape(-1, ROSETTE_ROW, 3)
            times = times[::ROSETTE_ROW]
        return directions, times


@wp.kernel
def rosette_rays_kernel(first: wp.float64, low: float, high: float, rays: wp.array3d(dtype=wp.vec3)):
    """A rosette scan's directions straight into the renderer's ray table (one camera, runs of
    ``ROSETTE_ROW`` points): point i of the scan is point ``first + i`` of the endless pattern, as
    ``LidarModel.rays`` draws it (float64 steps: the pattern's index grows by 200,000 a second)."""
    i = wp.tid()
    k = first + wp.float64(i)
    step_a = k * wp.float64(_STEP_A)
    step_b = k * wp.float64(_STEP_B)
    azimuth = 2.0 * wp.pi * float(step_a - wp.floor(step_a))
    swing = 0.5 - 0.5 * wp.cos(2.0 * wp.pi * float(step_b - wp.floor(step_b)))
    elevation = low + (high - low) * swing
    row = i // rays.shape[2]
    rays[0, row, i - row * rays.shape[2]] = wp.vec3(
        wp.cos(elevation) * wp.cos(azimuth), wp.cos(elevation) * wp.sin(azimuth), wp.sin(elevation)
    )


@wp.kernel
def range_noise_kernel(
    sigma: float,
    min_range: float,
    max_range: float,
    draws: wp.array(dtype=wp.int64),
    stream: int,
    ranges: wp.array3d(dtype=float),
):
    """Gaussian noise on every valid range of a scan (one camera: rows x beams); a reading that the
    noise takes out of the sensor's limits reads as out of range (REP 117)."""
    row, beam = wp.tid()
    r = ranges[0, row, beam]
    if not wp.isfinite(r):
        return
    state = draw_state(draws, stream, row * ranges.shape[2] + beam)
    r = r + sigma * wp.randn(state)
    if r > max_range:
        r = wp.inf
    elif r < min_range:
        r = -wp.inf
    ranges[0, row, beam] = r


def _uniform(count: int, low: float, high: float) -> tuple[float, ...]:
    return tuple(np.linspace(low, high, count))


#: Velodyne VLP-16: 16 beams from -15 to +15 degrees in 2 degree steps, 0.2 degrees at 10 Hz, 100 m.
#: Range noise ±3 cm (typical accuracy, taken as 1σ).
VLP16 = LidarModel(
    "vlp16", _uniform(16, -15.0, 15.0), 1800, 10.0, 0.5, 100.0, source="Velodyne VLP-16 datasheet", range_sigma=0.03
)
#: Ouster OS1-64/128: beams evenly over 45 degrees (+/-22.5; each unit's exact angles are in its
#: metadata, beam_altitude_angles), 1024 columns at 10 Hz, 120 m; range repeatability 1σ ±3 cm at
#: SNR 100 (±1.5 cm above SNR 250, ±10 cm at SNR 12).
OS1_64 = LidarModel(
    "os1-64", _uniform(64, -22.5, 22.5), 1024, 10.0, 0.3, 120.0, source="Ouster OS1 datasheet", range_sigma=0.03
)
OS1_128 = LidarModel(
    "os1-128", _uniform(128, -22.5, 22.5), 1024, 10.0, 0.3, 120.0, source="Ouster OS1 datasheet", range_sigma=0.03
)
#: Ouster OS0-128: 90 degrees of vertical field, 50 m; the OS1's range repeatability.
OS0_128 = LidarModel(
    "os0-128", _uniform(128, -45.0, 45.0), 1024, 10.0, 0.3, 50.0, source="Ouster OS0 datasheet", range_sigma=0.03
)
#: Livox Mid-360: a non-repetitive pattern over 360 x (-7 .. 52) degrees, 200k points/s at 10 Hz, 40 m;
#: range precision 1σ ≤ 2 cm at 10 m.
MID360 = LidarModel(
    "mid360", (-7.0, 52.0), 20_000, 10.0, 0.1, 40.0, "rosette", "Livox Mid-360 datasheet", range_sigma=0.02
)

PRESETS = {m.name: m for m in (VLP16, OS1_64, OS1_128, OS0_128, MID360)}


def lidar_model(name: LidarModel | str) -> LidarModel:
    """``name``'s preset (``PRESETS``), or ``name`` itself where it is a LidarModel."""
    if isinstance(name, LidarModel):
        return name
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(f"LiDAR {name!r}: choose one of {sorted(PRESETS)}, or a LidarModel")
    return PRESETS[name]


class RayTable:
    """A LiDAR's rays as the renderer's camera: ``height`` firing times x ``width`` beams, ranges
    limited radially (not along an optical axis)."""

    radial = True
    sampling = "beams"
    """Its rays are thin beams, not pixels (the splats' screen-space filter takes their finer step)."""
    distortion = (0.0, 0.0, 0.0, 0.0, 0.0)
    fx = fy = 1.0
    cx = cy = 0.0

    def __init__(self, directions: np.ndarray, min_range: float, max_range: float):
        self._directions = np.asarray(directions, dtype=np.float32)
        self.height, self.width = self._directions.shape[:2]
        self.min_depth, self.max_depth = float(min_range), float(max_range)

    def ray_directions(self) -> np.ndarray:
        return self._directions


@dataclass
class LidarScan:
    """One scan: ranges (REP 117) and intensities per (firing time, beam), and the points."""

    range: np.ndarray
    """(rows, beams) float32 metres."""
    intensity: np.ndarray
    """(rows, beams) float32, albedo x cos(incidence), 0 where nothing was hit."""
    time: np.ndarray
    """(rows,) seconds from the start of the scan."""
    directions: np.ndarray
    """(rows, beams, 3) unit rays, sensor frame at each point's time."""

    @property
    def ring(self) -> np.ndarray:
        """(rows, beams) the beam index of each point."""
        return np.broadcast_to(np.arange(self.range.shape[1]), self.range.shape)

    def points(self) -> np.ndarray:
        """(k, 3) valid points in the sensor frame, each where the sensor was when it measured it."""
        valid = np.isfinite(self.range)
        return self.directions[valid] * self.range[valid][:, None]


class Lidar:
    """A LiDAR on a world: ``scan`` from the sensor's pose at the start and at the end of the scan.
    ``goggles.rig.parts.lidar(scene, model)`` makes one.

    Args:
        renderer: a renderer (``goggles.render.Renderer``, LIDAR shading, depth and rgb written) whose
            one camera is ``model``'s ``RayTable``.
        model: your own, or a preset's name (``PRESETS``).
        seed, stream: the range noise's seed and this sensor's stream (``draws.stream_of`` its name).
        noise: False for exact ranges.
    """

    def __init__(self, renderer, model: LidarModel | str, *, seed: int = 0, stream: int = 0, noise: bool = True):
        self.model = model = lidar_model(model)
        self._scan = 0
        self._sigma = model.range_sigma if noise else 0.0
        self._stream = int(stream)
        self._table, self._times = renderer.cameras[0], model.rays(0)[1]
        if not isinstance(self._table, RayTable) or self._table.ray_directions().shape[:2] != (
            len(self._times),
            model.beams,
        ):
            raise ConfigError(f"LiDAR {model.name}: its renderer's one camera must be the model's RayTable")
        self.renderer = renderer
        self._draws = NoiseDraws(seed, self.renderer.device)
        if model.pattern != "spin":  # its rays are drawn on the device each scan
            load_kernels(rosette_rays_kernel.module, self.renderer.device)
        if self._sigma > 0.0:
            load_kernels(range_noise_kernel.module, self.renderer.device)

    def scan(
        self,
        T_WS_start: np.ndarray,
        T_WS_end: np.ndarray | None = None,
        carrier: int = -1,
        utime: int | None = None,
    ) -> LidarScan:
        """One scan, each point from the sensor's pose at its firing time (poses interpolated from the
        scan's start to its end; None: the sensor stands still). The actor instance ``carrier`` (the
        sensor's own vehicle; -1: none) is not seen. ``utime``: the scan's start (sim time, µs), which
        chooses its noise and a rosette's stretch of the pattern, so a replay scans what the run
        scanned; None: the scan after the last."""
        if utime is not None:
            self._scan = int(round(utime * 1e-6 * self.model.rate_hz))
            self._draws.at(utime)
        T_start = checks.poses(T_WS_start, "LiDAR pose at the scan's start", 1)
        T_end = T_start if T_WS_end is None else checks.poses(T_WS_end, "LiDAR pose at the scan's end", 1)
        directions = self._table.ray_directions()
        if self.model.pattern != "spin":  # this scan's stretch of the pattern, drawn on the device
            low, high = np.radians(self.model.elevations_deg)
            first = float((self._scan % ROSETTE_SCANS) * self.model.columns)
            rays = self.renderer.rays_C
            d = self.renderer.device  # named: on a machine with a GPU, Warp's default device is CUDA
            wp.launch(rosette_rays_kernel, dim=self.model.columns, inputs=[first, low, high], outputs=[rays], device=d)
            directions = rays.numpy()[0].copy()
        self._scan += 1
        self.renderer.render(T_start, T_end, [carrier])
        if self._sigma > 0.0:
            m, d = self.model, self.renderer.device
            ranges = self.renderer.buffers.depth
            inputs = [self._sigma, m.min_range, m.max_range, self._draws.array, self._stream]
            wp.launch(range_noise_kernel, dim=ranges.shape[1:], inputs=inputs, outputs=[ranges], device=d)
        self._draws.next()
        images = self.renderer.images()
        intensity = images.rgb[0, ..., 0] * np.float32(1.0 / 255.0)  # grey: every channel alike
        return LidarScan(images.depth[0], intensity, self._times, directions)

    def close(self) -> None:
        self.renderer.close()
