"""Camera models: intrinsics, a lens (pinhole with OpenCV's radial-tangential distortion, or a
fisheye, unified, double-sphere or extended unified one: ``goggles.render.lenses``), and stereo rigs.

A camera is turned into a table of unit ray directions, one per pixel, in its optical frame
(x right, y down, z forward). The renderer only reads that table, so every camera model costs the
same to trace, and a lens is exact: each ray is the inverse of the lens's projection at the pixel
centre (OpenCV convention: pixel (u, v) = (column, row), centre of the top-left pixel at (0, 0)); a
pinhole's is ``cv2.projectPoints``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from goggles.checks import FLOAT32_MAX, is_number, is_whole
from goggles.errors import ConfigError
from goggles.render import lenses

#: Largest image side goggles renders, pixels: a run file's, a calibration's and a camera model's
#: bound (a typo's 320000 fails where it is written, not in a kernel).
MAX_IMAGE_SIDE = 16384


@dataclass(frozen=True)
class CameraModel:
    """Intrinsics and depth limits of one camera."""

    width: int
    """Image width, pixels."""
    height: int
    """Image height, pixels."""
    fx: float
    """Focal length along x, pixels."""
    fy: float
    """Focal length along y, pixels."""
    cx: float
    """Principal point x, pixels (OpenCV convention)."""
    cy: float
    """Principal point y, pixels (OpenCV convention)."""
    distortion: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)
    """The lens's coefficients (``lenses.LENSES``): a pinhole's OpenCV (k1, k2, p1, p2, k3)."""
    min_depth: float = 0.0
    """Closest valid depth, metres; closer hits read -inf (REP 118)."""
    max_depth: float = 1000.0
    """Farthest depth traced, metres; beyond it a pixel reads +inf (REP 118)."""
    lens: str = "pinhole"
    """The lens model (``lenses.LENSES``). Depth is the z-depth along the optical axis for a pinhole,
    the range along the ray for every other lens (they see beyond 90 degrees)."""
    fov_deg: float | None = None
    """The lens's field of view, degrees: what lies farther than half of it from the optical axis is
    outside the lens (a 200-degree fisheye's black corners); None: whatever the model reaches."""

    def __post_init__(self) -> None:
        if not (is_whole(self.width, 1, MAX_IMAGE_SIDE) and is_whole(self.height, 1, MAX_IMAGE_SIDE)):
            raise ConfigError(
                f"camera size {self.width!r}x{self.height!r} must be whole numbers of pixels, 1 to {MAX_IMAGE_SIDE}"
            )
        object.__setattr__(self, "width", int(self.width))  # NumPy's integers too: models compare and hash alike
        object.__setattr__(self, "height", int(self.height))
        for name in ("fx", "fy", "cx", "cy", "min_depth", "max_depth"):
            value = getattr(self, name)
            if not is_number(value):
                raise ConfigError(f"camera {name}={value!r} must be a number")
            object.__setattr__(self, name, float(value))
        for name in ("fx", "fy", "cx", "cy"):
            if not abs(getattr(self, name)) <= FLOAT32_MAX:  # the renderer's float32: 1e39 is infinite there
                raise ConfigError(f"camera {name}={getattr(self, name)} must be finite")
        if self.fx <= 0 or self.fy <= 0:
            raise ConfigError(f"camera focal lengths fx={self.fx}, fy={self.fy} must be positive (pixels)")
        # A tuple of floats: hashable, as a renderer keys its ray tables on camera models.
        object.__setattr__(self, "distortion", lenses.check_coefficients(self.lens, self.distortion))
        if self.fov_deg is not None:
            if not (is_number(self.fov_deg) and 0.0 < self.fov_deg <= 360.0):
                raise ConfigError(f"camera fov_deg={self.fov_deg!r} must be a field of view in (0, 360] degrees")
            object.__setattr__(self, "fov_deg", float(self.fov_deg))
        if not (0.0 <= self.min_depth < self.max_depth and math.isfinite(self.max_depth)):
            raise ConfigError(f"camera depth limits [{self.min_depth}, {self.max_depth}] m need 0 <= min < max < inf")

    @classmethod
    def from_fov(cls, width: int, height: int, vfov_deg: float, **kwargs) -> CameraModel:
        """Square-pixel pinhole camera with the principal point at the image centre.

        Args:
            width: pixels.
            height: pixels.
            vfov_deg: vertical field of view, degrees, in (0, 180).
            **kwargs: other fields (distortion, min_depth, max_depth).
        """
        if not 0.0 < vfov_deg < 180.0:
            raise ConfigError(f"vertical field of view {vfov_deg} deg must be in (0, 180)")
        f = (height / 2.0) / math.tan(math.radians(vfov_deg) / 2.0)
        return cls(width, height, f, f, (width - 1) / 2.0, (height - 1) / 2.0, **kwargs)

    @classmethod
    def fisheye(cls, width: int, height: int, fov_deg: float, **kwargs) -> CameraModel:
        """An equidistant fisheye (Kannala-Brandt with k = 0: r = f theta) whose ``fov_deg`` circle, up
        to 360 degrees, fills the image's shorter side; square pixels, principal point at the centre.
        Pixels outside the circle see nothing (``STATUS_OUTSIDE_LENS``)."""
        if not 0.0 < fov_deg <= 360.0:
            raise ConfigError(f"fisheye field of view {fov_deg} deg must be in (0, 360]")
        f = (min(width, height) / 2.0) / (math.radians(fov_deg) / 2.0)
        kwargs.setdefault("distortion", (0.0, 0.0, 0.0, 0.0))
        kwargs.setdefault("fov_deg", fov_deg)
        return cls(width, height, f, f, (width - 1) / 2.0, (height - 1) / 2.0, lens="fisheye", **kwargs)

    @property
    def K(self) -> np.ndarray:
        """(3, 3) float64 OpenCV camera matrix."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @property
    def has_distortion(self) -> bool:
        return self.lens != "pinhole" or any(c != 0.0 for c in self.distortion)

    @property
    def radial(self) -> bool:
        """Depth and limits along the ray (every lens but a pinhole sees beyond 90 degrees)."""
        return self.lens != "pinhole"

    @property
    def lens_id(self) -> int:
        """The lens's number in the kernels (``goggles.render.projection``)."""
        return lenses.LENS_IDS[self.lens]

    @property
    def max_angle(self) -> float:
        """The largest angle from the optical axis the lens images, radians (``lenses.max_angle``)."""
        return lenses.max_angle(self.lens, self.distortion, self.fov_deg)

    def kernel_coefficients(self) -> tuple[float, ...]:
        """The lens's coefficients as the kernels take them: zero-padded to five, then its largest angle."""
        padded = (*self.distortion, *(0.0,) * (5 - len(self.distortion)))
        return (*padded, self.max_angle)

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pixels (n, 2) of points (n, 3) in the optical frame, and whether the lens images each (n,)."""
        intrinsics = (self.fx, self.fy, self.cx, self.cy)
        return lenses.project(self.lens, self.distortion, intrinsics, points, self.max_angle)

    def ray_directions(self) -> np.ndarray:
        """Unit ray direction of every pixel centre in the optical frame.

        Returns:
            (height, width, 3) float32; a pinhole's rays have z > 0; a pixel other lenses reach no ray
            through is the zero vector.

        Raises:
            ConfigError: if the distortion cannot be inverted inside the image (rays would fold back).
        """
        u, v = np.meshgrid(np.arange(self.width, dtype=np.float64), np.arange(self.height, dtype=np.float64))
        if self.lens != "pinhole":
            pixels = np.stack([u.ravel(), v.ravel()], axis=1)
            intrinsics = (self.fx, self.fy, self.cx, self.cy)
            rays = lenses.unproject(self.lens, self.distortion, intrinsics, pixels, self.max_angle)
            seen = np.any(rays != 0.0, axis=1)
            back, imaged = self.project(rays[seen])
            error = np.abs(back - pixels[seen]).max() if seen.any() else 0.0
            if not (imaged.all() and error < 1e-3):
                names = ", ".join(lenses.LENSES[self.lens])
                raise ConfigError(
                    f"{self.lens} lens {self.distortion} cannot be inverted inside the {self.width}x{self.height} "
                    f"image (round-trip error {error:.3g} px); check the coefficients ({names})"
                )
            return rays.reshape(self.height, self.width, 3).astype(np.float32)
        if self.has_distortion:
            import cv2

            pixels = np.stack([u.ravel(), v.ravel()], axis=-1).reshape(-1, 1, 2)
            criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-14)
            if hasattr(cv2, "undistortPointsIter"):  # OpenCV 4
                undistorted = cv2.undistortPointsIter(pixels, self.K, np.asarray(self.distortion), None, None, criteria)
            else:  # OpenCV 5 folded the iteration criteria into undistortPoints
                undistorted = cv2.undistortPoints(pixels, self.K, np.asarray(self.distortion), criteria=criteria)
            undistorted = undistorted.reshape(self.height, self.width, 2)
            x, y = undistorted[..., 0], undistorted[..., 1]
            reprojected, _ = cv2.projectPoints(
                np.stack([x.ravel(), y.ravel(), np.ones(x.size)], axis=-1),
                np.zeros(3),
                np.zeros(3),
                self.K,
                np.asarray(self.distortion),
            )
            error = np.abs(reprojected.reshape(self.height, self.width, 2) - np.stack([u, v], axis=-1)).max()
            if not error < 1e-3:
                raise ConfigError(
                    f"distortion {self.distortion} cannot be inverted inside the {self.width}x{self.height} image "
                    f"(round-trip error {error:.3g} px); check the coefficients' order (k1, k2, p1, p2, k3)"
                )
        else:
            x, y = (u - self.cx) / self.fx, (v - self.cy) / self.fy
        rays = np.stack([x, y, np.ones_like(x)], axis=-1)
        return (rays / np.linalg.norm(rays, axis=-1, keepdims=True)).astype(np.float32)


#: A camera whose pixels span less than this (rad, corner to corner) sees one direction, not an image.
LEAST_FIELD_OF_VIEW = 1e-6
#: A pinhole pixel whose ray is this close to the image plane (its z) has no depth along the axis.
LEAST_RAY_Z = 1e-6


def blindness(model) -> str | None:
    """Why a camera model (or a LiDAR's ray table) sees nothing, or None when it sees: a lens that
    cannot be inverted in its image, no pixel with a ray, every pixel along one direction (a focal
    length of 1e30 px), or a pinhole whose rays all graze its image plane (a principal point 1e9 px
    away). Computes its ray table: call it once, where the model is read."""
    try:
        rays = model.ray_directions()
    except ConfigError as exc:
        return str(exc)
    valid = np.all(np.isfinite(rays), axis=-1) & np.any(rays != 0.0, axis=-1)
    if not getattr(model, "radial", False):
        valid &= rays[..., 2] > LEAST_RAY_Z
    if not valid.any():
        return "no pixel of its image has a ray (its lens sees nothing there: check the intrinsics)"
    seen = rays[valid].astype(np.float64)
    spread = np.linalg.norm(seen.max(axis=0) - seen.min(axis=0))
    if not spread > LEAST_FIELD_OF_VIEW:
        return f"its pixels span {spread:.3g} rad: every one sees the same direction (check the focal lengths)"
    return None


def stereo_right_offset(baseline: float) -> np.ndarray:
    """(4, 4) pose of a stereo rig's right optical frame in the left one: +baseline along optical x.

    The right camera sits at -baseline along the body y axis (FLU), which is optical +x.
    """
    if not (math.isfinite(baseline) and baseline > 0.0):
        raise ConfigError(f"stereo baseline {baseline} m must be a positive number")
    T = np.eye(4)
    T[0, 3] = baseline
    return T
