"""The camera kernels: one launch traces every pixel of a batch of same-size cameras; a second marks
the stereo occlusion shadow from the partner camera's depth.

This module is compiled for the CPU with ``-menable-no-nans`` (REFERENCE.md section 8: about 1.8x
faster BVH traversal): nothing here may create, test for or rely on NaN. Invalid pixels are written
as a status code; ``goggles.render.invalid`` turns codes into REP 118 values in a separate module.
"""

import warp as wp

from goggles.render.projection import distortion5, inside_image, project_point
from goggles.render.shading import SHADING_NONE, Lighting, albedo, shade
from goggles.world.appearance import SceneData
from goggles.world.queries import ActorData, closest_hit

_DEFAULT_CPU_FLAGS = wp.config.cpu_compiler_flags if wp.config.cpu_compiler_flags is not None else "-march=native"
wp.set_module_options(
    {
        "cpu_compiler_flags": _DEFAULT_CPU_FLAGS + " -menable-no-nans -Wno-nan-infinity-disabled",
        "enable_backward": False,  # forward kernels only: no autodiff, a tenth of the compile time
    }
)

#: Pixel status codes (the validity mask of a rendered image).
STATUS_HIT = wp.constant(0)
STATUS_NO_HIT = wp.constant(1)
"""Nothing within max_depth: depth and range read +inf."""
STATUS_TOO_CLOSE = wp.constant(2)
"""A surface closer than min_depth: depth and range read -inf."""
STATUS_SHADOW = wp.constant(3)
"""Stereo occlusion shadow (the partner camera cannot see the point): depth and range read NaN."""

#: A point is hidden from the partner camera when the partner sees a surface closer than the point
#: by more than this fraction of the point's depth, plus SHADOW_TOLERANCE_M, at every one of the
#: 2x2 pixels around the point's projection (so sampling at pixel resolution never invents a shadow).
SHADOW_TOLERANCE = wp.constant(0.01)
SHADOW_TOLERANCE_M = wp.constant(0.01)


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
    """Camera that must also see a point for this camera's depth of it to be valid (stereo), or -1."""
    intrinsics: wp.array(dtype=wp.vec4)
    """fx, fy, cx, cy (pixels)."""
    distortion: wp.array(dtype=distortion5)
    """OpenCV k1, k2, p1, p2, k3."""
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
    actors: ActorData,
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
    query = closest_hit(scene.mesh, actors, origin, direction, cameras.max_depth[c] / ray_C[2])
    if not query.result:
        out.status[c, y, x] = wp.int8(STATUS_NO_HIT)
        out.segmentation[c, y, x] = SEGMENT_NONE
        out.face[c, y, x] = FACE_NONE
        out.normal_W[c, y, x] = wp.vec3(0.0)
        write_rgb(out, c, y, x, light.background)
        return

    normal = wp.normalize(query.normal_W)
    if wp.dot(normal, direction) > 0.0:
        normal = -normal
    depth = query.t * ray_C[2]
    status = STATUS_HIT
    if depth < cameras.min_depth[c]:
        status = STATUS_TOO_CLOSE
    out.status[c, y, x] = wp.int8(status)
    out.depth[c, y, x] = depth
    out.range[c, y, x] = query.t
    out.segmentation[c, y, x] = scene.face_segment[query.face]
    out.face[c, y, x] = query.face
    out.normal_W[c, y, x] = normal
    if light.shading != SHADING_NONE:
        write_rgb(out, c, y, x, shade(light, albedo(scene, query.face, query.u, query.v), normal))


@wp.func
def partner_depth(out: ImageBuffers, partner: int, x: int, y: int) -> float:
    """The partner's depth at a pixel; a pixel that hit nothing sees infinitely far."""
    if int(out.status[partner, y, x]) == STATUS_NO_HIT:
        return 1.0e30
    return out.depth[partner, y, x]


@wp.kernel
def mark_stereo_shadow_kernel(cameras: CameraBatch, row_stride: int, row_offset: int, out: ImageBuffers):
    """Invalidate a camera's pixel when its partner cannot see the point: it projects outside the
    partner's image or behind it, or the partner sees something closer there (occlusion shadow)."""
    c, k, x = wp.tid()
    y = row_offset + k * row_stride
    partner = cameras.partner[c]
    if partner < 0 or int(out.status[c, y, x]) != STATUS_HIT:
        return
    p_W = cameras.p_WC[c] + (cameras.R_WC[c] * cameras.rays_C[c, y, x]) * out.range[c, y, x]
    p_P = wp.transpose(cameras.R_WC[partner]) * (p_W - cameras.p_WC[partner])
    width = out.status.shape[2]
    height = out.status.shape[1]
    visible = False
    if p_P[2] > 0.0:
        uv = project_point(p_P, cameras.intrinsics[partner], cameras.distortion[partner])
        if inside_image(uv, width, height):
            u0 = wp.max(int(wp.floor(uv[0])), 0)
            v0 = wp.max(int(wp.floor(uv[1])), 0)
            u1 = wp.min(u0 + 1, width - 1)
            v1 = wp.min(v0 + 1, height - 1)
            farthest = wp.max(
                wp.max(partner_depth(out, partner, u0, v0), partner_depth(out, partner, u1, v0)),
                wp.max(partner_depth(out, partner, u0, v1), partner_depth(out, partner, u1, v1)),
            )
            visible = farthest >= p_P[2] * (1.0 - SHADOW_TOLERANCE) - SHADOW_TOLERANCE_M
    if not visible:
        out.status[c, y, x] = wp.int8(STATUS_SHADOW)
