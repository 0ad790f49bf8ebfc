"""Surface appearance at a hit: barycentric attributes, bilinear texture lookup, simple lighting."""

from enum import IntEnum

import warp as wp

from goggles.render.looks import TEXTURE_METRES as _TEXTURE_METRES
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.world.appearance import SceneData

wp.set_module_options(FORWARD_ONLY)


class Shading(IntEnum):
    """How the intensity image is lit."""

    UNLIT = 0
    """Albedo only: texture x base colour x vertex colour."""
    SUN = 1
    """Albedo x (ambient + (1 - ambient) x max(0, n . sun)), the sun a directional light (0 in its
    shadow, when the renderer casts shadows)."""
    NONE = 2
    """No intensity image (depth-only cameras): the colour buffer is left untouched, and faster."""
    LIDAR = 3
    """A LiDAR's return, grey: the face's mean albedo (``SceneData.face_reflectivity``) x the cosine of
    the incidence (the sensor is its own light)."""


SHADING_UNLIT = wp.constant(int(Shading.UNLIT))
SHADING_NONE = wp.constant(int(Shading.NONE))
SHADING_LIDAR = wp.constant(int(Shading.LIDAR))
TEXTURE_METRES = wp.constant(float(_TEXTURE_METRES))


@wp.struct
class Lighting:
    shading: wp.int32
    """A ``Shading`` value."""
    sun_W: wp.vec3
    """Unit vector towards the sun, world frame."""
    ambient: float
    background: wp.vec3
    """Colour of pixels that hit nothing, [0, 1]; with a sky, its colour at the horizon."""
    shadows: bool
    """Cast a ray to the sun from every lit point: shadowed points get the ambient light only."""
    sky: bool
    """Pixels that hit nothing show a gradient from ``background`` (horizon) to ``zenith``."""
    zenith: wp.vec3
    sunlit: wp.array(dtype=wp.int8)
    """(static faces,) per sun (the scene's first, then looks' suns: ``look_table``), how far no static
    geometry shades the face (``goggles.render.sunlit`` levels; 0: trace): a hit within its level traces
    its shadow ray against the actors only. One 0 when shadows are off."""
    static_faces: int
    """Faces ``sunlit`` covers (the static scene's; 0 when shadows are off)."""
    look_sun: wp.array(dtype=wp.vec4)
    """Per camera (``goggles.render.looks``; read only by a render kernel built with looks): its
    sun's unit direction and intensity."""
    look_ambient: wp.array(dtype=float)
    look_horizon: wp.array(dtype=wp.vec3)
    """Per camera: the sky's colour at the horizon (the background's without a sky)."""
    look_zenith: wp.array(dtype=wp.vec3)
    look_exposure: wp.array(dtype=float)
    look_table: wp.array(dtype=wp.int32)
    """Per camera: which of the tables stacked in ``sunlit`` is its sun's, or -1 for none."""
    look_albedo: wp.array2d(dtype=wp.vec3)
    """(cameras, materials) factor on each material's albedo."""
    look_texture: wp.array2d(dtype=wp.int32)
    """(cameras, materials) texture swapped in for the material, or -1."""


@wp.func
def corner_mix_vec3(values: wp.array(dtype=wp.vec3), face: int, u: float, v: float) -> wp.vec3:
    """Barycentric mix of a per-corner attribute; Warp's hit point is u*p0 + v*p1 + (1-u-v)*p2."""
    i = face * 3
    return values[i] * u + values[i + 1] * v + values[i + 2] * (1.0 - u - v)


@wp.func
def corner_mix_vec2(values: wp.array(dtype=wp.vec2), face: int, u: float, v: float) -> wp.vec2:
    i = face * 3
    return values[i] * u + values[i + 1] * v + values[i + 2] * (1.0 - u - v)


@wp.func
def texel(scene: SceneData, texture: int, width: int, x: int, y: int) -> wp.vec3:
    """RGB in [0, 1] of texel (x, y), which must lie inside the texture."""
    i = (scene.texture_offset[texture] + y * width + x) * 3
    return wp.vec3(float(scene.texels[i]), float(scene.texels[i + 1]), float(scene.texels[i + 2])) / 255.0


@wp.func
def wrap_pair(coordinate: float, size: int) -> wp.vec3:
    """For a texel-space coordinate in [-0.5, size - 0.5): the two texel indices around it, wrapped
    (repeat addressing), and the weight of the second."""
    start = wp.floor(coordinate)
    first = int(start)
    second = first + 1
    if first < 0:
        first += size
    if second >= size:
        second -= size
    return wp.vec3(float(first), float(second), coordinate - start)


@wp.func
def sample_texture(scene: SceneData, texture: int, uv: wp.vec2) -> wp.vec3:
    """Bilinear lookup with repeat addressing; uv (0, 0) is the image's bottom-left corner and texel
    centres sit at half steps. The uv is wrapped once, so no texel index needs a division."""
    size = scene.texture_size[texture]
    u = uv[0] - wp.floor(uv[0])
    v = uv[1] - wp.floor(uv[1])
    xs = wrap_pair(u * float(size[0]) - 0.5, size[0])
    ys = wrap_pair((1.0 - v) * float(size[1]) - 0.5, size[1])
    x0 = int(xs[0])
    x1 = int(xs[1])
    y0 = int(ys[0])
    y1 = int(ys[1])
    w = size[0]
    top = texel(scene, texture, w, x0, y0) * (1.0 - xs[2]) + texel(scene, texture, w, x1, y0) * xs[2]
    bottom = texel(scene, texture, w, x0, y1) * (1.0 - xs[2]) + texel(scene, texture, w, x1, y1) * xs[2]
    return top * (1.0 - ys[2]) + bottom * ys[2]


@wp.func
def albedo(scene: SceneData, face: int, u: float, v: float) -> wp.vec3:
    """Base colour x texture x vertex colour at a hit, [0, 1]."""
    material = scene.face_material[face]
    colour = wp.cw_mul(scene.material_rgb[material], corner_mix_vec3(scene.corner_rgb, face, u, v))
    texture = scene.material_texture[material]
    if texture >= 0:
        colour = wp.cw_mul(colour, sample_texture(scene, texture, corner_mix_vec2(scene.corner_uv, face, u, v)))
    return colour


@wp.func
def box_uv(point_W: wp.vec3, normal_W: wp.vec3) -> wp.vec2:
    """Texture coordinates of a world point for a texture laid across the face's dominant axis,
    ``TEXTURE_METRES`` per image (a swapped texture needs none from the mesh)."""
    ax = wp.abs(normal_W[0])
    ay = wp.abs(normal_W[1])
    az = wp.abs(normal_W[2])
    p = point_W / TEXTURE_METRES
    if az >= ax and az >= ay:
        return wp.vec2(p[0], p[1])
    if ax >= ay:
        return wp.vec2(p[1], p[2])
    return wp.vec2(p[0], p[2])


@wp.func
def looked_albedo(
    scene: SceneData, light: Lighting, c: int, face: int, u: float, v: float, point_W: wp.vec3, normal_W: wp.vec3
) -> wp.vec3:
    """``albedo`` under camera ``c``'s look: its factor on the material, or a texture swapped in."""
    material = scene.face_material[face]
    if material >= light.look_albedo.shape[1]:  # a material added after the looks were set
        return albedo(scene, face, u, v)
    swapped = light.look_texture[c, material]
    colour = wp.vec3(0.0)
    if swapped < 0:
        colour = albedo(scene, face, u, v)
    else:
        colour = wp.cw_mul(
            corner_mix_vec3(scene.corner_rgb, face, u, v), sample_texture(scene, swapped, box_uv(point_W, normal_W))
        )
    return wp.cw_mul(colour, light.look_albedo[c, material])


@wp.func
def looked_shade(light: Lighting, c: int, colour: wp.vec3, normal_W: wp.vec3, sunlit: float) -> wp.vec3:
    """``shade`` under camera ``c``'s look (its sun, intensity and ambient), then its exposure."""
    exposure = light.look_exposure[c]
    if light.shading == SHADING_UNLIT:
        return colour * exposure
    sun = light.look_sun[c]
    ambient = wp.min(light.look_ambient[c], 1.0)
    lambert = wp.max(wp.dot(normal_W, wp.vec3(sun[0], sun[1], sun[2])), 0.0) * sunlit * sun[3]
    return colour * ((ambient + (1.0 - ambient) * lambert) * exposure)


@wp.func
def looked_sky(light: Lighting, c: int, direction_W: wp.vec3) -> wp.vec3:
    """``sky_colour`` under camera ``c``'s look."""
    colour = light.look_horizon[c]
    if light.sky:
        up = wp.clamp(direction_W[2], 0.0, 1.0)
        colour = colour * (1.0 - up) + light.look_zenith[c] * up
    return colour * light.look_exposure[c]


@wp.func
def shade(light: Lighting, colour: wp.vec3, normal_W: wp.vec3, sunlit: float) -> wp.vec3:
    """Lit colour of a surface with camera-facing unit normal ``normal_W``; ``sunlit`` 0 in shadow, else 1."""
    if light.shading == SHADING_UNLIT:
        return colour
    lambert = wp.max(wp.dot(normal_W, light.sun_W), 0.0) * sunlit
    return colour * (light.ambient + (1.0 - light.ambient) * lambert)


@wp.func
def sky_colour(light: Lighting, direction_W: wp.vec3) -> wp.vec3:
    """What a ray that hit nothing sees: the background, or the sky's gradient with elevation."""
    if not light.sky:
        return light.background
    up = wp.clamp(direction_W[2], 0.0, 1.0)
    return light.background * (1.0 - up) + light.zenith * up


@wp.kernel
def face_reflectivity_kernel(scene: SceneData, reflectivity: wp.array(dtype=float)):
    """Each face's mean albedo, grey: the mean of four samples, the centres of the face's four
    midpoint sub-triangles (a LiDAR return's reflectivity: one load per hit instead of a texture's four)."""
    f = wp.tid()
    sixth = 1.0 / 6.0
    third = 1.0 / 3.0
    total = (
        albedo(scene, f, 4.0 * sixth, sixth)
        + albedo(scene, f, sixth, 4.0 * sixth)
        + albedo(scene, f, sixth, sixth)
        + albedo(scene, f, third, third)
    )
    reflectivity[f] = (total[0] + total[1] + total[2]) / 12.0
