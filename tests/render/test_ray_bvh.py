"""goggles' own BVH (``goggles.world.ray_bvh``) and its 8-wide compressed collapse
(``goggles.world.wide_bvh``): each tree holds every triangle once inside its boxes (the wide one's as
float32 decodes its bytes), stays within its traversal's stack, and its closest hits equal Embree's (an
independent tracer), closed forms (a grid's plane hit through its shared vertices and edges: no
cracks), and Warp's ``mesh_query_ray`` (face, distance, barycentrics, normal), on the CPU and on CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from goggles.bench.measure import bench_views
from goggles.frames import camera_pose_from_body
from goggles.paths import default_scene
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.render.embree import EmbreeTracer, embree_available
from goggles.scene import box_shape, load_static_scene
from goggles.scene.terrain import terrain_scene
from goggles.world.queries import static_hit
from goggles.world.ray_bvh import LEAF_SIZE, STACK_DEPTH, RayBvh, build_ray_bvh, bvh_closest_hit, upload
from goggles.world.wide_bvh import WIDE_STACK, WideBvh, build_wide_bvh, upload_wide, wide_closest_hit

wp.config.quiet = True


@wp.kernel(enable_backward=False)
def trace_wide_kernel(
    bvh: WideBvh,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    reach: float,
    t: wp.array(dtype=float),
    face: wp.array(dtype=wp.int32),
    uv: wp.array(dtype=wp.vec2),
    normal: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    hit = wide_closest_hit(bvh, origins[i], directions[i], reach)
    t[i] = wp.where(hit.result, hit.t, -1.0)
    face[i] = hit.face
    uv[i] = wp.vec2(hit.u, hit.v)
    normal[i] = hit.normal_W


@wp.kernel(enable_backward=False)
def trace_kernel(
    bvh: RayBvh,
    mesh: wp.uint64,
    use_bvh: bool,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    reach: float,
    t: wp.array(dtype=float),
    face: wp.array(dtype=wp.int32),
    uv: wp.array(dtype=wp.vec2),
    normal: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    if use_bvh:
        hit = bvh_closest_hit(bvh, origins[i], directions[i], reach)
    else:
        hit = static_hit(mesh, origins[i], directions[i], reach)
    t[i] = wp.where(hit.result, hit.t, -1.0)
    face[i] = hit.face
    uv[i] = wp.vec2(hit.u, hit.v)
    normal[i] = hit.normal_W


def trace(vertices, faces, origins, directions, device="cpu", reach=1.0e4, tree=None, warp=False, layout="binary"):
    """Closest hits of rays through goggles' BVH (``layout`` binary or wide; or Warp's, ``warp``): t (-1:
    none), face, uv, normal."""
    n = len(origins)
    tree = tree or build_ray_bvh(vertices, faces)
    bvh = upload(tree, device)
    mesh = wp.Mesh(
        points=wp.array(np.asarray(vertices, np.float32), dtype=wp.vec3, device=device),
        indices=wp.array(np.asarray(faces, np.int32).ravel(), dtype=wp.int32, device=device),
    )
    out = [
        wp.zeros(n, dtype=float, device=device),
        wp.zeros(n, dtype=wp.int32, device=device),
        wp.zeros(n, dtype=wp.vec2, device=device),
        wp.zeros(n, dtype=wp.vec3, device=device),
    ]
    inputs = [wp.array(np.asarray(a, np.float32), dtype=wp.vec3, device=device) for a in (origins, directions)]
    if layout == "wide":
        wide = upload_wide(build_wide_bvh(tree), device)
        wp.launch(trace_wide_kernel, n, [wide, *inputs, reach, *out], device=device)
    else:
        wp.launch(trace_kernel, n, [bvh, mesh.id, not warp, *inputs, reach, *out], device=device)
    return [a.numpy() for a in out]


LAYOUTS = ["binary", "wide"]


def check_tree(tree, vertices, faces, leaf_size=LEAF_SIZE):
    """Every face once, in leaves of at most leaf_size, inside the boxes that lead to it; depth in the stack."""
    assert sorted(tree.faces.tolist()) == list(range(len(faces)))
    np.testing.assert_array_equal(tree.triangles, np.asarray(vertices, np.float32)[faces[tree.faces]])
    assert tree.depth <= STACK_DEPTH
    boxes = [  # per inner node: child 0's lower and upper corners, child 1's
        (
            np.array([tree.boxes[i, 0, 0], tree.boxes[i, 0, 2], tree.boxes[i, 2, 0]]),
            np.array([tree.boxes[i, 0, 1], tree.boxes[i, 0, 3], tree.boxes[i, 2, 1]]),
            np.array([tree.boxes[i, 1, 0], tree.boxes[i, 1, 2], tree.boxes[i, 2, 2]]),
            np.array([tree.boxes[i, 1, 1], tree.boxes[i, 1, 3], tree.boxes[i, 2, 3]]),
        )
        for i in range(len(tree.boxes))
    ]
    seen = 0

    def visit(node, box_lo, box_hi, depth):
        nonlocal seen
        assert depth <= STACK_DEPTH
        if node >= 0:
            lo0, hi0, lo1, hi1 = boxes[node]
            for child, (a, b) in zip(tree.children[node], ((lo0, hi0), (lo1, hi1))):
                visit(int(child), a, b, depth + 1)
            return
        code = -node - 1
        first, count = code >> 4, code & 15
        assert count <= leaf_size
        seen += count
        corners = tree.triangles[first : first + count].reshape(-1, 3)
        assert (corners >= box_lo).all() and (corners <= box_hi).all()

    visit(0, None, None, 0)
    assert seen == len(faces)


def check_wide_tree(wide, vertices, faces):
    """Every face once, at most 8 children a node, each inside its box as float32 decodes the box's bytes
    (origin + cells * scale), and no path holding more stack entries than the traversal has (its bound
    recomputed here: a node pushes its k children and pops one)."""
    assert sorted(wide.faces.tolist()) == list(range(len(faces)))
    assert wide.stack <= WIDE_STACK
    cells = wide.quantized.view(np.uint8).reshape(len(wide.origin), 6, 8).astype(np.float32)
    lo = wide.origin[:, None, :] + cells[:, 0::2].transpose(0, 2, 1) * wide.scale[:, None, :]
    hi = wide.origin[:, None, :] + cells[:, 1::2].transpose(0, 2, 1) * wide.scale[:, None, :]
    assert ((wide.scale > 0) & (np.log2(wide.scale) == np.round(np.log2(wide.scale)))).all(), "powers of two"
    seen, parents = 0, {0}

    def corners(code):  # every triangle corner below a child
        if code < 0:
            first, count = (-code - 1) >> 4, (-code - 1) & 15
            return wide.triangles[first : first + count].reshape(-1, 3)
        return np.concatenate([corners(int(c)) for c in wide.children[code] if c != 0] or [np.zeros((0, 3))])

    for node in range(len(wide.origin)):
        for slot, code in enumerate(wide.children[node]):
            if code == 0:  # an empty slot (children sit in the slots of their octants)
                continue
            inside = corners(int(code))
            assert (inside >= lo[node, slot]).all() and (inside <= hi[node, slot]).all()
            if code < 0:
                seen += (-int(code) - 1) & 15
            else:
                assert code not in parents
                parents.add(int(code))
    assert seen == len(faces) and len(parents) == len(wide.origin)

    def peak(node):
        codes = [int(c) for c in wide.children[node] if c != 0]
        return max([len(codes)] + [len(codes) - 1 + peak(c) for c in codes if c > 0])

    assert wide.stack == (peak(0) if len(wide.origin) and (wide.children[0] != 0).any() else wide.stack)
    assert wide.stack <= WIDE_STACK


@pytest.mark.parametrize("leaf_size", [1, 4])
def test_tree_holds_every_triangle_once_inside_its_boxes(leaf_size):
    scene = terrain_scene(5000)
    tree = build_ray_bvh(scene.vertices, scene.faces, leaf_size)
    check_tree(tree, scene.vertices, scene.faces, leaf_size)
    check_wide_tree(build_wide_bvh(tree), scene.vertices, scene.faces)


def test_a_wide_node_puts_each_child_in_the_slot_of_the_octant_it_comes_first_for():
    # Eight boxes at the corners of a cube: the one at (-, -, -) comes first along (+, +, +) (octant 0),
    # the one at (+, -, -) along (-, +, +) (octant 1: x negative), ... so each lands in the slot whose
    # bits are its corner's positive axes.
    from goggles.world.wide_bvh import _octant_slots

    corners = np.array([[(s >> k & 1) * 2.0 - 1.0 for k in range(3)] for s in range(8)])
    rng = np.random.default_rng(3)
    order = rng.permutation(8)
    lo, hi = (corners[order] - 0.2)[None], (corners[order] + 0.2)[None]
    slots = _octant_slots(lo.astype(np.float32), hi.astype(np.float32), np.ones((1, 8), bool))
    np.testing.assert_array_equal(slots[0], order)
    # Three children: the slots left go to the unused ones, and every slot is taken once.
    used = np.array([[True, True, True, False, False, False, False, False]])
    assert sorted(_octant_slots(lo.astype(np.float32), hi.astype(np.float32), used)[0]) == list(range(8))


def test_a_wide_tree_never_outgrows_its_stack():
    # A small stack: the collapse keeps nodes narrow where the binary subtree below is deep, and the
    # tree still finds every triangle.
    scene = terrain_scene(5000)
    tree = build_ray_bvh(scene.vertices, scene.faces)
    narrow = build_wide_bvh(tree, stack=tree.depth + 3)
    assert narrow.stack <= tree.depth + 3 < build_wide_bvh(tree).stack
    check_wide_tree(narrow, scene.vertices, scene.faces)
    with pytest.raises(ValueError, match="does not fit a stack"):
        build_wide_bvh(tree, stack=tree.depth)


@pytest.mark.slow
def test_small_empty_and_coincident_scenes():
    one = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32)
    for vertices, faces in (
        (one, np.zeros((0, 3), np.int64)),  # nothing to hit
        (one, np.array([[0, 1, 2]])),  # fewer triangles than a leaf
        (one, np.tile([[0, 1, 2]], (50, 1))),  # 50 copies: every centroid in one bin
    ):
        tree = build_ray_bvh(vertices, faces)
        check_tree(tree, vertices, faces)
        check_wide_tree(build_wide_bvh(tree), vertices, faces)
        for layout in LAYOUTS:
            t, face, _, _ = trace(
                vertices, faces, [[0.2, 0.2, 1.0], [5.0, 5.0, 1.0]], [[0, 0, -1.0]] * 2, layout=layout
            )
            if len(faces):
                assert t[0] == pytest.approx(1.0) and 0 <= face[0] < len(faces)
            else:
                assert t[0] == -1 and face[0] == -1
            assert t[1] == -1 and face[1] == -1
    with pytest.raises(ValueError, match="leaf_size"):
        build_ray_bvh(one, np.array([[0, 1, 2]]), leaf_size=16)


def test_a_lopsided_tree_is_held_within_the_stack(monkeypatch):
    # Triangles at exponentially growing spacing: each SAH split cuts off the few farthest ones, so the
    # tree is 31 deep. With a stack of 10 entries the builder must halve the nodes that would go deeper,
    # and every triangle must still be found.
    from goggles.world import ray_bvh

    x = 1.5 ** np.arange(200, dtype=np.float64)
    vertices = np.stack([np.stack([x, np.zeros_like(x), np.zeros_like(x)], 1), np.stack([x + 0.5, x * 0, x * 0], 1)])
    vertices = np.concatenate([vertices[0], vertices[1], np.stack([x, x * 0 + 0.5, x * 0], 1)]).astype(np.float32)
    n = len(x)
    faces = np.stack([np.arange(n), np.arange(n) + n, np.arange(n) + 2 * n], 1)
    assert build_ray_bvh(vertices, faces).depth > 10
    monkeypatch.setattr(ray_bvh, "STACK_DEPTH", 10)
    tree = build_ray_bvh(vertices, faces)
    assert tree.depth <= 10
    check_tree(tree, vertices, faces)
    # A ray down onto each triangle's centroid hits that triangle at 1 m.
    centroids = vertices[faces].mean(axis=1)
    finite = np.isfinite(centroids).all(axis=1) & (np.abs(centroids[:, 0]) < 1e6)  # float32 keeps the small ones whole
    origins = centroids[finite] + [0, 0, 1]
    for layout in LAYOUTS:
        t, face, _, _ = trace(vertices, faces, origins, [[0, 0, -1.0]] * len(origins), tree=tree, layout=layout)
        np.testing.assert_allclose(t, 1.0, rtol=1e-5)
        np.testing.assert_array_equal(face, np.flatnonzero(finite))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_cracks_through_a_grids_shared_vertices_and_edges(device, layout):
    # A 40 x 40 grid at z = 0.25 (two triangles per cell): rays straight down and slanted through every
    # vertex, every edge's midpoint and every cell's diagonal midpoint must hit the plane at the closed
    # form distance. A test that is not watertight loses some of them between two triangles.
    k = 40
    xs, ys = np.meshgrid(np.linspace(-1, 1, k + 1), np.linspace(-1, 1, k + 1))
    vertices = np.stack([xs.ravel(), ys.ravel(), np.full(xs.size, 0.25)], 1).astype(np.float32)
    index = np.arange((k + 1) ** 2).reshape(k + 1, k + 1)
    a, b, c, d = index[:-1, :-1].ravel(), index[:-1, 1:].ravel(), index[1:, :-1].ravel(), index[1:, 1:].ravel()
    faces = np.concatenate([np.stack([a, b, d], 1), np.stack([a, d, c], 1)])
    step = 2.0 / k
    u = np.arange(-1 + step, 1, step / 2)[:-1]  # vertices and edge midpoints inside the grid
    px, py = np.meshgrid(u, u)
    targets = np.stack([px.ravel(), py.ravel(), np.full(px.size, 0.25)], 1)
    for slant in ([0.0, 0.0, -1.0], [0.3, -0.2, -1.0]):
        direction = np.array(slant) / np.linalg.norm(slant)
        origins = targets - 2.0 * direction
        directions = np.tile(direction, (len(origins), 1))
        t, face, _, normal = trace(vertices, faces, origins, directions, device, layout=layout)
        missed = int((t < 0).sum())
        assert missed == 0, f"{missed} of {len(t)} rays slipped through the grid"
        np.testing.assert_allclose(t, 2.0, rtol=1e-5)
        np.testing.assert_allclose(np.abs(normal[:, 2]), 1.0, atol=1e-6)


def camera_rays(scene, views: int, width: int, height: int):
    T_WC = [camera_pose_from_body(T) for T in bench_views(scene.view if scene.view is not None else np.eye(4), views)]
    rays_C = CameraModel.from_fov(width, height, 60.0).ray_directions().reshape(-1, 3)
    origins = np.concatenate([np.broadcast_to(T[:3, 3], rays_C.shape) for T in T_WC]).astype(np.float32)
    directions = np.concatenate([rays_C @ T[:3, :3].T for T in T_WC]).astype(np.float32)
    return origins, directions


@pytest.mark.slow
@pytest.mark.skipif(not embree_available(), reason="embreex is not installed")
@pytest.mark.parametrize("which", ["arena", "terrain"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_closest_hits_equal_embrees(which, device, layout):
    scene = load_static_scene(default_scene()) if which == "arena" else terrain_scene(60_000)
    if scene.view is None:
        scene.view = np.eye(4)
        scene.view[:3, 3] = [0.0, 0.0, scene.vertices[:, 2].max() + 3.0]
    origins, directions = camera_rays(scene, 4, 96, 72)
    t, face, _, _ = trace(scene.vertices, scene.faces, origins, directions, device, reach=1.0e6, layout=layout)
    embree = EmbreeTracer(scene, threads=1)
    t_e, face_e = embree.trace(origins, directions)
    embree.close()
    hit = face_e >= 0
    assert hit.mean() > 0.3, "the views must see the scene"
    np.testing.assert_array_equal(face >= 0, hit)
    ties = (face != face_e).mean()  # a ray through an edge shared by two triangles may take either
    assert ties <= 1e-3
    np.testing.assert_allclose(t[hit], t_e[hit], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hits_equal_warps_mesh_query(device, layout):
    scene = terrain_scene(20_000)
    scene.view = np.eye(4)
    scene.view[:3, 3] = [10.0, -5.0, scene.vertices[:, 2].max() + 2.0]
    origins, directions = camera_rays(scene, 3, 64, 48)
    ours = trace(scene.vertices, scene.faces, origins, directions, device, layout=layout)
    warps = trace(scene.vertices, scene.faces, origins, directions, device, warp=True)
    same = ours[1] == warps[1]
    assert (ours[0] >= 0).mean() > 0.3 and same.mean() >= 0.999
    np.testing.assert_allclose(ours[0][same], warps[0][same], rtol=1e-5)
    np.testing.assert_allclose(ours[2][same], warps[2][same], atol=1e-4)  # weights of corners 0 and 1
    np.testing.assert_allclose(ours[3][same], warps[3][same], atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_distances_are_the_exact_plane_distances_rounded_once(device, layout):
    # The closed form in float64 (numpy): the distance to the hit triangle's plane from the same float32
    # inputs. Each t must be that value correctly rounded to float32 (Warp's own is up to 11 ulps off).
    scene = terrain_scene(20_000)
    scene.view = np.eye(4)
    scene.view[:3, 3] = [10.0, -5.0, scene.vertices[:, 2].max() + 2.0]
    origins, directions = camera_rays(scene, 3, 64, 48)
    t, face, _, _ = trace(scene.vertices, scene.faces, origins, directions, device, layout=layout)
    hit = face >= 0
    corners = scene.vertices.astype(np.float32).astype(np.float64)[scene.faces[face[hit]]]
    normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    o, d = origins[hit].astype(np.float64), directions[hit].astype(np.float64)
    exact = np.einsum("ij,ij->i", normal, corners[:, 0] - o) / np.einsum("ij,ij->i", normal, d)
    np.testing.assert_array_equal(t[hit], exact.astype(np.float32))


@pytest.mark.parametrize("actors", [False, True])
def test_bvh_backend_renders_what_the_warp_backend_renders(device, actors):
    # Every output, with the sun's shadows (any-hit rays through the same BVH), with and without a crate.
    from goggles.world import DeviceScene

    scene = load_static_scene(default_scene())
    world = DeviceScene(scene, device, shapes=[box_shape("crate", (1.0, 1.0, 1.0))] if actors else ())
    camera = CameraModel.from_fov(96, 72, 70.0)
    views = bench_views(scene.view, 3)
    T_WC = np.stack([camera_pose_from_body(T) for T in views])
    if actors:
        T_WA = views[0].copy()
        T_WA[:3, 3] += views[0][:3, 0] * 3.0  # 3 m ahead of the first view
        world.set_actors([0], T_WA[None])
    images = {}
    for backend, shadows in (("warp", True), ("bvh", True), ("bvh", False), ("wide", True)):
        renderer = Renderer(
            world,
            [camera] * 3,
            RenderSettings(backend=backend, shading=Shading.SUN, shadows=shadows, sun_W=(1.0, 0.6, 0.5)),
        )
        renderer.render(T_WC)
        images[backend, shadows] = renderer.images()
        renderer.close()
    warp, bvh = images["warp", True], images["bvh", True]
    if actors:
        assert (bvh.segmentation == 1).any(), "the crate must be in view"
    assert (bvh.rgb != images["bvh", False].rgb).any(axis=-1).mean() > 0.01, "the views must hold shadows"
    same = warp.face == bvh.face
    assert same.mean() >= 0.999
    np.testing.assert_allclose(bvh.depth[same], warp.depth[same], rtol=1e-5)
    np.testing.assert_array_equal(bvh.segmentation[same], warp.segmentation[same])
    assert np.abs(bvh.rgb[same].astype(int) - warp.rgb[same]).max() <= 1
    wide = images["wide", True]  # the same leaves: the same hits, shadows and colours (a tie at an edge aside)
    same = wide.face == bvh.face
    assert same.mean() >= 0.999
    np.testing.assert_array_equal(wide.depth[same], bvh.depth[same])
    np.testing.assert_array_equal(wide.rgb[same], bvh.rgb[same])
