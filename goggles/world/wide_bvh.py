"""goggles' BVH in wide, compressed nodes (the renderer's ``wide`` backend): eight children a node,
their boxes tested together, quantized to a byte per plane (Ylitie, Karras and Laine, HPG 2017).

Why: on an H100 the binary traversal (``goggles.world.ray_bvh``) is instruction-bound (64 registers,
half occupancy): every step reads one node, tests two boxes and makes a data-dependent choice. A wide
node is read once for eight boxes, a ray takes a third to a half of the steps (``goggles bench bvh``
counts them), and with its boxes stored as bytes over a power-of-two grid a node is 104 bytes for eight
children (the binary tree: 56 for two). The wide tree is the binary tree collapsed (each wide node
opens its largest inner child until it has eight), so both trace the same leaves with the same
watertight triangle test (and its float64 fallback) and the same float64 plane distance: their hits
are the same (a ray through an edge two triangles share may take either).

Each plane's distance along the ray is Ylitie's one multiply-add, ``start + cells * cell``, where
``start`` is where the ray meets the node's origin plane and ``cell`` what one cell adds (a power of two
times the inverse direction: exact). ``start`` rounds, so near planes move nearer and far ones farther
by that rounding's bound: a ray that meets a child meets its decoded box, and quantization (each box
rounded out to whole cells) only ever adds boxes entered, never loses a hit. The ray's signs say which
byte of each axis is its near plane. Children sit in the slots of the octant they come first for, so
visiting slots ``octant ^ 0 .. 7`` meets them about nearest first without sorting; every child entered
is pushed (branch-free), and a popped entry beyond the best hit so far is skipped.

A node pushes up to its eight children and pops one; the collapse never makes a node wider than the
stack (``WIDE_STACK``) can hold on the deepest path below it, so no tree overflows it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles.world.queries import Hit
from goggles.world.ray_bvh import (
    LEAF_MASK,
    ROBUST_FAR,
    Found,
    RayBvhArrays,
    found_hit,
    intersect_leaf,
    nothing_found,
    ray_inverse,
    ray_shear,
    upload_leaves,
)

#: Children per node.
WIDTH = 8
#: Entries of the traversal stack (an entry: a child's code and its entry distance).
WIDE_STACK = 64
#: An unused slot's child code (0 is the root, never a child).
EMPTY = wp.constant(0)
#: Quantization levels per axis: a child's box is [q_lo, q_hi] cells of the node's grid.
LEVELS = 255

# One entry more than a path can keep: the traversal writes a child it missed where the next entry goes.
_stack_codes = wp.types.vector(length=WIDE_STACK + 1, dtype=wp.int32)
_stack_nears = wp.types.vector(length=WIDE_STACK + 1, dtype=wp.float32)


@dataclass(frozen=True)
class WideBvhArrays:
    """The wide tree on the host, ready to upload (triangles and faces are the binary tree's)."""

    origin: np.ndarray
    """(N, 3) float32 each node's grid origin (its box's lower corner)."""
    scale: np.ndarray
    """(N, 3) float32 each node's cell size per axis, a power of two."""
    quantized: np.ndarray
    """(N, 12) uint32 the children's boxes in cells, a byte each: words 0-1 lower x of children 0-7 (child
    i in byte i % 4 of word i // 4), 2-3 upper x, 4-5 lower y, 6-7 upper y, 8-9 lower z, 10-11 upper z."""
    children: np.ndarray
    """(N, 8) int32 a child's node index, a leaf's code (as the binary tree's), or ``EMPTY``."""
    triangles: np.ndarray
    faces: np.ndarray
    stack: int
    """The most stack entries any path through the tree can hold."""

    @property
    def nbytes(self) -> int:
        nodes = self.origin.nbytes + self.scale.nbytes + self.quantized.nbytes + self.children.nbytes
        return nodes + self.triangles.nbytes + self.faces.nbytes


def build_wide_bvh(tree: RayBvhArrays, width: int = WIDTH, stack: int = WIDE_STACK) -> WideBvhArrays:
    """Collapse a binary tree into nodes of up to ``width`` children: each wide node starts from a binary
    node's two children and opens the inner child of largest surface area while it has fewer than
    ``width`` and the stack keeps room: a node pushes every child it enters and pops one, so one
    reached with ``used`` entries below peaks at used + k and hands its children used + k - 1; a
    binary subtree of height h then needs h + 1 more at most."""
    if not 2 <= width <= WIDTH:
        raise ValueError(f"width {width}: give 2 to {WIDTH}")
    lo, hi = _child_boxes(tree)
    area = _half_area(lo, hi).tolist()
    kids = tree.children.tolist()  # Python's lists: the walk below reads them one at a time
    height = _heights(kids)
    if height[0] + 1 > stack:
        raise ValueError(f"a binary tree {height[0]} deep does not fit a stack of {stack}")

    def children_of(b: int) -> list[tuple[int, int, int]]:  # (code, binary parent, side), empty leaves left out
        return [(kids[b][s], b, s) for s in (0, 1) if kids[b][s] >= 0 or (-kids[b][s] - 1) & LEAF_MASK]

    nodes: list[list[tuple[int, int, int]]] = []  # per wide node: its children
    queue = deque([(0, 0)])  # (binary node, stack entries below it), breadth first: popped in index order
    index_of = {0: 0}
    while queue:
        b, used = queue.popleft()
        entries = children_of(b)
        while len(entries) < width:
            inner = [e for e in entries if e[0] >= 0]
            if not inner:
                break
            pick = max(inner, key=lambda e: area[e[1]][e[2]])
            trial = [e for e in entries if e is not pick] + children_of(pick[0])
            if used + len(trial) + max((height[e[0]] for e in trial if e[0] >= 0), default=0) > stack:
                break
            entries = trial
        nodes.append(entries)
        below = used + len(entries) - 1
        for code, _, _ in entries:
            if code >= 0:
                index_of[code] = len(index_of)
                queue.append((code, below))
    return _pack(tree, nodes, index_of, lo, hi, stack)


def _child_boxes(tree: RayBvhArrays) -> tuple[np.ndarray, np.ndarray]:
    """(I, 2, 3) lower and upper corners of each binary node's two children."""
    b = tree.boxes.astype(np.float64)
    lo = np.stack(
        [np.stack([b[:, 0, 0], b[:, 0, 2], b[:, 2, 0]], 1), np.stack([b[:, 1, 0], b[:, 1, 2], b[:, 2, 2]], 1)], 1
    )
    hi = np.stack(
        [np.stack([b[:, 0, 1], b[:, 0, 3], b[:, 2, 1]], 1), np.stack([b[:, 1, 1], b[:, 1, 3], b[:, 2, 3]], 1)], 1
    )
    return lo, hi


def _half_area(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    e = np.maximum(hi - lo, 0.0)
    return e[..., 0] * e[..., 1] + e[..., 1] * e[..., 2] + e[..., 2] * e[..., 0]


def _heights(kids: list[list[int]]) -> list[int]:
    """Inner nodes on the longest path down from each binary node, itself included (children are numbered
    after their parents, so one pass from the last node up settles them)."""
    height = [1] * len(kids)
    for node in range(len(kids) - 1, -1, -1):
        left, right = kids[node]
        height[node] = 1 + max(height[left] if left >= 0 else 0, height[right] if right >= 0 else 0)
    return height


def _pack(tree, nodes, index_of, lo, hi, stack) -> WideBvhArrays:
    n = len(nodes)
    children = np.full((n, WIDTH), EMPTY, np.int32)
    child_lo = np.zeros((n, WIDTH, 3), np.float32)
    child_hi = np.zeros((n, WIDTH, 3), np.float32)
    used = np.zeros((n, WIDTH), bool)
    # In collapse order first, then moved to their octant slots.
    flat = [(i, j, index_of[c] if c >= 0 else c, p, s) for i, es in enumerate(nodes) for j, (c, p, s) in enumerate(es)]
    if flat:
        i, j, code, parent, side = np.array(flat, np.int64).T
        children[i, j] = code
        child_lo[i, j], child_hi[i, j] = lo[parent, side], hi[parent, side]
        used[i, j] = True
    slots = _octant_slots(child_lo, child_hi, used)
    rows = np.arange(n)[:, None]
    children[rows, slots] = np.where(used, children, EMPTY)
    child_lo[rows, slots], child_hi[rows, slots] = child_lo.copy(), child_hi.copy()
    used[rows, slots] = used.copy()
    big = np.float32(np.finfo(np.float32).max)
    node_lo = np.where(used[..., None], child_lo, big).min(axis=1)
    node_hi = np.where(used[..., None], child_hi, -big).max(axis=1)
    node_lo = np.where(used.any(axis=1)[:, None], node_lo, 0.0).astype(np.float32)
    node_hi = np.where(used.any(axis=1)[:, None], node_hi, 0.0).astype(np.float32)
    origin, scale = node_lo, _grid(node_lo, node_hi)
    q_lo, q_hi = _quantize(origin, scale, child_lo, child_hi)
    q_lo = np.where(used[..., None], q_lo, LEVELS)  # an unused slot: skipped by its code anyway
    q_hi = np.where(used[..., None], q_hi, 0)
    planes = np.stack([q_lo[..., 0], q_hi[..., 0], q_lo[..., 1], q_hi[..., 1], q_lo[..., 2], q_hi[..., 2]], 1)
    quantized = planes.astype(np.uint8).reshape(n, 6 * WIDTH).view("<u4").reshape(n, 12)
    depth_bound = _stack_bound(nodes, index_of)
    assert depth_bound <= stack, (depth_bound, stack)
    return WideBvhArrays(origin, scale, quantized.astype(np.uint32), children, tree.triangles, tree.faces, depth_bound)


#: Each slot's octant as a direction: bit k set means negative along axis k.
_OCTANT_DIRECTIONS = np.array([[-1.0 if s >> k & 1 else 1.0 for k in range(3)] for s in range(WIDTH)])


def _octant_slots(child_lo: np.ndarray, child_hi: np.ndarray, used: np.ndarray) -> np.ndarray:
    """(N, 8) the slot of each node's children (a permutation of 0-7; unused children take the slots
    left), such that a ray whose direction lies in octant o, visiting slots o, o ^ 1, ..., o ^ 7, meets
    the children about nearest first (Ylitie et al. 2017): slot s goes to the child that comes first
    along octant s's diagonal, greedily, the pair that comes first of all first (every node at once)."""
    n = len(used)
    centres = 0.5 * (child_lo.astype(np.float64) + child_hi)
    count = np.maximum(used.sum(axis=1, keepdims=True), 1)
    mean = np.where(used[..., None], centres, 0.0).sum(axis=1) / count
    along = (centres - mean[:, None, :]) @ _OCTANT_DIRECTIONS.T  # (N, children, slots): low comes first
    along[~used] = np.inf
    slots = np.full((n, WIDTH), -1, np.int64)
    rows = np.arange(n)
    for _ in range(WIDTH):
        flat = along.reshape(n, -1).argmin(axis=1)
        child, slot = np.divmod(flat, WIDTH)
        open_ = np.isfinite(along[rows, child, slot])
        slots[rows[open_], child[open_]] = slot[open_]
        along[rows[open_], child[open_], :] = np.inf
        along[rows[open_], :, slot[open_]] = np.inf
    # The unused children take the slots left, in order: as many of each.
    taken = np.zeros((n, WIDTH), bool)
    placed = np.nonzero(slots >= 0)
    taken[placed[0], slots[placed]] = True
    free = np.argsort(taken, axis=1, kind="stable")  # the free slots first, in order
    waiting = slots < 0
    rank = np.cumsum(waiting, axis=1) - 1
    slots[waiting] = free[np.nonzero(waiting)[0], rank[waiting]]
    return slots


def _grid(node_lo: np.ndarray, node_hi: np.ndarray) -> np.ndarray:
    """The least power-of-two cell per axis whose ``LEVELS`` cells from the origin cover the node, as
    float32 decodes it (``origin + LEVELS * scale >= hi``)."""
    extent = node_hi.astype(np.float64) - node_lo.astype(np.float64)
    exponent = np.ceil(np.log2(np.maximum(extent, 1e-30) / LEVELS)).astype(np.int64)
    exponent = np.clip(exponent, -126, 127)
    for _ in range(4):  # float32 rounding of the decoded top may fall short by an ulp: one cell size up
        scale = np.ldexp(np.float32(1.0), exponent).astype(np.float32)
        short = (node_lo + np.float32(LEVELS) * scale < node_hi) & (exponent < 127)
        if not short.any():
            break
        exponent = exponent + short
    return np.ldexp(np.float32(1.0), exponent).astype(np.float32)


def _quantize(origin, scale, child_lo, child_hi) -> tuple[np.ndarray, np.ndarray]:
    """Cells of each child: the lower plane rounded down and the upper up, then moved a cell outwards
    wherever float32's decode would not hold the child."""
    o, s = origin[:, None, :], scale[:, None, :]
    q_lo = np.clip(np.floor((child_lo.astype(np.float64) - o) / s), 0, LEVELS)
    q_hi = np.clip(np.ceil((child_hi.astype(np.float64) - o) / s), 0, LEVELS)
    for _ in range(4):
        over = (o + q_lo.astype(np.float32) * s > child_lo) & (q_lo > 0)
        under = (o + q_hi.astype(np.float32) * s < child_hi) & (q_hi < LEVELS)
        if not (over.any() or under.any()):
            break
        q_lo, q_hi = q_lo - over, q_hi + under
    return q_lo.astype(np.int64), q_hi.astype(np.int64)


def _stack_bound(nodes, index_of) -> int:
    """The most entries the stack can hold: a node pushes its k children and pops one, so below a node
    the stack peaks at k, or at k - 1 plus what its children's subtrees need."""
    bound = np.zeros(len(nodes), np.int64)
    for i in range(len(nodes) - 1, -1, -1):  # children are numbered after their parents
        k = len(nodes[i])
        below = [bound[index_of[code]] for code, _, _ in nodes[i] if code >= 0]
        bound[i] = max(k, k - 1 + max(below, default=0))
    return int(bound[0]) if len(nodes) else 0


@wp.struct
class WideBvh:
    """The wide tree on a device (``WideBvhArrays``)."""

    origin: wp.array(dtype=wp.vec3)
    scale: wp.array(dtype=wp.vec3)
    quantized: wp.array2d(dtype=wp.uint32)
    children: wp.array2d(dtype=wp.int32)
    triangles: wp.array2d(dtype=wp.vec3)
    faces: wp.array(dtype=wp.int32)


def upload_wide(tree: WideBvhArrays, device) -> WideBvh:
    bvh = WideBvh()
    bvh.origin = wp.array(tree.origin, dtype=wp.vec3, device=device)
    bvh.scale = wp.array(tree.scale, dtype=wp.vec3, device=device)
    bvh.quantized = wp.array(tree.quantized, dtype=wp.uint32, device=device)
    bvh.children = wp.array(tree.children, dtype=wp.int32, device=device)
    bvh.triangles, bvh.faces = upload_leaves(tree, device)
    return bvh


#: Relative error of a decoded plane's distance, bounded: ``start + cells * cell`` rounds once (a fused
#: multiply-add; ``cells * cell`` is exact) and ``start`` twice; four units of float32's rounding.
PLANE_SLACK = wp.constant(4.0 * 1.1920929e-07)


@wp.func
def _abs3(v: wp.vec3) -> wp.vec3:
    return wp.vec3(wp.abs(v[0]), wp.abs(v[1]), wp.abs(v[2]))


@wp.func
def _plane(words: wp.uint32, shift: int, start: float, cell: float) -> float:
    """The distance along the ray to a child's plane: its byte of ``words`` (at ``shift`` bits) times the
    node's cell, from the node's origin (``start``: where the ray meets the origin's plane)."""
    return start + float((words >> wp.uint32(shift)) & wp.uint32(255)) * cell


def make_wide_traverse(counting: bool):
    """The traversal of the wide tree; ``counting`` compiles in the tally of nodes and triangles."""

    @wp.func
    def traverse(bvh: WideBvh, origin: wp.vec3, direction: wp.vec3, max_t: float, first: bool) -> Found:
        """The nearest triangle along a unit ray within ``max_t`` (``first``: any one, found sooner)."""
        M = ray_shear(direction)
        inverse = ray_inverse(direction)
        found = nothing_found(max_t)
        # Which words hold each axis's near planes: the lower ones where the ray runs up the axis.
        near_word = wp.vec3i(
            wp.where(inverse[0] >= 0.0, 0, 2), wp.where(inverse[1] >= 0.0, 4, 6), wp.where(inverse[2] >= 0.0, 8, 10)
        )
        far_word = wp.vec3i(2, 10, 18) - near_word  # the other word of each pair (0-2, 4-6, 8-10)
        octant = wp.where(inverse[0] < 0.0, 1, 0) | wp.where(inverse[1] < 0.0, 2, 0) | wp.where(inverse[2] < 0.0, 4, 0)
        # The i-th slot visited, octant ^ i, lies in word half (i >> 2) ^ flip at byte (i & 3) ^ turn.
        flip = octant >> 2
        turn = octant & 3
        shifts = wp.vec4i(8 * turn, 8 * (1 ^ turn), 8 * (2 ^ turn), 8 * (3 ^ turn))
        codes_stack = _stack_codes()
        nears_stack = _stack_nears()
        depth = int(0)  # noqa: UP018
        node = int(0)  # noqa: UP018
        while True:
            if node >= 0:
                if wp.static(counting):
                    found.nodes += 1
                # Ylitie et al.'s decode: a plane's distance is start + cells * cell, one multiply-add,
                # where the node's origin plane is met at start and each cell adds cell. start rounds, so
                # every near plane moves nearer and every far one farther by that rounding's bound.
                start = wp.cw_mul(bvh.origin[node] - origin, inverse)
                cell = wp.cw_mul(bvh.scale[node], inverse)  # a power of two times the inverse: exact
                slack = PLANE_SLACK * (_abs3(start) + float(LEVELS) * _abs3(cell))
                near_start = start - slack
                far_start = start + slack
                # Every child the ray enters goes on the stack, the last visited first, so the first
                # visited is popped next: slots octant, octant ^ 1, ..., octant ^ 7 (the builder put in
                # slot s the child that comes first along octant s's diagonal). Branch-free: an entry is
                # always written and kept (depth moves on) only where the ray entered its box.
                # Each plane's word for the first four slots visited (a) and the last four (b): twelve loads
                # a node, and the slots' bytes are then shifts of words held in registers.
                q = bvh.quantized
                nx_a = q[node, near_word[0] + flip]
                nx_b = q[node, near_word[0] + 1 - flip]
                ny_a = q[node, near_word[1] + flip]
                ny_b = q[node, near_word[1] + 1 - flip]
                nz_a = q[node, near_word[2] + flip]
                nz_b = q[node, near_word[2] + 1 - flip]
                fx_a = q[node, far_word[0] + flip]
                fx_b = q[node, far_word[0] + 1 - flip]
                fy_a = q[node, far_word[1] + flip]
                fy_b = q[node, far_word[1] + 1 - flip]
                fz_a = q[node, far_word[2] + flip]
                fz_b = q[node, far_word[2] + 1 - flip]
                for back in range(wp.static(WIDTH)):
                    i = wp.static(WIDTH - 1) - back
                    first_half = i < 4
                    shift = shifts[i & 3]
                    code = bvh.children[node, i ^ octant]
                    near_x = _plane(wp.where(first_half, nx_a, nx_b), shift, near_start[0], cell[0])
                    near_y = _plane(wp.where(first_half, ny_a, ny_b), shift, near_start[1], cell[1])
                    near_z = _plane(wp.where(first_half, nz_a, nz_b), shift, near_start[2], cell[2])
                    far_x = _plane(wp.where(first_half, fx_a, fx_b), shift, far_start[0], cell[0])
                    far_y = _plane(wp.where(first_half, fy_a, fy_b), shift, far_start[1], cell[1])
                    far_z = _plane(wp.where(first_half, fz_a, fz_b), shift, far_start[2], cell[2])
                    near = wp.max(wp.max(near_x, near_y), wp.max(near_z, 0.0))
                    far = wp.min(wp.min(far_x, far_y), wp.min(far_z, found.t)) * ROBUST_FAR
                    codes_stack[depth] = code
                    nears_stack[depth] = near
                    depth += wp.where(near <= far and code != EMPTY, 1, 0)
            else:
                found = intersect_leaf(bvh.triangles, node, M, origin, found, wp.static(counting))
                if first and found.index >= 0:
                    break
            popped = bool(False)  # noqa: UP018
            while depth > 0 and not popped:
                depth -= 1
                if nears_stack[depth] <= found.t:  # a box beyond the best hit holds nothing nearer
                    node = codes_stack[depth]
                    popped = True
            if not popped:
                break
        return found

    return traverse


_traverse = make_wide_traverse(False)
#: The traversal that counts what it visits (``goggles bench bvh``).
counting_wide_traverse = make_wide_traverse(True)


@wp.func
def wide_closest_hit(bvh: WideBvh, origin: wp.vec3, direction: wp.vec3, max_t: float) -> Hit:
    """The nearest static surface along a unit ray within ``max_t`` metres (a miss keeps ``t`` = max_t),
    as ``ray_bvh.bvh_closest_hit`` answers."""
    return found_hit(
        bvh.triangles, bvh.faces, _traverse(bvh, origin, direction, max_t, False), origin, direction, max_t
    )


@wp.func
def wide_any_hit(bvh: WideBvh, origin: wp.vec3, direction: wp.vec3, max_t: float) -> bool:
    """Is there any static surface along a unit ray within ``max_t`` metres (a shadow ray)?"""
    return _traverse(bvh, origin, direction, max_t, True).index >= 0
