"""goggles' BVH layouts side by side on the same rays: the binary tree (``goggles.world.ray_bvh``) and
its 8-wide compressed collapse (``goggles.world.wide_bvh``). A counting build of each traversal says
what a ray costs in steps (inner nodes visited, triangles tested), independent of the machine; the
plain build's rays per second say what that costs here, timed in back-to-back pairs so that a noisy
machine moves both alike. Closest hits are compared ray by ray.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles.bench.measure import bench_views
from goggles.runtime.kernel_options import TRACING
from goggles.world.ray_bvh import RayBvh, build_ray_bvh, bvh_closest_hit, counting_traverse, upload
from goggles.world.wide_bvh import WideBvh, build_wide_bvh, counting_wide_traverse, upload_wide, wide_closest_hit

wp.set_module_options(TRACING)


@wp.kernel
def _count_binary(
    bvh: RayBvh,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    reach: float,
    index: wp.array(dtype=wp.int32),
    tally: wp.array(dtype=wp.vec2i),
):
    i = wp.tid()
    found = counting_traverse(bvh, origins[i], directions[i], reach, False)
    index[i] = found.index
    tally[i] = wp.vec2i(found.nodes, found.triangles)


@wp.kernel
def _count_wide(
    bvh: WideBvh,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    reach: float,
    index: wp.array(dtype=wp.int32),
    tally: wp.array(dtype=wp.vec2i),
):
    i = wp.tid()
    found = counting_wide_traverse(bvh, origins[i], directions[i], reach, False)
    index[i] = found.index
    tally[i] = wp.vec2i(found.nodes, found.triangles)


@wp.kernel
def _trace_binary(
    bvh: RayBvh,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    reach: float,
    face: wp.array(dtype=wp.int32),
    t: wp.array(dtype=float),
):
    i = wp.tid()
    hit = bvh_closest_hit(bvh, origins[i], directions[i], reach)
    face[i] = hit.face
    t[i] = hit.t


@wp.kernel
def _trace_wide(
    bvh: WideBvh,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    reach: float,
    face: wp.array(dtype=wp.int32),
    t: wp.array(dtype=float),
):
    i = wp.tid()
    hit = wide_closest_hit(bvh, origins[i], directions[i], reach)
    face[i] = hit.face
    t[i] = hit.t


@dataclass(frozen=True)
class LayoutFigures:
    """One layout's figures on the benchmark's rays."""

    layout: str
    nodes_per_ray: float
    """Inner nodes visited per ray (each tests its children's boxes: 2 in the binary tree, up to 8)."""
    triangles_per_ray: float
    """Triangles tested per ray."""
    megabytes: float
    """The tree on the device: nodes, triangles in leaf order and their face indices."""
    build_s: float
    """Building it from the triangles (the wide one: collapsing the binary one), s."""
    rays_per_s: float
    """Closest hits per second, one launch (one thread on the CPU)."""


@dataclass(frozen=True)
class BvhBench:
    layouts: tuple[LayoutFigures, ...]
    rays: int
    hit: float
    """Fraction of the rays that hit the scene."""
    same_faces: float
    """Fraction of the rays whose closest face is the same in both layouts (a ray through an edge shared
    by two triangles may take either)."""
    speedup: float
    """The wide layout's rays per second over the binary one's: the median of back-to-back pairs."""
    device: str


def bench_bvh(
    scene, *, width: int, height: int, views: int, vfov_deg: float = 60.0, device=None, seconds: float = 2.0
) -> BvhBench:
    """Trace the camera rays of ``views`` views of ``scene`` (a StaticScene) through both layouts."""
    from goggles.frames import camera_pose_from_body
    from goggles.render import CameraModel

    device = wp.get_device(device)
    T_WB = scene.view if scene.view is not None else np.eye(4)
    rays_C = CameraModel.from_fov(width, height, vfov_deg).ray_directions().reshape(-1, 3)
    T_WC = [camera_pose_from_body(T) for T in bench_views(T_WB, views)]
    origins = np.concatenate([np.broadcast_to(T[:3, 3], rays_C.shape) for T in T_WC]).astype(np.float32)
    directions = np.concatenate([rays_C @ T[:3, :3].T for T in T_WC]).astype(np.float32)
    n = len(origins)
    o = wp.array(origins, dtype=wp.vec3, device=device)
    d = wp.array(directions, dtype=wp.vec3, device=device)
    reach = 1.0e6

    start = time.perf_counter()
    binary = build_ray_bvh(scene.vertices, scene.faces)
    binary_s = time.perf_counter() - start
    start = time.perf_counter()
    wide = build_wide_bvh(binary)
    wide_s = time.perf_counter() - start
    trees = {"binary": upload(binary, device), "wide": upload_wide(wide, device)}
    counting = {"binary": _count_binary, "wide": _count_wide}
    tracing = {"binary": _trace_binary, "wide": _trace_wide}

    faces, tallies = {}, {}
    for name, tree in trees.items():
        index = wp.zeros(n, dtype=wp.int32, device=device)
        tally = wp.zeros(n, dtype=wp.vec2i, device=device)
        wp.launch(counting[name], n, [tree, o, d, reach], [index, tally], device=device)
        tallies[name] = tally.numpy()
        face = wp.zeros(n, dtype=wp.int32, device=device)
        wp.launch(tracing[name], n, [tree, o, d, reach], [face, wp.zeros(n, dtype=float, device=device)], device=device)
        faces[name] = face.numpy()

    def timed(name: str):
        face = wp.zeros(n, dtype=wp.int32, device=device)
        t = wp.zeros(n, dtype=float, device=device)

        def trace() -> float:
            begin = time.perf_counter()
            wp.launch(tracing[name], n, [trees[name], o, d, reach], [face, t], device=device)
            wp.synchronize_device(device)
            return time.perf_counter() - begin

        return trace

    runs = {name: timed(name) for name in trees}
    pairs: list[tuple[float, float]] = []
    begin = time.perf_counter()
    while len(pairs) < 3 or time.perf_counter() - begin < seconds:
        pairs.append((runs["binary"](), runs["wide"]()))
    times = np.array(pairs)
    figures = []
    for k, (name, tree, build_s) in enumerate((("binary", binary, binary_s), ("wide", wide, wide_s))):
        tally = tallies[name]
        figures.append(
            LayoutFigures(
                layout=name,
                nodes_per_ray=float(tally[:, 0].mean()),
                triangles_per_ray=float(tally[:, 1].mean()),
                megabytes=tree.nbytes / 1e6,
                build_s=build_s,
                rays_per_s=n / float(np.median(times[:, k])),
            )
        )
    return BvhBench(
        layouts=tuple(figures),
        rays=n,
        hit=float((faces["binary"] >= 0).mean()),
        same_faces=float((faces["binary"] == faces["wide"]).mean()),
        speedup=float(np.median(times[:, 0] / times[:, 1])),
        device=str(device),
    )
