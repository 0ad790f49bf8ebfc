"""Ray queries over the whole world, shared by every sensor: the static BVH plus moving actors.

Each actor instance is a shape's BVH (in the shape's frame) placed by a rigid pose. A ray is tested
against an instance's world box first, then transformed into its frame; nothing is rebuilt or refit
when actors move. A linear pass over instances suits tens of actors (a BVH over their boxes is the
step for hundreds).
"""

import numpy as np
import warp as wp

from goggles import checks


class Carriers:
    """The actor instance carrying each of ``count`` sensors (its vehicle's body, which the queries
    from that sensor skip), on the device: (count,) int32, -1 for none. Uploaded only when it changes:
    sensors fire every frame, and what carries them seldom changes."""

    def __init__(self, count: int, device, what: str):
        self.what = what
        self._host = np.full(count, -1, np.int32)
        self.array = wp.array(self._host, dtype=wp.int32, device=device)

    def set(self, carriers) -> wp.array:
        """``carriers`` (``checks.carriers``: None, none carries any) on the device."""
        value = checks.carriers(carriers, len(self._host), self.what)
        if not np.array_equal(value, self._host):
            self.array.assign(value)
            self._host = value
        return self.array


@wp.struct
class ActorData:
    """Actor shapes and placed instances on the device."""

    shape_mesh: wp.array(dtype=wp.uint64)
    """BVH mesh of each shape, in the shape frame."""
    shape_first_face: wp.array(dtype=wp.int32)
    """Index of each shape's first face in the appearance table."""
    count: int
    """Instances placed now (the arrays below may be longer)."""
    every: wp.array(dtype=wp.int32)
    """0, 1, 2, ...: the candidate list of a query that considers every instance."""
    shape: wp.array(dtype=wp.int32)
    R_WA: wp.array(dtype=wp.mat33)
    p_WA: wp.array(dtype=wp.vec3)
    lower: wp.array(dtype=wp.vec3)
    """World-frame bounding box of each instance."""
    upper: wp.array(dtype=wp.vec3)


def no_actors(device) -> ActorData:
    """Actor data with no instances: queries of the static mesh alone."""
    actors = ActorData()
    actors.count = 0
    actors.shape_mesh = wp.zeros(1, dtype=wp.uint64, device=device)
    actors.shape_first_face = wp.zeros(1, dtype=wp.int32, device=device)
    for name, dtype in (
        ("every", wp.int32),
        ("shape", wp.int32),
        ("R_WA", wp.mat33),
        ("p_WA", wp.vec3),
        ("lower", wp.vec3),
        ("upper", wp.vec3),
    ):
        setattr(actors, name, wp.zeros(1, dtype=dtype, device=device))
    return actors


@wp.struct
class Hit:
    result: bool
    t: float
    """Distance along the (unit) ray, metres."""
    face: int
    """Index in the appearance table (static faces first, then each shape's)."""
    u: float
    v: float
    normal_W: wp.vec3
    """Face normal, world frame (not yet turned towards the ray)."""


@wp.func
def safe_inverse(d: float) -> float:
    """1/d, finite for d = 0 (kernels compiled without NaN support must never form 0 * inf)."""
    if wp.abs(d) < 1.0e-12:
        return 1.0e12
    return 1.0 / d


@wp.func
def inverse_direction(direction: wp.vec3) -> wp.vec3:
    """Per-axis 1/d of a ray, once per ray for the box tests of every actor."""
    return wp.vec3(safe_inverse(direction[0]), safe_inverse(direction[1]), safe_inverse(direction[2]))


@wp.func
def ray_hits_box(origin: wp.vec3, inverse: wp.vec3, lower: wp.vec3, upper: wp.vec3, max_t: float) -> bool:
    """Slab test: does the ray (with ``inverse_direction``) enter the box before ``max_t``?"""
    t0 = wp.cw_mul(lower - origin, inverse)
    t1 = wp.cw_mul(upper - origin, inverse)
    near = wp.max(wp.min(t0, t1))
    far = wp.min(wp.max(t0, t1))
    return wp.max(near, 0.0) <= wp.min(far, max_t)


@wp.func
def static_hit(static_mesh: wp.uint64, origin: wp.vec3, direction: wp.vec3, max_t: float) -> Hit:
    """The nearest static surface along a unit ray within ``max_t`` metres (a miss keeps ``t`` = max_t)."""
    hit = Hit()
    hit.result = False
    hit.t = max_t
    hit.face = -1
    query = wp.mesh_query_ray(static_mesh, origin, direction, max_t)
    if query.result:
        hit.result = True
        hit.t = query.t
        hit.face = query.face
        hit.u = query.u
        hit.v = query.v
        hit.normal_W = query.normal
    return hit


@wp.func
def closest_hit(static_mesh: wp.uint64, actors: ActorData, origin: wp.vec3, direction: wp.vec3, max_t: float) -> Hit:
    """The nearest surface along a unit ray within ``max_t`` metres, static or actor."""
    hit = static_hit(static_mesh, origin, direction, max_t)
    if actors.count == 0:  # skips copying the actor tables into the call (costly per CPU pixel)
        return hit
    return closer_actor_hit(actors, actors.every, actors.count, -1, origin, direction, hit)


@wp.func
def closer_instance_hit(
    actors: ActorData, a: int, origin: wp.vec3, direction: wp.vec3, inverse: wp.vec3, hit: Hit
) -> Hit:
    """``hit``, replaced by instance ``a``'s nearest surface in front of it (``inverse``: the ray's
    ``inverse_direction``)."""
    if ray_hits_box(origin, inverse, actors.lower[a], actors.upper[a], hit.t):
        # Into the instance's frame: nothing is rebuilt when it moves.
        R = actors.R_WA[a]
        shape = actors.shape[a]
        R_AW = wp.transpose(R)
        mesh = actors.shape_mesh[shape]
        local = wp.mesh_query_ray(mesh, R_AW * (origin - actors.p_WA[a]), R_AW * direction, hit.t)
        if local.result and local.t < hit.t:
            hit.result = True
            hit.t = local.t
            hit.face = actors.shape_first_face[shape] + local.face
            hit.u = local.u
            hit.v = local.v
            hit.normal_W = R * local.normal
    return hit


@wp.func
def closer_actor_hit(
    actors: ActorData,
    candidates: wp.array(dtype=wp.int32),
    count: int,
    skip: int,
    origin: wp.vec3,
    direction: wp.vec3,
    hit: Hit,
) -> Hit:
    """``hit`` (the static scene's answer, or a miss with ``t`` = the ray's reach), replaced by the
    nearest surface in front of it of the first ``count`` instances listed in ``candidates`` (every
    instance: ``actors.every``; a camera passes the ones in its view) but instance ``skip`` (the body
    of the vehicle that carries the sensor; -1: none)."""
    inverse = inverse_direction(direction)
    for j in range(count):
        a = candidates[j]
        if a != skip:
            hit = closer_instance_hit(actors, a, origin, direction, inverse, hit)
    return hit


@wp.func
def actor_blocks(
    actors: ActorData, a: int, origin: wp.vec3, inverse: wp.vec3, direction: wp.vec3, max_t: float
) -> bool:
    """Does instance ``a``'s surface lie along a unit ray within ``max_t`` metres?"""
    if ray_hits_box(origin, inverse, actors.lower[a], actors.upper[a], max_t):
        R = actors.R_WA[a]
        local_origin = wp.transpose(R) * (origin - actors.p_WA[a])
        return wp.mesh_query_ray_anyhit(
            actors.shape_mesh[actors.shape[a]], local_origin, wp.transpose(R) * direction, max_t
        )
    return False


@wp.func
def any_actor_hit(actors: ActorData, origin: wp.vec3, direction: wp.vec3, max_t: float) -> bool:
    """Is there any actor surface along a unit ray within ``max_t`` metres?"""
    inverse = inverse_direction(direction)
    for a in range(actors.count):
        if actor_blocks(actors, a, origin, inverse, direction, max_t):
            return True
    return False


@wp.func
def any_listed_actor_hit(
    actors: ActorData, listed: wp.array(dtype=wp.int32), count: int, origin: wp.vec3, direction: wp.vec3, max_t: float
) -> bool:
    """Like ``any_actor_hit``, over the first ``count`` instances ``listed`` only (one world's actors,
    where several worlds share the placed instances: a learning batch's environments)."""
    inverse = inverse_direction(direction)
    for j in range(count):
        if actor_blocks(actors, listed[j], origin, inverse, direction, max_t):
            return True
    return False


@wp.struct
class Proximity:
    found: bool
    point_W: wp.vec3
    """Nearest surface point, world frame."""
    distance: float
    inside: bool
    """The query point is behind the nearest face (inside a closed obstacle, or under a terrain)."""
    face_normal_W: wp.vec3
    """The nearest face's outward normal, world frame: the way out where the point lies on the
    surface (there, neither the offset nor the side is defined)."""


@wp.func
def nearest_surface(static_mesh: wp.uint64, actors: ActorData, p: wp.vec3, max_distance: float) -> Proximity:
    """The surface point nearest to ``p`` within ``max_distance`` metres, static or actor."""
    near = Proximity()
    near.found = False
    near.inside = False
    near.distance = max_distance
    query = wp.mesh_query_point_sign_normal(static_mesh, p, max_distance)
    if query.result:
        point = wp.mesh_eval_position(static_mesh, query.face, query.u, query.v)
        near.found = True
        near.point_W = point
        near.distance = wp.length(p - point)
        near.inside = query.sign < 0.0
        near.face_normal_W = wp.mesh_eval_face_normal(static_mesh, query.face)
    reach = wp.vec3(max_distance)
    for a in range(actors.count):
        if wp.min(p - (actors.lower[a] - reach)) >= 0.0 and wp.max(p - (actors.upper[a] + reach)) <= 0.0:
            R = actors.R_WA[a]
            mesh = actors.shape_mesh[actors.shape[a]]
            local = wp.mesh_query_point_sign_normal(mesh, wp.transpose(R) * (p - actors.p_WA[a]), near.distance)
            if local.result:
                point = R * wp.mesh_eval_position(mesh, local.face, local.u, local.v) + actors.p_WA[a]
                distance = wp.length(p - point)
                if distance < near.distance:
                    near.found = True
                    near.point_W = point
                    near.distance = distance
                    near.inside = local.sign < 0.0
                    near.face_normal_W = R * wp.mesh_eval_face_normal(mesh, local.face)
    return near
