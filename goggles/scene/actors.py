"""Actor shapes: rigid meshes that move (vehicles, gates, obstacles), each in its own frame.

A shape is loaded or built once; the renderer keeps one BVH per shape in the shape's frame and
places instances of it with a pose per frame, so moving an actor never rebuilds or refits a BVH.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.errors import SceneError
from goggles.runtime.signals import signals_held
from goggles.scene.assets import MeshPart, part_from_trimesh


@dataclass
class ActorShape:
    """Mesh parts in the shape's own frame (metres, +Z up) and the class id they render with."""

    name: str
    parts: list[MeshPart]
    segmentation: int
    """Class id in the segmentation image (>= 1)."""

    def __post_init__(self) -> None:
        if not self.parts:
            raise SceneError(f"actor shape {self.name!r} has no mesh parts")
        if not 1 <= self.segmentation < 2**31:
            raise SceneError(f"actor shape {self.name!r}: segmentation {self.segmentation} must be >= 1")

    def bounds(self) -> np.ndarray:
        """(2, 3) axis-aligned bounds in the shape frame, metres."""
        vertices = np.concatenate([p.vertices for p in self.parts])
        return np.stack([vertices.min(axis=0), vertices.max(axis=0)])


@signals_held()
def box_shape(name: str, extents, rgb=(0.8, 0.8, 0.8), segmentation: int = 1) -> ActorShape:
    """A box centred on its origin, of ``extents`` (x, y, z) metres and one colour."""
    import trimesh

    box = paint(trimesh.creation.box(extents=extents), rgb)
    return ActorShape(name, [part_from_trimesh(box, name)], segmentation)


def paint(mesh, rgb):
    """``mesh`` (a ``trimesh.Trimesh``) with every vertex coloured ``rgb`` in [0, 1], opaque; returned."""
    mesh.visual.vertex_colors = np.tile([*(np.asarray(rgb) * 255).astype(int), 255], (len(mesh.vertices), 1))
    return mesh


@dataclass(frozen=True)
class PropSpec:
    """An object a run may spawn while it runs (a run file's ``[[prop]]``): a box of one colour, or a
    mesh file, in its own frame (a spawn's pose places that frame)."""

    name: str
    segmentation: int
    """Class id in segmentation images (>= 1)."""
    box: tuple[float, float, float] | None = None
    """Extents (x, y, z), metres, of a box centred on the prop's origin; None: a mesh."""
    rgb: tuple[float, float, float] = (0.8, 0.8, 0.8)
    """The box's colour, [0, 1]."""
    mesh: Path | None = None
    """A mesh file (OBJ, glTF/GLB, PLY, STL)."""
    units: str = "m"
    up: str = "+z"
    tracked: tuple[str, ...] = ()
    """Motion-capture bodies that are instances of it: ``pose/<body>`` places an actor of that name."""
    splat: Path | None = None
    """A captured object (a Gaussian splat file: .ply, .splat, .spz) instead of a box or a mesh."""
    filter: str = "3dgs"
    """A splat's screen-space filter (``goggles.scene.splats.FILTERS``)."""
    instances: int = 1
    """A splat's: how many of it may be placed at once (its Gaussians are kept on the device per instance)."""

    def splat_cloud(self):
        """A splat prop's Gaussians in its own frame (the file's units and up axis), of its class."""
        from goggles.scene.batch import place_splat
        from goggles.scene.scene_file import AssetSpec

        asset = AssetSpec(self.name, self.splat, self.units, self.up, np.eye(4), 1.0, self.segmentation, self.filter)
        return place_splat(asset, self.splat)

    def shape(self) -> ActorShape:
        """Its actor shape (a mesh file is read here: ``SceneError`` names it)."""
        if self.box is not None:
            return box_shape(self.name, self.box, rgb=self.rgb, segmentation=self.segmentation)
        from goggles.scene.assets import load_asset

        return ActorShape(self.name, load_asset(self.mesh, units=self.units, up=self.up), self.segmentation)
