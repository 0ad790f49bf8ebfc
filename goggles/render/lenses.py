"""Lens models: each camera model's projection of a point to a pixel and its unprojection of a pixel
to a ray, exact and per pixel (the renderer traces a table of rays, so any model costs the same).

Models, with the coefficients a ``CameraModel``'s ``distortion`` holds for each (intrinsics fx, fy,
cx, cy throughout, OpenCV's pixel convention):

* ``pinhole``: OpenCV's radial-tangential (k1, k2, p1, p2, k3). Rays within 90 degrees of the axis.
* ``fisheye``: Kannala-Brandt, OpenCV's ``cv2.fisheye`` and Kalibr's ``pinhole-equi`` (k1, k2, k3, k4):
  theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8), r = f theta_d, with theta
  the angle from the optical axis; beyond 90 degrees too (up to where theta_d stops growing).
* ``unified``: Mei's unified model, OpenCV's ``cv2.omnidir`` and Kalibr's ``omni-radtan`` (xi, k1, k2,
  p1, p2): the point on the unit sphere projected from (0, 0, -xi), then radial-tangential.
* ``double-sphere``: Usenko, Demmel and Cremers 2018, Kalibr's ``ds-none`` (xi, alpha).
* ``eucm``: the extended unified model, Khomutenko et al. 2016, Kalibr's ``eucm-none`` (alpha, beta).

A pixel no ray of the model reaches (outside the fisheye's circle, beyond a model's valid region)
unprojects to the zero vector: the renderer reads it as outside the lens (``STATUS_OUTSIDE_LENS``,
depth NaN). For every model but ``pinhole``, ``depth`` is the range along the ray (REP 118's
spirit: the distance to the point, which a z-depth no longer is past 90 degrees).
"""

from __future__ import annotations

import numpy as np

from goggles.errors import ConfigError

#: Each lens's coefficients, in order: the names a run file and a calibration give them.
LENSES = {
    "pinhole": ("k1", "k2", "p1", "p2", "k3"),
    "fisheye": ("k1", "k2", "k3", "k4"),
    "unified": ("xi", "k1", "k2", "p1", "p2"),
    "double-sphere": ("xi", "alpha"),
    "eucm": ("alpha", "beta"),
}
#: The kernels' number of each lens (``goggles.render.projection``).
LENS_IDS = {name: i for i, name in enumerate(LENSES)}


def check_coefficients(lens: str, coefficients) -> tuple[float, ...]:
    """``coefficients`` as the ``lens`` takes them (a tuple of floats, each finite, each in its range);
    a ConfigError naming the lens and what it takes otherwise."""
    if lens not in LENSES:
        raise ConfigError(f"lens {lens!r}: choose one of {', '.join(LENSES)}")
    names = LENSES[lens]
    try:
        values = tuple(float(c) for c in coefficients)
    except (TypeError, ValueError):
        values = ()
    if len(values) != len(names) or not all(np.isfinite(values)):
        raise ConfigError(
            f"a {lens} lens takes {len(names)} finite coefficients ({', '.join(names)}), got {coefficients!r}"
        )
    if lens == "unified" and not values[0] >= 0.0:
        raise ConfigError(f"a unified lens's xi must be >= 0, got {values[0]}")
    if lens == "double-sphere" and not (-1.0 < values[0] < 1.0 and 0.0 <= values[1] <= 1.0):
        raise ConfigError(
            f"a double-sphere lens needs -1 < xi < 1 and 0 <= alpha <= 1, got xi={values[0]}, alpha={values[1]}"
        )
    if lens == "eucm" and not (0.0 <= values[0] <= 1.0 and values[1] > 0.0):
        got = f"alpha={values[0]}, beta={values[1]}"
        raise ConfigError(f"an eucm lens needs 0 <= alpha <= 1 and beta > 0, got {got}")
    return values


def project(
    lens: str, coefficients, intrinsics, points: np.ndarray, max_angle: float = np.pi
) -> tuple[np.ndarray, np.ndarray]:
    """Pixels (n, 2) of points (n, 3) in the optical frame, float64, and whether each projects (n,)
    (in front of a pinhole, in the model's valid region otherwise, and within ``max_angle`` radians of
    the optical axis: the lens's field of view)."""
    fx, fy, cx, cy = intrinsics
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    k = coefficients
    with np.errstate(divide="ignore", invalid="ignore"):
        if lens == "pinhole":
            valid = z > 0.0
            mx, my = _radtan(x / z, y / z, k[0], k[1], k[2], k[3], k[4])
        elif lens == "fisheye":
            r = np.hypot(x, y)
            theta = np.arctan2(r, z)
            theta_d = theta * (1.0 + theta**2 * (k[0] + theta**2 * (k[1] + theta**2 * (k[2] + theta**2 * k[3]))))
            scale = np.where(r > 0.0, theta_d / np.where(r > 0.0, r, 1.0), 1.0 / np.where(z > 0.0, z, 1.0))
            valid = (r > 0.0) | (z > 0.0)
            valid &= theta <= _fisheye_theta_max(k)
            mx, my = x * scale, y * scale
        elif lens == "unified":
            xi = k[0]
            d = np.sqrt(x * x + y * y + z * z)
            denominator = z + xi * d
            valid = denominator > 0.0 if xi <= 1.0 else z > -d / xi
            mx, my = _radtan(x / denominator, y / denominator, k[1], k[2], k[3], k[4], 0.0)
        elif lens == "double-sphere":
            xi, alpha = k
            d1 = np.sqrt(x * x + y * y + z * z)
            zeta = xi * d1 + z
            d2 = np.sqrt(x * x + y * y + zeta * zeta)
            denominator = alpha * d2 + (1.0 - alpha) * zeta
            mx, my = x / denominator, y / denominator
            # The exact region: where the pixel's unprojection is this ray again. The paper's bound
            # (z > -w2 d1) is sufficient only: for xi != 0 a ring past it projects one to one too (a
            # TUM-VI-like calibration's image corners lie there).
            back, valid = _double_sphere_rays(mx, my, xi, alpha)
            back /= np.linalg.norm(back, axis=1, keepdims=True)
            valid &= (denominator > 0.0) & (np.linalg.norm(back - p / d1[:, None], axis=1) < 1e-6)
        elif lens == "eucm":
            alpha, beta = k
            d = np.sqrt(beta * (x * x + y * y) + z * z)
            denominator = alpha * d + (1.0 - alpha) * z
            w = alpha / (1.0 - alpha) if alpha <= 0.5 else (1.0 - alpha) / alpha
            valid = z > -w * d  # where the projection is one to one (the double-sphere paper's region)
            mx, my = x / denominator, y / denominator
        else:
            raise ConfigError(f"lens {lens!r}: choose one of {', '.join(LENSES)}")
    valid &= np.isfinite(mx) & np.isfinite(my)
    valid &= np.arctan2(np.hypot(x, y), z) <= max_angle
    return np.stack([fx * mx + cx, fy * my + cy], axis=1), valid


def unproject(lens: str, coefficients, intrinsics, pixels: np.ndarray, max_angle: float = np.pi) -> np.ndarray:
    """Unit rays (n, 3), float64, of pixels (n, 2); the zero vector where the model reaches no ray, or
    one more than ``max_angle`` radians from the optical axis (the lens's field of view)."""
    fx, fy, cx, cy = intrinsics
    uv = np.asarray(pixels, dtype=np.float64).reshape(-1, 2)
    mx, my = (uv[:, 0] - cx) / fx, (uv[:, 1] - cy) / fy
    k = coefficients
    with np.errstate(divide="ignore", invalid="ignore"):
        if lens == "fisheye":
            theta_d = np.hypot(mx, my)
            theta, valid = _fisheye_theta(theta_d, k)
            scale = np.where(theta_d > 0.0, np.sin(theta) / np.where(theta_d > 0.0, theta_d, 1.0), 0.0)
            rays = np.stack([mx * scale, my * scale, np.cos(theta)], axis=1)
        elif lens == "unified":
            xi = k[0]
            mx, my = _undistort_radtan(mx, my, k[1], k[2], k[3], k[4], 0.0)
            r2 = mx * mx + my * my
            root = 1.0 + (1.0 - xi * xi) * r2
            valid = root >= 0.0
            factor = (xi + np.sqrt(np.maximum(root, 0.0))) / (1.0 + r2)
            rays = np.stack([factor * mx, factor * my, factor - xi], axis=1)
            valid &= project(lens, k, (1.0, 1.0, 0.0, 0.0), rays)[1]  # on the side the model sees
        elif lens == "double-sphere":
            rays, valid = _double_sphere_rays(mx, my, *k)
        elif lens == "eucm":
            alpha, beta = k
            r2 = mx * mx + my * my
            root = 1.0 - (2.0 * alpha - 1.0) * beta * r2
            valid = root >= 0.0
            mz = (1.0 - beta * alpha * alpha * r2) / (alpha * np.sqrt(np.maximum(root, 0.0)) + 1.0 - alpha)
            rays = np.stack([mx, my, mz], axis=1)
        elif lens == "pinhole":
            x, y = _undistort_radtan(mx, my, *k)
            rays = np.stack([x, y, np.ones_like(x)], axis=1)
            valid = np.ones(len(rays), bool)
        else:
            raise ConfigError(f"lens {lens!r}: choose one of {', '.join(LENSES)}")
        norm = np.linalg.norm(rays, axis=1, keepdims=True)
        rays = rays / norm
    valid &= np.all(np.isfinite(rays), axis=1)
    valid &= np.arccos(np.clip(rays[:, 2], -1.0, 1.0)) <= max_angle
    rays[~valid] = 0.0
    return rays


def _double_sphere_rays(mx, my, xi: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The double-sphere unprojection (the paper's eq. 47-50) of normalised coordinates: rays (n, 3),
    not unit, and where the model reaches one."""
    r2 = mx * mx + my * my
    root = 1.0 - (2.0 * alpha - 1.0) * r2
    valid = root >= 0.0
    mz = (1.0 - alpha * alpha * r2) / (alpha * np.sqrt(np.maximum(root, 0.0)) + 1.0 - alpha)
    factor = (mz * xi + np.sqrt(mz * mz + (1.0 - xi * xi) * r2)) / (mz * mz + r2)
    return np.stack([factor * mx, factor * my, factor * mz - xi], axis=1), valid


def _radtan(x, y, k1, k2, p1, p2, k3):
    """OpenCV's radial-tangential distortion of normalised coordinates."""
    r2 = x * x + y * y
    radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    return (
        x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x),
        y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y,
    )


def _undistort_radtan(xd, yd, k1, k2, p1, p2, k3, iterations: int = 40):
    """The normalised coordinates ``_radtan`` takes to (xd, yd): Gauss-Newton, as OpenCV's
    ``undistortPointsIter``, to float64's precision where the distortion is invertible."""
    x, y = np.array(xd, dtype=np.float64), np.array(yd, dtype=np.float64)
    if not any((k1, k2, p1, p2, k3)):
        return x, y
    for _ in range(iterations):
        r2 = x * x + y * y
        radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
        dradial = k1 + r2 * (2.0 * k2 + 3.0 * k3 * r2)  # d radial / d r2
        ex = x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x) - xd
        ey = y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y - yd
        jxx = radial + 2.0 * x * x * dradial + 2.0 * p1 * y + 6.0 * p2 * x
        jxy = 2.0 * x * y * dradial + 2.0 * p1 * x + 2.0 * p2 * y
        jyx = 2.0 * x * y * dradial + 2.0 * p1 * x + 2.0 * p2 * y
        jyy = radial + 2.0 * y * y * dradial + 6.0 * p1 * y + 2.0 * p2 * x
        det = jxx * jyy - jxy * jyx
        x = x - (jyy * ex - jxy * ey) / det
        y = y - (jxx * ey - jyx * ex) / det
    return x, y


def max_angle(lens: str, coefficients, fov_deg: float | None) -> float:
    """The largest angle from the optical axis a lens images, radians: half its field of view, within
    what the model reaches (a fisheye polynomial's rising part)."""
    top = _fisheye_theta_max(coefficients) if lens == "fisheye" else np.pi
    return float(min(top, np.radians(fov_deg) / 2.0)) if fov_deg is not None else float(top)


def _fisheye_theta_max(k) -> float:
    """The largest angle from the axis a Kannala-Brandt lens images: where theta_d stops growing, or pi."""
    theta = np.linspace(0.0, np.pi, 20001)
    slope = 1.0 + theta**2 * (3.0 * k[0] + theta**2 * (5.0 * k[1] + theta**2 * (7.0 * k[2] + theta**2 * 9.0 * k[3])))
    falling = np.flatnonzero(slope <= 0.0)
    return float(theta[falling[0] - 1]) if falling.size else float(np.pi)


def _fisheye_theta(theta_d: np.ndarray, k) -> tuple[np.ndarray, np.ndarray]:
    """The angle from the axis of each theta_d (Newton from theta = theta_d), and whether the lens
    reaches it (theta_d within the polynomial's rising part, up to pi)."""
    top = _fisheye_theta_max(k)
    reach = top * (1.0 + top**2 * (k[0] + top**2 * (k[1] + top**2 * (k[2] + top**2 * k[3]))))
    valid = theta_d <= reach
    theta = np.clip(theta_d, 0.0, top)
    for _ in range(30):
        t2 = theta * theta
        value = theta * (1.0 + t2 * (k[0] + t2 * (k[1] + t2 * (k[2] + t2 * k[3])))) - theta_d
        slope = 1.0 + t2 * (3.0 * k[0] + t2 * (5.0 * k[1] + t2 * (7.0 * k[2] + t2 * 9.0 * k[3])))
        theta = np.clip(theta - value / np.where(slope > 1e-12, slope, 1e-12), 0.0, top)
    return theta, valid
