"""Static batching: every static mesh of a scene merged into one triangle soup with a texture table.

The renderer traces one BVH over all static triangles (as FlightGoggles batches its static meshes);
per-face material and segmentation ids and per-corner UVs and colours keep each asset's appearance.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.checks import FLOAT32_MAX
from goggles.errors import SceneError
from goggles.runtime.progress import busy
from goggles.scene.assets import UNITS_M, UP_AXES, Material, MeshPart, load_asset
from goggles.scene.scene_file import SceneSpec, load_scene_spec
from goggles.scene.splats import SplatCloud, merge_splats, read_splat_file

log = logging.getLogger(__name__)


@dataclass
class StaticScene:
    """All static geometry of a scene in world coordinates, ready to upload to a device.

    Every array is host memory; ``goggles.render`` uploads them once.
    """

    name: str
    vertices: np.ndarray
    """(V, 3) float32 world positions, metres, ENU."""
    faces: np.ndarray
    """(F, 3) int32 vertex indices."""
    corner_uv: np.ndarray
    """(F, 3, 2) float32 texture coordinates per corner (zeros for untextured faces)."""
    corner_rgb: np.ndarray
    """(F, 3, 3) float32 vertex colour per corner in [0, 1] (ones where the asset has none)."""
    face_material: np.ndarray
    """(F,) int32 index into the material arrays."""
    face_segment: np.ndarray
    """(F,) int32 segmentation class id (>= 1)."""
    material_rgb: np.ndarray
    """(M, 3) float32 base colour per material in [0, 1]."""
    material_texture: np.ndarray
    """(M,) int32 index into ``textures``, or -1 for none."""
    textures: list[np.ndarray]
    """Texture table: (h, w, 3) uint8 RGB images, row 0 at the top."""
    view: np.ndarray | None = None
    """(4, 4) default body pose T_WB for a first look, from the scene file, or None."""
    splats: SplatCloud | None = None
    """The scene's Gaussian splats in the world (``[[splat]]`` tables), or None."""
    meshes: bool = True
    """False: no mesh of its own (a scene of captures keeps one triangle far below the world, which
    the tracers need and nobody should frame)."""

    @property
    def num_faces(self) -> int:
        return len(self.faces)

    def bounds(self) -> np.ndarray:
        """(2, 3) float64 axis-aligned bounds of all vertices, metres."""
        return np.stack([self.vertices.min(axis=0), self.vertices.max(axis=0)]).astype(np.float64)

    def content_bounds(self) -> np.ndarray:
        """(2, 3) float64 bounds of what there is to see: its meshes and the bulk of its captures'
        Gaussians (the 1st to 99th percentile on each axis: a capture's stray floaters would frame a
        speck)."""
        boxes = [self.bounds()] if self.meshes else []
        if self.splats is not None:
            boxes.append(np.percentile(self.splats.positions, [1.0, 99.0], axis=0).astype(np.float64))
        if not boxes:
            return self.bounds()
        return np.stack([np.min([b[0] for b in boxes], axis=0), np.max([b[1] for b in boxes], axis=0)])


def load_static_scene(path: str | Path, *, units: str | None = None, up: str | None = None) -> StaticScene:
    """Read a scene file (or a single mesh or capture path, in ``units`` with ``up`` its up axis when
    given), import its assets and batch them.

    Raises:
        SceneError: naming the file and the problem.
    """
    return batch_scene(load_scene_spec(path, units=units, up=up))


def batch_scene(spec: SceneSpec) -> StaticScene:
    """Import every asset of ``spec`` (logging progress) and merge them into one StaticScene."""
    placed: list[tuple[MeshPart, np.ndarray, int]] = []
    imported: dict[tuple[Path, str, str], list[MeshPart]] = {}  # a file placed many times is read once
    for i, asset in enumerate(spec.assets):
        start = time.perf_counter()
        key = (Path(asset.path).resolve(), asset.units, asset.up)
        if key not in imported:
            with busy(f"importing {asset.name} ({i + 1} of {len(spec.assets)} assets): {asset.path}"):
                imported[key] = load_asset(asset.path, units=asset.units, up=asset.up)
        parts = imported[key]
        T = asset.T_WA.copy()
        T[:3, :3] *= asset.scale
        reach = _reach(parts, T)
        if not reach < FLOAT32_MAX:  # the renderer's float32 would make it infinite
            raise SceneError(
                f"{spec.source}: asset {asset.name!r} placed reaches {reach:.3g} m, beyond float32's range; "
                "check its scale and units"
            )
        placed.extend((part, T, asset.segmentation) for part in parts)
        faces = sum(len(p.faces) for p in parts)
        log.info(
            "imported asset %d/%d %s: %d parts, %d triangles (%.2f s)",
            i + 1,
            len(spec.assets),
            asset.name,
            len(parts),
            faces,
            time.perf_counter() - start,
        )
    if not placed:  # a scene of splats alone: the tracers need a mesh, so one triangle far below the world
        far = np.array([[0.0, 0.0, -1e5], [1.0, 0.0, -1e5], [0.0, 1.0, -1e5]], np.float32)
        nothing = MeshPart(
            "nothing", far, np.array([[0, 1, 2]]), None, None, Material("nothing", (0.0, 0.0, 0.0), None)
        )
        placed.append((nothing, np.eye(4), 1))
    scene = merge_parts(spec.name, placed)
    scene.view = spec.view
    scene.meshes = bool(spec.assets)
    scene.splats = merge_splats([_placed_splat(spec, i, splat) for i, splat in enumerate(spec.splats)])
    return scene


def place_splats(scene: StaticScene, splats, source) -> StaticScene:
    """``scene`` with more Gaussian splats (``AssetSpec``s, as ``[[splat]]`` tables give them) placed in it."""
    spec = SceneSpec(scene.name, source, (), splats=tuple(splats))
    added = [_placed_splat(spec, i, splat) for i, splat in enumerate(spec.splats)]
    clouds = ([scene.splats] if scene.splats is not None else []) + added
    return dataclasses.replace(scene, splats=merge_splats(clouds))


def _placed_splat(spec: SceneSpec, index: int, splat) -> SplatCloud:
    """A ``[[splat]]``'s Gaussians in the world: the file's units and up axis, its scale and pose."""
    with busy(f"reading splat {splat.name} ({index + 1} of {len(spec.splats)}): {splat.path}"):
        placed = place_splat(splat, spec.source)
    log.info("read splat %s: %d Gaussians, SH degree %d", splat.name, len(placed), placed.degree)
    return placed


def place_splat(splat, source) -> SplatCloud:
    """The Gaussians of ``splat`` (an ``AssetSpec``: a scene's ``[[splat]]``, or a splat prop in its own
    frame) read and placed: the file's units and up axis, its scale, pose, class and filter."""
    cloud = read_splat_file(splat.path)
    T = splat.T_WA.copy()
    T[:3, :3] = T[:3, :3] @ UP_AXES[splat.up]
    placed = cloud.placed(T, splat.scale * UNITS_M[splat.units], splat.segmentation).filtered(splat.filter)
    reach = float(np.abs(placed.positions).max())
    if not reach < FLOAT32_MAX / 2:
        raise SceneError(f"{source}: splat {splat.name!r} placed reaches {reach:.3g} m; check its scale and units")
    return placed


def _reach(parts: list[MeshPart], T: np.ndarray) -> float:
    """The largest |coordinate| the parts' bounding boxes reach once placed by ``T`` (metres)."""
    reach = 0.0
    for part in parts:
        low, high = part.vertices.min(axis=0), part.vertices.max(axis=0)
        corners = np.array([[x, y, z] for x in (low[0], high[0]) for y in (low[1], high[1]) for z in (low[2], high[2])])
        reach = max(reach, float(np.abs(corners @ T[:3, :3].T + T[:3, 3]).max()))
    return reach


#: The longest triangle edge traced as it is, m: the renderers intersect in float32, whose rounding at
#: a triangle's scale (1e-7 of it) is 1 mm at 10 km, and whose products overflow past about 1e19 (a
#: ground plane of +-1e20 m vanished on every backend).
LONGEST_EDGE = 1.0e4


def clip_huge_triangles(vertices, faces, corner_uv, corner_rgb, name: str):
    """Triangles with an edge longer than ``LONGEST_EDGE`` cut to the box of +-``LONGEST_EDGE`` about the
    origin (each piece a fan of new triangles, texture coordinates and colours interpolated): a
    ground plane of any size is the same plane where anything can see it."""
    corners = vertices[faces]  # (F, 3, 3) float64
    edges = np.linalg.norm(corners - np.roll(corners, 1, axis=1), axis=2).max(axis=1)
    huge = ~(edges <= LONGEST_EDGE)
    if not huge.any():
        return vertices, faces, corner_uv, corner_rgb
    new_vertices, new_faces, new_uv, new_rgb = [], [], [], []
    for f in np.flatnonzero(huge):
        positions, polygon = _clip_to_box(corners[f], LONGEST_EDGE)
        for k in range(1, len(polygon) - 1):
            fan = [0, k, k + 1]
            weights = polygon[fan]  # (3 corners, 3 weights)
            start = len(vertices) + len(new_vertices) * 3
            new_vertices.append(positions[fan])
            new_faces.append([start, start + 1, start + 2])
            new_uv.append(weights @ corner_uv[f])
            new_rgb.append(weights @ corner_rgb[f])
    log.info(
        "%s: %d triangles longer than %g m cut to %d within +-%g m",
        name,
        huge.sum(),
        LONGEST_EDGE,
        len(new_faces),
        LONGEST_EDGE,
    )
    keep = ~huge
    vertices = np.concatenate([vertices, *new_vertices]) if new_vertices else vertices
    faces = np.concatenate([faces[keep], np.asarray(new_faces, faces.dtype).reshape(-1, 3)])
    used, faces = np.unique(faces, return_inverse=True)  # the huge corners go with their triangles
    vertices, faces = vertices[used], faces.reshape(-1, 3).astype(np.int64)
    corner_uv = np.concatenate([corner_uv[keep], np.asarray(new_uv, np.float32).reshape(-1, 3, 2)])
    corner_rgb = np.concatenate([corner_rgb[keep], np.asarray(new_rgb, np.float32).reshape(-1, 3, 3)])
    return vertices, faces, corner_uv, corner_rgb


def _clip_to_box(corners: np.ndarray, half: float) -> tuple[np.ndarray, np.ndarray]:
    """Sutherland-Hodgman in exact arithmetic: the triangle ``corners`` (3, 3) clipped to |x|, |y|, |z|
    <= ``half``: its vertices (k, 3) and their barycentric weights (k, 3). Exact, because the pieces lie a
    hundred-millionth of the triangle's size from its corners: float64 would place a cut of a 1e20 m
    plane's diagonal 1e4 m astray, and the two halves of a ground quad would not meet."""
    from fractions import Fraction

    points = [[Fraction(float(c)) for c in corner] for corner in corners]
    bound = Fraction(half)
    polygon = [(Fraction(1), Fraction(0), Fraction(0)), (Fraction(0), Fraction(1), Fraction(0))]
    polygon.append((Fraction(0), Fraction(0), Fraction(1)))

    def coordinate(weights, axis):
        return sum(w * p[axis] for w, p in zip(weights, points))

    for axis in range(3):
        for sign in (1, -1):
            inside = []
            for k, a in enumerate(polygon):
                b = polygon[(k + 1) % len(polygon)]
                da, db = bound - sign * coordinate(a, axis), bound - sign * coordinate(b, axis)
                if da >= 0:
                    inside.append(a)
                if (da >= 0) != (db >= 0):
                    t = da / (da - db)
                    inside.append(tuple(x + (y - x) * t for x, y in zip(a, b)))
            polygon = inside
            if len(polygon) < 3:
                return np.zeros((0, 3)), np.zeros((0, 3))
    positions = np.array([[float(coordinate(weights, axis)) for axis in range(3)] for weights in polygon])
    return positions, np.array([[float(w) for w in weights] for weights in polygon])


def merge_parts(name: str, placed: list[tuple[MeshPart, np.ndarray, int]]) -> StaticScene:
    """Merge mesh parts, each with a (4, 4) world transform and a segmentation id, into one scene.

    Identical texture images (the same array object) are stored once in the texture table.
    """
    vertices, faces, corner_uv, corner_rgb, face_material, face_segment = [], [], [], [], [], []
    material_rgb, material_texture, textures = [], [], []
    texture_index: dict[int, int] = {}
    offset = 0
    for material_id, (part, T, segment) in enumerate(placed):
        n_faces = len(part.faces)
        placed_vertices = part.vertices.astype(np.float64) @ T[:3, :3].T + T[:3, 3]
        part_faces = part.faces if np.linalg.det(T[:3, :3]) > 0 else part.faces[:, ::-1]
        uv = part.corner_uv if part.corner_uv is not None else np.zeros((n_faces, 3, 2), np.float32)
        rgb = part.corner_rgb if part.corner_rgb is not None else np.ones((n_faces, 3, 3), np.float32)
        placed_vertices, part_faces, uv, rgb = clip_huge_triangles(placed_vertices, part_faces, uv, rgb, part.name)
        n_faces = len(part_faces)
        vertices.append(placed_vertices)
        faces.append(part_faces + offset)
        offset += len(placed_vertices)
        corner_uv.append(uv)
        corner_rgb.append(rgb)
        face_material.append(np.full(n_faces, material_id, np.int32))
        face_segment.append(np.full(n_faces, segment, np.int32))
        material_rgb.append(part.material.base_rgb)
        texture = part.material.texture
        if texture is None:
            material_texture.append(-1)
        else:
            key = id(texture)
            if key not in texture_index:
                texture_index[key] = len(textures)
                textures.append(texture)
            material_texture.append(texture_index[key])
    return StaticScene(
        name=name,
        vertices=np.concatenate(vertices).astype(np.float32),
        faces=np.concatenate(faces).astype(np.int32),
        corner_uv=np.concatenate(corner_uv).astype(np.float32),
        corner_rgb=np.concatenate(corner_rgb).astype(np.float32),
        face_material=np.concatenate(face_material),
        face_segment=np.concatenate(face_segment),
        material_rgb=np.asarray(material_rgb, np.float32).reshape(-1, 3),
        material_texture=np.asarray(material_texture, np.int32),
        textures=textures,
    )


def stack_appearance(scenes: list[StaticScene]) -> tuple[StaticScene, np.ndarray]:
    """One appearance table over the faces of several scenes, in order (static scene, then shapes).

    Material and texture indices are shifted so each face keeps its appearance.

    Returns:
        The stacked scene (its vertices and faces are concatenated too, for completeness) and the
        (len(scenes),) int64 index of each scene's first face in the stack.
    """
    first_face = np.cumsum([0] + [s.num_faces for s in scenes[:-1]])
    material_offset = np.cumsum([0] + [len(s.material_rgb) for s in scenes[:-1]])
    texture_offset = np.cumsum([0] + [len(s.textures) for s in scenes[:-1]])
    vertex_offset = np.cumsum([0] + [len(s.vertices) for s in scenes[:-1]])
    stacked = StaticScene(
        name="+".join(s.name for s in scenes),
        vertices=np.concatenate([s.vertices for s in scenes]),
        faces=np.concatenate([s.faces + o for s, o in zip(scenes, vertex_offset)]).astype(np.int32),
        corner_uv=np.concatenate([s.corner_uv for s in scenes]),
        corner_rgb=np.concatenate([s.corner_rgb for s in scenes]),
        face_material=np.concatenate([s.face_material + o for s, o in zip(scenes, material_offset)]).astype(np.int32),
        face_segment=np.concatenate([s.face_segment for s in scenes]),
        material_rgb=np.concatenate([s.material_rgb for s in scenes]),
        material_texture=np.concatenate(
            [np.where(s.material_texture >= 0, s.material_texture + o, -1) for s, o in zip(scenes, texture_offset)]
        ).astype(np.int32),
        textures=[t for s in scenes for t in s.textures],
        view=scenes[0].view,
    )
    return stacked, first_face
