"""The world: mesh assets imported into metres/ENU and batched for the renderer.

Contract:
    * ``load_asset(path, units=, up=)`` imports one mesh file (OBJ+MTL, glTF/GLB, PLY, STL) as
      ``MeshPart``s in metres with +Z up; bad files raise ``SceneError`` naming the file and problem.
    * ``load_scene_spec(path)`` reads a scene TOML (or wraps a single mesh path).
    * ``load_static_scene(path)`` imports and merges everything into one ``StaticScene``: a
      triangle soup with per-face segmentation and material ids, per-corner UVs and colours,
      and a texture table. It never touches a device; ``goggles.render`` uploads it.
    * ``ActorShape`` is a rigid mesh that moves (gates, vehicles, obstacles), kept in its own frame.
"""

from goggles.scene.actors import ActorShape, box_shape
from goggles.scene.assets import Material, MeshPart, load_asset, part_from_trimesh
from goggles.scene.batch import StaticScene, batch_scene, load_static_scene, merge_parts, stack_appearance
from goggles.scene.scene_file import AssetSpec, SceneSpec, load_scene_spec

__all__ = [
    "ActorShape",
    "box_shape",
    "stack_appearance",
    "AssetSpec",
    "Material",
    "MeshPart",
    "SceneSpec",
    "StaticScene",
    "batch_scene",
    "load_asset",
    "load_scene_spec",
    "load_static_scene",
    "merge_parts",
    "part_from_trimesh",
]
