"""What viewers (Foxglove) draw of an actor: its mesh, with the appearance it renders with, and where
it is. Gates, props and people all come as meshes; the static scene is ``DeviceScene.static``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from goggles.scene.batch import StaticScene


@dataclass(frozen=True, eq=False)
class ViewedActor:
    name: str
    mesh: StaticScene
    """Its shape's merged mesh and appearance, in its own frame (the same object while the shape lives)."""
    T_WA: np.ndarray
    """(4, 4) its pose in the world."""
    vertices: np.ndarray | None = None
    """(V, 3) the mesh's vertices now, for a shape that deforms (a skinned person), else None."""
