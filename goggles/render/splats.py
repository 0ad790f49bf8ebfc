"""The splats' pass of a render: after the meshes, each pixel's ray is traced through the world's
Gaussian splats up to the opaque surface it hit (``goggles.world.splats.trace_splats``), from the same
origin and direction (every lens, every row's pose of a rolling shutter, each sub-frame of a blur).

What the splats composite goes in front of what the meshes gave: colour = splats + transmittance x
the mesh's (or the sky's) colour. Where their opacity reached one half before the mesh, the pixel's
depth, range, segmentation class and normal are the splats' (``SplatTrace.t_half``; the normal
faces the camera, the face is none): so a mesh in front of a splat hides it, and a splat hides the
mesh behind it. Splats carry their own light (the capture's): the sun neither shades nor shadows
them, and they cast no shadow on the meshes. A LiDAR's renderer runs the same pass: its beams stop
where the splats' opacity reaches one half, their intensity the splats' luminance.
"""

from __future__ import annotations

import warp as wp

from goggles.render.kernels import (
    FACE_NONE,
    STATUS_HIT,
    STATUS_OUTSIDE_LENS,
    STATUS_TOO_CLOSE,
    CameraBatch,
    ImageBuffers,
    OutputFlags,
    to_byte,
    write_hit,
)
from goggles.runtime.kernel_options import TRACING
from goggles.world.splats import SplatData, SplatTrace, trace_splats

wp.set_module_options(TRACING)


@wp.func
def reach(status: int, depth: float, min_depth: float, max_depth: float) -> float:
    """How deep the splats may lie at a pixel (its depth's measure: along the optical axis, or the
    range for a radial sensor): what the meshes hit there (its ``status`` and ``depth``), or the
    camera's reach. Divided by the ray's ``along``, how far along the ray."""
    if status == STATUS_HIT:
        return depth
    if status == STATUS_TOO_CLOSE:
        return min_depth
    return max_depth  # nothing opaque before the camera's reach


@wp.func
def composite(
    out: ImageBuffers,
    wanted: OutputFlags,
    min_depth: float,
    c: int,
    y: int,
    x: int,
    hit: SplatTrace,
    direction: wp.vec3,
    along: float,
    shaded: int,
    tint: wp.array(dtype=wp.vec3),
    tinted: int,
):
    """What a pixel's ray met in the splats, put in front of what the meshes gave (``tinted``: the
    colours times camera ``c``'s ``tint``)."""
    if hit.transmittance >= 1.0:
        return
    if shaded != 0:
        keep = hit.transmittance
        rgb = hit.rgb
        if tinted != 0:  # the camera's look: the capture's colour and the camera's exposure
            rgb = wp.cw_mul(rgb, tint[c])
        for channel in range(3):
            behind = float(out.rgb[c, y, x, channel]) / 255.0
            out.rgb[c, y, x, channel] = to_byte(rgb[channel] + keep * behind)
    if hit.t_half < 0.0:
        return
    write_hit(out, wanted, min_depth, c, y, x, hit.t_half, along, hit.segment, FACE_NONE)
    if wanted.normal:
        out.normal_W[c, y, x] = -direction


@wp.kernel
def splat_pass_kernel(
    cameras: CameraBatch,
    footprints: wp.array3d(dtype=float),
    splats: SplatData,
    shaded: int,
    tint: wp.array(dtype=wp.vec3),
    tinted: int,
    wanted: OutputFlags,
    row_stride: int,
    row_offset: int,
    span: int,
    out: ImageBuffers,
):
    """Composite the splats over every pixel of rows ``row_offset + k * row_stride`` (``tinted``: each
    camera's colours times its ``tint``)."""
    c, k, block = wp.tid()
    y = row_offset + k * row_stride
    table = cameras.ray_table[c]
    R = cameras.R_WC[c, y]
    origin = cameras.p_WC[c, y]
    radial = cameras.radial[c] != 0
    for column in range(span):
        x = block * span + column
        status = int(out.status[c, y, x])
        if status == STATUS_OUTSIDE_LENS:
            continue
        ray_C = cameras.rays_C[table, y, x]
        along = ray_C[2]
        if radial:
            along = 1.0
        direction = R * ray_C
        end = reach(status, out.depth[c, y, x], cameras.min_depth[c], cameras.max_depth[c]) / along
        hit = trace_splats(splats, origin, direction, 0.0, end, footprints[table, y, x])
        composite(out, wanted, cameras.min_depth[c], c, y, x, hit, direction, along, shaded, tint, tinted)
