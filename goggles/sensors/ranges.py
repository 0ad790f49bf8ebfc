"""Time-of-flight and range sensors: a single beam (a downward altimeter) or a grid of zones.

Each zone is one ray through its centre. Readings follow REP 117: +inf when nothing returns within
the maximum range, -inf when the target is closer than the minimum range, NaN never (no invalid
returns are modelled). Noise is Gaussian on valid readings, from a seeded Warp random stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles import checks
from goggles.errors import ConfigError
from goggles.runtime.device_copies import HostMirror, fetch
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.runtime.progress import load_kernels
from goggles.sensors.draws import NoiseDraws, draw_state
from goggles.world import DeviceScene
from goggles.world.queries import ActorData, Carriers, closer_actor_hit, static_hit
from goggles.world.splats import SplatData, trace_splats

#: Forward kernels only: no autodiff, a tenth of the compile time (CUDA 82 s -> 8 s).
wp.set_module_options(FORWARD_ONLY)


@dataclass(frozen=True)
class RangeSensorModel:
    """A range sensor: zones, field of view, limits and noise. Beams point along the sensor's +z."""

    name: str
    rows: int
    cols: int
    fov_deg: tuple[float, float]
    """Horizontal and vertical field of view of the zone grid, degrees (0 for a single beam)."""
    min_range: float
    """m."""
    max_range: float
    """m."""
    sigma: float
    """m, standard deviation of the range noise."""

    def __post_init__(self) -> None:
        if self.rows < 1 or self.cols < 1 or not 0 <= self.min_range < self.max_range or self.sigma < 0:
            raise ConfigError(f"range sensor {self.name!r}: needs rows, cols >= 1, 0 <= min < max, sigma >= 0")
        if not all(0 <= f < 180 for f in self.fov_deg):
            raise ConfigError(f"range sensor {self.name!r}: field of view {self.fov_deg} must be in [0, 180) degrees")

    def directions(self) -> np.ndarray:
        """(rows, cols, 3) unit beam directions in the sensor frame (x right, y down, z along the beam)."""
        h, v = (math.tan(math.radians(f) / 2.0) for f in self.fov_deg)
        x = (np.arange(self.cols) + 0.5) / self.cols * 2.0 - 1.0
        y = (np.arange(self.rows) + 0.5) / self.rows * 2.0 - 1.0
        X, Y = np.meshgrid(x * h, y * v)
        d = np.stack([X, Y, np.ones_like(X)], axis=-1)
        return d / np.linalg.norm(d, axis=-1, keepdims=True)


#: The FlightGoggles downward altimeter (LightWare SF11/B): one beam, 20 m, sigma 0.0949 m.
FLIGHTGOGGLES_ALTIMETER = RangeSensorModel("flightgoggles-altimeter", 1, 1, (0.0, 0.0), 0.0, 20.0, 0.0949)
#: A VL53L5CX-like multizone ToF: 8 x 8 zones over 45 x 45 degrees, 0.02-4 m (sigma ~1 cm, an estimate
#: from its datasheet's accuracy figures, not a measured value).
VL53L5CX = RangeSensorModel("vl53l5cx", 8, 8, (45.0, 45.0), 0.02, 4.0, 0.01)

PRESETS = {m.name: m for m in (FLIGHTGOGGLES_ALTIMETER, VL53L5CX)}


def range_sensor_model(model: RangeSensorModel | str, what: str = "range sensor") -> RangeSensorModel:
    """``model``, or the preset it names (``PRESETS``); errors start with ``what``."""
    if isinstance(model, RangeSensorModel):
        return model
    if isinstance(model, str) and model in PRESETS:
        return PRESETS[model]
    raise ConfigError(f"{what} {model!r}: a preset ({', '.join(PRESETS)}) or a RangeSensorModel")


@wp.kernel
def measure_ranges_kernel(
    static_mesh: wp.uint64,
    actors: ActorData,
    splats: SplatData,
    R_WS: wp.array(dtype=wp.mat33),
    p_WS: wp.array(dtype=wp.vec3),
    directions_S: wp.array(dtype=wp.vec3),
    min_range: float,
    max_range: float,
    sigma: float,
    draws: wp.array(dtype=wp.int64),
    first_sensor: int,
    carriers: wp.array(dtype=wp.int32),
    out_range: wp.array2d(dtype=float),
):
    """One (sensor pose, zone) reading; the noise of sensor s from stream (first_sensor + s, zone).
    The actor instance ``carriers[s]`` (the sensor's own vehicle; -1: none) is not seen. A beam stops
    in splats where their opacity passes one half, as a depth camera's pixel does."""
    s, z = wp.tid()
    direction = R_WS[s] * directions_S[z]
    hit = static_hit(static_mesh, p_WS[s], direction, max_range)
    if actors.count > 0:
        hit = closer_actor_hit(actors, actors.every, actors.count, carriers[s], p_WS[s], direction, hit)
    if splats.count > 0:
        end = max_range
        if hit.result:
            end = hit.t
        seen = trace_splats(splats, p_WS[s], direction, 0.0, end, 0.0)
        if seen.t_half >= 0.0:
            hit.result = True
            hit.t = seen.t_half
    if not hit.result:
        out_range[s, z] = wp.inf
    elif hit.t < min_range:
        out_range[s, z] = -wp.inf
    else:
        reading = hit.t
        if sigma > 0.0:
            rng = draw_state(draws, first_sensor + s, z)
            reading += sigma * wp.randn(rng)
        out_range[s, z] = reading


class RangeSensor:
    """Readings of one range-sensor model from any number of poses in one launch.

    Args:
        scene: the world (static scene and placed actors).
        model: the sensor model (your own, or a ``PRESETS`` name).
        seed: seed of the noise; every ``measure`` call draws new noise, reproducibly, or the noise of
            the measurement it names (``key``: its sim time).
        noise: False to read true ranges.
        stream: the first pose's noise stream (``draws.stream_of`` the sensor's name); pose i's is
            ``stream + i``.
    """

    def __init__(
        self, scene: DeviceScene, model: RangeSensorModel | str, *, seed: int = 0, noise: bool = True, stream: int = 0
    ):
        self.scene = scene
        self.model = model = range_sensor_model(model)
        self.noise = noise
        d = scene.device
        self._draws, self._stream = NoiseDraws(seed, d), int(stream)
        self._directions = wp.array(model.directions().reshape(-1, 3), dtype=wp.vec3, device=d)
        self._buffers: dict[int, tuple] = {}
        load_kernels(measure_ranges_kernel.module, d)  # compiled now, not inside the first reading
        """Per batch size: the pose and reading arrays, allocated once (a sensor fires many times)."""

    def measure(self, T_WS: np.ndarray, carriers: np.ndarray | None = None, key: int | None = None) -> np.ndarray:
        """Readings from ``T_WS`` (n, 4, 4) sensor poses (beam along each pose's +z).

        Args:
            carriers: (n,) the actor instance carrying each pose's sensor (its vehicle's body, which
                it does not see), -1 none; None: none carries any.
            key: the measurement whose noise to draw (its sim time, µs); None: the one after the last.

        Returns:
            (n, rows, cols) float32 metres, REP 117 values.
        """
        T_WS = checks.poses(T_WS, "range sensor poses")
        n, d = len(T_WS), self.scene.device
        if n not in self._buffers:
            out = wp.zeros((n, self.model.rows * self.model.cols), dtype=float, device=d)
            R_WS, p_WS = wp.zeros(n, dtype=wp.mat33, device=d), wp.zeros(n, dtype=wp.vec3, device=d)
            self._buffers[n] = (R_WS, p_WS, Carriers(n, d, "range sensor poses"), out, HostMirror(out))
        R_WS, p_WS, carried_by, out, host = self._buffers[n]
        on_device = carried_by.set(carriers)
        if key is not None:
            self._draws.at(key)
        R_WS.assign(T_WS[:, :3, :3].astype(np.float32))
        p_WS.assign(T_WS[:, :3, 3].astype(np.float32))
        if self.scene.splats is not None:
            self.scene.splats.fit(None, 0.0)  # after a splat prop moved
        wp.launch(
            measure_ranges_kernel,
            dim=(n, self.model.rows * self.model.cols),
            inputs=[
                self.scene.mesh.id,
                self.scene.actors,
                self.scene.splat_data,
                R_WS,
                p_WS,
                self._directions,
                self.model.min_range,
                self.model.max_range,
                self.model.sigma if self.noise else 0.0,
                self._draws.array,
                self._stream,
                on_device,
            ],
            outputs=[out],
            device=d,
        )
        self._draws.next()  # each call draws new noise, the same on a rerun
        (reading,) = fetch([host])
        return reading.reshape(n, self.model.rows, self.model.cols).copy()  # the buffer is reused


def downward_pose(T_WB: np.ndarray) -> np.ndarray:
    """(4, 4) pose of a sensor at the body origin whose beam (+z) points along body -z (down)."""
    T_BS = np.diag([1.0, -1.0, -1.0, 1.0])  # x forward, y right, z down: a proper rotation about x
    return np.asarray(T_WB, dtype=np.float64) @ T_BS
