"""The byte layouts of splat files beyond the INRIA PLY's plain columns: a PLY's header (its elements
and their properties), SuperSplat's compressed PLY and Niantic's ``.spz``, decoded into the INRIA
PLY's quantities (``Gaussians``: means, log scales, rotations w x y z, opacities, SH coefficients).

SuperSplat's compressed PLY (PlayCanvas): a ``chunk`` element of float ranges per 256 Gaussians
(position, log scale, and optionally colour), a ``vertex`` element of four uint32 per Gaussian
(position and log scale as 11-10-11-bit fractions of the chunk's range, rotation as the largest
component's index in 2 bits and the other three in 10 bits each over +-1/sqrt(2), colour and opacity
as 8 bits each), and optionally an ``sh`` element of bytes (f_rest = byte * 8 / 255 - 4). Memory-mapped.

``.spz`` (Niantic; versions 2 and 3 one gzip stream after a 16-byte header, version 4 a 32-byte header,
a table of contents and a zstd stream per attribute): positions as 24-bit fixed point, opacity a byte,
colour bytes (f_dc = (byte / 255 - 0.5) / 0.15), log scales as byte / 16 - 10, rotations (version 2:
x y z bytes, w rebuilt; 3 on: the smallest three in 32 bits), SH bytes ((byte - 128) / 128, colour
channel innermost). Read as stored, with no change of axes (the format's default): Niantic's own
tools store right-up-back axes (up +y), splat-transform stores the PLY's. The header's antialiased
flag names the capture's screen-space filter.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.errors import SceneError

PLY_TYPES = {
    "char": "i1",
    "int8": "i1",
    "uchar": "u1",
    "uint8": "u1",
    "short": "i2",
    "int16": "i2",
    "ushort": "u2",
    "uint16": "u2",
    "int": "i4",
    "int32": "i4",
    "uint": "u4",
    "uint32": "u4",
    "float": "f4",
    "float32": "f4",
    "double": "f8",
    "float64": "f8",
}
#: A plain splat PLY's vertex properties, any of which marks a point cloud as Gaussians.
GAUSSIAN_PROPERTIES = ("f_dc_0", "opacity", "scale_0", "rot_0")
PACKED = ("packed_position", "packed_rotation", "packed_scale", "packed_color")
CHUNK = 256
SPZ_MAGIC = 0x5053474E  # "NGSP"
SPZ_COLOUR_SCALE = 0.15


@dataclass(frozen=True)
class PlyElement:
    name: str
    count: int
    properties: tuple[tuple[str, str | None], ...]
    """(name, numpy type), the type None for a list property."""

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.properties]


@dataclass(frozen=True)
class PlyLayout:
    format: str
    elements: tuple[PlyElement, ...]
    header_bytes: int

    def element(self, name: str) -> PlyElement | None:
        return next((e for e in self.elements if e.name == name), None)

    def offset(self, name: str) -> int:
        """Where element ``name``'s records start (binary formats; every earlier element fixed-size)."""
        at = self.header_bytes
        for e in self.elements:
            if e.name == name:
                return at
            at += e.count * record_dtype(self, e).itemsize
        raise KeyError(name)


@dataclass
class Gaussians:
    """A splat file's Gaussians in the INRIA PLY's quantities, file frame and units."""

    positions: np.ndarray
    log_scales: np.ndarray
    rotations: np.ndarray
    """(N, 4) w x y z, not necessarily unit."""
    opacity: np.ndarray
    """(N,) in [0, 1] (not a logit)."""
    sh: np.ndarray
    """(N, (degree + 1)^2, 3) real SH coefficients (f_dc, then f_rest by coefficient)."""
    antialiased: bool = False


def ply_layout(path: Path) -> PlyLayout:
    """A PLY's header: its format and elements. Raises a one-line ``SceneError`` for a file that is
    not a PLY or whose header cannot be read."""
    with path.open("rb") as f:
        head = f.read(65536)
    end = head.find(b"end_header")
    if not head.startswith(b"ply") or end < 0:
        raise SceneError(f"{path}: not a PLY file (no 'ply' magic and 'end_header' in its first 64 KiB)")
    stop = head.find(b"\n", end)
    stop = len(head) if stop < 0 else stop + 1
    fmt, elements, current = "", [], None
    for number, line in enumerate(head[:stop].decode("ascii", errors="replace").splitlines()[1:], start=2):
        words = line.split()
        if not words or words[0] in ("comment", "obj_info", "end_header"):
            continue
        if words[0] == "format":
            fmt = words[1] if len(words) > 1 else ""
        elif words[0] == "element":
            if len(words) != 3 or not words[2].isdigit():
                raise SceneError(f"{path}: header line {number} {line.strip()!r}: an element needs a name and a count")
            current = (words[1], int(words[2]), [])
            elements.append(current)
        elif words[0] == "property":
            if current is None:
                raise SceneError(f"{path}: header line {number}: a property before any element")
            if words[1:2] == ["list"]:
                current[2].append((words[-1], None))
            elif len(words) == 3 and words[1] in PLY_TYPES:
                current[2].append((words[2], PLY_TYPES[words[1]]))
            else:
                raise SceneError(f"{path}: header line {number} {line.strip()!r}: unknown property type")
        else:
            raise SceneError(f"{path}: header line {number} {line.strip()!r}: not a PLY header line")
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise SceneError(f"{path}: PLY format {fmt!r}: ascii, binary_little_endian or binary_big_endian")
    layout = tuple(PlyElement(name, count, tuple(props)) for name, count, props in elements)
    return PlyLayout(fmt, layout, stop)


def record_dtype(layout: PlyLayout, element: PlyElement) -> np.dtype:
    if any(kind is None for _, kind in element.properties):
        raise SceneError(f"element {element.name!r} has list properties: its records are not fixed-size")
    order = "<" if layout.format == "binary_little_endian" else ">"
    return np.dtype([(name, order + kind) for name, kind in element.properties])


def ply_kind(path: Path, layout: PlyLayout | None = None) -> str:
    """What a PLY holds (its ``layout`` when read already): "mesh" (faces), "splat" (Gaussians'
    columns) or "compressed" (SuperSplat's packed Gaussians). Raises a one-line ``SceneError`` for
    anything else (a point cloud, garbage)."""
    layout = layout if layout is not None else ply_layout(path)
    faces = layout.element("face")
    if faces is not None and faces.count > 0:
        return "mesh"
    chunk, vertex = layout.element("chunk"), layout.element("vertex")
    if chunk is not None and vertex is not None and any(n in vertex.names for n in PACKED):
        return "compressed"
    if vertex is None:
        raise SceneError(f"{path}: a PLY without 'element vertex': neither a mesh nor a Gaussian splat")
    if any(n in vertex.names for n in GAUSSIAN_PROPERTIES) or any(n.startswith("f_rest_") for n in vertex.names):
        return "splat"
    raise SceneError(
        f"{path}: a point cloud (no faces, and none of {', '.join(GAUSSIAN_PROPERTIES)}): neither a mesh nor a "
        "Gaussian splat"
    )


def read_compressed_ply(path: Path, layout: PlyLayout) -> Gaussians:
    """SuperSplat's compressed PLY, memory-mapped."""
    if layout.format != "binary_little_endian":
        raise SceneError(f"{path}: a compressed splat PLY is binary_little_endian, not {layout.format}")
    chunk, vertex, sh = layout.element("chunk"), layout.element("vertex"), layout.element("sh")
    ranges = ("min_x", "min_y", "min_z", "max_x", "max_y", "max_z")
    ranges += ("min_scale_x", "min_scale_y", "min_scale_z", "max_scale_x", "max_scale_y", "max_scale_z")
    for element, names in ((chunk, ranges), (vertex, PACKED)):
        missing = [n for n in names if n not in element.names]
        if missing:
            raise SceneError(f"{path}: compressed splat PLY: element {element.name!r} has no property {missing[0]!r}")
    n = vertex.count
    if chunk.count != -(-n // CHUNK):
        raise SceneError(f"{path}: compressed splat PLY: {chunk.count} chunks for {n} Gaussians (one per {CHUNK})")
    if sh is not None and (sh.count != n or len(sh.names) not in (9, 24, 45)):
        raise SceneError(f"{path}: compressed splat PLY: 'sh' holds {len(sh.names)} bytes for {sh.count} Gaussians")
    elements = [e for e in (chunk, vertex, sh) if e is not None]
    needed = layout.offset(elements[-1].name) + elements[-1].count * record_dtype(layout, elements[-1]).itemsize
    size = path.stat().st_size
    if size < needed:
        raise SceneError(f"{path}: truncated: its header promises {needed} bytes, the file has {size}")

    def records(element: PlyElement) -> np.ndarray:
        dtype = record_dtype(layout, element)
        return np.memmap(path, dtype=dtype, mode="r", offset=layout.offset(element.name), shape=(element.count,))

    c, v = records(chunk), records(vertex)
    of = np.arange(n) // CHUNK

    def lerp(packed: np.ndarray, prefix: tuple[str, str], axes: tuple[str, str, str]) -> np.ndarray:
        fractions = _unorm_11_10_11(packed)
        low = np.stack([np.asarray(c[f"{prefix[0]}{a}"], np.float64)[of] for a in axes], axis=1)
        high = np.stack([np.asarray(c[f"{prefix[1]}{a}"], np.float64)[of] for a in axes], axis=1)
        return low + (high - low) * fractions

    positions = lerp(np.asarray(v["packed_position"]), ("min_", "max_"), ("x", "y", "z"))
    log_scales = lerp(np.asarray(v["packed_scale"]), ("min_scale_", "max_scale_"), ("x", "y", "z"))
    colour = np.asarray(v["packed_color"], np.uint32)
    rgba = np.stack([(colour >> s) & 0xFF for s in (24, 16, 8, 0)], axis=1) / 255.0
    if all(f"{e}_{ch}" in chunk.names for e in ("min", "max") for ch in "rgb"):
        low = np.stack([np.asarray(c[f"min_{ch}"], np.float64)[of] for ch in "rgb"], axis=1)
        high = np.stack([np.asarray(c[f"max_{ch}"], np.float64)[of] for ch in "rgb"], axis=1)
        rgba[:, :3] = low + (high - low) * rgba[:, :3]
    from goggles.scene.splats import SH_C0

    rest = len(sh.names) // 3 if sh is not None else 0
    coefficients = np.zeros((n, rest + 1, 3), np.float32)
    coefficients[:, 0] = (rgba[:, :3] - 0.5) / SH_C0
    if sh is not None:
        packed_sh = records(sh)
        for channel in range(3):
            for k in range(rest):
                name = f"f_rest_{channel * rest + k}"
                coefficients[:, k + 1, channel] = np.asarray(packed_sh[name], np.float32) * (8.0 / 255.0) - 4.0
    return Gaussians(
        positions.astype(np.float32),
        log_scales.astype(np.float32),
        _largest_and_three(np.asarray(v["packed_rotation"], np.uint32)),
        rgba[:, 3].astype(np.float32),
        coefficients,
    )


def _unorm_11_10_11(packed: np.ndarray) -> np.ndarray:
    p = np.asarray(packed, np.uint32)
    return np.stack([((p >> 21) & 0x7FF) / 2047.0, ((p >> 11) & 0x3FF) / 1023.0, (p & 0x7FF) / 2047.0], axis=1)


def _largest_and_three(packed: np.ndarray) -> np.ndarray:
    """(N, 4) w x y z of SuperSplat's 2-10-10-10 rotations: the largest component's index (w x y z)
    in the top 2 bits, rebuilt from the other three, which follow in order over +-1/sqrt(2)."""
    norm = np.sqrt(2.0)
    others = np.stack([(((packed >> s) & 0x3FF) / 1023.0 - 0.5) * norm for s in (20, 10, 0)], axis=1)
    largest = (packed >> 30).astype(np.int64)
    q = np.empty((len(packed), 4))
    rows = np.arange(len(packed))
    q[rows, largest] = np.sqrt(np.maximum(0.0, 1.0 - (others**2).sum(axis=1)))
    slot = np.arange(3)[None, :] + (np.arange(3)[None, :] >= largest[:, None])  # skip the largest's place
    q[rows[:, None], slot] = others
    return q.astype(np.float32)


def read_spz(path: Path, most_points: int) -> Gaussians:
    """A ``.spz`` file (versions 2 to 4), its streams inflated at most to the sizes its header
    declares; at most ``most_points`` Gaussians (what memory allows)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # versions 2 and 3: one gzip stream
        inflater = zlib.decompressobj(wbits=31)
        head = inflater.decompress(raw, 16)
        header = _spz_header(path, head)
        expected = 16 + header["bytes"]
        if header["points"] > most_points:
            raise SceneError(f"{path}: {header['points']:,} Gaussians: more than memory holds ({most_points:,})")
        try:
            body = inflater.decompress(inflater.unconsumed_tail, expected - 16)
        except zlib.error as exc:
            raise SceneError(f"{path}: its gzip stream is damaged ({exc})") from None
        if len(body) < expected - 16:
            raise SceneError(
                f"{path}: truncated: its header promises {expected - 16} bytes, the stream holds {len(body)}"
            )
        streams = _split(body, header["sizes"])
    else:
        header = _spz_header(path, raw[:32])
        if header["version"] < 4:
            raise SceneError(f"{path}: a version {header['version']} .spz is a gzip stream; this is not one")
        if header["points"] > most_points:
            raise SceneError(f"{path}: {header['points']:,} Gaussians: more than memory holds ({most_points:,})")
        streams = _spz_v4_streams(path, raw, header)
    return _decode_spz(path, header, streams)


def _spz_header(path: Path, head: bytes) -> dict:
    if len(head) < 16:
        raise SceneError(f"{path}: not a .spz file ({len(head)} bytes, shorter than its header)")
    magic, version, points, degree, fractional, flags, _ = struct.unpack("<IIIBBBB", head[:16])
    if magic != SPZ_MAGIC:
        raise SceneError(f"{path}: not a .spz file (no 'NGSP' magic)")
    if not 2 <= version <= 4:
        raise SceneError(f"{path}: .spz version {version}: versions 2 to 4 are read")
    if degree > 3:
        raise SceneError(f"{path}: .spz spherical harmonics of degree {degree}: degrees 0 to 3 are read")
    rest = 3 * ((degree + 1) ** 2 - 1)
    sizes = [points * 9, points, points * 3, points * 3, points * (3 if version == 2 else 4)]
    if rest:
        sizes.append(points * rest)
    return {
        "version": version,
        "points": points,
        "degree": degree,
        "fractional": fractional,
        "antialiased": bool(flags & 1),
        "sizes": sizes,
        "bytes": sum(sizes),
        "streams": head[15] if len(head) >= 32 else len(sizes),
        "toc": struct.unpack("<I", head[16:20])[0] if len(head) >= 32 else 0,
    }


def _split(body: bytes, sizes: list[int]) -> list[bytes]:
    out, at = [], 0
    for size in sizes:
        out.append(body[at : at + size])
        at += size
    return out


def _spz_v4_streams(path: Path, raw: bytes, header: dict) -> list[bytes]:
    import zstandard

    count, toc, sizes = header["streams"], header["toc"], header["sizes"]
    if count != len(sizes) or toc < 32 or toc + 16 * count > len(raw):
        raise SceneError(f"{path}: .spz table of contents: {count} streams at byte {toc}, expected {len(sizes)}")
    at, streams = toc + 16 * count, []
    for i, expected in enumerate(sizes):
        packed, unpacked = struct.unpack("<QQ", raw[toc + 16 * i : toc + 16 * i + 16])
        if unpacked != expected or at + packed > len(raw):
            raise SceneError(
                f"{path}: .spz stream {i} at byte {at}: {packed} bytes packed, {unpacked} unpacked; expected "
                f"{expected} unpacked within the file's {len(raw)} bytes"
            )
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(raw[at : at + packed])
            data = reader.read(expected)
        except zstandard.ZstdError as exc:
            raise SceneError(f"{path}: .spz stream {i} at byte {at} is damaged ({exc})") from None
        if len(data) != expected:
            raise SceneError(f"{path}: .spz stream {i} at byte {at}: {len(data)} bytes, its table says {expected}")
        streams.append(data)
        at += packed
    return streams


def _decode_spz(path: Path, header: dict, streams: list[bytes]) -> Gaussians:
    n = header["points"]
    p = np.frombuffer(streams[0], np.uint8).reshape(n, 3, 3).astype(np.int32)
    fixed = p[..., 0] | (p[..., 1] << 8) | (p[..., 2] << 16)
    fixed = np.where(fixed & 0x800000, fixed - (1 << 24), fixed)
    positions = fixed.astype(np.float64) / (1 << header["fractional"])
    opacity = np.frombuffer(streams[1], np.uint8) / 255.0
    colours = np.frombuffer(streams[2], np.uint8).reshape(n, 3) / 255.0
    log_scales = np.frombuffer(streams[3], np.uint8).reshape(n, 3) / 16.0 - 10.0
    if header["version"] == 2:
        xyz = np.frombuffer(streams[4], np.uint8).reshape(n, 3) / 127.5 - 1.0
        w = np.sqrt(np.maximum(0.0, 1.0 - (xyz**2).sum(axis=1)))
        rotations = np.column_stack([w, xyz])
    else:
        rotations = _smallest_three(np.frombuffer(streams[4], "<u4"))
    rest = 3 * ((header["degree"] + 1) ** 2 - 1)
    sh = np.zeros((n, rest // 3 + 1, 3), np.float32)
    sh[:, 0] = (colours - 0.5) / SPZ_COLOUR_SCALE
    if rest:
        sh[:, 1:] = (np.frombuffer(streams[5], np.uint8).reshape(n, rest // 3, 3) - 128.0) / 128.0
    values = (positions, log_scales)
    for name, value in zip(("position", "scale"), values):
        if not np.isfinite(value).all():
            raise SceneError(f"{path}: .spz {name}s are not finite")
    return Gaussians(
        positions.astype(np.float32),
        log_scales.astype(np.float32),
        rotations.astype(np.float32),
        opacity.astype(np.float32),
        sh,
        header["antialiased"],
    )


def _smallest_three(packed: np.ndarray) -> np.ndarray:
    """(N, 4) w x y z of .spz's smallest-three rotations: the largest component's index (x y z w) in
    the top 2 bits, the others from w down to x in 10 bits each (9 of magnitude over 1/sqrt(2), a sign)."""
    packed = packed.astype(np.uint32)
    largest = packed >> 30
    q = np.zeros((len(packed), 4))  # x y z w
    rest = packed.copy()
    total = np.zeros(len(packed))
    for j in (3, 2, 1, 0):
        here = largest != j
        magnitude = (rest & 0x1FF) / 511.0 * np.sqrt(0.5)
        value = np.where((rest >> 9) & 1, -magnitude, magnitude)
        q[here, j] = value[here]
        total += np.where(here, value * value, 0.0)
        rest = np.where(here, rest >> 10, rest)
    q[np.arange(len(packed)), largest] = np.sqrt(np.maximum(0.0, 1.0 - total))
    return q[:, [3, 0, 1, 2]]
