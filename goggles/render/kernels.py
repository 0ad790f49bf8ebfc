"""The camera kernels: one launch traces every pixel of a batch of same-size cameras (``render_kernel``,
built per set of features); a second marks the stereo occlusion shadow from the partner camera's depth.

This module is compiled for the CPU with ``-menable-no-nans`` (``goggles.runtime.kernel_options``:
about 1.8x faster BVH traversal, measured): nothing here may create, test for or rely on NaN. Every pixel gets a status
code; the render writes +inf (nothing within max_depth) and -inf (closer than min_depth) itself, and
``goggles.render.invalid``, compiled apart with IEEE semantics, writes the stereo shadow's NaN.
"""

import functools

import warp as wp

from goggles.render.projection import inside_image, lens_coefficients, project
from goggles.render.shading import (
    SHADING_LIDAR,
    SHADING_UNLIT,
    Lighting,
    albedo,
    looked_albedo,
    looked_shade,
    looked_sky,
    shade,
    sky_colour,
)
from goggles.render.sunlit import SHADOW_GRAZING, SHADOW_START_M, SHADOW_START_PER_M, whole_face_lit
from goggles.runtime.kernel_options import TRACING
from goggles.world.appearance import SceneData
from goggles.world.queries import (
    ActorData,
    Hit,
    any_actor_hit,
    any_listed_actor_hit,
    closer_actor_hit,
    closer_instance_hit,
    inverse_direction,
    static_hit,
)
from goggles.world.ray_bvh import bvh_any_hit, bvh_closest_hit
from goggles.world.wide_bvh import wide_any_hit, wide_closest_hit

wp.set_module_options(TRACING)

#: Where the render kernel's closest static hit comes from: Warp's BVH (``mesh_query_ray``), goggles'
#: own (``goggles.world.ray_bvh``), the same in wide nodes (``goggles.world.wide_bvh``), or rows another
#: tracer filled (``TracedRows``: Embree).
TRACERS = ("warp", "bvh", "wide", "rows")

#: Pixel status codes (the validity mask of a rendered image).
STATUS_HIT = wp.constant(0)
STATUS_NO_HIT = wp.constant(1)
"""Nothing within max_depth: depth and range read +inf."""
STATUS_TOO_CLOSE = wp.constant(2)
"""A surface closer than min_depth: depth and range read -inf."""
STATUS_SHADOW = wp.constant(3)
"""Stereo occlusion shadow (the partner camera cannot see the point): depth and range read NaN."""
STATUS_OUTSIDE_LENS = wp.constant(4)
"""A pixel no ray of the lens reaches (outside a fisheye's circle): depth and range read NaN, colour black."""

#: A point is hidden from the partner camera when the partner sees a surface closer than the point
#: by more than this fraction of the point's depth, plus SHADOW_TOLERANCE_M, at every one of the
#: 2x2 pixels around the point's projection (so sampling at pixel resolution never invents a shadow).
SHADOW_TOLERANCE = wp.constant(0.01)
SHADOW_TOLERANCE_M = wp.constant(0.01)


#: How far a shadow ray looks for what hides the sun, metres (beyond any scene).
SUN_DISTANCE = wp.constant(1.0e5)

#: Segmentation id of pixels that hit nothing.
SEGMENT_NONE = wp.constant(0)
#: Face id of pixels that hit nothing.
FACE_NONE = wp.constant(-1)


@wp.struct
class CameraBatch:
    """Cameras rendered together, all of one size."""

    rays_C: wp.array3d(dtype=wp.vec3)
    """(m, H, W) unit ray directions, optical frame: one table per distinct camera model."""
    ray_table: wp.array(dtype=wp.int32)
    """(n,) which of the ``rays_C`` tables each camera uses (a batch of one model keeps one table)."""
    R_WC: wp.array2d(dtype=wp.mat33)
    """(n, H) orientation of each camera when each row was exposed (all rows alike: a global shutter)."""
    p_WC: wp.array2d(dtype=wp.vec3)
    """(n, H) position of each camera when each row was exposed."""
    partner: wp.array(dtype=wp.int32)
    """Camera that must also see a point for this camera's depth of it to be valid (stereo), or -1."""
    intrinsics: wp.array(dtype=wp.vec4)
    """fx, fy, cx, cy (pixels)."""
    lens: wp.array(dtype=wp.int32)
    """The lens model (``goggles.render.projection``)."""
    coefficients: wp.array(dtype=lens_coefficients)
    """The lens's coefficients and bound (``CameraModel.kernel_coefficients``)."""
    min_depth: wp.array(dtype=float)
    max_depth: wp.array(dtype=float)
    radial: wp.array(dtype=wp.int32)
    """1: limits and depth along the ray (a LiDAR's range), 0: along the optical axis (a camera's depth)."""


@wp.struct
class ImageBuffers:
    """Per-pixel outputs, each (n, H, W[, 3])."""

    status: wp.array3d(dtype=wp.int8)
    depth: wp.array3d(dtype=float)
    range: wp.array3d(dtype=float)
    rgb: wp.array4d(dtype=wp.uint8)
    segmentation: wp.array3d(dtype=wp.int32)
    normal_W: wp.array3d(dtype=wp.vec3)
    face: wp.array3d(dtype=wp.int32)


@wp.struct
class OutputFlags:
    """Which optional outputs a render writes (status and depth always; rgb when shading is not NONE)."""

    range: bool
    segmentation: bool
    normal: bool
    face: bool


@wp.struct
class ActorCulling:
    """Per camera, the actor instances whose boxes may be in its view (the rest cost nothing per pixel)."""

    count: wp.array(dtype=wp.int32)
    """(n,) how many."""
    index: wp.array2d(dtype=wp.int32)
    """(n, max_actors) which: indices into ``ActorData``."""
    tile_count: wp.array3d(dtype=wp.int32)
    """(n, H / ACTOR_TILE, W / ACTOR_TILE) how many of those may be seen by the rays of each tile of
    ACTOR_TILE x ACTOR_TILE pixels (listed in ``tile_index``); -1: the camera's whole list applies
    (more than ``TILE_ACTORS``, or a view the host does not bound: a radial sensor's, a rolling
    shutter's, one posed on the device)."""
    tile_index: wp.array4d(dtype=wp.int32)
    """(n, H / ACTOR_TILE, W / ACTOR_TILE, TILE_ACTORS) which: indices into ``ActorData``."""
    shadow_casters: wp.array(dtype=wp.int32)
    """(n,) the actors that may shade what camera c sees: -1, every placed instance (the list is a
    view's); k >= 0, the first k of its list, which is its whole world (a learning environment's own
    actors: the others' are in other worlds)."""


#: Side of the square pixel tiles that keep their own short lists of actors, and the most a list holds.
ACTOR_TILE = wp.constant(16)
TILE_ACTORS = 8


@wp.func
def closer_actor_hit_in_view(
    actors: ActorData, culling: ActorCulling, c: int, y: int, x: int, origin: wp.vec3, direction: wp.vec3, hit: Hit
) -> Hit:
    """``hit``, replaced by the nearest surface in front of it of the actors camera ``c`` may see at
    pixel (y, x): its tile's list, or the camera's."""
    ty = y // ACTOR_TILE
    tx = x // ACTOR_TILE
    count = culling.tile_count[c, ty, tx]
    if count < 0:
        return closer_actor_hit(actors, culling.index[c], culling.count[c], -1, origin, direction, hit)
    inverse = inverse_direction(direction)
    for j in range(count):
        hit = closer_instance_hit(actors, culling.tile_index[c, ty, tx, j], origin, direction, inverse, hit)
    return hit


@wp.struct
class TracedRows:
    """Closest static-scene hits of a chunk (rows of cameras) found by another tracer (Embree).

    ``t`` is (n, H, W), the whole batch: ``make_rays_kernel`` writes each ray's reach there and the
    tracer lowers it to the hit distance. The others are (cameras, rows, W) of the chunk, the tracer's
    own arrays, or one placeholder element when ``has_face`` is False (only depth was asked for: the
    tracer then reports distances only, and a ray hit something where its distance fell below its reach).
    """

    used: bool
    """False: Warp traces the static scene in the render kernel, and nothing here is read."""
    t: wp.array3d(dtype=float)
    has_face: bool
    face: wp.array3d(dtype=wp.int32)
    """Index of the static triangle hit, -1 where nothing was hit."""
    has_surface: bool
    """The tracer also gave the hit's distance, barycentrics and normal (``u``, ``v``, ``normal_W``;
    a texture needs them). False with ``has_face``: the tracer gave the triangle only (a cheaper query),
    and the distance and normal come from its plane here."""
    planes: wp.array(dtype=wp.vec4)
    """Each static face's plane, for a triangle-only hit (``DeviceScene.static_planes``)."""
    u: wp.array3d(dtype=float)
    """Embree's barycentrics: the hit point is (1 - u - v) p0 + u p1 + v p2."""
    v: wp.array3d(dtype=float)
    normal_W: wp.array3d(dtype=wp.vec3)
    """Geometric normal (not unit, any side)."""
    sun_start: wp.array3d(dtype=wp.vec3)
    """With the sun's shadows, the static shadow rays are the tracer's too, after this kernel: it
    leaves each pixel's ray here (its start, ``sun_direction``, and ``sun_reach``, which the caller set
    to 0, no ray, for every pixel) with the pixel's colour written lit, and in ``dark`` as it reads
    where the ray is blocked (the caller copies it there: ``EmbreeTracer.occluded``)."""
    sun_direction: wp.array3d(dtype=wp.vec3)
    sun_reach: wp.array3d(dtype=float)
    dark: wp.array4d(dtype=wp.uint8)


#: On CUDA a warp's 32 threads take an 8 x 4 tile of pixels instead of 32 pixels of one row, so that
#: their rays leave side by side and walk the same BVH nodes (measured on an H100 with a bare BVH
#: query: +12 %). Each band of TILE_ROWS rows is cut into tiles TILE_COLUMNS wide; the image's last
#: band may have fewer rows.
TILE_COLUMNS = wp.constant(8)
TILE_ROWS = wp.constant(4)


@wp.func
def tile_pixel(index: int, width: int, height: int) -> wp.vec2i:
    """Pixel (x, y) of a camera's ``index``-th thread in tile order (``width`` a multiple of TILE_COLUMNS)."""
    band_pixels = width * TILE_ROWS
    band = index // band_pixels
    top = band * TILE_ROWS
    tile_pixels = TILE_COLUMNS * wp.min(TILE_ROWS, height - top)
    within_band = index - band * band_pixels
    tile = within_band // tile_pixels
    within_tile = within_band - tile * tile_pixels
    return wp.vec2i(tile * TILE_COLUMNS + within_tile % TILE_COLUMNS, top + within_tile // TILE_COLUMNS)


@wp.func
def to_byte(value: float) -> wp.uint8:
    return wp.uint8(wp.clamp(value * 255.0 + 0.5, 0.0, 255.0))


@wp.func
def write_hit(
    out: ImageBuffers,
    wanted: OutputFlags,
    min_depth: float,
    c: int,
    y: int,
    x: int,
    t: float,
    along: float,
    segment: int,
    face: int,
):
    """A pixel's hit ``t`` along its ray (``along``: the ray's z, 1 where depth is the range): its status
    and depth (REP 118: -inf closer than ``min_depth``), range, class and face, as asked."""
    depth = t * along
    distance = t
    status = STATUS_HIT
    if depth < min_depth:
        status = STATUS_TOO_CLOSE
        depth = -wp.inf
        distance = -wp.inf
    out.status[c, y, x] = wp.int8(status)
    out.depth[c, y, x] = depth
    if wanted.range:
        out.range[c, y, x] = distance
    if wanted.segmentation:
        out.segmentation[c, y, x] = segment
    if wanted.face:
        out.face[c, y, x] = face


@wp.func
def traced_hit(
    traced: TracedRows, c: int, y: int, i: int, k: int, x: int, origin: wp.vec3, direction: wp.vec3, reach: float
) -> Hit:
    """The static hit another tracer found for pixel (y, x) of camera c: row k of camera i of its chunk."""
    hit = Hit()
    hit.t = traced.t[c, y, x]
    hit.face = -1
    if traced.has_face:
        hit.face = traced.face[i, k, x]
        hit.result = hit.face >= 0
        if hit.result:
            if traced.has_surface:
                u = traced.u[i, k, x]
                v = traced.v[i, k, x]
                hit.u = 1.0 - u - v  # to Warp's order: u p0 + v p1 + (1 - u - v) p2
                hit.v = u
                hit.normal_W = traced.normal_W[i, k, x]
            else:  # the triangle only: where the ray meets its plane
                plane = traced.planes[hit.face]
                normal = wp.vec3(plane[0], plane[1], plane[2])
                hit.t = (plane[3] - wp.dot(origin, normal)) / wp.dot(direction, normal)
                hit.normal_W = normal
                hit.u = 1.0 / 3.0  # not asked for: the centre
                hit.v = 1.0 / 3.0
    else:
        hit.result = hit.t < reach
    if not hit.result:
        hit.t = reach
    return hit


@functools.cache
def render_kernel(
    tracer: str, use_actors: bool, use_shading: bool, use_shadows: bool, use_looks: bool = False
) -> wp.Kernel:
    """The render kernel with only the features a render uses compiled in, built (in its own Warp
    module) on first use: where the closest static hit comes from (``tracer``, one of ``TRACERS``:
    Warp's BVH, goggles' own, or another tracer's rows), actors, shaded colour, the sun's shadows,
    a look per camera (``goggles.render.looks``).
    Measured on an H100, the kernel with every feature held 164 registers and rendered depth at a third
    of the rate of a bare BVH query (1.06 against 3.0 Grays/s on 1M triangles); specialised and held to
    64 registers, 2.3. Which optional outputs are written stays a run-time choice (``OutputFlags``):
    each costs only its store.
    """
    if tracer not in TRACERS:
        raise ValueError(f"tracer {tracer!r}: use one of {', '.join(TRACERS)}")
    use_shadows = use_shadows and use_shading
    use_looks = use_looks and use_shading

    # 64 registers per thread on CUDA (measured on an H100, 1M triangles, 8 x 640x480): depth
    # 1.27 -> 1.04 ms and every output 1.54 -> 1.13 ms against the compiler's own choice (96, 105).
    @wp.kernel(module="unique", enable_backward=False, module_options=TRACING, cuda_max_registers=64)
    def render_cameras_kernel(
        scene: SceneData,
        actors: ActorData,
        cameras: CameraBatch,
        light: Lighting,
        wanted: OutputFlags,
        culling: ActorCulling,
        traced: TracedRows,
        tiled: bool,
        first_camera: int,
        row_stride: int,
        row_offset: int,
        span: int,
        out: ImageBuffers,
    ):
        """Every output of ``span`` pixels of camera ``first_camera + i``, row ``row_offset + k * row_stride``;
        or, ``tiled`` (a thread per pixel over whole cameras), pixel ``tile_pixel(k * width + block)``.

        The closest static hit comes from a BVH traversed here (Warp's or goggles' own), or from another
        tracer (``rows``: Embree, one chunk of rows of one or more cameras per launch); the actors in the camera's
        view are always found here (Warp BVHs, ``culling``), and every output is written by the code
        below whoever traced. On the CPU a thread takes a whole row (``span`` = width): Warp copies the struct
        arguments into every thread, which would cost more per pixel than writing a depth image. On
        CUDA ``span`` is 1 and the pixels are tiled (``TILE_COLUMNS``).
        """
        i, k, block = wp.tid()
        c = first_camera + i
        y = row_offset + k * row_stride
        first_column = block * span
        if tiled:
            width = cameras.rays_C.shape[2]
            pixel = tile_pixel(k * width + block, width, cameras.rays_C.shape[1])
            first_column = pixel[0]
            y = pixel[1]
        radial = cameras.radial[c] != 0
        table = cameras.ray_table[c]
        origin = cameras.p_WC[c, y]
        R = cameras.R_WC[c, y]
        max_depth = cameras.max_depth[c]
        for column in range(span):
            x = first_column + column
            ray_C = cameras.rays_C[table, y, x]
            if ray_C[0] == 0.0 and ray_C[1] == 0.0 and ray_C[2] == 0.0:  # outside the lens: no ray
                out.status[c, y, x] = wp.int8(STATUS_OUTSIDE_LENS)
                out.depth[c, y, x] = wp.inf  # NaN, written by ``invalid``
                if wanted.segmentation:
                    out.segmentation[c, y, x] = SEGMENT_NONE
                if wanted.face:
                    out.face[c, y, x] = FACE_NONE
                if wanted.normal:
                    out.normal_W[c, y, x] = wp.vec3(0.0)
                if wp.static(use_shading):
                    out.rgb[c, y, x, 0] = wp.uint8(0)
                    out.rgb[c, y, x, 1] = wp.uint8(0)
                    out.rgb[c, y, x, 2] = wp.uint8(0)
                continue
            direction = R * ray_C
            along = ray_C[2]  # depth per metre of ray: the optical axis component, or 1 for a radial sensor
            if radial:
                along = 1.0
            reach = max_depth / along
            if wp.static(tracer == "rows"):
                hit = traced_hit(traced, c, y, i, k, x, origin, direction, reach)
            elif wp.static(tracer == "bvh"):
                hit = bvh_closest_hit(scene.rays, origin, direction, reach)
            elif wp.static(tracer == "wide"):
                hit = wide_closest_hit(scene.wide, origin, direction, reach)
            else:
                hit = static_hit(scene.mesh, origin, direction, reach)
            if wp.static(use_actors):
                if culling.count[c] > 0:
                    hit = closer_actor_hit_in_view(actors, culling, c, y, x, origin, direction, hit)

            if not hit.result:
                out.status[c, y, x] = wp.int8(STATUS_NO_HIT)
                out.depth[c, y, x] = wp.inf
                if wanted.range:
                    out.range[c, y, x] = wp.inf
                if wanted.segmentation:
                    out.segmentation[c, y, x] = SEGMENT_NONE
                if wanted.face:
                    out.face[c, y, x] = FACE_NONE
                if wanted.normal:
                    out.normal_W[c, y, x] = wp.vec3(0.0)
                if wp.static(use_shading):
                    if wp.static(use_looks):
                        sky = looked_sky(light, c, direction)
                    else:
                        sky = sky_colour(light, direction)
                    out.rgb[c, y, x, 0] = to_byte(sky[0])
                    out.rgb[c, y, x, 1] = to_byte(sky[1])
                    out.rgb[c, y, x, 2] = to_byte(sky[2])
                continue

            write_hit(out, wanted, cameras.min_depth[c], c, y, x, hit.t, along, scene.face_segment[hit.face], hit.face)
            if wanted.normal or wp.static(use_shading):
                normal = wp.normalize(hit.normal_W)
                if wp.dot(normal, direction) > 0.0:
                    normal = -normal
                if wanted.normal:
                    out.normal_W[c, y, x] = normal
                if wp.static(use_shading):
                    if light.shading == SHADING_LIDAR:  # the sensor is the light: cos of the incidence
                        colour = wp.vec3(scene.face_reflectivity[hit.face] * wp.dot(normal, -direction))
                    else:
                        sun = light.sun_W
                        lit_faces = light.static_faces
                        first_lit = int(0)  # noqa: UP018 (Warp: a variable the branch below may change)
                        if wp.static(use_looks):
                            looked = light.look_sun[c]
                            sun = wp.vec3(looked[0], looked[1], looked[2])
                            sun_table = light.look_table[c]
                            if sun_table < 0:  # no table of faces lit whole for this camera's sun
                                lit_faces = 0
                            else:
                                first_lit = sun_table * light.static_faces
                            point = origin + direction * hit.t
                            colour = looked_albedo(scene, light, c, hit.face, hit.u, hit.v, point, normal)
                        else:
                            colour = albedo(scene, hit.face, hit.u, hit.v)
                        sunlit = float(1.0)  # noqa: UP018 (Warp: a variable the branch below may change)
                        if wp.static(use_shadows):
                            if light.shading != SHADING_UNLIT and wp.dot(normal, sun) > 0.0:
                                # One ray towards the sun, from just off the surface along the sun's line
                                # (``sunlit``); against the actors only on a face no static geometry shades.
                                incidence = wp.max(wp.dot(normal, sun), SHADOW_GRAZING)
                                lift = (SHADOW_START_M + SHADOW_START_PER_M * hit.t) / incidence
                                start = origin + direction * hit.t + sun * lift
                                whole = False
                                if hit.face < lit_faces:
                                    whole = whole_face_lit(light.sunlit[first_lit + hit.face], hit.t)
                                blocked = False
                                deferred = False
                                if not whole:
                                    if wp.static(tracer == "rows"):  # the tracer's, after this kernel
                                        deferred = True
                                    elif wp.static(tracer == "bvh"):
                                        blocked = bvh_any_hit(scene.rays, start, sun, SUN_DISTANCE)
                                    elif wp.static(tracer == "wide"):
                                        blocked = wide_any_hit(scene.wide, start, sun, SUN_DISTANCE)
                                    else:
                                        blocked = wp.mesh_query_ray_anyhit(scene.mesh, start, sun, SUN_DISTANCE)
                                if wp.static(use_actors):
                                    if not blocked:
                                        casters = culling.shadow_casters[c]
                                        if casters < 0:
                                            blocked = any_actor_hit(actors, start, sun, SUN_DISTANCE)
                                        else:
                                            blocked = any_listed_actor_hit(
                                                actors, culling.index[c], casters, start, sun, SUN_DISTANCE
                                            )
                                if blocked:
                                    sunlit = 0.0
                                elif wp.static(tracer == "rows"):
                                    if deferred:
                                        traced.sun_start[i, k, x] = start
                                        traced.sun_direction[i, k, x] = sun
                                        traced.sun_reach[i, k, x] = SUN_DISTANCE
                                        if wp.static(use_looks):
                                            dark = looked_shade(light, c, colour, normal, 0.0)
                                        else:
                                            dark = shade(light, colour, normal, 0.0)
                                        traced.dark[i, k, x, 0] = to_byte(dark[0])
                                        traced.dark[i, k, x, 1] = to_byte(dark[1])
                                        traced.dark[i, k, x, 2] = to_byte(dark[2])
                        if wp.static(use_looks):
                            colour = looked_shade(light, c, colour, normal, sunlit)
                        else:
                            colour = shade(light, colour, normal, sunlit)
                    out.rgb[c, y, x, 0] = to_byte(colour[0])
                    out.rgb[c, y, x, 1] = to_byte(colour[1])
                    out.rgb[c, y, x, 2] = to_byte(colour[2])

    return render_cameras_kernel


@wp.kernel
def make_rays_kernel(
    cameras: CameraBatch,
    first_camera: int,
    first_row: int,
    rows: int,
    direction: wp.array3d(dtype=wp.vec3),
    reach: wp.array3d(dtype=float),
    per_ray_origin: bool,
    origin: wp.array(dtype=wp.vec3),
):
    """World-frame ray directions and reaches of rows ``first_row + k`` (``rows`` of them) of cameras
    ``first_camera + i``, for another tracer on the CPU (computed as ``render_kernel`` computes them),
    and where one origin per camera will not do (``per_ray_origin``: rows with poses of their own, a
    rolling shutter or a LiDAR's sweep, or a chunk of several cameras) each ray's origin, in the
    chunk's order from ``origin[0]``; a thread per row."""
    i, k = wp.tid()
    c = first_camera + i
    y = first_row + k
    R = cameras.R_WC[c, y]
    p = cameras.p_WC[c, y]
    max_depth = cameras.max_depth[c]
    radial = cameras.radial[c] != 0
    table = cameras.ray_table[c]
    for x in range(direction.shape[2]):
        ray_C = cameras.rays_C[table, y, x]
        direction[c, y, x] = R * ray_C
        if per_ray_origin:
            origin[(i * rows + k) * direction.shape[2] + x] = p
        if radial:
            reach[c, y, x] = max_depth
        elif ray_C[2] > 0.0:
            reach[c, y, x] = max_depth / ray_C[2]
        else:  # outside the lens: no ray, nothing to trace
            reach[c, y, x] = 0.0


@wp.func
def partner_depth(status: wp.array3d(dtype=wp.int8), depth: wp.array3d(dtype=float), partner: int, x: int, y: int):
    """The partner's depth at a pixel; a pixel that hit nothing sees infinitely far."""
    if int(status[partner, y, x]) == STATUS_NO_HIT:
        return 1.0e30
    return depth[partner, y, x]


@wp.kernel
def mark_stereo_shadow_kernel(cameras: CameraBatch, row_stride: int, row_offset: int, span: int, out: ImageBuffers):
    """Invalidate a camera's pixel when its partner cannot see the point: it projects outside the
    partner's image or behind it, or the partner sees something closer there (occlusion shadow).
    ``span`` pixels of a row per thread, as in ``render_kernel``."""
    c, k, block = wp.tid()
    y = row_offset + k * row_stride
    partner = cameras.partner[c]
    if partner < 0:
        return
    status = out.status
    depth = out.depth
    width = status.shape[2]
    height = status.shape[1]
    table = cameras.ray_table[c]
    radial = cameras.radial[c] != 0
    partner_radial = cameras.radial[partner] != 0
    for column in range(span):
        x = block * span + column
        if int(status[c, y, x]) != STATUS_HIT:
            continue
        ray_C = cameras.rays_C[table, y, x]
        metres = depth[c, y, x]  # along the ray: a range, or a z-depth over the ray's axis component
        if not radial:
            metres = metres / ray_C[2]
        p_W = cameras.p_WC[c, y] + cameras.R_WC[c, y] * (ray_C * metres)
        p_P = wp.transpose(cameras.R_WC[partner, y]) * (p_W - cameras.p_WC[partner, y])  # the partner's same row
        seen_at = p_P[2]  # what the partner's depth would read there
        if partner_radial:
            seen_at = wp.length(p_P)
        visible = False
        uv = project(p_P, cameras.intrinsics[partner], cameras.lens[partner], cameras.coefficients[partner])
        if seen_at > 0.0:
            if inside_image(uv, width, height):
                u0 = wp.max(int(wp.floor(uv[0])), 0)
                v0 = wp.max(int(wp.floor(uv[1])), 0)
                u1 = wp.min(u0 + 1, width - 1)
                v1 = wp.min(v0 + 1, height - 1)
                d00 = partner_depth(status, depth, partner, u0, v0)
                d10 = partner_depth(status, depth, partner, u1, v0)
                d01 = partner_depth(status, depth, partner, u0, v1)
                d11 = partner_depth(status, depth, partner, u1, v1)
                farthest = wp.max(wp.max(d00, d10), wp.max(d01, d11))
                visible = farthest >= seen_at * (1.0 - SHADOW_TOLERANCE) - SHADOW_TOLERANCE_M
        if not visible:
            status[c, y, x] = wp.int8(STATUS_SHADOW)


@wp.kernel
def accumulate_rgb_kernel(
    row_stride: int, row_offset: int, span: int, rgb: wp.array4d(dtype=wp.uint8), total: wp.array3d(dtype=wp.vec3)
):
    """Add a sub-frame's colour to the exposure's running sum (rows as ``Renderer.launch_rows`` gives)."""
    c, k, block = wp.tid()
    y = row_offset + k * row_stride
    for column in range(span):
        x = block * span + column
        total[c, y, x] = total[c, y, x] + wp.vec3(
            float(rgb[c, y, x, 0]), float(rgb[c, y, x, 1]), float(rgb[c, y, x, 2])
        )


@wp.kernel
def average_rgb_kernel(
    count: float,
    row_stride: int,
    row_offset: int,
    span: int,
    total: wp.array3d(dtype=wp.vec3),
    rgb: wp.array4d(dtype=wp.uint8),
):
    """The exposure's colour: the mean of its sub-frames."""
    c, k, block = wp.tid()
    y = row_offset + k * row_stride
    for column in range(span):
        x = block * span + column
        mean = total[c, y, x] / count
        rgb[c, y, x, 0] = wp.uint8(wp.clamp(mean[0] + 0.5, 0.0, 255.0))
        rgb[c, y, x, 1] = wp.uint8(wp.clamp(mean[1] + 0.5, 0.0, 255.0))
        rgb[c, y, x, 2] = wp.uint8(wp.clamp(mean[2] + 0.5, 0.0, 255.0))
