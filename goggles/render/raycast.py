"""Ray queries shared by every sensor: closest hit and blocked segments, as Warp functions.

Secondary rays start a small distance off the surface they leave: Warp reports hits at t ~ 0 for a
ray that starts on a face, so without the offset a surface would occlude itself.
"""

import warp as wp

#: Fixed part of a secondary ray's start offset, metres.
SECONDARY_OFFSET_M = 1.0e-3
#: Part of a secondary ray's start offset that grows with the primary hit distance (float32 error).
SECONDARY_OFFSET_PER_M = 1.0e-5


@wp.func
def secondary_offset(distance: float) -> float:
    """Start offset, metres, for a secondary ray leaving a point ``distance`` metres from its origin."""
    return SECONDARY_OFFSET_M + SECONDARY_OFFSET_PER_M * distance


@wp.func
def segment_blocked(mesh: wp.uint64, start: wp.vec3, end: wp.vec3, offset: float) -> bool:
    """True if any face lies on the segment start->end, ignoring ``offset`` metres at both ends."""
    delta = end - start
    length = wp.length(delta)
    if length <= 2.0 * offset:
        return False
    direction = delta / length
    return wp.mesh_query_ray_anyhit(mesh, start + direction * offset, direction, length - 2.0 * offset)
