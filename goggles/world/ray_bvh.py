"""goggles' own BVH of the static scene, for closest-hit rays (the renderer's ``bvh`` backend).

Why not Warp's ``mesh_query_ray``: read in its sm_90 code, it reaches each triangle through three
dependent loads (primitive index, vertex indices, vertices) and redoes the watertight test's shear per
triangle, indexing vectors by a run-time axis, so every triangle test goes through local memory. Here
the triangles are stored in leaf order (one load of nine floats), the shear is a 3x3 matrix made once
per ray (no run-time index in the loop), and each inner node holds both children's boxes, so a step
reads one node and tests two boxes. The test is the watertight one of Woop, Benthin and Wald (JCGT
2013), double-sided, as Warp's, with the same ``u``, ``v`` (weights of the face's first and second
vertex) and normal; an edge function too near zero to trust in float32 is redone in float64, so the
test stays watertight where the compiler fuses multiply-adds (CUDA).

The tree is a binned-SAH BVH built on the host with numpy, level by level over every node of a level
at once (1.4 s for the arena's 199k triangles on one core; Warp builds its own in 0.1 s), once per
machine: ``goggles.world.bvh_cache`` keeps it on disk by its triangles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import warp as wp

from goggles.world.queries import Hit

#: Most triangles in a leaf (a node with more is split).
LEAF_SIZE = 4
#: SAH bins per axis and node.
BINS = 16
#: Entries of the traversal stack: nodes whose subtree could grow deeper are halved instead of SAH-split.
STACK_DEPTH = 32
#: Both corners of an empty child's box: far enough that no ray within reach enters it.
EMPTY_CORNER = 1.0e30
_LEAF_BITS = 4  # a leaf's code: -(first * 16 + count) - 1
LEAF_BITS = wp.constant(_LEAF_BITS)
LEAF_MASK = wp.constant((1 << _LEAF_BITS) - 1)
#: A box's exit distance, widened by two ulps: a ray along a box's face still enters it (Ize 2013).
ROBUST_FAR = wp.constant(1.0 + 2.0 * 1.1920929e-07)

_stack_type = wp.types.vector(length=STACK_DEPTH, dtype=wp.int32)


@dataclass(frozen=True)
class RayBvhArrays:
    """The tree on the host, ready to upload."""

    boxes: np.ndarray
    """(I, 3, 4) float32 per inner node, both children's boxes: (lo0.x, hi0.x, lo0.y, hi0.y),
    (lo1.x, hi1.x, lo1.y, hi1.y), (lo0.z, hi0.z, lo1.z, hi1.z)."""
    children: np.ndarray
    """(I, 2) int32: an inner node's index, or a leaf as -(first * 16 + count) - 1."""
    triangles: np.ndarray
    """(F, 3, 3) float32 the triangles' corners in leaf order."""
    faces: np.ndarray
    """(F,) int32 the scene face of each triangle in leaf order."""
    depth: int
    """Inner nodes on the longest path from the root."""

    @property
    def nbytes(self) -> int:
        return self.boxes.nbytes + self.children.nbytes + self.triangles.nbytes + self.faces.nbytes


def leaf_code(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    return -(first * (1 << _LEAF_BITS) + count) - 1


def build_ray_bvh(vertices: np.ndarray, faces: np.ndarray, leaf_size: int = LEAF_SIZE) -> RayBvhArrays:
    """A binned-SAH BVH over the triangles ``vertices[faces]``.

    Every node of a level is split at once: each triangle's centroid falls in one of ``BINS`` bins per
    axis of its node's centroid bounds, bins' counts and boxes are gathered per node, and the split of
    least surface-area cost (left area x count + right area x count) over the three axes wins. A node
    whose centroids coincide is halved in its order. Nodes of at most ``leaf_size`` triangles are leaves.
    """
    corners = np.asarray(vertices, np.float32)[np.asarray(faces)]
    nodes = build_nodes(corners.min(axis=1), corners.max(axis=1), leaf_size)
    boxes, children = pair_nodes(nodes)
    return RayBvhArrays(
        boxes=boxes,
        children=children,
        triangles=np.ascontiguousarray(corners[nodes.order], np.float32),
        faces=nodes.order.astype(np.int32),
        depth=nodes.depth,
    )


class Nodes(NamedTuple):
    """A binned-SAH tree's nodes, breadth first from the root (0); children side by side."""

    lo: np.ndarray
    hi: np.ndarray
    first: np.ndarray
    """Each node's first item in leaf order."""
    count: np.ndarray
    first_child: np.ndarray
    """Each node's first child (the second follows it); -1: a leaf."""
    order: np.ndarray
    """The items in leaf order."""
    depth: int


def build_nodes(lowers: np.ndarray, uppers: np.ndarray, leaf_size: int = LEAF_SIZE) -> Nodes:
    """A binned-SAH tree over the (n, 3) boxes ``lowers``, ``uppers`` (``build_ray_bvh``'s, for any
    items with boxes: triangles, Gaussians)."""
    if not 1 <= leaf_size < (1 << _LEAF_BITS):
        raise ValueError(f"leaf_size {leaf_size}: give 1 to {(1 << _LEAF_BITS) - 1}")
    n = len(lowers)
    if n >= 2**31 // (1 << _LEAF_BITS):
        raise ValueError(f"{n} items: the BVH holds at most {2**31 // (1 << _LEAF_BITS) - 1}")
    # Per-item rows, kept in tree order: box lower (0-2), upper (3-5), centroid (6-8).
    rows = np.empty((9, n), np.float32)
    rows[0:3] = np.asarray(lowers, np.float32).T
    rows[3:6] = np.asarray(uppers, np.float32).T
    rows[6:9] = 0.5 * (rows[0:3] + rows[3:6])
    order = np.arange(n, dtype=np.int64)

    # Nodes are numbered breadth first from the root, 0; the two children of a node are side by side.
    capacity = 2 * max(n, 1) + 1
    node_lo = np.full((capacity, 3), EMPTY_CORNER, np.float32)
    node_hi = np.full((capacity, 3), EMPTY_CORNER, np.float32)
    node_first = np.zeros(capacity, np.int64)
    node_count = np.zeros(capacity, np.int64)
    first_child = np.full(capacity, -1, np.int64)
    node_count[0] = n
    total, depth = 1, 0
    active, first, count = np.array([0]), np.array([0]), np.array([n])
    if n <= leaf_size:  # every tree has an inner root: here one leaf of them all and an empty one
        if n:
            node_lo[1], node_hi[1] = rows[0:3].min(axis=1), rows[3:6].max(axis=1)
        node_count[1] = n
        first_child[0] = 1
        total, depth, active = 3, 1, active[:0]
    while len(active):
        depth += 1
        m = len(active)
        offsets = np.concatenate(([0], np.cumsum(count)[:-1]))
        everything = offsets[-1] + count[-1] == n  # the top levels: no gather
        pos = slice(None) if everything else np.repeat(first - offsets, count) + np.arange(count.sum())
        seg = np.repeat(np.arange(m), count)
        sub = rows[:, pos]
        halve = depth + np.ceil(np.log2(count / leaf_size)) >= STACK_DEPTH  # keeps the tree within the stack
        right = _split_sides(sub, seg, offsets, count, halve)
        # Stable partition of each node's triangles: lefts, then rights (compact: this level's triangles).
        rights = np.bincount(seg, weights=right, minlength=m).astype(np.int64)
        lefts = count - rights
        before = np.cumsum(right) - right
        right_rank = before - before[offsets][seg]
        left_rank = np.arange(len(seg)) - offsets[seg] - right_rank
        local = offsets[seg] + np.where(right, lefts[seg] + right_rank, left_rank)
        moved = np.empty_like(sub)
        moved[:, local] = sub
        moved_order = np.empty_like(order[pos])
        moved_order[local] = order[pos]
        rows[:, pos], order[pos] = moved, moved_order

        ids = total + 2 * np.arange(m)
        total += 2 * m
        first_child[active] = ids
        children = np.stack([ids, ids + 1], axis=1).ravel()
        node_first[children] = np.stack([first, first + lefts], axis=1).ravel()
        node_count[children] = np.stack([lefts, rights], axis=1).ravel()
        local_first = np.stack([offsets, offsets + lefts], axis=1).ravel()
        filled = node_count[children] > 0
        if filled.any():  # reduceat cannot give an empty node its identity: those keep EMPTY_CORNER
            node_lo[children[filled]] = np.minimum.reduceat(moved[0:3], local_first[filled], axis=1).T
            node_hi[children[filled]] = np.maximum.reduceat(moved[3:6], local_first[filled], axis=1).T
        split = children[node_count[children] > leaf_size]
        active, first, count = split, node_first[split], node_count[split]
    return Nodes(node_lo, node_hi, node_first, node_count, first_child[:total], order, depth)


def _split_sides(
    sub: np.ndarray, seg: np.ndarray, offsets: np.ndarray, count: np.ndarray, halve: np.ndarray
) -> np.ndarray:
    """Which triangles of each node go right: the least-SAH binned split over three axes, or the node's
    second half in its order where ``halve`` says so (or its centroids all fall in one bin)."""
    m = len(count)
    centroid = sub[6:9]
    cmin = np.minimum.reduceat(centroid, offsets, axis=1)
    cmax = np.maximum.reduceat(centroid, offsets, axis=1)
    extent = cmax - cmin
    scale = np.where(extent > 0, BINS / np.where(extent > 0, extent, 1), 0).astype(np.float32)
    bins = np.minimum(((centroid - cmin[:, seg]) * scale[:, seg]).astype(np.int64), BINS - 1)
    best_cost = np.full(m, np.inf)
    best_axis = np.zeros(m, np.int64)
    best_bin = np.zeros(m, np.int64)
    for axis in range(3):
        key = bins[axis] * m + seg  # bin-major: the scans below run over whole rows of nodes
        counts = np.bincount(key, minlength=BINS * m).reshape(BINS, m)
        lo = np.full((BINS, 3, m), np.inf, np.float32)
        hi = np.full((BINS, 3, m), -np.inf, np.float32)
        for k in range(3):
            flat = bins[axis] * (3 * m) + k * m + seg
            np.minimum.at(lo.reshape(-1), flat, sub[k])
            np.maximum.at(hi.reshape(-1), flat, sub[3 + k])
        left_area = _area(np.minimum.accumulate(lo, axis=0), np.maximum.accumulate(hi, axis=0))
        right_area = _area(np.minimum.accumulate(lo[::-1], axis=0)[::-1], np.maximum.accumulate(hi[::-1], axis=0)[::-1])
        left_count = np.cumsum(counts, axis=0)
        right_count = count - left_count
        # Split after bin j: bins 0..j left, j+1.. right.
        cost = left_area[:-1] * left_count[:-1] + right_area[1:] * right_count[:-1]
        cost = np.where((left_count[:-1] > 0) & (right_count[:-1] > 0), cost, np.inf)
        j = cost.argmin(axis=0)
        c = cost[j, np.arange(m)]
        better = c < best_cost
        best_cost = np.where(better, c, best_cost)
        best_axis = np.where(better, axis, best_axis)
        best_bin = np.where(better, j, best_bin)
    right = bins[best_axis[seg], np.arange(len(seg))] > best_bin[seg]
    unsplit = ~np.isfinite(best_cost) | halve
    if unsplit.any():
        rank = np.arange(len(seg)) - offsets[seg]
        right = np.where(unsplit[seg], rank >= count[seg] // 2, right)
    return right


def _area(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Half the surface area of (bins, 3, nodes) boxes; an empty box's is 0."""
    e = np.maximum(hi - lo, 0)
    return e[:, 0] * e[:, 1] + e[:, 1] * e[:, 2] + e[:, 2] * e[:, 0]


def pair_nodes(nodes: Nodes) -> tuple[np.ndarray, np.ndarray]:
    """Breadth-first nodes to inner nodes that each hold both children's boxes ((I, 3, 4) float32: lo.x
    hi.x lo.y hi.y of each child, then lo.z hi.z of both) and references ((I, 2) int32: an inner
    node's index, or a leaf's ``leaf_code``)."""
    first_child = nodes.first_child
    inner = np.flatnonzero(first_child >= 0)
    index = np.full(len(first_child), -1, np.int64)
    index[inner] = np.arange(len(inner))
    pair = np.stack([first_child[inner], first_child[inner] + 1], axis=1)
    code = np.where(first_child[pair] >= 0, index[pair], leaf_code(nodes.first[pair], nodes.count[pair]))
    lo0, hi0, lo1, hi1 = nodes.lo[pair[:, 0]], nodes.hi[pair[:, 0]], nodes.lo[pair[:, 1]], nodes.hi[pair[:, 1]]
    boxes = np.stack(
        [
            np.stack([lo0[:, 0], hi0[:, 0], lo0[:, 1], hi0[:, 1]], axis=1),
            np.stack([lo1[:, 0], hi1[:, 0], lo1[:, 1], hi1[:, 1]], axis=1),
            np.stack([lo0[:, 2], hi0[:, 2], lo1[:, 2], hi1[:, 2]], axis=1),
        ],
        axis=1,
    )
    return boxes.astype(np.float32), code.astype(np.int32)


@wp.struct
class RayBvh:
    """The tree on a device (``RayBvhArrays``)."""

    boxes: wp.array2d(dtype=wp.vec4)
    children: wp.array(dtype=wp.vec2i)
    triangles: wp.array2d(dtype=wp.vec3)
    faces: wp.array(dtype=wp.int32)


def upload(tree: RayBvhArrays, device) -> RayBvh:
    bvh = RayBvh()
    bvh.boxes = wp.array(tree.boxes, dtype=wp.vec4, device=device)
    bvh.children = wp.array(tree.children, dtype=wp.vec2i, device=device)
    bvh.triangles, bvh.faces = upload_leaves(tree, device)
    return bvh


def upload_leaves(tree, device) -> tuple[wp.array, wp.array]:
    """A tree's triangles in leaf order and their scene faces on ``device`` (one dummy each for an
    empty scene: Warp arrays of no element cannot be indexed, even where no leaf points)."""
    triangles = tree.triangles if len(tree.triangles) else np.zeros((1, 3, 3), np.float32)
    faces = tree.faces if len(tree.faces) else np.zeros(1, np.int32)
    return wp.array(triangles, dtype=wp.vec3, device=device), wp.array(faces, dtype=wp.int32, device=device)


@wp.func
def _axis(k: int, value: float) -> wp.vec3:
    """``value`` on axis ``k``: builds the shear matrix without indexing a vector at run time."""
    return wp.vec3(wp.where(k == 0, value, 0.0), wp.where(k == 1, value, 0.0), wp.where(k == 2, value, 0.0))


@wp.func
def _safe_inverse(d: float) -> float:
    return 1.0 / wp.where(d == 0.0, 1.0e-20, d)


@wp.func
def slab(lo: float, hi: float, o: float, inverse: float) -> wp.vec2:
    """Entry and exit distances of one axis's slab."""
    a = (lo - o) * inverse
    b = (hi - o) * inverse
    return wp.vec2(wp.min(a, b), wp.max(a, b))


#: How near zero a float32 edge function may lie before its sign is settled in float64: the products'
#: rounding, or a compiler fusing one product into the subtraction (NVRTC does by default), moves the
#: difference by at most about 1.5 ulps of the larger product.
EDGE_DOUBT = wp.constant(4.0 * 1.1920929e-07)


@wp.func
def _edge(p: wp.vec3, q: wp.vec3) -> float:
    """``p.x q.y - p.y q.x`` with its exact sign. The two triangles of an edge must see it with opposite
    signs, or a ray through it slips between them; a fused multiply-add rounds one product only and
    breaks that symmetry (152 of 5929 rays through a grid's edges were lost on an H100). Near zero the
    products of floats are exact in float64, and the difference is rounded once, symmetrically."""
    left = p[0] * q[1]
    right = p[1] * q[0]
    e = left - right
    if wp.abs(e) <= EDGE_DOUBT * (wp.abs(left) + wp.abs(right)):
        e = float(wp.float64(p[0]) * wp.float64(q[1]) - wp.float64(p[1]) * wp.float64(q[0]))
    return e


@wp.struct
class Found:
    """What a traversal found, and what it cost where it counts (``make_traverse(counting=True)``)."""

    index: int
    """The triangle's place in leaf order, or -1."""
    t: float
    u: float
    v: float
    nodes: int
    """Inner nodes visited (their boxes tested)."""
    triangles: int
    """Triangles tested."""


@wp.func
def ray_shear(direction: wp.vec3) -> wp.mat33:
    """The watertight test's shear, once per ray: maps a corner minus the origin to the ray's frame
    (x, y sheared along the ray's major axis kz, z scaled by 1 / d[kz])."""
    ax = wp.abs(direction[0])
    ay = wp.abs(direction[1])
    az = wp.abs(direction[2])
    kz = 0
    if ay > ax and ay >= az:
        kz = 1
    elif az > ax and az > ay:
        kz = 2
    kx = (kz + 1) % 3
    ky = (kx + 1) % 3
    dz = direction[kz]
    if dz < 0.0:  # keeps the winding: U, V, W share the sign of the determinant for either side
        swap = kx
        kx = ky
        ky = swap
    return wp.matrix_from_rows(
        _axis(kx, 1.0) - _axis(kz, direction[kx] / dz),
        _axis(ky, 1.0) - _axis(kz, direction[ky] / dz),
        _axis(kz, 1.0 / dz),
    )


@wp.func
def ray_inverse(direction: wp.vec3) -> wp.vec3:
    return wp.vec3(_safe_inverse(direction[0]), _safe_inverse(direction[1]), _safe_inverse(direction[2]))


@wp.func
def intersect_leaf(
    triangles: wp.array2d(dtype=wp.vec3), code: int, M: wp.mat33, origin: wp.vec3, found: Found, counting: bool
) -> Found:
    """The leaf ``code``'s triangles against the ray (shear ``M``): ``found`` with a nearer hit, if any."""
    leaf = -code - 1
    start = leaf >> LEAF_BITS
    count = leaf & LEAF_MASK
    if counting:
        found.triangles += count
    for k in range(start, start + count):
        a = M * (triangles[k, 0] - origin)
        b = M * (triangles[k, 1] - origin)
        c = M * (triangles[k, 2] - origin)
        u = _edge(c, b)
        v = _edge(a, c)
        w = _edge(b, a)
        if (u < 0.0 or v < 0.0 or w < 0.0) and (u > 0.0 or v > 0.0 or w > 0.0):
            continue
        det = u + v + w
        if det == 0.0:
            continue
        t = (u * a[2] + v * b[2] + w * c[2]) / det
        if t >= 0.0 and t < found.t:
            found.t = t
            found.index = k
            found.u = u / det
            found.v = v / det
    return found


@wp.func
def nothing_found(max_t: float) -> Found:
    found = Found()
    found.index = -1
    found.t = max_t
    return found


def make_traverse(counting: bool):
    """The traversal of the binary tree; ``counting`` compiles in the tally of nodes and triangles."""

    @wp.func
    def traverse(bvh: RayBvh, origin: wp.vec3, direction: wp.vec3, max_t: float, first: bool) -> Found:
        """The nearest triangle along a unit ray within ``max_t`` (``first``: any one, found sooner)."""
        M = ray_shear(direction)
        inverse = ray_inverse(direction)
        found = nothing_found(max_t)
        stack = _stack_type()
        depth = int(0)  # noqa: UP018
        node = int(0)  # noqa: UP018
        while True:
            if node >= 0:
                if wp.static(counting):
                    found.nodes += 1
                xy0 = bvh.boxes[node, 0]
                xy1 = bvh.boxes[node, 1]
                zz = bvh.boxes[node, 2]
                x = slab(xy0[0], xy0[1], origin[0], inverse[0])
                y = slab(xy0[2], xy0[3], origin[1], inverse[1])
                z = slab(zz[0], zz[1], origin[2], inverse[2])
                near0 = wp.max(wp.max(x[0], y[0]), wp.max(z[0], 0.0))
                far0 = wp.min(wp.min(x[1], y[1]), wp.min(z[1], found.t)) * ROBUST_FAR
                x = slab(xy1[0], xy1[1], origin[0], inverse[0])
                y = slab(xy1[2], xy1[3], origin[1], inverse[1])
                z = slab(zz[2], zz[3], origin[2], inverse[2])
                near1 = wp.max(wp.max(x[0], y[0]), wp.max(z[0], 0.0))
                far1 = wp.min(wp.min(x[1], y[1]), wp.min(z[1], found.t)) * ROBUST_FAR
                child = bvh.children[node]
                if near0 <= far0:
                    if near1 <= far1:  # both: the nearer first, the other on the stack
                        later = child[1]
                        node = child[0]
                        if near1 < near0:
                            later = child[0]
                            node = child[1]
                        stack[depth] = later
                        depth += 1
                    else:
                        node = child[0]
                    continue
                if near1 <= far1:
                    node = child[1]
                    continue
            else:
                found = intersect_leaf(bvh.triangles, node, M, origin, found, wp.static(counting))
                if first and found.index >= 0:
                    break
            if depth == 0:
                break
            depth -= 1
            node = stack[depth]
        return found

    return traverse


_traverse = make_traverse(False)
#: The traversal that counts what it visits (``goggles bench bvh``).
counting_traverse = make_traverse(True)


@wp.func
def _double(v: wp.vec3) -> wp.vec3d:
    return wp.vec3d(wp.float64(v[0]), wp.float64(v[1]), wp.float64(v[2]))


@wp.func
def plane_distance(p0: wp.vec3, p1: wp.vec3, p2: wp.vec3, origin: wp.vec3, direction: wp.vec3, t: float) -> float:
    """The distance along the ray to the plane of the triangle it hit, in float64 (once per ray): the
    test's ``t`` carries the rounding of the shear and of three products (up to 11 ulps on a terrain,
    as Warp's); this one is the exact distance rounded once, so a plane's depth comes out to the last
    bit (``t`` is kept for a ray that runs along the plane). On GPUs with slow float64 (1/64 rate on
    GeForce and L4/L40 parts) it is a few dozen float64 operations per ray, against a traversal."""
    a = _double(p0)
    normal = wp.cross(_double(p1) - a, _double(p2) - a)
    across = wp.dot(normal, _double(direction))
    if across == wp.float64(0.0):
        return t
    return float(wp.dot(normal, a - _double(origin)) / across)


@wp.func
def bvh_closest_hit(bvh: RayBvh, origin: wp.vec3, direction: wp.vec3, max_t: float) -> Hit:
    """The nearest static surface along a unit ray within ``max_t`` metres (a miss keeps ``t`` = max_t),
    as ``queries.static_hit`` answers from Warp's BVH."""
    return found_hit(
        bvh.triangles, bvh.faces, _traverse(bvh, origin, direction, max_t, False), origin, direction, max_t
    )


@wp.func
def found_hit(
    triangles: wp.array2d(dtype=wp.vec3),
    faces: wp.array(dtype=wp.int32),
    found: Found,
    origin: wp.vec3,
    direction: wp.vec3,
    max_t: float,
) -> Hit:
    """A traversal's find as a ``Hit``: the scene face, the weights, the normal, and the distance to the
    triangle's plane in float64 (a miss keeps ``t`` = max_t)."""
    hit = Hit()
    hit.result = found.index >= 0
    hit.t = found.t
    hit.face = -1
    if hit.result:
        hit.face = faces[found.index]
        hit.u = found.u
        hit.v = found.v
        p0 = triangles[found.index, 0]
        p1 = triangles[found.index, 1]
        p2 = triangles[found.index, 2]
        hit.t = wp.clamp(plane_distance(p0, p1, p2, origin, direction, found.t), 0.0, max_t)
        hit.normal_W = wp.normalize(wp.cross(p1 - p0, p2 - p0))
    return hit


@wp.func
def bvh_any_hit(bvh: RayBvh, origin: wp.vec3, direction: wp.vec3, max_t: float) -> bool:
    """Is there any static surface along a unit ray within ``max_t`` metres (a shadow ray)?"""
    return _traverse(bvh, origin, direction, max_t, True).index >= 0
