"""Faces the sun lights whole: static faces that no static geometry can shade at any point, found once
per scene and sun, so that a pixel on one skips its shadow ray against the static scene (actors, which
move, are still traced).

In the sun's frame (two axes across the sun's direction, and the height h along it), a point of face F
is shaded by triangle T when T lies above it: where their projections along the sun overlap, T's height
exceeds F's. Both heights are planes over the overlap, so their difference is largest at one of the
overlap's vertices: a vertex of one triangle inside the other, or a crossing of their edges. Triangles
over a face are found with a BVH over the scene turned into the sun's frame; one thread per face.

Conservative by construction, against the render kernel's own shadow ray, which starts on the sun's line
through the hit point, lifted by at least ``SHADOW_START_M``: T counts when it rises above F by more than
half that, anywhere over F's footprint widened by how far a float32 hit point may stray from its face.
That stray grows with the hit's distance, so each face gets a level: lit with its footprint widened by
``MARGINS[level - 1]`` (0: not lit at the smallest), and a hit uses the table only where its own
distance's stray is within its face's level. Images are the same as with every ray traced (tested).
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import warp as wp

from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.runtime.progress import load_kernels

log = logging.getLogger(__name__)

wp.set_module_options(FORWARD_ONLY)

#: A shadow ray starts off the surface by this much plus this much per metre of the hit's distance
#: (what a float32 hit point may be off by, with room to spare), measured across the surface: along
#: the sun's direction, by that over the cosine of the sun's incidence (at most 1 / SHADOW_GRAZING).
SHADOW_START_M = 1.0e-3
SHADOW_START_PER_M = 1.0e-5
SHADOW_GRAZING = 0.05
#: How far a float32 hit point may stray from its face: this much plus this much per metre of distance.
STRAY_M = 2.0e-4
STRAY_PER_M = 2.0e-6
#: The footprint widenings of the levels, metres: level k holds for hits within ``MARGINS[k - 1]``
#: of stray (0.25 mm: up to 25 m away; 1 mm: 400 m; 4 mm: 1.9 km).
MARGINS = (0.25e-3, 1.0e-3, 4.0e-3)

_tables: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: ``MARGINS`` in a kernel.
_MARGINS = wp.constant(wp.vec3(*MARGINS))


@wp.func
def whole_face_lit(level: wp.int8, distance: float) -> bool:
    """May a hit ``distance`` metres away on a face of this sun-lit ``level`` skip its static shadow ray?"""
    if level <= wp.int8(0):
        return False
    return STRAY_M + STRAY_PER_M * distance <= _MARGINS[wp.min(int(level), 3) - 1]


def sunlit_faces(scene, sun_W) -> wp.array:
    """(F,) int8 level per static face of a ``DeviceScene`` for the sun ``sun_W`` (unit, towards the
    sun): k where no static geometry shades any point of the face widened by ``MARGINS[k - 1]``, 0 where
    a shadow ray must decide. Cached per scene and sun."""
    key = tuple(np.round(np.asarray(sun_W, np.float64), 12))
    cached = _tables.setdefault(scene, {})
    if key not in cached:
        start = time.perf_counter()
        cached[key] = _compute(scene, np.asarray(sun_W, np.float64))
        levels = cached[key].numpy()
        log.info(
            "sun-lit faces of %s: %.0f%% of %d (%.0f%% at the widest margin), in %.2f s",
            scene.name,
            100.0 * np.mean(levels > 0),
            scene.num_faces,
            100.0 * np.mean(levels == len(MARGINS)),
            time.perf_counter() - start,
        )
    return cached[key]


def _compute(scene, sun: np.ndarray) -> wp.array:
    d = scene.device
    static = scene.static
    out = wp.zeros(max(1, static.num_faces), dtype=wp.int8, device=d)
    if static.num_faces == 0:
        return out
    # The scene in the sun's frame (rows: two axes across the sun, then the sun): a BVH over it finds
    # the triangles over a face's footprint (and not wholly below it) with one box query.
    helper = np.array([1.0, 0.0, 0.0]) if abs(sun[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    e1 = np.cross(sun, helper)
    e1 /= np.linalg.norm(e1)
    frame = np.stack([e1, np.cross(sun, e1), sun])
    points = wp.array((static.vertices.astype(np.float64) @ frame.T).astype(np.float32), dtype=wp.vec3, device=d)
    mesh = wp.Mesh(points=points, indices=scene.indices)
    fixed = [mesh.id, points, scene.indices, wp.vec3(*MARGINS), 0.5 * SHADOW_START_M]

    def launch(first: int, count: int) -> None:
        wp.launch(sunlit_faces_kernel, dim=count, inputs=[*fixed, first], outputs=[out], device=d)

    if d.is_cuda:
        launch(0, static.num_faces)
    else:  # a Warp CPU launch runs on one thread and releases the GIL: a share of the faces per core
        load_kernels(sunlit_faces_kernel.module, d)
        bounds = np.linspace(0, static.num_faces, (os.cpu_count() or 1) + 1).astype(int)
        with ThreadPoolExecutor(len(bounds) - 1) as pool:
            list(pool.map(lambda ab: launch(ab[0], ab[1] - ab[0]), zip(bounds[:-1], bounds[1:])))
    wp.synchronize_device(d)  # the BVH over the sun's frame is freed when this returns
    return out


@wp.func
def height_at(a: wp.vec3, b: wp.vec3, c: wp.vec3, x: wp.vec2) -> float:
    """The height over ``x`` of the plane through the sun-frame points a, b, c (extended beyond them)."""
    ab = wp.vec2(b[0] - a[0], b[1] - a[1])
    ac = wp.vec2(c[0] - a[0], c[1] - a[1])
    ax = wp.vec2(x[0] - a[0], x[1] - a[1])
    area = ab[0] * ac[1] - ab[1] * ac[0]
    beta = (ax[0] * ac[1] - ax[1] * ac[0]) / area
    gamma = (ab[0] * ax[1] - ab[1] * ax[0]) / area
    return a[2] + beta * (b[2] - a[2]) + gamma * (c[2] - a[2])


@wp.func
def inside_triangle(a: wp.vec3, b: wp.vec3, c: wp.vec3, x: wp.vec2) -> bool:
    """Is ``x`` inside (or on) the projection of triangle a, b, c (either winding)?"""
    d1 = (b[0] - a[0]) * (x[1] - a[1]) - (b[1] - a[1]) * (x[0] - a[0])
    d2 = (c[0] - b[0]) * (x[1] - b[1]) - (c[1] - b[1]) * (x[0] - b[0])
    d3 = (a[0] - c[0]) * (x[1] - c[1]) - (a[1] - c[1]) * (x[0] - c[0])
    negative = d1 < 0.0 or d2 < 0.0 or d3 < 0.0
    positive = d1 > 0.0 or d2 > 0.0 or d3 > 0.0
    return not (negative and positive)


@wp.func
def rises_above(f0: wp.vec3, f1: wp.vec3, f2: wp.vec3, g: wp.mat33, t: wp.mat33, rise: float) -> bool:
    """Does triangle t (sun frame, corners as rows) rise more than ``rise`` above face f's plane anywhere
    over the widened footprint g of f (f's corners with its edges pushed out, as rows)?"""
    flat_t = wp.abs((t[1, 0] - t[0, 0]) * (t[2, 1] - t[0, 1]) - (t[1, 1] - t[0, 1]) * (t[2, 0] - t[0, 0])) < 1.0e-12
    for k in range(3):
        # t's corner k over the widened footprint
        x = wp.vec2(t[k, 0], t[k, 1])
        if inside_triangle(g[0], g[1], g[2], x):
            if t[k, 2] - height_at(f0, f1, f2, x) > rise:
                return True
        # the footprint's corner k over t
        x = wp.vec2(g[k, 0], g[k, 1])
        if not flat_t and inside_triangle(t[0], t[1], t[2], x):
            if height_at(t[0], t[1], t[2], x) - height_at(f0, f1, f2, x) > rise:
                return True
    # crossings of the footprint's edges with t's
    for i in range(3):
        p = g[i]
        q = g[(i + 1) % 3]
        r = wp.vec2(q[0] - p[0], q[1] - p[1])
        for j in range(3):
            a = t[j]
            b = t[(j + 1) % 3]
            s = wp.vec2(b[0] - a[0], b[1] - a[1])
            denominator = r[0] * s[1] - r[1] * s[0]
            if wp.abs(denominator) > 1.0e-20:
                ap = wp.vec2(a[0] - p[0], a[1] - p[1])
                along_g = (ap[0] * s[1] - ap[1] * s[0]) / denominator
                along_t = (ap[0] * r[1] - ap[1] * r[0]) / denominator
                if along_g >= 0.0 and along_g <= 1.0 and along_t >= 0.0 and along_t <= 1.0:
                    x = wp.vec2(p[0] + along_g * r[0], p[1] + along_g * r[1])
                    if a[2] + along_t * (b[2] - a[2]) - height_at(f0, f1, f2, x) > rise:
                        return True
    return False


@wp.func
def pushed_corner(a: wp.vec3, b: wp.vec3, c: wp.vec3, margin: float) -> wp.vec3:
    """Corner a of triangle a, b, c (counter-clockwise in the projection) once both edges at a are
    pushed ``margin`` outwards: where the two pushed lines meet (height: f's plane there, unused)."""
    u = wp.normalize(wp.vec2(b[0] - a[0], b[1] - a[1]))
    v = wp.normalize(wp.vec2(a[0] - c[0], a[1] - c[1]))
    out_u = wp.vec2(u[1], -u[0])  # outward normals of a CCW triangle's edges
    out_v = wp.vec2(v[1], -v[0])
    # x = a + margin * (out_u + out_v) / (1 + out_u . out_v) lies at distance margin from both lines
    x = wp.vec2(a[0], a[1]) + (out_u + out_v) * (margin / wp.max(1.0 + wp.dot(out_u, out_v), 1.0e-6))
    return wp.vec3(x[0], x[1], 0.0)


@wp.func
def footprint(f0: wp.vec3, f1: wp.vec3, f2: wp.vec3, margin: float) -> wp.mat33:
    """The corners of face f's projection (counter-clockwise) with its edges pushed ``margin`` out, as rows."""
    return wp.matrix_from_rows(
        pushed_corner(f0, f1, f2, margin), pushed_corner(f1, f2, f0, margin), pushed_corner(f2, f0, f1, margin)
    )


@wp.func
def lit_level(
    f0: wp.vec3, f1: wp.vec3, f2: wp.vec3, g1: wp.mat33, g2: wp.mat33, g3: wp.mat33, t: wp.mat33, rise: float, best: int
) -> int:
    """The highest level, at most ``best``, whose widened footprint triangle t does not rise above."""
    if best == 3:
        if rises_above(f0, f1, f2, g3, t, rise):
            best = 2
    if best == 2:
        if rises_above(f0, f1, f2, g2, t, rise):
            best = 1
    if best == 1:
        if rises_above(f0, f1, f2, g1, t, rise):
            best = 0
    return best


@wp.kernel
def sunlit_faces_kernel(
    mesh: wp.uint64,
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    margins: wp.vec3,
    rise: float,
    first: int,
    lit: wp.array(dtype=wp.int8),
):
    """lit[f] = the highest level (1..3) whose margin-widened footprint of face f no other static
    triangle rises above; 0 if none (faces from ``first`` on; ``points`` in the sun's frame)."""
    f = first + wp.tid()
    anchor = points[indices[f * 3]]
    f0 = wp.vec3(0.0)
    f1 = points[indices[f * 3 + 1]] - anchor
    f2 = points[indices[f * 3 + 2]] - anchor
    area = f1[0] * f2[1] - f1[1] * f2[0]
    extent = wp.max(wp.max(wp.length(f1), wp.length(f2)), wp.length(f2 - f1))
    if wp.abs(area) < 1.0e-4 * extent * extent:
        return  # edge-on to the sun (or degenerate): leave it to the shadow ray
    if area < 0.0:  # counter-clockwise in the projection
        swap = f1
        f1 = f2
        f2 = swap
    g1 = footprint(f0, f1, f2, margins[0])
    g2 = footprint(f0, f1, f2, margins[1])
    g3 = footprint(f0, f1, f2, margins[2])
    # Candidates: triangles whose boxes overlap f's box widened by the widest margin (which holds every
    # point a shadow ray can start over; the pushed corners of a thin face reach far beyond it) and
    # reach above the lowest point of f's plane over that box (a triangle wholly below it cannot rise
    # above f anywhere). The exact test above then uses the pushed corners: a superset, conservative.
    reach = margins[2]
    low = wp.vec3(wp.min(wp.min(f0[0], f1[0]), f2[0]) - reach, wp.min(wp.min(f0[1], f1[1]), f2[1]) - reach, 0.0)
    high = wp.vec3(wp.max(wp.max(f0[0], f1[0]), f2[0]) + reach, wp.max(wp.max(f0[1], f1[1]), f2[1]) + reach, 1.0e9)
    low[2] = wp.min(
        wp.min(height_at(f0, f1, f2, wp.vec2(low[0], low[1])), height_at(f0, f1, f2, wp.vec2(low[0], high[1]))),
        wp.min(height_at(f0, f1, f2, wp.vec2(high[0], low[1])), height_at(f0, f1, f2, wp.vec2(high[0], high[1]))),
    )
    query = wp.mesh_query_aabb(mesh, anchor + low, anchor + high)
    level = int(3)  # noqa: UP018 (Warp: a variable the loop changes)
    t = int(0)  # noqa: UP018 (Warp: the query writes the face index here)
    while wp.mesh_query_aabb_next(query, t):
        if t != f:
            i = t * 3
            corners = wp.matrix_from_rows(
                points[indices[i]] - anchor, points[indices[i + 1]] - anchor, points[indices[i + 2]] - anchor
            )
            level = lit_level(f0, f1, f2, g1, g2, g3, corners, rise, level)
            if level == 0:
                return
    lit[f] = wp.int8(level)
