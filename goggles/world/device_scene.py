"""DeviceScene: the world on one Warp device, uploaded once: the static BVH, actor shapes and their
placed instances, and the appearance table over all of their faces."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
import warp as wp

from goggles import checks
from goggles.errors import ConfigError
from goggles.runtime.progress import busy
from goggles.scene.actors import ActorShape
from goggles.scene.batch import StaticScene, merge_parts, stack_appearance
from goggles.scene.splats import SplatCloud
from goggles.world.appearance import SceneData
from goggles.world.bvh_cache import cached_ray_bvh, cached_wide_bvh
from goggles.world.queries import ActorData
from goggles.world.ray_bvh import RayBvh, upload
from goggles.world.splats import DeviceSplats, check_splats_fit, empty_splats
from goggles.world.wide_bvh import WideBvh, upload_wide

log = logging.getLogger(__name__)

#: Warp's BVH builders.
BVH_BUILDERS = ("sah", "median", "lbvh")


class DeviceScene:
    """The world on one Warp device: the static BVH, actor shapes (one BVH each, in their own frames),
    placed actor instances, and one appearance table over all of their faces.

    Args:
        scene: the batched static scene (host arrays).
        device: Warp device ("cpu", "cuda", "cuda:0", ...); None picks Warp's default.
        shapes: actor shapes that instances can be made of (``set_actors``).
        max_actors: most actor instances placed at once.
        bvh: Warp's BVH builder for the static mesh ("sah", "median", "lbvh"); default SAH on CUDA (built
            once, traced for the whole run: Warp's CUDA default, LBVH, builds faster but traces slower) and
            Warp's default on the CPU (SAH there already). ``goggles bench render --bvh`` compares them.
        splat_props: captured objects that may be placed while it runs: each one's Gaussians in its own
            frame and how many of it may be placed at once (``DeviceSplats``).
    """

    def __init__(
        self,
        scene: StaticScene,
        device: wp.context.Devicelike = None,
        *,
        shapes: Sequence[ActorShape] = (),
        max_actors: int = 64,
        bvh: str | None = None,
        splat_props: Sequence[tuple[SplatCloud, int]] = (),
    ):
        if not isinstance(scene, StaticScene):
            raise ConfigError(f"a DeviceScene holds a StaticScene (goggles.scene.load_static_scene), got {scene!r}")
        if not checks.is_whole(max_actors, 0, checks.INT32_MAX):
            raise ConfigError(f"max_actors {max_actors!r}: a whole number, 0 or more")
        self.device = d = checks.warp_device(device)
        if bvh is not None and bvh not in BVH_BUILDERS:
            raise ConfigError(f"BVH builder {bvh!r}: use one of {', '.join(BVH_BUILDERS)}")
        self.bvh = bvh or ("sah" if d.is_cuda else None)
        self.name = scene.name
        self.num_faces = scene.num_faces
        self.max_actors = max_actors
        self.static = scene
        self._planes: wp.array | None = None
        self._ray_bvh: RayBvh | None = None
        self._wide_bvh: WideBvh | None = None
        self.shapes: list[ActorShape] = []
        self._shape_scenes: list[StaticScene] = []
        self._shape_meshes: list[wp.Mesh] = []
        self._shape_bounds: list[np.ndarray] = []
        start = time.perf_counter()
        self.points = wp.array(scene.vertices, dtype=wp.vec3, device=d)
        self.indices = wp.array(scene.faces.ravel(), dtype=wp.int32, device=d)
        log.info("building BVH over %d triangles on %s ...", scene.num_faces, d)
        with busy(f"building the scene's BVH ({scene.num_faces:,} triangles on {d})"):
            self.mesh = wp.Mesh(points=self.points, indices=self.indices, bvh_constructor=self.bvh)
        for shape in shapes:
            self._append_shape(shape)
        wp.synchronize_device(d)
        log.info("BVH built in %.2f s (%d actor shapes)", time.perf_counter() - start, len(shapes))
        self.splats = None
        """The scene's Gaussian splats and its splat props' on the device (``DeviceSplats``), or None."""
        if scene.splats is not None or splat_props:
            clouds = [(scene.splats, 1)] if scene.splats is not None else []
            clouds += list(splat_props)
            count = sum(len(c) * n for c, n in clouds)
            width = max(c.sh.shape[1] for c, _ in clouds)
            check_splats_fit(count, width, d, f"the scene's {count:,} Gaussians (its captures and splat props)")
            self.splats = DeviceSplats(scene.splats, d, splat_props)
        self.splat_data = self.splats.data if self.splats is not None else empty_splats(d)
        """What kernels that see splats read (no Gaussians where there are none)."""
        self.data = SceneData()
        self.data.mesh = self.mesh.id
        actors = ActorData()
        actors.count = 0
        capacity = max(1, max_actors)
        actors.every = wp.array(np.arange(capacity), dtype=wp.int32, device=d)
        actors.shape = wp.zeros(capacity, dtype=wp.int32, device=d)
        actors.R_WA = wp.zeros(capacity, dtype=wp.mat33, device=d)
        actors.p_WA = wp.zeros(capacity, dtype=wp.vec3, device=d)
        actors.lower = wp.zeros(capacity, dtype=wp.vec3, device=d)
        actors.upper = wp.zeros(capacity, dtype=wp.vec3, device=d)
        self.actors = actors
        self.actor_boxes = np.zeros((0, 2, 3))
        """(k, 2, 3) world-frame lower and upper corners of each placed instance (host copy, for culling)."""
        self.obstacle_count = 0
        """The first this many placed instances are obstacles (``set_actors``)."""
        self._obstacles: tuple[tuple, ActorData] | None = None
        self._extra_textures: list[np.ndarray] = []
        self._texture_sets: list[tuple[int, tuple]] = []
        self._upload_appearance()

    def _append_shape(self, shape: ActorShape) -> None:
        self.shapes.append(shape)
        self._shape_scenes.append(None)
        self._shape_meshes.append(None)
        self._shape_bounds.append(None)
        self._set_shape(len(self.shapes) - 1, shape)

    def _set_shape(self, index: int, shape: ActorShape) -> None:
        d = self.device
        merged = merge_parts(shape.name, [(p, np.eye(4), shape.segmentation) for p in shape.parts])
        self.shapes[index] = shape
        self._shape_scenes[index] = merged
        self._shape_meshes[index] = wp.Mesh(
            points=wp.array(merged.vertices, dtype=wp.vec3, device=d),
            indices=wp.array(merged.faces.ravel(), dtype=wp.int32, device=d),
        )
        self._shape_bounds[index] = shape.bounds()

    def _upload_appearance(self) -> None:
        """(Re)build the appearance table over the static faces and every shape's faces."""
        d = self.device
        table, first_face = stack_appearance([self.static, *self._shape_scenes])
        data = self.data
        extra = list(self._extra_textures)  # first, so that their indices stay when shapes come and go
        textures = extra + table.textures or [np.zeros((1, 1, 3), np.uint8)]
        key = tuple(id(t) for t in textures)
        if key != getattr(self, "_texture_key", None):  # an avatar brings no texture: keep the upload
            self._upload_textures(textures)
            self._texture_key, self._textures = key, textures  # held, so their ids stay theirs
        data.corner_uv = wp.array(table.corner_uv.reshape(-1, 2), dtype=wp.vec2, device=d)
        data.corner_rgb = wp.array(table.corner_rgb.reshape(-1, 3), dtype=wp.vec3, device=d)
        data.face_material = wp.array(table.face_material, dtype=wp.int32, device=d)
        data.face_segment = wp.array(table.face_segment, dtype=wp.int32, device=d)
        data.material_rgb = wp.array(table.material_rgb, dtype=wp.vec3, device=d)
        own = np.asarray(table.material_texture, np.int32)
        data.material_texture = wp.array(np.where(own >= 0, own + len(extra), own), dtype=wp.int32, device=d)
        data.face_reflectivity = wp.zeros(0, dtype=float, device=d)  # a LiDAR's renderer fills it when needed
        self.actors.shape_mesh = wp.array([m.id for m in self._shape_meshes] or [0], dtype=wp.uint64, device=d)
        self.actors.shape_first_face = wp.array(list(first_face[1:]) or [0], dtype=wp.int32, device=d)

    def add_textures(self, images: Sequence[np.ndarray]) -> int:
        """Put images into the texture table (looks swap them in: ``goggles.render.looks``) and say the
        index of the first; the same images (by identity) again are not added twice."""
        images = tuple(images)
        for first, added in self._texture_sets:
            if len(added) == len(images) and all(a is b for a, b in zip(added, images)):
                return first
        for i, image in enumerate(images):
            if not (
                isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
            ):
                raise ConfigError(f"texture {i}: an (H, W, 3) uint8 image, got {getattr(image, 'shape', image)!r}")
        first = len(self._extra_textures)
        self._extra_textures = [*self._extra_textures, *images]
        self._texture_sets.append((first, images))
        self._upload_appearance()
        return first

    def _upload_textures(self, textures: list[np.ndarray]) -> None:
        sizes = np.array([[t.shape[1], t.shape[0]] for t in textures], np.int32)
        offsets = np.concatenate([[0], np.cumsum(sizes[:, 0] * sizes[:, 1])[:-1]]).astype(np.int32)
        texels = np.concatenate([t.reshape(-1) for t in textures])
        if texels.size >= 2**31:
            raise ConfigError(f"scene {self.name!r}: textures hold {texels.size} bytes; at most 2 GiB are supported")
        self.data.texels = wp.array(texels, dtype=wp.uint8, device=self.device)
        self.data.texture_offset = wp.array(offsets, dtype=wp.int32, device=self.device)
        self.data.texture_size = wp.array(sizes, dtype=wp.vec2i, device=self.device)

    def add_shape(self, shape: ActorShape) -> int:
        """Add an actor shape after start-up (an avatar whose skeleton just appeared); returns its index."""
        self._append_shape(shape)
        self._upload_appearance()
        return len(self.shapes) - 1

    def replace_shape(self, index: int, shape: ActorShape) -> int:
        """Put another shape in slot ``index`` (an avatar of a new person where one has left); returns it."""
        if not 0 <= index < len(self.shapes):
            raise ConfigError(f"no actor shape {index} to replace (have {len(self.shapes)})")
        self._set_shape(index, shape)
        self._upload_appearance()
        return index

    def static_planes(self) -> wp.array:
        """(F,) each static face's plane as (unit normal, offset: normal . any point of it), built on
        first use: a tracer that names the face it hit (Embree's cheapest query) gets the hit's distance
        and normal from it. A degenerate face gets a zero normal (no ray hits it)."""
        if self._planes is None:
            corners = self.static.vertices[self.static.faces].astype(np.float64)  # (F, 3, 3)
            normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
            length = np.linalg.norm(normal, axis=1, keepdims=True)
            normal = np.divide(normal, length, out=np.zeros_like(normal), where=length > 0.0)
            offset = np.einsum("fi,fi->f", normal, corners[:, 0])
            planes = np.concatenate([normal, offset[:, None]], axis=1).astype(np.float32)
            self._planes = wp.array(planes, dtype=wp.vec4, device=self.device)
        return self._planes

    def ray_bvh(self) -> RayBvh:
        """goggles' own BVH of the static mesh (``goggles.world.ray_bvh``), built (or loaded from the
        disk cache, ``goggles.world.bvh_cache``) and uploaded on first use, and kept in ``data.rays``
        for the render kernels that trace with it."""
        if self._ray_bvh is None:
            start = time.perf_counter()
            log.info("goggles' BVH over %d triangles ...", self.num_faces)
            with busy(f"building goggles' BVH of the scene ({self.num_faces:,} triangles)"):
                tree, loaded = cached_ray_bvh(self.static.vertices, self.static.faces)
            self._ray_bvh = self.data.rays = upload(tree, self.device)
            seconds, megabytes = time.perf_counter() - start, tree.nbytes / 1e6
            how = "loaded from the cache" if loaded else "built"
            log.info("goggles' BVH %s in %.2f s (depth %d, %.1f MB)", how, seconds, tree.depth, megabytes)
        return self._ray_bvh

    def wide_bvh(self) -> WideBvh:
        """The same tree collapsed into 8-wide nodes (``goggles.world.wide_bvh``), made (or loaded from
        the disk cache) and uploaded on first use, and kept in ``data.wide`` for the render kernels that
        trace with it."""
        if self._wide_bvh is None:
            start = time.perf_counter()
            with busy(f"building goggles' wide BVH of the scene ({self.num_faces:,} triangles)"):
                wide, loaded = cached_wide_bvh(self.static.vertices, self.static.faces)
            self._wide_bvh = self.data.wide = upload_wide(wide, self.device)
            how = "loaded from the cache" if loaded else "built"
            megabytes = wide.nbytes / 1e6
            log.info(
                "goggles' wide BVH %s in %.2f s (%d nodes, %.1f MB)",
                how,
                time.perf_counter() - start,
                len(wide.origin),
                megabytes,
            )
        return self._wide_bvh

    @property
    def obstacles(self) -> ActorData:
        """The placed instances vehicles collide with (``set_actors``' ``obstacles``): ``actors`` itself
        where every instance is one, else the same arrays with the obstacles' count."""
        actors = self.actors
        if self.obstacle_count == actors.count:
            return actors
        key = (self.obstacle_count, actors.count, id(actors.shape_mesh), id(actors.shape_first_face))
        if self._obstacles is None or self._obstacles[0] != key:  # (the appearance upload swaps two arrays)
            view = ActorData()
            for name in ActorData.vars:
                setattr(view, name, getattr(actors, name))
            view.count = self.obstacle_count
            self._obstacles = key, view
        return self._obstacles[1]

    def shape_mesh(self, index: int) -> wp.Mesh:
        """The BVH mesh of a shape (a deforming shape rewrites its points and refits it)."""
        return self._shape_meshes[index]

    def shape_scene(self, index: int) -> StaticScene:
        """A shape's parts merged into one mesh with its appearance, in its frame (for viewers)."""
        return self._shape_scenes[index]

    def shape_bounds(self, index: int) -> np.ndarray:
        """(2, 3) lower and upper corners of a shape's box, in its frame."""
        return self._shape_bounds[index]

    def set_shape_bounds(self, index: int, bounds: np.ndarray) -> None:
        """New (2, 3) bounds of a deforming shape, in its frame; used by the next ``set_actors``."""
        self._shape_bounds[index] = np.asarray(bounds, dtype=np.float64)

    def set_actors(self, shapes: Sequence[int], T_WA: np.ndarray, obstacles: int | None = None) -> None:
        """Place actor instances for the next queries (replacing the previous placement).

        Args:
            shapes: (k,) index into ``self.shapes`` of each instance.
            T_WA: (k, 4, 4) rigid pose of each instance in the world, metres.
            obstacles: the first this many instances are obstacles that vehicles collide with
                (``self.obstacles``); the others, the vehicles' own bodies, are only seen. None: all.

        Raises:
            ConfigError: too many instances, unknown shape, non-finite or non-rigid pose.
        """
        shapes = np.asarray(shapes, dtype=np.int64).reshape(-1)
        T_WA = checks.poses(T_WA, "actor poses")
        k = len(shapes)
        if k > self.max_actors or len(T_WA) != k:
            raise ConfigError(f"{k} actors with {len(T_WA)} poses; give one pose each, at most {self.max_actors}")
        if obstacles is not None and not checks.is_whole(obstacles, 0, k):
            raise ConfigError(f"obstacles {obstacles!r}: the first 0 to {k} of the {k} actors placed")
        if k and (shapes.min() < 0 or shapes.max() >= len(self.shapes)):
            raise ConfigError(f"actor shape indices {shapes.tolist()} must be in [0, {len(self.shapes)})")
        R = T_WA[:, :3, :3]
        if k:
            corners = np.array(self._shape_bounds)[shapes]  # (k, 2, 3): box corners in the shape frame -> world box
            signs = np.array([[i, j, k_] for i in (0, 1) for j in (0, 1) for k_ in (0, 1)])
            local = np.stack([corners[:, signs[:, a], a] for a in range(3)], axis=-1)  # (k, 8, 3)
            world = np.einsum("kij,kcj->kci", R, local) + T_WA[:, None, :3, 3]
            pad = max(1, self.max_actors) - k
            self.actors.shape.assign(np.concatenate([shapes, np.zeros(pad, np.int64)]).astype(np.int32))
            self.actors.R_WA.assign(np.concatenate([R, np.zeros((pad, 3, 3))]).astype(np.float32))
            self.actors.p_WA.assign(np.concatenate([T_WA[:, :3, 3], np.zeros((pad, 3))]).astype(np.float32))
            self.actors.lower.assign(np.concatenate([world.min(axis=1), np.zeros((pad, 3))]).astype(np.float32))
            self.actors.upper.assign(np.concatenate([world.max(axis=1), np.zeros((pad, 3))]).astype(np.float32))
        self.actors.count = k
        self.obstacle_count = k if obstacles is None else int(obstacles)
        self.actor_boxes = np.stack([world.min(axis=1), world.max(axis=1)], axis=1) if k else np.zeros((0, 2, 3))
