"""What viewers (Foxglove) draw of an actor: its mesh, with the appearance it renders with, and where
it is. Gates, props, people and vehicles all come as meshes; the static scene is
``DeviceScene.static``."""

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
    """(4, 4) its pose in ``frame``."""
    vertices: np.ndarray | None = None
    """(V, 3) the mesh's vertices now, for a shape that deforms (a skinned person), else None."""
    frame: str = "world"
    """The frame it is placed in: the world, or a frame that moves on the viewer's transforms (a
    vehicle's camera), which it then follows between updates."""
