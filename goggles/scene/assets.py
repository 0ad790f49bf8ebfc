"""Import one mesh asset (OBJ+MTL, glTF/GLB, PLY, STL) into metres, Z-up, with its appearance.

Units and up-axis are declared, never guessed: a scene file names them per asset; a bare mesh path
uses the format's own definition where it has one (glTF: metres, +Y up) and metres, +Z up otherwise.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.checks import FLOAT32_MAX
from goggles.errors import SceneError
from goggles.runtime.signals import signals_held

log = logging.getLogger(__name__)

#: Length of one declared unit in metres.
UNITS_M = {"m": 1.0, "dm": 0.1, "cm": 0.01, "mm": 0.001, "km": 1000.0, "in": 0.0254, "ft": 0.3048}

#: Rotation taking an asset whose up axis is the key to goggles' +Z up (x kept where possible).
UP_AXES = {
    "+z": np.eye(3),
    "-z": np.diag([1.0, -1.0, -1.0]),
    "+y": np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]),
    "-y": np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]),
    "+x": np.array([[0.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]),
    "-x": np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]]),
}

MESH_SUFFIXES = (".obj", ".gltf", ".glb", ".ply", ".stl")


@dataclass(frozen=True)
class Material:
    """Surface appearance: albedo = base_rgb x texture (if any) x vertex colour."""

    name: str
    base_rgb: tuple[float, float, float]
    """Base colour, linear [0, 1] per channel."""
    texture: np.ndarray | None
    """(h, w, 3) uint8 RGB image, row 0 at the top (v = 1), or None."""


@dataclass
class MeshPart:
    """One triangle mesh with a single material, in the asset frame (metres, Z up)."""

    name: str
    vertices: np.ndarray
    """(V, 3) float64 positions, metres."""
    faces: np.ndarray
    """(F, 3) int64 vertex indices, counter-clockwise seen from the front."""
    corner_uv: np.ndarray | None
    """(F, 3, 2) float32 texture coordinates per face corner (v = 0 at the image bottom), or None."""
    corner_rgb: np.ndarray | None
    """(F, 3, 3) float32 vertex colours per face corner in [0, 1], or None."""
    material: Material


def default_frame(path: Path) -> tuple[str, str]:
    """Units and up-axis of a bare mesh path: glTF's own definition, else metres and +Z up."""
    if path.suffix.lower() in (".gltf", ".glb"):
        return "m", "+y"
    return "m", "+z"


@signals_held()
def load_asset(path: str | Path, *, units: str, up: str) -> list[MeshPart]:
    """Load a mesh file into parts in metres with +Z up.

    Args:
        path: an .obj (with its .mtl and textures), .gltf, .glb, .ply or .stl file.
        units: the length unit of the file's coordinates, a key of ``UNITS_M``.
        up: the file's up axis, a key of ``UP_AXES`` (e.g. ``"+y"`` for glTF).

    Returns:
        The file's triangle meshes, one per (node, geometry), node transforms applied.

    Raises:
        SceneError: naming the file and the problem (missing file or texture, unreadable data,
            no faces, non-finite vertices, unknown units or up axis).
    """
    import trimesh

    path = Path(path)
    if not isinstance(units, str) or units not in UNITS_M:
        raise SceneError(f"{path}: units {units!r} unknown; use one of {sorted(UNITS_M)}")
    if not isinstance(up, str) or up not in UP_AXES:
        raise SceneError(f"{path}: up axis {up!r} unknown; use one of {sorted(UP_AXES)}")
    if not path.is_file():
        raise SceneError(f"{path}: mesh file not found")
    if path.suffix.lower() not in MESH_SUFFIXES:
        raise SceneError(f"{path}: unsupported mesh format {path.suffix!r}; use one of {MESH_SUFFIXES}")
    if path.stat().st_size == 0:
        raise SceneError(f"{path}: is empty (0 bytes): an export or a copy that did not finish?")
    if path.suffix.lower() == ".obj":
        _check_obj_textures(path)

    try:
        scene = trimesh.load(str(path), force="scene", process=False)
    except Exception as exc:  # trimesh raises many types for malformed files
        raise SceneError(f"{path}: cannot be read as {path.suffix} mesh: {exc}") from exc

    to_goggles = np.eye(4)
    to_goggles[:3, :3] = UP_AXES[up] * UNITS_M[units]
    parts = []
    decoded: dict[int, np.ndarray] = {}  # one array per image object, so the texture table dedupes
    for node in scene.graph.nodes_geometry:
        T_node, geometry_name = scene.graph[node]
        mesh = scene.geometry[geometry_name]
        if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
            continue
        parts.append(_mesh_part(path, f"{node}", mesh, to_goggles @ T_node, decoded))
    if not parts:
        raise SceneError(f"{path}: has no triangle faces (point clouds and line sets cannot be rendered)")
    return parts


def part_from_trimesh(mesh, name: str = "mesh", T: np.ndarray | None = None) -> MeshPart:
    """A MeshPart from an in-memory ``trimesh.Trimesh`` already in metres and +Z up.

    Args:
        mesh: the mesh, with texture, vertex-colour or no visuals.
        name: names the part in error messages.
        T: optional (4, 4) transform applied to the vertices.
    """
    return _mesh_part(Path(f"<{name}>"), name, mesh, np.eye(4) if T is None else T, {})


def _check_obj_textures(path: Path) -> None:
    """Raise if an OBJ's material library or a texture it names is missing (trimesh only warns)."""
    text = path.read_text(errors="replace")
    for mtl_name in re.findall(r"^\s*mtllib\s+(.+?)\s*$", text, flags=re.MULTILINE):
        mtl_path = path.parent / mtl_name
        if not mtl_path.is_file():
            raise SceneError(f"{path}: material library {mtl_name!r} not found next to it")
        mtl_text = mtl_path.read_text(errors="replace")
        for texture in re.findall(r"^\s*map_Kd\s+(?:-\S+\s+\S+\s+)*(.+?)\s*$", mtl_text, flags=re.MULTILINE):
            if not (mtl_path.parent / texture).is_file():
                raise SceneError(f"{mtl_path}: texture {texture!r} (map_Kd) not found next to it")


def _mesh_part(path: Path, name: str, mesh, T: np.ndarray, decoded: dict[int, np.ndarray]) -> MeshPart:
    """Convert one trimesh geometry, validating it, with transform ``T`` applied."""
    vertices = np.asarray(mesh.vertices, dtype=np.float64)
    faces = np.asarray(mesh.faces, dtype=np.int64)
    bad = ~np.isfinite(vertices).all(axis=1)
    if bad.any():
        raise SceneError(f"{path}: geometry {name!r} has {int(bad.sum())} non-finite (NaN or inf) vertices")
    if faces.min() < 0 or faces.max() >= len(vertices):
        raise SceneError(f"{path}: geometry {name!r} has face indices outside its {len(vertices)} vertices")
    vertices = vertices @ T[:3, :3].T + T[:3, 3]
    reach = float(np.abs(vertices).max(initial=0.0))
    if not reach < FLOAT32_MAX:  # the renderer's float32 would make them inf
        raise SceneError(f"{path}: geometry {name!r} reaches {reach:.3g} m, beyond float32's range; check its units")
    if np.linalg.det(T[:3, :3]) < 0.0:  # a mirroring transform flips winding; keep fronts outward
        faces = faces[:, ::-1]

    visual = mesh.visual
    corner_uv = None
    corner_rgb = None
    material = Material(name=name, base_rgb=(0.7, 0.7, 0.7), texture=None)
    if visual.kind == "texture":
        material = _material(path, name, visual.material, decoded)
        uv = getattr(visual, "uv", None)
        if material.texture is not None and uv is not None and len(uv) == len(mesh.vertices):
            corner_uv = np.asarray(uv, dtype=np.float32)[faces]
        elif material.texture is not None:
            log.warning("%s: geometry %r has a texture but no UVs; rendering its base colour", path, name)
            material = Material(name=material.name, base_rgb=material.base_rgb, texture=None)
    elif visual.kind in ("vertex", "face"):
        material = Material(name=name, base_rgb=(1.0, 1.0, 1.0), texture=None)  # the colours are the albedo
    if visual.kind == "vertex":
        corner_rgb = (np.asarray(visual.vertex_colors, dtype=np.float32)[:, :3] / 255.0)[faces]
    elif visual.kind == "face":
        rgb = np.asarray(visual.face_colors, dtype=np.float32)[:, :3] / 255.0
        corner_rgb = np.repeat(rgb[:, None, :], 3, axis=1)
    return MeshPart(name, vertices, faces, corner_uv, corner_rgb, material)


def _material(path: Path, name: str, material, decoded: dict[int, np.ndarray]) -> Material:
    """Base colour and texture of a trimesh SimpleMaterial (OBJ) or PBRMaterial (glTF)."""
    image = getattr(material, "baseColorTexture", None)
    factor = getattr(material, "baseColorFactor", None)
    if image is None:
        image = getattr(material, "image", None)
        factor = None  # OBJ: map_Kd replaces Kd, as most viewers render it
        if image is None and getattr(material, "diffuse", None) is not None:
            factor = material.diffuse
    base = (1.0, 1.0, 1.0) if factor is None else tuple(float(c) / 255.0 for c in np.asarray(factor)[:3])
    texture = None
    if image is not None and id(image) in decoded:
        texture = decoded[id(image)]
    elif image is not None:
        try:
            texture = decoded[id(image)] = np.asarray(image.convert("RGB"), dtype=np.uint8)
        except Exception as exc:
            raise SceneError(f"{path}: texture of geometry {name!r} cannot be decoded: {exc}") from exc
    return Material(name=getattr(material, "name", None) or name, base_rgb=base, texture=texture)
