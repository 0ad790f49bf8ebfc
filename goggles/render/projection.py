"""Camera projection as a Warp function: the OpenCV pinhole + radial-tangential model, the exact
forward of ``CameraModel.ray_directions`` (so a rendered point projects back onto its pixel)."""

import warp as wp

distortion5 = wp.types.vector(length=5, dtype=wp.float32)


@wp.func
def project_point(p_C: wp.vec3, intrinsics: wp.vec4, k: distortion5) -> wp.vec2:
    """Pixel (u, v) of a point in the optical frame (z > 0); intrinsics (fx, fy, cx, cy), k (k1 k2 p1 p2 k3)."""
    x = p_C[0] / p_C[2]
    y = p_C[1] / p_C[2]
    r2 = x * x + y * y
    radial = 1.0 + r2 * (k[0] + r2 * (k[1] + r2 * k[4]))
    xd = x * radial + 2.0 * k[2] * x * y + k[3] * (r2 + 2.0 * x * x)
    yd = y * radial + k[2] * (r2 + 2.0 * y * y) + 2.0 * k[3] * x * y
    return wp.vec2(intrinsics[0] * xd + intrinsics[2], intrinsics[1] * yd + intrinsics[3])


@wp.func
def inside_image(uv: wp.vec2, width: int, height: int) -> bool:
    """Within the footprint of the image's pixels, [-0.5, size - 0.5) (OpenCV pixel centres)."""
    return uv[0] >= -0.5 and uv[1] >= -0.5 and uv[0] < float(width) - 0.5 and uv[1] < float(height) - 0.5
