"""The camera render kernel: one launch traces every pixel of a batch of same-size cameras.

This module is compiled for the CPU with ``-menable-no-nans`` (REFERENCE.md section 8: about 1.8x
faster BVH traversal): nothing here may create, test for or rely on NaN. Invalid pixels are written
as a status code; ``goggles.render.invalid`` turns codes into REP 118 values in a separate module.
"""

import warp as wp

from goggles.render.raycast import secondary_offset, segment_blocked
from goggles.render.shading import Lighting, SceneData, albedo, shade

_DEFAULT_CPU_FLAGS = wp.config.cpu_compiler_flags if wp.config.cpu_compiler_flags is not None else "-march=native"
wp.set_module_options({"cpu_compiler_flags": _DEFAULT_CPU_FLAGS + " -menable-no-nans -Wno-nan-infinity-disabled"})

#: Pixel status codes (the validity mask of a rendered image).
STATUS_HIT = wp.constant(0)
STATUS_NO_HIT = wp.constant(1)
"""Nothing within max_depth: depth and range read +inf."""
STATUS_TOO_CLOSE = wp.constant(2)
"""A surface closer than min_depth: depth and range read -inf."""
STATUS_SHADOW = wp.constant(3)
"""Stereo occlusion shadow (hidden from the partner camera): depth and range read NaN."""

#: Segmentation id of pixels that hit nothing.
SEGMENT_NONE = wp.constant(0)
#: Face id of pixels that hit nothing.
FACE_NONE = wp.constant(-1)


@wp.struct
class CameraBatch:
    """Cameras rendered together, all of one size."""

    rays_C: wp.array3d(dtype=wp.vec3)
    """(n, H, W) unit ray directions, optical frame."""
    R_WC: wp.array(dtype=wp.mat33)
    p_WC: wp.array(dtype=wp.vec3)
    partner: wp.array(dtype=wp.int32)
    """Camera whose line of sight invalidates this camera's depth (stereo shadow), or -1."""
    min_depth: wp.array(dtype=float)
    max_depth: wp.array(dtype=float)


@wp.struct
class ImageBuffers:
    """Per-pixel outputs, each (n, H, W[, 3])."""

    status: wp.array3d(dtype=wp.int8)
    depth: wp.array3d(dtype=float)
    range: wp.array3d(dtype=float)
    rgb: wp.array4d(dtype=wp.uint8)
    segmentation: wp.array3d(dtype=wp.int32)
    normal_W: wp.array3d(dtype=wp.vec3)
    face: wp.array3d(dtype=wp.int32)


@wp.func
def to_byte(value: float) -> wp.uint8:
    return wp.uint8(wp.clamp(value * 255.0 + 0.5, 0.0, 255.0))


@wp.func
def write_rgb(out: ImageBuffers, c: int, y: int, x: int, colour: wp.vec3):
    out.rgb[c, y, x, 0] = to_byte(colour[0])
    out.rgb[c, y, x, 1] = to_byte(colour[1])
    out.rgb[c, y, x, 2] = to_byte(colour[2])


@wp.kernel
def render_cameras_kernel(
    scene: SceneData,
    cameras: CameraBatch,
    light: Lighting,
    row_stride: int,
    row_offset: int,
    out: ImageBuffers,
):
    """Trace one pixel; rows ``row_offset + k * row_stride`` so CPU threads can share an image."""
    c, k, x = wp.tid()
    y = row_offset + k * row_stride
    ray_C = cameras.rays_C[c, y, x]
    origin = cameras.p_WC[c]
    direction = cameras.R_WC[c] * ray_C
    query = wp.mesh_query_ray(scene.mesh, origin, direction, cameras.max_depth[c] / ray_C[2])
    if not query.result:
        out.status[c, y, x] = wp.int8(STATUS_NO_HIT)
        out.segmentation[c, y, x] = SEGMENT_NONE
        out.face[c, y, x] = FACE_NONE
        out.normal_W[c, y, x] = wp.vec3(0.0)
        write_rgb(out, c, y, x, light.background)
        return

    normal = wp.normalize(query.normal)
    if wp.dot(normal, direction) > 0.0:
        normal = -normal
    depth = query.t * ray_C[2]
    status = STATUS_HIT
    partner = cameras.partner[c]
    if depth < cameras.min_depth[c]:
        status = STATUS_TOO_CLOSE
    elif partner >= 0:
        offset = secondary_offset(query.t)
        start = origin + direction * query.t + normal * offset
        if segment_blocked(scene.mesh, start, cameras.p_WC[partner], offset):
            status = STATUS_SHADOW
    out.status[c, y, x] = wp.int8(status)
    out.depth[c, y, x] = depth
    out.range[c, y, x] = query.t
    out.segmentation[c, y, x] = scene.face_segment[query.face]
    out.face[c, y, x] = query.face
    out.normal_W[c, y, x] = normal
    write_rgb(out, c, y, x, shade(light, albedo(scene, query.face, query.u, query.v), normal))
