"""Camera projection as Warp functions: every lens model's projection of a point to a pixel, the
exact forward of the rays a ``CameraModel`` unprojects (``goggles.render.lenses``), so a rendered
point projects back onto its pixel (the stereo shadow, beacons)."""

import warp as wp

#: A lens's coefficients as the kernels take them: the model's own (``lenses.LENSES``, zero-padded to
#: five), then the largest angle from the optical axis it images, radians (``lenses.max_angle``).
lens_coefficients = wp.types.vector(length=6, dtype=wp.float32)

LENS_PINHOLE = wp.constant(0)
LENS_FISHEYE = wp.constant(1)
LENS_UNIFIED = wp.constant(2)
LENS_DOUBLE_SPHERE = wp.constant(3)
LENS_EUCM = wp.constant(4)


@wp.func
def radtan(x: float, y: float, k1: float, k2: float, p1: float, p2: float, k3: float) -> wp.vec2:
    """OpenCV's radial-tangential distortion of normalised coordinates."""
    r2 = x * x + y * y
    radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    return wp.vec2(
        x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x), y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y
    )


@wp.func
def one_to_one(alpha: float) -> float:
    """The double-sphere paper's w: a unified-family lens projects points with z > -w d one to one."""
    if alpha <= 0.5:
        return alpha / (1.0 - alpha)
    return (1.0 - alpha) / alpha


@wp.func
def project(p_C: wp.vec3, intrinsics: wp.vec4, lens: int, k: lens_coefficients) -> wp.vec3:
    """Pixel (u, v) of a point in the optical frame, and 1 where the lens images it (0 elsewhere: behind
    a pinhole, outside a model's valid region); ``intrinsics`` (fx, fy, cx, cy)."""
    x = p_C[0]
    y = p_C[1]
    z = p_C[2]
    m = wp.vec2(0.0)
    valid = float(0.0)  # noqa: UP018 (Warp: a variable the branches below change)
    if k[5] < wp.pi:  # a lens that does not image every direction (a pinhole's bound is pi: no atan2)
        if wp.atan2(wp.sqrt(x * x + y * y), z) > k[5]:  # beyond its field of view
            return wp.vec3(0.0)
    if lens == LENS_PINHOLE:
        if z > 0.0:
            m = radtan(x / z, y / z, k[0], k[1], k[2], k[3], k[4])
            valid = 1.0
    elif lens == LENS_FISHEYE:
        r = wp.sqrt(x * x + y * y)
        theta = wp.atan2(r, z)
        if r > 0.0 or z > 0.0:
            t2 = theta * theta
            theta_d = theta * (1.0 + t2 * (k[0] + t2 * (k[1] + t2 * (k[2] + t2 * k[3]))))
            if r > 0.0:
                m = wp.vec2(x, y) * (theta_d / r)
            valid = 1.0
    elif lens == LENS_UNIFIED:
        xi = k[0]
        d = wp.length(p_C)
        w = xi
        if xi > 1.0:
            w = 1.0 / xi
        if z > -w * d:
            m = radtan(x / (z + xi * d), y / (z + xi * d), k[1], k[2], k[3], k[4], 0.0)
            valid = 1.0
    elif lens == LENS_DOUBLE_SPHERE:
        xi = k[0]
        alpha = k[1]
        d1 = wp.length(p_C)
        zeta = xi * d1 + z
        d2 = wp.sqrt(x * x + y * y + zeta * zeta)
        w1 = one_to_one(alpha)
        w2 = (w1 + xi) / wp.sqrt(2.0 * w1 * xi + xi * xi + 1.0)
        if z > -w2 * d1:
            m = wp.vec2(x, y) / (alpha * d2 + (1.0 - alpha) * zeta)
            valid = 1.0
    else:  # LENS_EUCM
        alpha = k[0]
        d = wp.sqrt(k[1] * (x * x + y * y) + z * z)
        if z > -one_to_one(alpha) * d:
            m = wp.vec2(x, y) / (alpha * d + (1.0 - alpha) * z)
            valid = 1.0
    return wp.vec3(intrinsics[0] * m[0] + intrinsics[2], intrinsics[1] * m[1] + intrinsics[3], valid)


@wp.func
def inside_image(uv: wp.vec3, width: int, height: int) -> bool:
    """Imaged by the lens (``uv[2]``, as ``project`` gives it) and within the footprint of the image's
    pixels, [-0.5, size - 0.5) (OpenCV pixel centres)."""
    return (
        uv[2] > 0.0 and uv[0] >= -0.5 and uv[1] >= -0.5 and uv[0] < float(width) - 0.5 and uv[1] < float(height) - 0.5
    )
