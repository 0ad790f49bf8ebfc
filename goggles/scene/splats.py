"""3D Gaussian splats from files: the INRIA/graphdeco PLY (as gsplat, nerfstudio, Brush, Postshot and
splat-transform write it) and the antimatter15 ``.splat``, read as they are written, checked, and
placed in the world.

A file is memory-mapped and read a property at a time, so what is kept is the one copy in memory.
Each Gaussian keeps its mean, the standard deviations along its local axes (PLY's ``scale_*`` are
their logarithms), its rotation (w, x, y, z; PLY's ``rot_*`` need not be unit), its opacity (PLY's is
a logit) and its colour's real spherical-harmonic coefficients (PLY's ``f_dc_*``, then ``f_rest_*``
channel-major: every red coefficient, then green, then blue; Kerbl et al. 2023). Gaussians whose
opacity is under 1/255 can never show and are left out. A Gaussian's colour is evaluated in its
file's own frame (``frames``), so placing a splat turns its view-dependent colour with it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.errors import SceneError
from goggles.scene.splat_formats import (
    Gaussians,
    PlyLayout,
    ply_kind,
    ply_layout,
    read_compressed_ply,
    read_spz,
    record_dtype,
)

log = logging.getLogger(__name__)

#: The degree-0 real spherical harmonic, 1 / (2 sqrt(pi)): colour = 0.5 + SH_C0 * f_dc.
SH_C0 = 0.28209479177387814
MAX_SH_DEGREE = 3
#: The least opacity a Gaussian can show with (one 8-bit step, as the rasterizers cut).
MIN_OPACITY = 1.0 / 255.0
#: The screen-space filters captures are trained with: (px^2 added to each Gaussian's projected
#: covariance, whether its opacity is scaled to keep its integral). 3DGS's (Kerbl et al. 2023, gsplat's
#: ``eps2d``); "antialiased" as gsplat's and Mip-Splatting's 2D filter and the .spz flag of that name;
#: none (3DGRT, or a capture whose 3D filter is baked into its scales).
FILTERS = {"3dgs": (0.3, False), "antialiased": (0.3, True), "none": (0.0, False)}
#: What a file must hold, PLY property names.
_REQUIRED = ("x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2")
_ROTATION = ("rot_0", "rot_1", "rot_2", "rot_3")
SPLAT_SUFFIXES = (".ply", ".splat", ".spz")


@dataclass
class SplatCloud:
    """Gaussians in the world (or in their file's frame, before ``placed``), host memory."""

    positions: np.ndarray
    """(N, 3) float32 means, metres."""
    scales: np.ndarray
    """(N, 3) float32 standard deviations along each Gaussian's own axes, metres."""
    rotations: np.ndarray
    """(N, 4) float32 unit quaternions (w, x, y, z): each Gaussian's axes in the world."""
    opacity: np.ndarray
    """(N,) float32 peak opacity in (0, 1)."""
    sh: np.ndarray
    """(N, (degree + 1)^2, 3) float32 real spherical-harmonic coefficients of the colour (RGB)."""
    segment: np.ndarray
    """(N,) int32 segmentation class."""
    frame: np.ndarray
    """(N,) int32 index into ``frames``: the frame its colour's directions are measured in."""
    frames: np.ndarray
    """(F, 3, 3) float32 rotations, world to each file's frame (the colours' frames)."""
    filters: np.ndarray | None = None
    """(F,) per file: the name of the screen-space filter it was trained with (``FILTERS``; None:
    3DGS's for every file)."""

    def __post_init__(self):
        if self.filters is None:
            self.filters = np.full(len(self.frames), "3dgs", dtype="<U12")

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def degree(self) -> int:
        return int(round(np.sqrt(self.sh.shape[1]))) - 1

    def placed(self, T_WA: np.ndarray, scale: float, segment: int) -> SplatCloud:
        """The cloud moved by ``T_WA`` (a rigid (4, 4) pose) after a uniform ``scale``, of class ``segment``."""
        R = np.asarray(T_WA[:3, :3], np.float64)
        positions = (self.positions.astype(np.float64) * scale) @ R.T + T_WA[:3, 3]
        turn = _matrix_to_quat(R)
        rotations = _quat_multiply(turn, self.rotations.astype(np.float64))
        frames = np.einsum("fij,jk->fik", self.frames.astype(np.float64), R.T)  # world -> file
        return SplatCloud(
            positions.astype(np.float32),
            (self.scales * scale).astype(np.float32),
            rotations.astype(np.float32),
            self.opacity,
            self.sh,
            np.full(len(self), segment, np.int32),
            self.frame,
            frames.astype(np.float32),
            self.filters,
        )

    def filtered(self, name: str) -> SplatCloud:
        """The cloud rendered with the screen-space filter ``name`` (``FILTERS``)."""
        return dataclasses.replace(self, filters=np.full(len(self.frames), name, dtype="<U12"))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.positions, self.scales, self.rotations, self.opacity, self.sh, self.segment))


def merge_splats(clouds: list[SplatCloud]) -> SplatCloud | None:
    """One cloud of several (their SH padded with zeros to the highest degree), or None for none."""
    if not clouds:
        return None
    if len(clouds) == 1:
        return clouds[0]
    width = max(c.sh.shape[1] for c in clouds)
    sh = np.zeros((sum(len(c) for c in clouds), width, 3), np.float32)
    start = 0
    for c in clouds:
        sh[start : start + len(c), : c.sh.shape[1]] = c.sh
        start += len(c)
    offsets = np.cumsum([0] + [len(c.frames) for c in clouds[:-1]])
    return SplatCloud(
        np.concatenate([c.positions for c in clouds]),
        np.concatenate([c.scales for c in clouds]),
        np.concatenate([c.rotations for c in clouds]),
        np.concatenate([c.opacity for c in clouds]),
        sh,
        np.concatenate([c.segment for c in clouds]),
        np.concatenate([c.frame + o for c, o in zip(clouds, offsets)]).astype(np.int32),
        np.concatenate([c.frames for c in clouds]),
        np.concatenate([c.filters for c in clouds]),
    )


def is_splat_file(path: Path) -> bool:
    """A ``.splat`` or ``.spz``, or a PLY that is not a mesh: Gaussians (plain or SuperSplat's packed
    ones), or a file no mesh reader should be given (the splat reader's one line says what it is)."""
    suffix = path.suffix.lower()
    if suffix in (".splat", ".spz"):
        return True
    if suffix != ".ply" or not path.is_file():
        return False
    try:
        return ply_kind(path) != "mesh"
    except SceneError:
        return True


def read_splat_file(path: str | Path) -> SplatCloud:
    """The Gaussians of a ``.ply`` or ``.splat`` file, in the file's frame and units.

    Raises:
        SceneError: one line naming the file and what is wrong (a missing property, NaN or infinite
            values, zero quaternions, a truncated or unknown format).
    """
    path = Path(path)
    if not path.is_file():
        raise SceneError(f"{path}: splat file not found")
    suffix = path.suffix.lower()
    from goggles.runtime.device_memory import available_memory

    size = path.stat().st_size
    need, free = 2.5 * size, available_memory(None)  # reading takes about 2.2x the file
    if free is not None and need > free:
        raise SceneError(
            f"{path}: reading its {size / 2**30:.1f} GiB takes about {need / 2**30:.1f} GiB of "
            f"memory, and {free / 2**30:.1f} GiB is available"
        )
    if suffix == ".splat":
        cloud = _read_dot_splat(path)
    elif suffix == ".spz":
        cloud = _cloud(path, read_spz(path, most_points=int((free or 2**62) // 400)))
    elif suffix == ".ply":
        layout = ply_layout(path)
        kind = ply_kind(path, layout)
        if kind == "mesh":
            raise SceneError(f"{path}: a mesh (it has faces), not a Gaussian splat: place it as an [[asset]]")
        cloud = _cloud(path, read_compressed_ply(path, layout) if kind == "compressed" else _read_ply(path, layout))
    else:
        raise SceneError(f"{path}: unknown splat format {suffix!r}; use {', '.join(SPLAT_SUFFIXES)}")
    kept = cloud.opacity >= MIN_OPACITY
    if not kept.all():
        log.info("%s: %d of %d Gaussians are under 1/255 opacity: left out", path, (~kept).sum(), len(kept))
        cloud = SplatCloud(*(a[kept] for a in _per_gaussian(cloud)), cloud.frames, cloud.filters)
    if len(cloud) == 0:
        raise SceneError(f"{path}: no Gaussian with an opacity of 1/255 or more: nothing to see")
    return cloud


def _per_gaussian(c: SplatCloud) -> tuple[np.ndarray, ...]:
    return c.positions, c.scales, c.rotations, c.opacity, c.sh, c.segment, c.frame


def _read_ply(path: Path, layout: PlyLayout) -> Gaussians:
    """The INRIA PLY's columns, memory-mapped, read a property at a time."""
    vertex = layout.element("vertex")
    if layout.format not in ("binary_little_endian", "binary_big_endian"):
        raise SceneError(
            f"{path}: PLY format {layout.format!r}: splats are read from binary PLY (little or big endian)"
        )
    if layout.elements[0].name != "vertex":
        raise SceneError(
            f"{path}: element {layout.elements[0].name!r} comes before 'vertex': a splat PLY starts with its Gaussians"
        )
    names = vertex.names
    missing = [name for name in (*_REQUIRED, *_ROTATION) if name not in names]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SceneError(f"{path}: not a Gaussian splat PLY: missing property {missing[0]!r}{more}")
    lists = [name for name, kind in vertex.properties if kind is None]
    if lists:
        raise SceneError(f"{path}: vertex property {lists[0]!r} is a list: a splat's properties are numbers")
    rest = sorted((n for n in names if re.fullmatch(r"f_rest_\d+", n)), key=lambda n: int(n[7:]))
    degrees = {3 * ((d + 1) ** 2 - 1): d for d in range(MAX_SH_DEGREE + 1)}
    if len(rest) not in degrees or rest != [f"f_rest_{i}" for i in range(len(rest))]:
        raise SceneError(
            f"{path}: {len(rest)} f_rest_* properties: spherical harmonics of degree 0 to 3 have 0, 9, 24 or 45, "
            "numbered from f_rest_0"
        )
    dtype = record_dtype(layout, vertex)
    count = vertex.count
    needed = layout.header_bytes + count * dtype.itemsize
    size = path.stat().st_size
    if size < needed:
        raise SceneError(
            f"{path}: truncated: {count} Gaussians of {dtype.itemsize} bytes need {needed} bytes, the file has {size}"
        )
    records = np.memmap(path, dtype=dtype, mode="r", offset=layout.header_bytes, shape=(count,))

    def column(name: str) -> np.ndarray:
        values = np.asarray(records[name], dtype=np.float32)
        bad = ~np.isfinite(values)
        if bad.any():
            raise SceneError(
                f"{path}: property {name!r} has {int(bad.sum())} NaN or infinite values (first at Gaussian "
                f"{int(np.argmax(bad))})"
            )
        return values

    positions = np.stack([column(n) for n in ("x", "y", "z")], axis=1)
    log_scales = np.stack([column(f"scale_{i}") for i in range(3)], axis=1)
    rotations = np.stack([column(n) for n in _ROTATION], axis=1)
    logit = column("opacity")
    opacity = 1.0 / (1.0 + np.exp(-np.clip(logit, -60.0, 60.0)))
    degree = degrees[len(rest)]
    per_channel = (degree + 1) ** 2 - 1
    sh = np.empty((count, per_channel + 1, 3), np.float32)
    for c in range(3):
        sh[:, 0, c] = column(f"f_dc_{c}")
        for k in range(per_channel):
            sh[:, k + 1, c] = column(f"f_rest_{c * per_channel + k}")
    return Gaussians(positions, log_scales, rotations, opacity.astype(np.float32), sh)


def _cloud(path: Path, g: Gaussians) -> SplatCloud:
    """A file's Gaussians checked (every value finite, every rotation non-zero) as a cloud in its frame."""
    for name, values in (
        ("position (x, y, z)", g.positions),
        ("scale (scale_*)", g.log_scales),
        ("rotation (rot_*)", g.rotations),
        ("opacity", g.opacity),
        ("colour (f_dc_*, f_rest_*)", g.sh),
    ):
        bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
        if bad.any():
            raise SceneError(
                f"{path}: {name} has {int(bad.sum())} NaN or infinite values (first at Gaussian {int(np.argmax(bad))})"
            )
    count = len(g.positions)
    cloud = SplatCloud(
        g.positions,
        np.exp(np.clip(g.log_scales, -30.0, 30.0)).astype(np.float32),
        _unit_quaternions(path, g.rotations),
        g.opacity,
        g.sh,
        np.ones(count, np.int32),
        np.zeros(count, np.int32),
        np.eye(3, dtype=np.float32)[None],
    )
    return cloud.filtered("antialiased") if g.antialiased else cloud


def _read_dot_splat(path: Path) -> SplatCloud:
    """antimatter15's layout: 32 bytes per Gaussian: position 3 x f32, linear scale 3 x f32, RGBA u8,
    rotation w x y z as u8 (q = (b - 128) / 128)."""
    size = path.stat().st_size
    if size == 0 or size % 32:
        raise SceneError(f"{path}: a .splat file is 32-byte records; {size} bytes is not a whole number of them")
    record = np.dtype([("position", "<f4", 3), ("scale", "<f4", 3), ("rgba", "u1", 4), ("rotation", "u1", 4)])
    records = np.memmap(path, dtype=record, mode="r")
    positions = np.array(records["position"], dtype=np.float32)
    scales = np.array(records["scale"], dtype=np.float32)
    for name, values in (("position", positions), ("scale", scales)):
        bad = ~np.isfinite(values).all(axis=1)
        if bad.any():
            raise SceneError(
                f"{path}: {name} has {int(bad.sum())} NaN or infinite values (first at Gaussian {int(np.argmax(bad))})"
            )
    if (scales <= 0).any():
        raise SceneError(f"{path}: scale: {int((scales <= 0).any(axis=1).sum())} Gaussians have a scale <= 0")
    rgba = np.asarray(records["rgba"], dtype=np.float32) / 255.0
    rotations = _unit_quaternions(path, (np.asarray(records["rotation"], dtype=np.float32) - 128.0) / 128.0)
    sh = ((rgba[:, :3] - 0.5) / SH_C0)[:, None, :].astype(np.float32)
    count = len(positions)
    del records
    return SplatCloud(
        positions,
        scales,
        rotations,
        rgba[:, 3].copy(),
        sh,
        np.ones(count, np.int32),
        np.zeros(count, np.int32),
        np.eye(3, dtype=np.float32)[None],
    )


def _unit_quaternions(path: Path, q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)  # float32's norm of 1e20s overflows, and the rotation became zero
    norm = np.linalg.norm(q, axis=1)
    zero = norm < 1e-12
    if zero.any():
        raise SceneError(
            f"{path}: rotation: {int(zero.sum())} zero quaternions (first at Gaussian {int(np.argmax(zero))}): "
            "a Gaussian's axes must be a rotation"
        )
    return (q / norm[:, None]).astype(np.float32)


def _matrix_to_quat(R: np.ndarray) -> np.ndarray:
    from goggles.frames import matrix_to_quat

    return np.asarray(matrix_to_quat(R), np.float64)


def _quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b for one quaternion ``a`` and (N, 4) ``b``, (w, x, y, z)."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return np.stack(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ],
        axis=1,
    )


def write_splat_ply(cloud: SplatCloud, path: str | Path) -> Path:
    """Write ``cloud`` as an INRIA/graphdeco PLY (binary little endian: x y z, nx ny nz of 0, f_dc_*,
    f_rest_* channel-major, opacity as a logit, log scales, rot w x y z), as gsplat and nerfstudio write
    it; colours keep the world's frame (a placed cloud's own frames are not written back)."""
    path = Path(path)
    rest = cloud.sh.shape[1] - 1
    names = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    names += [f"f_rest_{i}" for i in range(3 * rest)]
    names += ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    records = np.zeros(len(cloud), np.dtype([(name, "<f4") for name in names]))
    for i, axis in enumerate("xyz"):
        records[axis] = cloud.positions[:, i]
        records[f"scale_{i}"] = np.log(cloud.scales[:, i])
    for c in range(3):
        records[f"f_dc_{c}"] = cloud.sh[:, 0, c]
        for k in range(rest):
            records[f"f_rest_{c * rest + k}"] = cloud.sh[:, 1 + k, c]
    p = np.clip(cloud.opacity.astype(np.float64), 1e-6, 1.0 - 1e-6)
    records["opacity"] = np.log(p / (1.0 - p))
    for i in range(4):
        records[f"rot_{i}"] = cloud.rotations[:, i]
    header = ["ply", "format binary_little_endian 1.0", f"element vertex {len(cloud)}"]
    header += [f"property float {name}" for name in names] + ["end_header"]
    path.write_bytes(("\n".join(header) + "\n").encode("ascii") + records.tobytes())
    return path
