"""Renderer: a batch of cameras traced through the world (``goggles.world.DeviceScene``).

Four primary-ray backends, one set of output kernels:

* ``warp``: Warp's BVH traversal in the render kernel. On CUDA one launch covers every pixel of
  every camera. On the CPU a Warp launch runs on one thread but releases the GIL, so image rows are
  interleaved across a pool of threads (row k to thread k mod T, balancing sky rows against ground).
* ``bvh``: the same launches, traversing goggles' own BVH of the static scene instead
  (``goggles.world.ray_bvh``: triangles in leaf order, the watertight test's shear once per ray).
* ``wide``: the same tree collapsed into 8-wide nodes with boxes quantized to bytes
  (``goggles.world.wide_bvh``), a third of the steps per ray: made for GPUs, opt-in until a GPU's
  measurement says it wins (``goggles bench bvh`` counts the steps of both on the same rays).
* ``embree`` (CPU): the rows are cut into chunks (rows of a camera, or whole cameras of a learning
  batch's small images) that a pool of threads takes in turn; per chunk
  ``make_rays_kernel`` writes the world-frame rays, Embree finds their closest static hits (SIMD
  traversal, 2-3x Warp's per thread), and the same ``kernels.render_kernel`` reads those hits, adds
  the actors and writes every output.

``auto`` is Embree on the CPU when embreex is installed, Warp otherwise: on a 2-core CPU ``bvh``
renders the 199k-triangle arena as fast as ``warp`` (a 1M-triangle terrain 1.2-1.5x faster), and on
CUDA the choice waits for a GPU's measurement (``goggles bench render --device cuda`` times both).
Outputs that nobody asked for (``outputs=``) are neither allocated nor written.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np
import warp as wp

from goggles import checks
from goggles.errors import ConfigError
from goggles.render import invalid, kernels, splat_raster, splats
from goggles.render.camera import CameraModel
from goggles.render.camera_looks import CameraLooks
from goggles.render.looks import Look
from goggles.render.settings import BACKENDS, OUTPUTS, RenderSettings
from goggles.render.shading import Lighting, Shading, face_reflectivity_kernel
from goggles.render.sunlit import sunlit_faces
from goggles.runtime.device_memory import check_fits
from goggles.runtime.launches import Launches
from goggles.runtime.profile import stage
from goggles.runtime.progress import load_kernels
from goggles.runtime.recorded_work import recording, struct_key
from goggles.world import DeviceScene

log = logging.getLogger(__name__)


#: Every output a render can write; ``depth`` and ``status`` are always written.
_ALIGN = 256  # bytes between outputs in the device block (CUDA's allocation alignment)


def default_render_threads() -> int:
    """CPU render threads where none are asked for: ``$GOGGLES_RENDER_THREADS`` (batch replays run one
    process per core, each with one thread), else one per core."""
    text = os.environ.get("GOGGLES_RENDER_THREADS", "").strip()
    threads = int(text) if text.isascii() and text.isdigit() else -1 if text else 0
    if threads < 0:
        raise ConfigError(
            f"GOGGLES_RENDER_THREADS={text[:32]!r}: give a whole number of render threads (0: one per core)"
        )
    return threads or os.cpu_count() or 1


class BlockSpan(NamedTuple):
    """Where an output lies in the renderer's device block, and its host view's type and shape."""

    offset: int
    size: int
    dtype: np.dtype
    shape: tuple[int, ...]

    def view(self, block: np.ndarray, start: int) -> np.ndarray:
        """This output inside a host copy of the block's bytes (any contiguous shape) from ``start`` on."""
        begin = self.offset - start
        return block.reshape(-1)[begin : begin + self.size].view(self.dtype).reshape(self.shape)


@dataclass
class Images:
    """Host copies of one render, every array indexed [camera, row, column]; None for an output the
    renderer was not asked for.

    depth and range follow REP 118: +inf nothing within max_depth, -inf closer than min_depth,
    NaN invalid (stereo shadow: the surface is hidden from the partner camera).
    """

    depth: np.ndarray
    """(n, H, W) float32 z-depth along the optical axis, metres."""
    range: np.ndarray | None
    """(n, H, W) float32 Euclidean distance from the camera centre, metres."""
    rgb: np.ndarray | None
    """(n, H, W, 3) uint8 shaded colour."""
    segmentation: np.ndarray | None
    """(n, H, W) int32 class id, 0 where nothing was hit."""
    normal_W: np.ndarray | None
    """(n, H, W, 3) float32 unit surface normal facing the camera, world frame; zero where nothing was hit."""
    face: np.ndarray | None
    """(n, H, W) int32 index of the triangle hit (static faces first, then actor shapes'), -1 where nothing was hit."""
    status: np.ndarray
    """(n, H, W) int8 pixel status: a ``kernels.STATUS_*`` code."""


def choose_backend(backend: str, device) -> str:
    """The primary-ray backend that runs: ``warp``, ``bvh``, ``wide`` or ``embree`` (``auto``: Embree on the CPU when
    installed, else Warp's; goggles' own ``bvh`` on CUDA, the fastest there: docs/benchmarks.md, "On an H200").

    Raises:
        ConfigError: an unknown name, Embree asked for on CUDA, or Embree asked for but not installed.
    """
    from goggles.render.embree import embree_available

    if backend not in BACKENDS:
        raise ConfigError(f"render backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if backend == "auto":
        if device.is_cuda:
            return "bvh"
        return "embree" if embree_available() else "warp"
    if backend == "embree" and device.is_cuda:
        raise ConfigError(
            f"the embree backend traces on the CPU, not on {device}: use --backend warp, bvh, wide or auto"
        )
    if backend == "embree" and not embree_available():
        raise ConfigError("--backend embree needs embreex: pip install embreex (x86-64 Linux or Windows)")
    return backend


def _pixel_order(order: str, backend: str, device, width: int) -> str:
    """The pixel order a render runs in: ``tiles`` or ``rows``."""
    tileable = backend != "embree" and width % kernels.TILE_COLUMNS == 0
    if order == "auto":
        return "tiles" if device.is_cuda and tileable else "rows"
    if order == "tiles" and not tileable:
        raise ConfigError(
            f"pixel order tiles needs the warp, bvh or wide backend and a width that is a multiple of "
            f"{kernels.TILE_COLUMNS} (here {backend}, {width} px): use rows"
        )
    return order


class Renderer:
    """Renders a batch of same-size cameras against a DeviceScene (one launch on CUDA; on the CPU a
    launch per worker thread, or per chunk of rows with Embree).

    Args:
        scene: the uploaded static scene; the renderer uses its device.
        cameras: intrinsics of each camera (same width and height; distortion may differ).
        settings: what it writes and how it lights and traces (``RenderSettings``; default: every
            output, sunlit with shadows, the best tracer here).
        shadow_partner: for each camera, the index of the camera that must also see a point for this
            camera's depth of it to be valid (a stereo rig's left camera names the right one), or -1.
    """

    def __init__(
        self,
        scene: DeviceScene,
        cameras: Sequence[CameraModel],
        settings: RenderSettings | None = None,
        *,
        shadow_partner: Sequence[int] | None = None,
    ):
        settings = settings if settings is not None else RenderSettings()
        if not isinstance(settings, RenderSettings):
            raise ConfigError(f"a renderer's settings are a RenderSettings, got {settings!r}")
        if not cameras:
            raise ConfigError("a renderer needs at least one camera")
        odd = next((c for c in cameras if not hasattr(c, "ray_directions")), None)
        if odd is not None:
            raise ConfigError(f"a renderer's cameras are CameraModels (or a LiDAR's RayTable), got {odd!r}")
        self.settings = settings
        shading, outputs, threads = settings.shading, settings.outputs, settings.threads
        width, height = cameras[0].width, cameras[0].height
        if any((c.width, c.height) != (width, height) for c in cameras):
            raise ConfigError("cameras rendered in one batch must share width and height; use one Renderer per size")
        n = len(cameras)
        partner = np.full(n, -1, np.int32) if shadow_partner is None else np.asarray(shadow_partner, np.int32)
        if partner.shape != (n,) or np.any((partner < -1) | (partner >= n)) or np.any(partner == np.arange(n)):
            raise ConfigError(f"shadow_partner {partner.tolist()} must give, per camera, another camera index or -1")
        self.backend = choose_backend(settings.backend, scene.device)
        self.pixel_order = _pixel_order(settings.pixel_order, self.backend, scene.device, width)
        self.outputs = frozenset({"depth", "status", *outputs} - ({"rgb"} if shading == Shading.NONE else set()))
        self.layout, block_bytes = _block_layout(set(outputs), self.outputs, n, height, width)
        """Where each output lies in the device block (``block``), in block order."""
        # One ray table per distinct camera model (a learning batch's thousands of cameras share one).
        models: dict = {}
        ray_table = np.array([models.setdefault(c, len(models)) for c in cameras], np.int32)
        check_fits(
            scene.device,
            block_bytes * (2 if scene.device.is_cpu else 1) + len(models) * width * height * RAY_TABLE_BYTES,
            f"rendering {n} camera(s) of {width}x{height}",
            "use fewer or smaller cameras",
        )
        self.scene = scene
        self.cameras = tuple(cameras)
        self._has_partners = bool(np.any(partner >= 0))
        self.width, self.height = width, height
        self.device = d = scene.device
        self.threads = 1 if d.is_cuda else max(1, min(threads or default_render_threads(), height))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="goggles-render") if self.threads > 1 else None
        self._launches = Launches(d, keep=128)
        """Every per-frame launch, replayed packed where its arguments are the same (a frame's are)."""

        tables = np.stack([model.ray_directions() for model in models])  # (m, H, W, 3)
        self._has_outside = bool(np.any(~np.any(tables != 0.0, axis=-1)))  # a lens's pixels that see nothing
        batch = kernels.CameraBatch()
        batch.rays_C = wp.array(tables, dtype=wp.vec3, device=d)
        batch.ray_table = wp.array(ray_table, dtype=wp.int32, device=d)
        batch.R_WC = wp.zeros((n, height), dtype=wp.mat33, device=d)
        batch.p_WC = wp.zeros((n, height), dtype=wp.vec3, device=d)
        batch.partner = wp.array(partner, dtype=wp.int32, device=d)
        batch.intrinsics = wp.array([(c.fx, c.fy, c.cx, c.cy) for c in cameras], dtype=wp.vec4, device=d)
        batch.lens = wp.array([getattr(c, "lens_id", 0) for c in cameras], dtype=wp.int32, device=d)
        coefficients = [c.kernel_coefficients() if hasattr(c, "kernel_coefficients") else (0.0,) * 6 for c in cameras]
        batch.coefficients = wp.array(coefficients, dtype=kernels.lens_coefficients, device=d)
        batch.min_depth = wp.array([c.min_depth for c in cameras], dtype=float, device=d)
        batch.max_depth = wp.array([c.max_depth for c in cameras], dtype=float, device=d)
        self._radial = np.array([bool(getattr(c, "radial", False)) for c in cameras])  # a LiDAR's, a wide lens
        batch.radial = wp.array(self._radial.astype(np.int32), dtype=wp.int32, device=d)
        self._cameras = batch
        if scene.splats is not None:  # each pixel's footprint, for the splats' screen-space filter
            beams = [getattr(model, "sampling", "pixels") == "beams" for model in models]
            footprints = np.stack([pixel_footprints(table, thin) for table, thin in zip(tables, beams)])
            self._footprints = wp.array(footprints, dtype=float, device=d)
            self._largest_footprint = float(footprints.max())
        rays = tables.reshape(len(tables), -1, 3)
        with np.errstate(divide="ignore", invalid="ignore"):  # radial sensors look every way: never culled
            slopes = rays[..., :2] / rays[..., 2:]  # x/z and y/z: the view's extent, distortion included
        self._view_slopes = np.stack([slopes.min(axis=1), slopes.max(axis=1)], axis=1)[ray_table]  # (n, 2, 2)
        self._max_depth = np.array([c.max_depth for c in cameras])
        culling = kernels.ActorCulling()
        culling.count = wp.zeros(n, dtype=wp.int32, device=d)
        culling.index = wp.zeros((n, max(1, scene.max_actors)), dtype=wp.int32, device=d)
        tiles = (-(-height // kernels.ACTOR_TILE), -(-width // kernels.ACTOR_TILE)) if scene.max_actors else (1, 1)
        culling.tile_count = wp.full((n, *tiles), -1, dtype=wp.int32, device=d)
        culling.tile_index = wp.zeros((n, *tiles, kernels.TILE_ACTORS), dtype=wp.int32, device=d)
        culling.shadow_casters = wp.full(n, -1, dtype=wp.int32, device=d)
        self._tile_slopes = _tile_slopes(tables, kernels.ACTOR_TILE) if scene.max_actors else None  # per ray table
        self._ray_table = ray_table
        self._culling, self._culled_any = culling, False
        self._posed_count, self._posed_lists = -1, None  # what render_posed last listed (-1: none)
        self._splats_seen = scene.splats is not None
        """May the cameras at their poses see the captures (``_splats_in_view``)?"""
        self._splat_raster = None
        """The captures' rasteriser (``splat_raster``), where it is chosen and can serve these cameras."""
        if scene.splats is not None and _rasterises(settings.splat_pass, cameras, d, scene.splats.count):
            need = splat_raster.raster_bytes(n, scene.splats.count, width, height)
            check_fits(d, need, f"the splats' rasteriser for {n} camera(s)", "use splat_pass='rays'")
            self._splat_raster = splat_raster.SplatRaster(scene.splats, n, width, height, d)

        light = Lighting()
        light.shading = int(shading if "rgb" in self.outputs else Shading.NONE)
        sun = np.asarray(settings.sun_W, np.float64)
        light.sun_W = wp.vec3(*(sun / np.linalg.norm(sun)))
        light.ambient = float(settings.ambient)
        light.background = wp.vec3(*settings.background_rgb)
        light.shadows = bool(settings.shadows)
        light.sky = settings.sky_rgb is not None
        light.zenith = wp.vec3(*(settings.sky_rgb if settings.sky_rgb is not None else settings.background_rgb))
        light.sunlit, light.static_faces = wp.zeros(1, dtype=wp.int8, device=d), 0
        if settings.shadows and light.shading == Shading.SUN:  # faces no static geometry shades skip the static ray
            light.sunlit, light.static_faces = sunlit_faces(scene, sun / np.linalg.norm(sun)), scene.num_faces
        self._light = light
        self._looks = settings.looks and light.shading in (Shading.SUN, Shading.UNLIT)
        """Each camera has its own look (``set_looks``): the render kernel built with them."""
        self.looks = CameraLooks(scene, settings, light, n if self._looks else 1)

        wanted = kernels.OutputFlags()
        wanted.range, wanted.segmentation = "range" in self.outputs, "segmentation" in self.outputs
        wanted.normal, wanted.face = "normal_W" in self.outputs, "face" in self.outputs
        self._wanted = wanted

        # Every output in one device block (``_block_layout``), in rows of _ALIGN bytes: one Warp dimension
        # holds fewer than 2**31 elements, and 2048 cameras of 480x270 depth and segmentation take 2.4 GB.
        self._block = wp.zeros((block_bytes // _ALIGN, _ALIGN), dtype=wp.uint8, device=d)
        out = kernels.ImageBuffers()
        for name, (dtype, channels, _, _) in _KINDS.items():
            span = self.layout[name]
            shape = span.shape[:3] + channels
            view = wp.array(ptr=self._block.ptr + span.offset, dtype=dtype, shape=shape, device=d)
            view._ref = self._block  # a view keeps the block alive (a consumer may outlive the renderer)
            setattr(out, name, view)
        self.buffers = out
        self._chunks: list[tuple[int, int, int, int]] = []
        self._rolling = False
        self._exposure: wp.array | None = None
        """The running sum of an exposure's sub-frame colours (allocated by the first blurred render)."""
        self._untraced = _untraced(d)
        if self.backend == "embree":
            self._prepare_embree()
        elif self.backend == "bvh":
            scene.ray_bvh()
        elif self.backend == "wide":
            scene.wide_bvh()
        # Compile/load before any worker thread launches, so threads never race on a module load: the
        # render kernel without actors, and with them when the scene has actor shapes.
        load_kernels(kernels, d)
        load_kernels(invalid, d)
        if scene.splats is not None:
            load_kernels(splats, d)
        if self._splat_raster is not None:
            load_kernels(splat_raster, d)
        if shading == Shading.LIDAR:
            load_kernels(face_reflectivity_kernel.module, d)
        self._loaded: set[wp.Kernel] = set()
        self._kernel = self._render_kernel(actors=False)
        if scene.shapes:
            self._render_kernel(actors=True)

    @property
    def look_materials(self) -> int:
        """How many materials a look's ``albedo`` and ``texture`` cover (the scene's, when made)."""
        return self.looks.materials

    def set_looks(
        self, looks: Sequence[Look], textures: Sequence[np.ndarray] = (), cameras: Sequence[int] | None = None
    ) -> None:
        """Give cameras their looks (``CameraLooks.set``: one per camera, or one for each of ``cameras``).

        Raises:
            ConfigError: a renderer made without ``RenderSettings(looks=True)``, or looks that do not
                fit its cameras or the scene's materials.
        """
        if not self._looks:
            raise ConfigError("this renderer has one look: make it with RenderSettings(looks=True) and rgb shading")
        self.looks.set(looks, textures, cameras)

    def _render_kernel(self, actors: bool | None = None) -> wp.Kernel:
        """The render kernel for this renderer's features (and actors, when any are placed now),
        loaded here on the calling thread."""
        if actors is None:
            actors = self.scene.actors.count > 0
        tracer = "rows" if self.backend == "embree" else self.backend
        kernel = kernels.render_kernel(
            tracer, actors, self._light.shading != Shading.NONE, self._light.shadows, self._looks
        )
        if kernel not in self._loaded:
            load_kernels(kernel.module, self.device)
            self._loaded.add(kernel)
        return kernel

    def _prepare_embree(self) -> None:
        """The Embree scene, the ray buffers (Warp arrays with numpy views of the same memory), and the
        chunks the threads take in turn (``_embree_chunks``)."""
        from goggles.render.embree import tracer_for

        self._embree = tracer_for(self.scene)
        n, h, w, d = self.num_cameras, self.height, self.width, self.device
        self._directions = wp.zeros((n, h, w), dtype=wp.vec3, device=d)
        self._reach = wp.zeros((n, h, w), dtype=float, device=d)
        self._direction_view, self._reach_view = self._directions.numpy(), self._reach.numpy()
        self._positions = np.zeros((n, 3), np.float32)  # each camera's, for a global shutter's rays
        self._chunks = _embree_chunks(n, h, w, self.threads)
        self._chunk_rays = max((c1 - c0) * (y1 - y0) * w for c0, c1, y0, y1 in self._chunks)
        self._thread_rays: dict[int, _ThreadRays] = {}
        """Per thread, the buffers of the chunk it traces (``_rays_of_thread``)."""
        self._one_origin = wp.zeros(1, dtype=wp.vec3, device=d)
        # Faces are needed for every output but depth (and the stereo shadow, which reads depth).
        self._need_faces = bool(self.outputs & {"rgb", "segmentation", "normal_W", "face"})
        # Barycentrics are for textures; the rest of the surface can come from the triangle's plane.
        self._need_surface = "rgb" in self.outputs and self._light.shading not in (Shading.NONE, Shading.LIDAR)
        self._planes = self.scene.static_planes() if self._need_faces and not self._need_surface else None
        # The sun's shadow rays from the primary hits are Embree's too, after the render kernel
        # (``TracedRows.sun_start``): embreex's single rays trace them at 2.4x Warp's any-hit rate here, its
        # packets faster still.
        self._defers_shadows = self._light.shadows and self._light.shading == Shading.SUN
        self._rgb_pixels = self.buffers.rgb.numpy().reshape(-1, 3) if self._defers_shadows else None
        """The colour images' pixels in a row (a view): a chunk's are a contiguous run of them."""

    def _rays_of_thread(self) -> _ThreadRays:
        """The calling thread's buffers for the chunk it traces (a chunk's worth, not the batch's: 2,048
        cameras of 480 x 270 would need 3.2 GB for their origins alone)."""
        key = threading.get_ident()
        rays = self._thread_rays.get(key)
        if rays is None:  # each thread adds only its own key
            hits = "surface" if self._need_surface else "faces" if self._need_faces else None
            rays = _ThreadRays(self._chunk_rays, self.device, hits, self._defers_shadows, self._traced_base)
            self._thread_rays[key] = rays
        return rays

    def _traced_base(self) -> kernels.TracedRows:
        """A new chunk's ``TracedRows`` before its tracer's arrays (``_TRACED_ARRAYS``) are set."""
        traced = kernels.TracedRows()
        traced.used = True
        traced.t = self._reach
        traced.has_face = self._need_faces
        traced.has_surface = self._need_surface
        traced.planes = self._planes
        for name in _TRACED_ARRAYS:  # placeholders until the tracer's own arrays replace them
            setattr(traced, name, getattr(self._untraced, name))
        return traced

    @property
    def num_cameras(self) -> int:
        return len(self.cameras)

    @property
    def rays_C(self) -> wp.array:
        """(m, H, W) unit ray of every pixel in its camera's optical frame, one table per distinct
        camera model (sensor models read it; ``ray_table`` says which table is whose)."""
        return self._cameras.rays_C

    @property
    def ray_table(self) -> wp.array:
        """(n,) int32: camera c's rays are ``rays_C[ray_table[c]]``."""
        return self._cameras.ray_table

    def render(
        self, T_WC: np.ndarray, T_WC_last_row: np.ndarray | None = None, carriers: np.ndarray | None = None
    ) -> None:
        """Trace every camera from its pose; results stay in ``self.buffers`` on the device
        (``set_poses`` then ``trace``)."""
        self.set_poses(T_WC, T_WC_last_row, carriers)
        self.trace()

    def set_poses(
        self, T_WC: np.ndarray, T_WC_last_row: np.ndarray | None = None, carriers: np.ndarray | None = None
    ) -> None:
        """Give every camera its pose for the next ``trace`` (host work: the upload, and each camera's
        list of actors it may see).

        Args:
            T_WC: (n, 4, 4) poses of the camera optical frames in the world, metres: when the first
                row was exposed (all rows, for a global shutter).
            T_WC_last_row: (n, 4, 4) poses when the last row was exposed (a rolling shutter): row y
                sees the world from the pose a fraction y / (H - 1) of the way there (position
                interpolated, rotation along the shortest arc); None: a global shutter.
            carriers: (n,) the actor instance carrying each camera (its vehicle's body: the camera
                does not see it, though its shadow falls in view), -1 none; None: none carries any.

        Raises:
            ConfigError: if the poses have the wrong shape or are not finite rigid transforms.
        """
        T_WC = self._checked(T_WC)
        carried_by = checks.carriers(carriers, self.num_cameras, "camera poses")
        if T_WC_last_row is not None:
            T_WC_last_row = self._checked(T_WC_last_row)
            if np.array_equal(T_WC_last_row, T_WC):  # standing still: every row alike
                T_WC_last_row = None
        n, h = self.num_cameras, self.height
        if T_WC_last_row is None:
            R_rows = np.broadcast_to(T_WC[:, None, :3, :3], (n, h, 3, 3))
            p_rows = np.broadcast_to(T_WC[:, None, :3, 3], (n, h, 3))
        else:
            R_rows, p_rows = _interpolate(T_WC, T_WC_last_row, np.linspace(0.0, 1.0, h) if h > 1 else np.zeros(1))
        if self.device.is_cpu:  # straight into the arrays' memory: no temporary Warp arrays
            self._cameras.R_WC.numpy()[...] = R_rows
            self._cameras.p_WC.numpy()[...] = p_rows
        else:
            self._cameras.R_WC.assign(R_rows.astype(np.float32))
            self._cameras.p_WC.assign(p_rows.astype(np.float32))
        self._rolling = T_WC_last_row is not None
        if self.backend == "embree":
            self._positions = T_WC[:, :3, 3].astype(np.float32)
        posed = T_WC if T_WC_last_row is None else np.concatenate([T_WC, T_WC_last_row])
        self._cull_actors(posed, carried_by)
        self._splats_seen = self._splats_in_view(posed)

    @property
    def camera_poses(self) -> tuple[wp.array, wp.array]:
        """The device arrays ``render`` fills, (n, H) each: every row's camera orientation R_WC (mat33)
        and position p_WC (vec3). A kernel may write them and call ``render_posed``."""
        return self._cameras.R_WC, self._cameras.p_WC

    def render_posed(self, actors_per_camera: np.ndarray | None = None) -> None:
        """Render from the poses already written into ``camera_poses`` on the device (a learning
        environment's kernel): nothing crosses to the host. Every placed actor is tested (no culling,
        which needs the poses on the host), or with ``actors_per_camera`` ((n, k) instance indices)
        each camera tests only its own (an environment's gates), and only they shade it. The embree
        backend (CPU only) reads the positions where the kernel wrote them: host memory."""
        if self.backend == "embree":
            self._positions = self._cameras.p_WC.numpy()[:, 0]  # where the kernel wrote them (host memory)
        count = self.scene.actors.count
        lists = None if actors_per_camera is None else np.asarray(actors_per_camera, np.int32)
        if not (count == self._posed_count and _same(lists, self._posed_lists)):
            index = np.zeros(self._culling.index.shape, np.int32)
            if actors_per_camera is None:
                index[:, :count] = np.arange(count)
                self._culling.count.fill_(count)
                self._culling.shadow_casters.fill_(-1)
            else:
                if lists.ndim != 2 or len(lists) != self.num_cameras or lists.size and lists.max() >= count:
                    raise ConfigError(f"actors_per_camera must be ({self.num_cameras}, k) indices of placed actors")
                index[:, : lists.shape[1]] = lists
                self._culling.count.fill_(lists.shape[1])
                self._culling.shadow_casters.fill_(lists.shape[1])  # a camera's own world shades it, no other
            self._culling.index.assign(index)
            self._culling.tile_count.fill_(-1)  # the poses are on the device: no view to cut into tiles here
            self._posed_count, self._posed_lists, self._culled_any = count, lists, True
        self._rolling, self._splats_seen = False, self.scene.splats is not None  # (the poses are on the device)
        self.trace()

    def trace(self) -> None:
        """Trace every camera from the poses ``set_poses`` gave (device work: recordable with the
        ``warp``, ``bvh`` and ``wide`` backends, ``trace_key`` saying what it passes by value)."""
        self._kernel = self._render_kernel()
        if self._light.shading == Shading.LIDAR:
            self._fill_reflectivity()
        if self.backend == "embree":
            with stage("meshes (rays, primary hits, shading)"):
                self._pool_map(self._trace_rows, self._chunks)
        elif self.pixel_order == "tiles":  # one launch, a thread per pixel
            n, h, w = self.num_cameras, self.height, self.width
            inputs = [*self._render_inputs(self._untraced), True, 0, 1, 0, 1]
            with stage("primary hits, shading and shadows"):
                wp.launch(self._kernel, dim=(n, h, w), inputs=inputs, outputs=[self.buffers], device=self.device)
        else:
            with stage("primary hits, shading and shadows"):
                self._launch_all(self._kernel, [*self._render_inputs(self._untraced), False, 0], [self.buffers])
        if self.scene.splats is not None and self._splats_seen:  # the splats, in front of what the meshes gave
            with stage("splats"):
                self._splat_pass()
        with stage("stereo shadow and invalid pixels"):
            if self._has_partners:  # the stereo shadow
                self._launch_all(kernels.mark_stereo_shadow_kernel, [self._cameras], [self.buffers])
            if self._has_partners or self._has_outside:  # NaN, written by a kernel compiled for IEEE NaNs
                b = self.buffers
                self._launch_all(invalid.write_invalid_kernel, [b.status], [b.depth, b.range, self._wanted.range])

    def _splat_pass(self) -> None:
        """Composite the captures over every pixel: a global-shutter frame of pinholes by the
        rasteriser where it serves, any other by tracing each pixel's ray."""
        shaded = int(self._light.shading != Shading.NONE)
        tint = self.looks.capture_tint, int(self._looks)
        raster = self._splat_raster
        if raster is not None and not self._rolling:

            def draw(inputs: list, pixels) -> None:
                kernel, inputs = splat_raster.splat_rows_kernel, [*inputs, shaded, *tint, self._wanted]
                self._launch_all(kernel, inputs, [pixels, self.buffers], unbounded=True, bands=raster.bands)

            batch = self._cameras, self.num_cameras, self._footprints, self._largest_footprint
            raster.render(*batch, self._pool_map, self.threads, draw)
            return
        with stage("splats: boxes fitted"):
            self.scene.splats.fit(self._cameras.p_WC, self._largest_footprint)
        inputs = [self._cameras, self._footprints, self.scene.splats.data, shaded, *tint, self._wanted]
        self._launch_all(splats.splat_pass_kernel, inputs, [self.buffers], unbounded=True)

    @property
    def recordable(self) -> bool:
        """Is ``trace`` device work only, which a recording can replay? Not with Embree, which is called
        from Python, nor splats on the CPU (their BVH's refit is a host call there), nor the splats'
        rasteriser (how many entries its lists hold is read on the host each frame)."""
        cpu_splats = self.device.is_cpu and self.scene.splats is not None
        return self.backend != "embree" and not cpu_splats and self._splat_raster is None

    def trace_key(self) -> bytes:
        """What ``trace`` passes by value: placing actors, adding shapes or a new appearance changes it."""
        return b"".join(struct_key(s) for s in self._render_inputs(self._untraced))

    def _fill_reflectivity(self) -> None:
        """Each face's mean albedo for LiDAR returns, once per appearance table (empty after a change)."""
        data = self.scene.data
        faces = data.face_material.shape[0]
        if data.face_reflectivity.shape[0] != faces:
            table = wp.empty(faces, dtype=float, device=self.device)
            wp.launch(face_reflectivity_kernel, dim=faces, inputs=[data, table], device=self.device)
            data.face_reflectivity = table

    def render_exposure(
        self,
        T_open: np.ndarray,
        T_close: np.ndarray,
        subframes: int,
        *,
        T_open_last_row: np.ndarray | None = None,
        T_close_last_row: np.ndarray | None = None,
        carriers: np.ndarray | None = None,
    ) -> None:
        """Render an exposure with motion blur: the colour is the mean of ``subframes`` renders at poses
        evenly spread between the shutter opening (``T_open``) and closing (``T_close``), (n, 4, 4)
        each; the other outputs are those of the sub-frame nearest mid-exposure. With a rolling
        shutter, the last row's opening and closing poses are given too (see ``set_poses``, and for
        ``carriers``).

        Raises:
            ConfigError: fewer than one sub-frame.
        """
        if subframes < 1:
            raise ConfigError(f"an exposure needs at least one sub-frame, got {subframes}")
        T_open, T_close = self._checked(T_open), self._checked(T_close)
        rolling = T_open_last_row is not None and T_close_last_row is not None
        if rolling:
            T_open_last_row, T_close_last_row = self._checked(T_open_last_row), self._checked(T_close_last_row)

        def render_at(fraction: float) -> None:
            last = _pose_at(T_open_last_row, T_close_last_row, fraction) if rolling else None
            self.render(_pose_at(T_open, T_close, fraction), last, carriers)

        if subframes == 1 or "rgb" not in self.outputs:
            render_at(0.5)
            return
        if self._exposure is None:
            n, h, w = self.num_cameras, self.height, self.width
            self._exposure = wp.zeros((n, h, w), dtype=wp.vec3, device=self.device)
        self._exposure.zero_()
        fractions = (np.arange(subframes) + 0.5) / subframes
        order = np.argsort(-np.abs(fractions - 0.5))  # the one nearest mid-exposure last
        for fraction in fractions[order]:
            render_at(fraction)
            self.launch_rows(kernels.accumulate_rgb_kernel, [], [self.buffers.rgb, self._exposure])
        self.launch_rows(kernels.average_rgb_kernel, [float(subframes)], [self._exposure, self.buffers.rgb])

    def _checked(self, T_WC) -> np.ndarray:
        return checks.poses(T_WC, "camera poses", self.num_cameras)

    def _cull_actors(self, T_WC: np.ndarray, carriers: np.ndarray) -> None:
        """List, per camera, the actor instances whose boxes are not wholly outside its view: behind
        it, beyond its max depth, or past one side of its frustum (conservative: a box corner test),
        and that do not carry it (``carriers``). ``T_WC`` may hold a second pose per camera (a
        rolling shutter's last row): a box is culled only when it is outside both views."""
        boxes = self.scene.actor_boxes
        if self._posed_count != -1:  # render_posed's lists were in place: a view's list from now on
            self._culling.shadow_casters.fill_(-1)  # (whatever is placed may shade a view)
            self._posed_count, self._culled_any = -1, True
        if len(boxes) == 0:
            if self._culled_any:
                self._culling.count.zero_()
                self._culled_any, self._posed_count = False, -1
            return
        n = self.num_cameras
        outside, (x, y, z) = self._outside_views(boxes, T_WC)
        outside[self._radial] = False  # a LiDAR sees all around
        carried = np.flatnonzero((carriers >= 0) & (carriers < outside.shape[1]))
        outside[carried, carriers[carried]] = True  # nor its own vehicle
        index = np.zeros(self._culling.index.shape, np.int32)
        count = np.zeros(self.num_cameras, np.int32)
        for c, hidden in enumerate(outside):
            visible = np.flatnonzero(~hidden)
            index[c, : len(visible)], count[c] = visible, len(visible)
        self._culling.index.assign(index)
        self._culling.count.assign(count)
        if len(T_WC) > n:  # a rolling shutter: its view moves along the rows, so no tile is bounded
            self._culling.tile_count.fill_(-1)
        elif count.any():  # (the kernel reads a camera's tiles only when its list is not empty)
            self._cull_tiles(x[:n], y[:n], z[:n], outside)

    def _outside_views(self, boxes: np.ndarray, T_WC: np.ndarray) -> tuple[np.ndarray, tuple]:
        """(n, k) which of the (k, 2, 3) world boxes lie wholly outside each camera's view (behind it,
        beyond its max depth, or past one side of its frustum: a corner test, conservative) in every
        pose ``T_WC`` holds for it (one per camera, or two: a rolling shutter's first and last rows);
        and the boxes' corners in the cameras' frames (x, y, z: (m, k, 8) each)."""
        pick = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)])
        corners = np.stack([boxes[:, pick[:, axis], axis] for axis in range(3)], axis=-1)  # (k, 8, 3)
        n = self.num_cameras
        R, p = T_WC[:, :3, :3], T_WC[:, :3, 3]
        local = np.einsum("nji,nkcj->nkci", R, corners[None] - p[:, None, None])  # (m, k, 8, 3) camera frame
        x, y, z = local[..., 0], local[..., 1], local[..., 2]
        low, high = self._view_slopes[:, 0, :, None, None], self._view_slopes[:, 1, :, None, None]  # (n, 2, 1, 1)
        low, high = np.tile(low, (len(T_WC) // n, 1, 1, 1)), np.tile(high, (len(T_WC) // n, 1, 1, 1))
        max_depth = np.tile(self._max_depth, len(T_WC) // n)
        outside = (
            (z <= 0).all(-1)
            | (z > max_depth[:, None, None]).all(-1)
            | (x < low[:, 0] * z).all(-1)
            | (x > high[:, 0] * z).all(-1)
            | (y < low[:, 1] * z).all(-1)
            | (y > high[:, 1] * z).all(-1)
        )
        return outside.reshape(-1, n, outside.shape[-1]).all(axis=0), (x, y, z)  # outside every pose given

    def _splats_in_view(self, T_WC: np.ndarray) -> bool:
        """May any camera's ray meet the scene's captures? Not when their box, grown by the most the
        filter can grow it for these cameras, lies outside every view: then their pass would change
        no pixel, and it and the boxes' fit are skipped (on the CPU, where the pass is not recorded)."""
        splats = self.scene.splats
        if splats is None:
            return False
        if not self.device.is_cpu or splats.has_props or self._radial.any() or not np.any(splats.bounds):
            return True
        corners = np.array(np.meshgrid(*splats.bounds.T, indexing="ij")).reshape(3, -1).T  # (8, 3)
        reach = np.linalg.norm(corners[None] - T_WC[:, None, :3, 3], axis=-1).max()
        grow = splats.growth * np.sqrt(self._largest_footprint) * reach * 1.001 + 1e-4
        box = np.stack([splats.bounds[0] - grow, splats.bounds[1] + grow])[None]
        outside, _ = self._outside_views(box, T_WC)
        return not outside.all()

    def _cull_tiles(self, x, y, z, outside: np.ndarray) -> None:
        """Each pixel tile's own list of the actors whose boxes its rays may meet: a box's corners'
        slopes (x/z, y/z, camera frame) bound its image when every corner is ahead (a convex body's
        image is its corners' images' hull), and a tile's rays' slopes bound the tile, so a box whose
        bounds miss a tile's is never tested there. ``x, y, z``: (n, k, 8) corners in each camera's
        frame. A tile with more than ``TILE_ACTORS`` and every tile of a radial sensor (it looks every
        way) keep the camera's whole list."""
        ahead = (z > 1e-6).all(-1)  # (n, k)
        with np.errstate(divide="ignore", invalid="ignore"):
            slopes = np.stack([x / z, y / z], axis=-1)  # (n, k, 8, 2)
        margin = 1e-5 * (1.0 + np.abs(np.where(ahead[..., None, None], slopes, 0.0)).max(axis=2))  # float32 rays
        lower = np.where(ahead[..., None], slopes.min(axis=2) - margin, -np.inf)[:, :, None, None]  # (n, k, 1, 1, 2)
        upper = np.where(ahead[..., None], slopes.max(axis=2) + margin, np.inf)[:, :, None, None]
        tile_slopes = self._tile_slopes[self._ray_table]  # (n, 2, TY, TX, 2)
        tile_lower, tile_upper = tile_slopes[:, None, 0], tile_slopes[:, None, 1]  # (n, 1, TY, TX, 2)
        meets = ~outside[:, :, None, None]  # (n, k, TY, TX): one axis at a time (a reduction over 2 is slow)
        for axis in (0, 1):
            meets = meets & (lower[..., axis] <= tile_upper[..., axis]) & (tile_lower[..., axis] <= upper[..., axis])
        slot = np.cumsum(meets, axis=1, dtype=np.int32) - 1  # each meeting actor's place in its tile's list
        c, a, ty, tx = np.nonzero(meets & (slot < kernels.TILE_ACTORS))
        tile_index = np.zeros(self._culling.tile_index.shape, np.int32)
        tile_index[c, ty, tx, slot[c, a, ty, tx]] = a
        tile_count = slot[:, -1] + 1
        tile_count[(tile_count > kernels.TILE_ACTORS) | self._radial[:, None, None]] = -1
        self._culling.tile_count.assign(tile_count)
        self._culling.tile_index.assign(tile_index)
        self._culled_any, self._posed_count = True, -1

    def _trace_rows(self, chunk: tuple[int, int, int, int]) -> None:
        """Embree backend: rows [y0, y1) of cameras [c0, c1), from rays to every output. The thread's
        buffers and the chunk's arguments are the same frame after frame: its launches replay packed."""
        c0, c1, y0, y1 = chunk
        dim = (c1 - c0, y1 - y0, self.width)
        count = dim[0] * dim[1] * dim[2]
        per_ray = self._rolling or c1 - c0 > 1  # else one origin serves every ray of the chunk
        buffers = self._rays_of_thread()
        rays = [self._cameras, c0, y0, dim[1], self._directions, self._reach, per_ray]
        with stage("rays"):
            self._launches(kernels.make_rays_kernel, dim[:2], [*rays, buffers.origins if per_ray else self._one_origin])
        if per_ray:  # written by the kernel
            origins = buffers.origin_view[:count]
        else:
            origins = np.broadcast_to(self._positions[c0], (count, 3))  # no per-ray copy
        directions = self._direction_view[c0:c1, y0:y1].reshape(-1, 3)
        reach = self._reach_view[c0:c1, y0:y1].reshape(-1)  # a view: Embree lowers it in place
        traced, hits, sun = buffers.rows(dim)
        with stage("primary hits (Embree)"):
            if hits is None:
                self._embree.distances(origins, directions, reach, dim[2])
            elif self._need_surface:
                self._embree.closest(origins, directions, reach, dim[2], out=hits)
            else:
                self._embree.faces(origins, directions, reach, dim[2], out=hits["primID"])
        if sun is not None:
            sun["reach"].fill(0.0)  # no ray, until the kernel leaves one
        with stage("shading and shadows"):
            inputs = [*self._render_inputs(traced), False, c0, 1, y0, dim[2]]
            self._launches(self._kernel, (dim[0], dim[1], 1), inputs, [self.buffers])
        if sun is not None:
            with stage("sun's shadow rays (Embree)"):
                first = (c0 * self.height + y0) * self.width  # rows of one camera, or whole cameras
                colour = self._rgb_pixels[first : first + count]
                self._embree.occluded(sun["start"], sun["direction"], sun["reach"], dim[2], sun["dark"], colour)

    def _render_inputs(self, traced: kernels.TracedRows) -> list:
        """The render kernel's arguments up to the rows it covers."""
        scene = self.scene
        return [scene.data, scene.actors, self._cameras, self._light, self._wanted, self._culling, traced]

    def _pool_map(self, work, items) -> None:
        if self._pool is None or len(items) < 2 or recording(self.device):  # a recording is one ordered stream
            for item in items:
                work(item)
        else:
            list(self._pool.map(work, items))

    def launch_rows(self, kernel, inputs: list, outputs: list) -> None:
        """Launch a per-pixel kernel over the batch's pixels as the renderer launches its own (sensor
        models after the render use it). The kernel's tid is (camera, k, block) and its inputs end with
        ``row_stride, row_offset, span``: it covers rows ``row_offset + k * row_stride``, ``span``
        pixels per thread from column ``block * span``."""
        self._launch_all(kernel, inputs, outputs)

    def _launch_all(self, kernel, inputs: list, outputs: list, unbounded: bool = False, bands: int = 0) -> None:
        """Launch ``kernel`` over every pixel: once on CUDA (a thread per pixel); on the CPU once per
        worker, each on interleaved rows (a thread per row: Warp copies the struct arguments into
        every thread, which costs more than a pixel's work). An ``unbounded`` kernel (the splats'
        pass: a ray through a million Gaussians at one point takes minutes) runs on the workers
        while the main thread waits, so a Ctrl-C or SIGTERM ends the command at once. A kernel over
        ``bands`` of rows (the splats' rasteriser) takes (camera, k) and ``band_stride, band_offset``."""
        span = 1 if self.device.is_cuda else self.width
        # Handing a few pixels to the threads costs more than it saves (one 64 x 48 learning environment
        # steps 1.2x faster launching here).
        threads = 1 if self.num_cameras * self.height * self.width < SHARED_PIXELS else self.threads
        work = partial(self._launch, kernel, inputs, outputs, span=span, threads=threads, bands=bands)
        main = threading.current_thread() is threading.main_thread()
        if unbounded and main and self.device.is_cpu and not recording(self.device):
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="goggles-render")
            futures = [self._pool.submit(work, k) for k in range(threads)]
            pending = set(futures)
            while pending:  # a signal may come to a worker's thread: wake up to run its handler here
                _, pending = wait(pending, timeout=0.1)
            for future in futures:
                future.result()
        else:
            self._pool_map(work, range(threads))

    def _launch(self, kernel, inputs: list, outputs: list, offset: int, *, span: int, threads: int, bands: int) -> None:
        if bands:
            dim = (self.num_cameras, (bands - offset + threads - 1) // threads)
            self._launches(kernel, dim, [*inputs, threads, offset], outputs)
            return
        rows = (self.height - offset + threads - 1) // threads
        self._launches(kernel, (self.num_cameras, rows, self.width // span), [*inputs, threads, offset, span], outputs)

    def block(self, names) -> wp.array:
        """The bytes of the outputs ``names`` (asked for at construction), side by side in the device
        block, in rows of ``_ALIGN`` bytes: one copy brings all of them (``layout`` says where each lies)."""
        order = list(self.layout)
        places = sorted(order.index(name) for name in names)
        if not places or places[-1] - places[0] + 1 != len(places):
            raise ValueError(f"outputs {sorted(names)} are not side by side: ask for them at construction")
        first, last = self.layout[order[places[0]]], self.layout[order[places[-1]]]
        return self._block[first.offset // _ALIGN : -(-(last.offset + last.size) // _ALIGN)]

    def images(self) -> Images:
        """Copy the last render's outputs to the host (copies: the next render does not change them)."""
        b = self.buffers
        copies = {name: np.array(getattr(b, name).numpy()) if name in self.outputs else None for name in OUTPUTS}
        return Images(**copies)

    def close(self) -> None:
        """Stop the CPU worker threads (one still in a kernel a Ctrl-C left is not waited for)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


#: Fewer pixels than this are launched on the calling thread (CPU), not shared by the render threads.
SHARED_PIXELS = 16384

#: Rays per Embree chunk: at least this many (a chunk costs two launches and an Embree call), and at
#: most the larger (each render thread's buffers hold its largest chunk).
CHUNK_RAYS = (4096, 1 << 18)


def _embree_chunks(n: int, h: int, w: int, threads: int) -> list[tuple[int, int, int, int]]:
    """The chunks ``(c0, c1, y0, y1)`` (rows y0..y1 of cameras c0..c1) that the threads take in turn:
    about four per thread, each whole cameras or rows of one camera (so its rays lie contiguous), of
    ``CHUNK_RAYS`` rays."""
    least, most = CHUNK_RAYS
    rows = max(-(-least // w), -(-n * h // (threads * 4)))
    rows = max(1, min(rows, most // w))
    if rows < h:
        return [(c, c + 1, y, min(h, y + rows)) for c in range(n) for y in range(0, h, rows)]
    per_chunk = rows // h
    return [(c, min(n, c + per_chunk), 0, h) for c in range(0, n, per_chunk)]


def _rasterises(splat_pass: str, cameras: Sequence, device, gaussians: int) -> bool:
    """Does the rasteriser composite these cameras' captures (``RenderSettings.splat_pass``)? Only
    undistorted pinholes (a LiDAR's beams and other lenses are traced). ``auto``: on the CPU (over the
    demo's flight a third of the tracer's CPU, a quarter at its costliest frames; on CUDA the tracer
    was measured and stays), for as many cameras as hold their Gaussians' records in ``AUTO_RASTER_BYTES``
    (a learning batch's thousands of cameras are traced)."""
    if splat_pass == "rays" or (splat_pass == "auto" and not device.is_cpu):
        return False
    if not all(isinstance(c, CameraModel) and not c.has_distortion for c in cameras):
        return False
    width, height = cameras[0].width, cameras[0].height
    return (
        splat_pass == "raster" or splat_raster.raster_bytes(len(cameras), gaussians, width, height) <= AUTO_RASTER_BYTES
    )


#: The most a rasteriser ``auto`` chooses may hold (a batch beyond it is traced).
AUTO_RASTER_BYTES = 512 << 20


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


#: The arrays of ``TracedRows`` a chunk's tracer may give (the rest are the whole batch's).
_TRACED_ARRAYS = ("face", "u", "v", "normal_W", "sun_start", "sun_direction", "sun_reach", "dark")


class _ThreadRays:
    """One render thread's buffers for the Embree chunks it takes, ``size`` rays' worth each and reused
    frame after frame: its rays' origins (where each ray needs its own), Embree's hits (``hits``:
    "surface", "faces" or None, distances only) and the sun's shadow rays (``sun``); and, per shape of
    chunk, the ``TracedRows`` that hands them to the render kernel, built once (``new_traced()`` gives
    one before the tracer's arrays are set)."""

    def __init__(self, size: int, device, hits: str | None, sun: bool, new_traced):
        from goggles.render.embree import hit_arrays

        self.origins = wp.zeros(size, dtype=wp.vec3, device=device)
        self.origin_view = self.origins.numpy()
        self._device = device
        self._new_traced = new_traced
        self._hits = None
        if hits == "surface":
            self._hits = hit_arrays(size)
        elif hits == "faces":
            self._hits = hit_arrays(size, ["primID"])
        self._sun = None
        if sun:
            self._sun = {"start": np.zeros((size, 3), np.float32), "direction": np.zeros((size, 3), np.float32)}
            self._sun |= {"reach": np.zeros(size, np.float32), "dark": np.zeros((size, 3), np.uint8)}
        self._rows: dict[tuple, tuple] = {}

    def rows(self, dim: tuple[int, int, int]):
        """For a chunk of ``dim`` (cameras, rows, width): its ``TracedRows``, and Embree's hit arrays and
        the shadow rays' (None where not traced), as many rays as the chunk has."""
        if dim not in self._rows:
            count = dim[0] * dim[1] * dim[2]
            hits = None if self._hits is None else {name: a[:count] for name, a in self._hits.items()}
            sun = None if self._sun is None else {name: a[:count] for name, a in self._sun.items()}
            traced = self._new_traced()

            def view(array: np.ndarray, dtype, channels: tuple = ()) -> wp.array:
                return wp.array(array.reshape(dim + channels), dtype=dtype, device=self._device, copy=False)

            if hits is not None:
                traced.face = view(hits["primID"], wp.int32)
            if hits is not None and "u" in hits:
                traced.u, traced.v = view(hits["u"], float), view(hits["v"], float)
                traced.normal_W = view(hits["Ng"], wp.vec3, (3,))
            if sun is not None:
                traced.sun_start = view(sun["start"], wp.vec3, (3,))
                traced.sun_direction = view(sun["direction"], wp.vec3, (3,))
                traced.sun_reach = view(sun["reach"], float)
                traced.dark = view(sun["dark"], wp.uint8, (3,))
            self._rows[dim] = (traced, hits, sun)
        return self._rows[dim]


def _untraced(device) -> kernels.TracedRows:
    """TracedRows that says "Warp traces here": placeholders of one element, never read."""
    traced = kernels.TracedRows()
    traced.used = False
    traced.has_face = False
    traced.has_surface = False
    traced.planes = wp.zeros(1, dtype=wp.vec4, device=device)
    traced.t = wp.zeros((1, 1, 1), dtype=float, device=device)
    traced.face = wp.zeros((1, 1, 1), dtype=wp.int32, device=device)
    traced.u = wp.zeros((1, 1, 1), dtype=float, device=device)
    traced.v = wp.zeros((1, 1, 1), dtype=float, device=device)
    traced.normal_W = wp.zeros((1, 1, 1), dtype=wp.vec3, device=device)
    traced.sun_start = wp.zeros((1, 1, 1), dtype=wp.vec3, device=device)
    traced.sun_direction = wp.zeros((1, 1, 1), dtype=wp.vec3, device=device)
    traced.sun_reach = wp.zeros((1, 1, 1), dtype=float, device=device)
    traced.dark = wp.zeros((1, 1, 1, 3), dtype=wp.uint8, device=device)
    return traced


def _pose_at(T_first: np.ndarray, T_last: np.ndarray, fraction: float) -> np.ndarray:
    """(n, 4, 4) poses a ``fraction`` of the way from ``T_first`` to ``T_last``."""
    R, p = _interpolate(T_first, T_last, np.array([fraction]))
    T = np.repeat(np.eye(4)[None], len(T_first), axis=0)
    T[:, :3, :3], T[:, :3, 3] = R[:, 0], p[:, 0]
    return T


def _interpolate(T_first: np.ndarray, T_last: np.ndarray, fractions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rotations (n, m, 3, 3) and positions (n, m, 3) a fraction of the way from each pose in ``T_first``
    to its own in ``T_last``, for m ``fractions``: position linearly, rotation along the shortest arc
    (Rodrigues' formula about each camera's axis of turn, all fractions at once)."""
    from goggles.frames import matrix_to_quat

    R_first = T_first[:, :3, :3]
    turns = np.array([matrix_to_quat(R) for R in np.swapaxes(R_first, 1, 2) @ T_last[:, :3, :3]])  # w >= 0
    sine = np.linalg.norm(turns[:, 1:], axis=1)
    angle = 2.0 * np.arctan2(sine, turns[:, 0])  # (n,) in [0, pi]: the shortest arc
    axis = turns[:, 1:] / np.where(sine > 0.0, sine, 1.0)[:, None]
    K = np.zeros((len(turns), 3, 3))
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -axis[:, 2], axis[:, 1], -axis[:, 0]
    K = K - np.swapaxes(K, 1, 2)
    theta = angle[:, None, None, None] * fractions[None, :, None, None]  # (n, m, 1, 1)
    RK, RKK = R_first @ K, R_first @ K @ K  # R (I + sin K + (1 - cos) K^2), products taken once
    R = R_first[:, None] + np.sin(theta) * RK[:, None] + (1.0 - np.cos(theta)) * RKK[:, None]
    p_first = T_first[:, None, :3, 3]
    return R, p_first + fractions[None, :, None] * (T_last[:, None, :3, 3] - p_first)


#: Bytes a pixel of a ray table takes at its peak (one table per distinct camera model): its float32
#: directions on the device and the float64 temporaries of its construction and its tiles' slopes.
RAY_TABLE_BYTES = 96

#: Each output's Warp dtype and channels, and its host copy's NumPy dtype and channels.
_KINDS = {
    "status": (wp.int8, (), np.int8, ()),
    "depth": (float, (), np.float32, ()),
    "range": (float, (), np.float32, ()),
    "rgb": (wp.uint8, (3,), np.uint8, (3,)),
    "segmentation": (wp.int32, (), np.int32, ()),
    "normal_W": (wp.vec3, (), np.float32, (3,)),
    "face": (wp.int32, (), np.int32, ()),
}


def _block_layout(asked: set[str], written: Collection[str], n: int, height: int, width: int):
    """Where each output lies in the renderer's one device block, and the block's size in bytes: the
    outputs ``asked`` for first and side by side, so that a reader copies those (``block``) in one
    transfer, each ``_ALIGN``-aligned; an output never ``written`` gets one element.

    Raises:
        ConfigError: an output over 2 GiB, which Warp's kernels cannot index (32-bit byte offsets).
    """
    layout: dict[str, BlockSpan] = {}
    end = 0
    for name in sorted(_KINDS, key=lambda name: (name not in asked, name not in written, name)):
        dtype, channels, np_dtype, host_channels = _KINDS[name]
        shape = (n, height, width) if name in written else (1, 1, 1)
        size = int(np.prod(shape + channels)) * wp.types.type_size_in_bytes(dtype)
        if size >= 2**31:
            raise ConfigError(
                f"{n} cameras of {width}x{height} need {size / 2**30:.1f} GiB of {name}, over the 2 GiB "
                "one Warp array can index: render them in smaller batches"
            )
        layout[name] = BlockSpan(end, size, np.dtype(np_dtype), shape + host_channels)
        end = -(-(end + size) // _ALIGN) * _ALIGN
    return layout, end


def _tile_slopes(rays: np.ndarray, tile: int) -> np.ndarray:
    """(m, 2, TY, TX, 2): the smallest and largest x/z and y/z of the rays of each ``tile`` x ``tile``
    pixel tile of each ray table ((m, H, W, 3), camera frame); unbounded where a ray is not ahead."""
    m, h, w, _ = rays.shape
    ty, tx = -(-h // tile), -(-w // tile)
    padded = np.pad(rays.astype(np.float64), ((0, 0), (0, ty * tile - h), (0, tx * tile - w), (0, 0)), mode="edge")
    tiles = padded.reshape(m, ty, tile, tx, tile, 3).transpose(0, 1, 3, 2, 4, 5).reshape(m, ty, tx, -1, 3)
    z = tiles[..., 2:]
    with np.errstate(divide="ignore", invalid="ignore"):
        slopes = tiles[..., :2] / z
    ahead = (z > 0).all(axis=3)  # (m, TY, TX, 1)
    lower = np.where(ahead, slopes.min(axis=3), -np.inf)
    upper = np.where(ahead, slopes.max(axis=3), np.inf)
    return np.stack([lower, upper], axis=1)


def pixel_footprints(rays: np.ndarray, beams: bool = False) -> np.ndarray:
    """(H, W) float32: the angle each ray's pixel spans, rad^2, from its unit ray and its neighbours'
    (the nearer of the two on each axis; 0 where a lens sees nothing): the splats' screen-space
    filter is this footprint times its px^2. A LiDAR's beams (``beams``) span the square of their
    finer step, not the whole cell between scan lines."""
    valid = np.any(rays != 0.0, axis=-1)

    def step(axis: int) -> np.ndarray:
        if rays.shape[axis] < 2:
            return np.full(valid.shape, np.nan)
        chord = np.linalg.norm(np.diff(rays, axis=axis), axis=-1)
        both = np.logical_and(np.delete(valid, -1, axis=axis), np.delete(valid, 0, axis=axis))
        chord = np.where(both, chord, np.inf)
        edge = np.full_like(np.take(chord, [0], axis=axis), np.inf)
        nearer = np.minimum(np.concatenate([edge, chord], axis=axis), np.concatenate([chord, edge], axis=axis))
        return np.where(np.isfinite(nearer), nearer, np.nan)

    across, down = step(1), step(0)
    across = np.where(np.isnan(across), down, across)
    down = np.where(np.isnan(down), across, down)
    area = np.minimum(across, down) ** 2 if beams else across * down
    return np.where(valid & np.isfinite(area), area, 0.0).astype(np.float32)
