"""Infrared beacons seen by cameras: projected with the camera model, occlusion-tested by ray casting.

A beacon is a point with an id ``<landmark>/<marker>``, fixed in the world or attached to an actor
instance. For each camera a beacon is detected when it is in front of the camera, inside the image,
and nothing lies between it and the camera centre (a ray from the beacon, started a little off it so
that a beacon on a surface does not occlude itself). Detections are ordered by id, always.
Optional noise: Gaussian pixel error, dropouts, and false positives (Poisson count, uniform pixels).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles import checks
from goggles.errors import ConfigError
from goggles.render.camera import CameraModel
from goggles.render.projection import inside_image, lens_coefficients, project
from goggles.runtime.device_copies import HostMirror, collect
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.runtime.progress import load_kernels
from goggles.sensors.draws import host_generator
from goggles.world import Beacon, DeviceScene
from goggles.world.queries import ActorData, Carriers, Hit, closer_actor_hit
from goggles.world.splats import SplatData, trace_splats

#: Forward kernels only: no autodiff, a tenth of the compile time (CUDA 82 s -> 8 s).
wp.set_module_options(FORWARD_ONLY)

#: Start offset of the occlusion ray off the beacon, metres, plus a part growing with distance.
OCCLUSION_OFFSET_M = 1.0e-3
OCCLUSION_OFFSET_PER_M = 1.0e-5


@dataclass(frozen=True)
class BeaconNoise:
    """Detector imperfections (FlightGoggles had none; its users asked for them)."""

    pixel_sigma: float = 0.0
    """Standard deviation of the pixel error per axis, pixels."""
    dropout: float = 0.0
    """Probability that a visible beacon is not reported."""
    false_positives: float = 0.0
    """Mean number of spurious detections per image (id ``false/<n>``, range NaN)."""


@dataclass(frozen=True)
class Detection:
    id: str
    camera: int
    u: float
    """Pixels, OpenCV convention (centre of the top-left pixel at 0, 0)."""
    v: float
    range: float
    """Metres from the camera centre (NaN for a false positive)."""


@wp.func
def detect_beacon(
    static_mesh: wp.uint64,
    actors: ActorData,
    splats: SplatData,
    candidates: wp.array(dtype=wp.int32),
    count: int,
    carrier: int,
    R_WC: wp.mat33,
    p_WC: wp.vec3,
    intrinsics: wp.vec4,
    lens: int,
    coefficients: lens_coefficients,
    size: wp.vec2i,
    beacon_W: wp.vec3,
) -> wp.vec3:
    """A beacon as one camera detects it: (u, v) pixels and range (m) when it is in front, inside the
    image, and nothing of the static scene or of the first ``count`` actor instances in
    ``candidates`` (but ``carrier``, the camera's own vehicle; -1: none) lies between, nor splats whose
    opacity passes one half; (0, 0, 0) otherwise."""
    p_C = wp.transpose(R_WC) * (beacon_W - p_WC)
    uv = project(p_C, intrinsics, lens, coefficients)  # imaged by the camera's lens (a pinhole's: in front)
    if not inside_image(uv, size[0], size[1]):
        return wp.vec3(0.0)
    to_camera = p_WC - beacon_W
    distance = wp.length(to_camera)
    direction = to_camera / distance
    offset = OCCLUSION_OFFSET_M + OCCLUSION_OFFSET_PER_M * distance
    if distance > 2.0 * offset:
        origin = beacon_W + direction * offset
        reach = distance - 2.0 * offset
        if wp.mesh_query_ray_anyhit(static_mesh, origin, direction, reach):
            return wp.vec3(0.0)
        hit = Hit()
        hit.result = False
        hit.t = reach
        hit = closer_actor_hit(actors, candidates, count, carrier, origin, direction, hit)
        if hit.result:
            return wp.vec3(0.0)
        if splats.count > 0:
            if trace_splats(splats, origin, direction, 0.0, reach, 0.0).t_half >= 0.0:
                return wp.vec3(0.0)
    return wp.vec3(uv[0], uv[1], distance)


@wp.kernel
def detect_beacons_kernel(
    static_mesh: wp.uint64,
    actors: ActorData,
    splats: SplatData,
    R_WC: wp.array(dtype=wp.mat33),
    p_WC: wp.array(dtype=wp.vec3),
    intrinsics: wp.array(dtype=wp.vec4),
    lens: wp.array(dtype=wp.int32),
    coefficients: wp.array(dtype=lens_coefficients),
    sizes: wp.array(dtype=wp.vec2i),
    carriers: wp.array(dtype=wp.int32),
    beacons_W: wp.array(dtype=wp.vec3),
    out: wp.array3d(dtype=float),
):
    """One (camera, beacon) pair, occluded by every placed actor but the camera's carrier. ``out[c, b]``
    is (u, v, range): one array, so one copy brings every detection; range 0 where not detected."""
    c, b = wp.tid()
    seen = detect_beacon(
        static_mesh,
        actors,
        splats,
        actors.every,
        actors.count,
        carriers[c],
        R_WC[c],
        p_WC[c],
        intrinsics[c],
        lens[c],
        coefficients[c],
        sizes[c],
        beacons_W[b],
    )
    for k in range(3):
        out[c, b, k] = seen[k]


class BeaconSensor:
    """Beacon detections of a set of cameras against a DeviceScene (static scene + placed actors).

    Args:
        scene: the world; actors must be placed (``set_actors``) before ``detect``.
        beacons: the beacons; ids must be unique.
        cameras: the cameras (any sizes and lenses: each beacon projected with its camera's).
        noise: optional detector noise.
        seed: seed of the noise (reproducible).
        streams: per camera, its noise stream (``draws.stream_of`` its name); None: the cameras' indices.

    Each ``read`` draws the next detection's noise; ``at(key)`` chooses the detection (its sim time),
    so a replay draws what the run drew at that instant.
    """

    def __init__(
        self,
        scene: DeviceScene,
        beacons: Sequence[Beacon],
        cameras: Sequence[CameraModel],
        *,
        noise: BeaconNoise | None = None,
        seed: int = 0,
        streams=None,
    ):
        for b in beacons:
            if checks.finite_vector(b.position, 3) is None or not (b.actor is None or checks.is_whole(b.actor, 0)):
                raise ConfigError(
                    f"beacon {b.id}: position must be 3 finite numbers and actor None or an actor's index, "
                    f"got {b.position!r}, {b.actor!r}"
                )
        ids = [b.id for b in beacons]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"beacon ids must be unique, got duplicates in {sorted(ids)}")
        if not cameras:
            raise ConfigError("a beacon sensor needs at least one camera")
        self.scene = scene
        self.beacons = tuple(sorted(beacons, key=lambda b: b.id))  # stable order by id (FlightGoggles #91)
        self.cameras = tuple(cameras)
        self.noise = noise or BeaconNoise()
        if not (self.noise.pixel_sigma >= 0 and 0 <= self.noise.dropout <= 1 and self.noise.false_positives >= 0):
            raise ConfigError(f"beacon noise {self.noise} needs sigma >= 0, 0 <= dropout <= 1, false positives >= 0")
        self._seed, self._key = int(seed), 0
        self._streams = list(range(len(cameras)) if streams is None else streams)
        d = scene.device
        n, m = len(cameras), max(1, len(self.beacons))
        self._intrinsics = wp.array([(c.fx, c.fy, c.cx, c.cy) for c in cameras], dtype=wp.vec4, device=d)
        self._lens = wp.array([c.lens_id for c in cameras], dtype=wp.int32, device=d)
        self._coefficients = wp.array([c.kernel_coefficients() for c in cameras], dtype=lens_coefficients, device=d)
        self._sizes = wp.array([(c.width, c.height) for c in cameras], dtype=wp.vec2i, device=d)
        self._R = wp.zeros(n, dtype=wp.mat33, device=d)
        self._p = wp.zeros(n, dtype=wp.vec3, device=d)
        self._beacons_W = wp.zeros(m, dtype=wp.vec3, device=d)
        self._carriers = Carriers(n, d, "beacon detection's cameras")
        self._out = wp.zeros((n, m, 3), dtype=float, device=d)
        self._results = HostMirror(self._out)
        self._launched = False
        load_kernels(detect_beacons_kernel.module, d)  # compiled now, not inside the first frame
        self._local = np.array([b.position for b in self.beacons], dtype=np.float64).reshape(-1, 3)
        self._actor = np.array([-1 if b.actor is None else b.actor for b in self.beacons], dtype=np.int64)

    def world_positions(self, T_WA: np.ndarray | None = None) -> np.ndarray:
        """(m, 3) beacon positions in the world, given the (k, 4, 4) poses of the actor instances."""
        positions = self._local.copy()
        attached = self._actor >= 0
        if attached.any():
            if T_WA is None or len(T_WA) <= self._actor.max():
                raise ConfigError(f"beacons are attached to actor {self._actor.max()}; give the poses of the actors")
            T = np.asarray(T_WA, dtype=np.float64)[self._actor[attached]]
            positions[attached] = np.einsum("kij,kj->ki", T[:, :3, :3], self._local[attached]) + T[:, :3, 3]
        return positions

    def detect(
        self, T_WC: np.ndarray, T_WA: np.ndarray | None = None, carriers: np.ndarray | None = None
    ) -> list[Detection]:
        """Detections of every camera, ordered by camera then beacon id.

        Args:
            T_WC: (n, 4, 4) camera optical-frame poses in the world.
            T_WA: (k, 4, 4) actor instance poses (as placed in the scene), for attached beacons.
            carriers: (n,) the actor instance carrying each camera (its vehicle's body, which does
                not hide beacons from it), -1 none; None: none carries any.
        """
        mirror = self.launch(T_WC, T_WA, carriers)
        if mirror is not None:
            collect([mirror])
        return self.read()

    def launch(
        self, T_WC: np.ndarray, T_WA: np.ndarray | None = None, carriers: np.ndarray | None = None
    ) -> HostMirror | None:
        """Begin ``detect`` on the device: the mirror whose copy is enqueued (None: no beacons), for the
        caller to ``collect`` with its other copies in one synchronisation before ``read``."""
        T_WC = checks.poses(T_WC, "beacon detection's camera poses", len(self.cameras))
        self._launched = bool(self.beacons)
        if not self.beacons:
            return None
        self._R.assign(T_WC[:, :3, :3].astype(np.float32))
        self._p.assign(T_WC[:, :3, 3].astype(np.float32))
        self._beacons_W.assign(self.world_positions(T_WA).astype(np.float32))
        carried_by = self._carriers.set(carriers)
        if self.scene.splats is not None:
            self.scene.splats.fit(None, 0.0)  # after a splat prop moved
        wp.launch(
            detect_beacons_kernel,
            dim=(len(self.cameras), len(self.beacons)),
            inputs=[
                self.scene.mesh.id,
                self.scene.actors,
                self.scene.splat_data,
                self._R,
                self._p,
                self._intrinsics,
                self._lens,
                self._coefficients,
                self._sizes,
                carried_by,
                self._beacons_W,
            ],
            outputs=[self._out],
            device=self.scene.device,
        )
        self._results.enqueue()
        return self._results

    def at(self, key: int) -> None:
        """Make the next ``read`` draw detection ``key``'s noise (its sim time, µs)."""
        self._key = int(key)

    def read(self) -> list[Detection]:
        """The detections of the last ``launch``, once its copy is collected; noise drawn here."""
        key, self._key = self._key, self._key + 1
        rngs = [host_generator(self._seed, stream, key) for stream in self._streams]
        if not self._launched:
            return self._false_positives([], rngs)
        out = self._results.array
        uv, distance = out[..., :2], out[..., 2]
        visible = distance > 0.0
        detections = []
        noise = self.noise
        for c, rng in enumerate(rngs):
            for b, beacon in enumerate(self.beacons):
                if not visible[c, b] or (noise.dropout and rng.random() < noise.dropout):
                    continue
                u, v = (uv[c, b] + rng.normal(0.0, noise.pixel_sigma, 2)) if noise.pixel_sigma else uv[c, b]
                detections.append(Detection(beacon.id, c, float(u), float(v), float(distance[c, b])))
        return self._false_positives(detections, rngs)

    def _false_positives(self, detections: list[Detection], rngs) -> list[Detection]:
        if not self.noise.false_positives:
            return detections
        for c, (camera, rng) in enumerate(zip(self.cameras, rngs)):
            for k in range(rng.poisson(self.noise.false_positives)):
                u, v = rng.uniform([-0.5, -0.5], [camera.width - 0.5, camera.height - 0.5])
                detections.append(Detection(f"false/{k}", c, float(u), float(v), float("nan")))
        return sorted(detections, key=lambda d: (d.camera, d.id))
