"""A BVH over boxes that move, walked nearest first: the splats' tree.

Warp's ``wp.Bvh`` answers a ray with every box it crosses, in the order its nodes lie. A ray through
a dense capture crosses ~1,700 Gaussians' boxes (the demo's houseplant), and the splats' pass wants
only the nearest ``HITS`` of them at a time: in that order it weighed every one before it knew which
were nearest. This tree is ``goggles.world.ray_bvh``'s (the same binned-SAH build, two children's
boxes per inner node), over the Gaussians' boxes, walked nearer child first with each pushed node's
entry distance kept, so a walk stops at the first node beyond the farthest of the hits it holds.

Its shape is built once; each frame the boxes change (the screen-space filter grows them for the
cameras, props move) and ``refit`` recomputes every node's boxes from its items, level by level from
the leaves (one launch per level).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles.runtime.kernel_options import TRACING
from goggles.world.ray_bvh import EMPTY_CORNER, LEAF_BITS, LEAF_MASK, STACK_DEPTH, build_nodes, pair_nodes

wp.set_module_options(TRACING)

#: Most Gaussians in a leaf.
LEAF_SIZE = 4


@wp.struct
class BoxTree:
    """On a device: each inner node's two children's boxes ((I, 3) vec4: lo.x hi.x lo.y hi.y of the
    first, the same of the second, lo.z hi.z of both), its children (an inner node's index, or a leaf
    as -(first * 16 + count) - 1), and the items in leaf order."""

    boxes: wp.array2d(dtype=wp.vec4)
    children: wp.array(dtype=wp.vec2i)
    items: wp.array(dtype=wp.int32)


@dataclass
class DeviceBoxTree:
    """A ``BoxTree`` and the levels ``refit`` walks, deepest first."""

    tree: BoxTree
    levels: list[wp.array]
    """Per depth, deepest first: the inner nodes at that depth."""
    depth: int


def build_box_tree(lowers: np.ndarray, uppers: np.ndarray, device) -> DeviceBoxTree:
    """The tree of the (n, 3) boxes, on ``device`` (its node boxes are those boxes' until ``refit``)."""
    nodes = build_nodes(lowers, uppers, LEAF_SIZE)
    boxes, code = pair_nodes(nodes)
    # Each inner node's depth: its parent's plus one (breadth-first numbering: parents come first).
    level = np.zeros(len(code), np.int64)
    for parent in range(len(code)):
        for child in code[parent]:
            if child >= 0:
                level[child] = level[parent] + 1
    tree = BoxTree()
    tree.boxes = wp.array(boxes, dtype=wp.vec4, device=device)
    tree.children = wp.array(code, dtype=wp.vec2i, device=device)
    items = nodes.order.astype(np.int32) if len(nodes.order) else np.zeros(1, np.int32)
    tree.items = wp.array(items, dtype=wp.int32, device=device)
    levels = [
        wp.array(np.flatnonzero(level == d).astype(np.int32), dtype=wp.int32, device=device)
        for d in range(int(level.max()), -1, -1)
    ]
    return DeviceBoxTree(tree, levels, int(level.max()) + 1)


def refit(tree: DeviceBoxTree, lowers: wp.array, uppers: wp.array) -> None:
    """Every node's boxes from its items' ``lowers``, ``uppers`` now, from the leaves up."""
    for nodes in tree.levels:
        wp.launch(refit_kernel, dim=len(nodes), inputs=[nodes, tree.tree, lowers, uppers], device=lowers.device)


@wp.func
def child_box(tree: BoxTree, child: int, lowers: wp.array(dtype=wp.vec3), uppers: wp.array(dtype=wp.vec3)):
    """(lower, upper) of a child: an inner node's two boxes joined, or a leaf's items' (an empty leaf:
    a box past any reach)."""
    lo = wp.vec3(EMPTY_CORNER)
    hi = wp.vec3(EMPTY_CORNER)
    if child >= 0:
        xy0 = tree.boxes[child, 0]
        xy1 = tree.boxes[child, 1]
        zz = tree.boxes[child, 2]
        lo = wp.vec3(wp.min(xy0[0], xy1[0]), wp.min(xy0[2], xy1[2]), wp.min(zz[0], zz[2]))
        hi = wp.vec3(wp.max(xy0[1], xy1[1]), wp.max(xy0[3], xy1[3]), wp.max(zz[1], zz[3]))
    else:
        code = -child - 1
        first = code >> LEAF_BITS
        count = code & LEAF_MASK
        for k in range(count):
            g = tree.items[first + k]
            if k == 0:
                lo = lowers[g]
                hi = uppers[g]
            else:
                lo = wp.min(lo, lowers[g])
                hi = wp.max(hi, uppers[g])
    return lo, hi


@wp.kernel
def refit_kernel(
    nodes: wp.array(dtype=wp.int32),
    tree: BoxTree,
    lowers: wp.array(dtype=wp.vec3),
    uppers: wp.array(dtype=wp.vec3),
):
    n = nodes[wp.tid()]
    child = tree.children[n]
    lo0, hi0 = child_box(tree, child[0], lowers, uppers)
    lo1, hi1 = child_box(tree, child[1], lowers, uppers)
    tree.boxes[n, 0] = wp.vec4(lo0[0], hi0[0], lo0[1], hi0[1])
    tree.boxes[n, 1] = wp.vec4(lo1[0], hi1[0], lo1[1], hi1[1])
    tree.boxes[n, 2] = wp.vec4(lo0[2], hi0[2], lo1[2], hi1[2])


def empty_box_tree(device) -> BoxTree:
    """A tree of nothing (kernels that see splats, in a world without any)."""
    tree = BoxTree()
    far = np.full((1, 3, 4), EMPTY_CORNER, np.float32)
    tree.boxes = wp.array(far, dtype=wp.vec4, device=device)
    tree.children = wp.array(np.full((1, 2), -1, np.int32), dtype=wp.vec2i, device=device)
    tree.items = wp.zeros(1, dtype=wp.int32, device=device)
    return tree


#: The walk's stacks: a node and its entry distance per entry.
node_stack_t = wp.types.vector(length=STACK_DEPTH, dtype=wp.int32)
near_stack_t = wp.types.vector(length=STACK_DEPTH, dtype=wp.float32)
