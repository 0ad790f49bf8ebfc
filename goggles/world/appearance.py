"""The world's appearance on the device: per-face and per-corner attributes and one texture table
over the static scene and every actor shape, read by whatever shades a hit."""

import warp as wp

from goggles.world.ray_bvh import RayBvh
from goggles.world.wide_bvh import WideBvh


@wp.struct
class SceneData:
    """Static scene on a device: BVH mesh and per-face / per-corner appearance."""

    mesh: wp.uint64
    rays: RayBvh
    """goggles' own BVH of the same mesh (the renderer's ``bvh`` backend); empty until one asks for it
    (``DeviceScene.ray_bvh``)."""
    wide: WideBvh
    """The same tree in wide nodes (the renderer's ``wide`` backend); empty until one asks for it
    (``DeviceScene.wide_bvh``)."""
    corner_uv: wp.array(dtype=wp.vec2)
    """(3F,) texture coordinates per face corner."""
    corner_rgb: wp.array(dtype=wp.vec3)
    """(3F,) vertex colour per face corner, [0, 1]."""
    face_material: wp.array(dtype=wp.int32)
    face_segment: wp.array(dtype=wp.int32)
    material_rgb: wp.array(dtype=wp.vec3)
    material_texture: wp.array(dtype=wp.int32)
    """Texture index per material, or -1."""
    texels: wp.array(dtype=wp.uint8)
    """All textures' RGB bytes, row-major, top row first."""
    texture_offset: wp.array(dtype=wp.int32)
    """First texel (pixel) index of each texture in ``texels``."""
    texture_size: wp.array(dtype=wp.vec2i)
    """(width, height) of each texture."""
    face_reflectivity: wp.array(dtype=float)
    """(F,) each face's mean albedo, grey, [0, 1]: what a LiDAR's return reads (its beam's footprint,
    3 cm at 10 m for an OS1, covers many texels). Filled by the first LiDAR render after the appearance
    changes (``goggles.render.shading.face_reflectivity_kernel``); empty until then."""
