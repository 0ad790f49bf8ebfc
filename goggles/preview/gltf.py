"""The world's meshes as binary glTF, for viewers that draw models (Foxglove's ModelPrimitive).

A batched mesh (``StaticScene``: the static scene, or an actor shape's merged parts) becomes one glTF
mesh per material: a textured material keeps its texture (times its base colour), the others carry
base colour x vertex colour per corner, as the renderer shades them. Corners are not shared, since
uv and colour are per corner. Textures go as JPEG, a viewer's copy: the arena's 222 take 2.6 s and
8.8 MB as PNG, 0.2 s and 1.4 MB as JPEG. glTF is Y-up: a point (x, y, z) of goggles' Z-up frames is
written as (x, z, -y), which viewers (Foxglove included) turn back into Z-up.
"""

from __future__ import annotations

import io

import numpy as np

from goggles.runtime.signals import signals_held
from goggles.scene.batch import StaticScene

#: From goggles' Z-up frames to glTF's Y-up: (x, y, z) -> (x, z, -y).
Z_UP_TO_GLTF = np.array([[1, 0, 0], [0, 0, 1], [0, -1, 0]], dtype=np.float32)


@signals_held()
def mesh_glb(scene: StaticScene, vertices: np.ndarray | None = None) -> bytes:
    """``scene`` as a GLB file's bytes; ``vertices`` (V, 3) replace its own (a skinned person's)."""
    import trimesh

    points = np.asarray(scene.vertices if vertices is None else vertices, dtype=np.float32) @ Z_UP_TO_GLTF.T
    model = trimesh.Scene()
    for material in np.unique(scene.face_material):
        faces = np.flatnonzero(scene.face_material == material)
        corners = points[scene.faces[faces]].reshape(-1, 3)
        triangles = np.arange(len(corners)).reshape(-1, 3)
        base = scene.material_rgb[material]
        texture = scene.material_texture[material]
        if texture >= 0:
            visual = trimesh.visual.TextureVisuals(
                uv=scene.corner_uv[faces].reshape(-1, 2),
                material=trimesh.visual.material.PBRMaterial(
                    baseColorFactor=np.append(np.round(base * 255), 255).astype(np.uint8),
                    baseColorTexture=_jpeg(scene.textures[texture]),
                    metallicFactor=0.0,
                ),
            )
        else:
            rgb = np.clip(scene.corner_rgb[faces].reshape(-1, 3) * base, 0.0, 1.0)
            colours = np.column_stack([np.round(rgb * 255), np.full(len(rgb), 255)]).astype(np.uint8)
            visual = trimesh.visual.ColorVisuals(vertex_colors=colours)
        model.add_geometry(
            trimesh.Trimesh(corners, triangles, visual=visual, process=False), geom_name=f"material{material}"
        )
    out = io.BytesIO()
    model.export(out, file_type="glb")
    return out.getvalue()


def _jpeg(pixels: np.ndarray):
    """A PIL image that trimesh writes as JPEG (it keeps an opened JPEG's format, re-encoding it at its
    default quality, 75; the first encoding at 95 adds little to that loss)."""
    from PIL import Image

    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, format="JPEG", quality=95)
    return Image.open(io.BytesIO(encoded.getvalue()))
