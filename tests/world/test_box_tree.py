"""The splats' tree (``goggles.world.box_tree``): after the boxes move, ``refit`` gives every inner
node exactly the union of the boxes below each child (checked by walking the tree on the host), each
item under one leaf once; for one box, a few, many, and many at one point. (Renders through it are
checked against an independent rasteriser in tests/render/test_splat_captures.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from goggles.world.box_tree import build_box_tree, refit
from goggles.world.ray_bvh import LEAF_BITS, LEAF_MASK


def unions(tree, lowers: np.ndarray, uppers: np.ndarray):
    """Per inner node, the union of the boxes under each child, from the host's walk; and every item reached."""
    boxes, children, items = tree.boxes.numpy(), tree.children.numpy(), tree.items.numpy()
    seen = []

    def under(child: int) -> tuple[np.ndarray, np.ndarray]:
        if child >= 0:
            (lo0, hi0), (lo1, hi1) = under(children[child][0]), under(children[child][1])
            return np.minimum(lo0, lo1), np.maximum(hi0, hi1)
        code = -child - 1
        first, count = code >> int(LEAF_BITS), code & int(LEAF_MASK)
        chosen = items[first : first + count]
        seen.extend(chosen.tolist())
        if not count:
            return np.full(3, np.inf), np.full(3, -np.inf)
        return lowers[chosen].min(axis=0), uppers[chosen].max(axis=0)

    under(0)  # the walk from the root reaches each item once
    reached = list(seen)
    expected = {node: [under(int(c)) for c in children[node]] for node in range(len(children))}
    return boxes, expected, reached


@pytest.mark.parametrize(("count", "spread"), [(1, 5.0), (3, 5.0), (1000, 5.0), (200, 0.0)])
def test_refit_gives_each_node_the_union_of_the_boxes_below_it(count, spread):
    rng = np.random.default_rng(count)
    centres = rng.uniform(-spread, spread, (count, 3)).astype(np.float32)
    half = rng.uniform(0.01, 0.5, (count, 3)).astype(np.float32)
    built = build_box_tree(centres - half, centres + half, "cpu")
    moved = centres + rng.normal(0.0, 2.0, (count, 3)).astype(np.float32)  # the shape stays, the boxes move
    grown = half * 1.5
    lowers = wp.array(moved - grown, dtype=wp.vec3, device="cpu")
    uppers = wp.array(moved + grown, dtype=wp.vec3, device="cpu")
    refit(built, lowers, uppers)
    boxes, expected, seen = unions(built.tree, moved - grown, moved + grown)
    assert sorted(seen) == list(range(count))  # every item under one leaf, once
    for node, ((lo0, hi0), (lo1, hi1)) in expected.items():
        xy0, xy1, zz = boxes[node]
        for lo, hi, got_lo, got_hi in (
            (lo0, hi0, (xy0[0], xy0[2], zz[0]), (xy0[1], xy0[3], zz[1])),
            (lo1, hi1, (xy1[0], xy1[2], zz[2]), (xy1[1], xy1[3], zz[3])),
        ):
            if np.isfinite(lo).all():  # an empty child keeps its box past any reach
                assert np.array_equal(np.float32(got_lo), lo) and np.array_equal(np.float32(got_hi), hi)
            else:
                assert min(got_lo) >= 1e29
