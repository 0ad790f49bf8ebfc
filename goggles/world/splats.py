"""Gaussian splats on the device, and what a ray meets in them (3DGRT, Moenne-Loccoz et al. 2024).

Each Gaussian is bounded by the box of its ellipsoid where its response falls to 1/255 (a BVH over
the boxes, ``goggles.world.box_tree``); a ray's response to a Gaussian is its largest along the ray,
at the point of closest Mahalanobis approach: alpha = opacity * exp(-d_min^2 / 2), met at that
point's distance t along the ray (inside the box, where alpha passes the cut). ``trace_splats``
gathers the nearest hits ``HITS`` at a time, walking the tree nearer child first (the reach shrinks
to the farthest kept once the buffer is full, and a node entered beyond it is not opened), composites
them front to back (C = sum c_i alpha_i T_i, T the transmittance; alpha at most 0.99), and starts
the next gathering after the last one composited, until the transmittance falls under 1e-4 or
nothing is left before ``t_end`` (an opaque mesh's hit). Each Gaussian's colour is its spherical
harmonics (degree 0-3, Kerbl et al. 2023's real basis) for the direction from the ray's origin to
its mean, in the frame of the file it came from (rasterizers' convention: one colour per Gaussian
per view).

A ray is taken to stop in the splats where their accumulated opacity first reaches one half: the
depth of a pixel, a LiDAR's range, and the segmentation class are those of the Gaussian that took it
past one half (the median of the ray's termination distribution, which a depth camera or a LiDAR's
return reports, rather than the mean, which blurs foreground and background at an edge).

3DGS trains and renders every Gaussian with a screen-space low-pass filter: 0.3 px^2 added to its
projected covariance, its peak opacity kept (Kerbl et al. 2023; gsplat's ``eps2d``); most of a
capture's Gaussians are smaller than a pixel, and without the filter stems and rims thin out. A ray
tracer has no projected covariance, so here the filter is its 3D form: the Gaussian's covariance
grows by an isotropic s^2 = dilation * footprint * r^2 (``footprint`` the ray's pixel in rad^2,
``r`` the distance along the ray to the mean), whose shadow across the ray is the same 0.3 px^2.
Its boxes grow with it, for the cameras about to trace (``DeviceSplats.fit``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import warp as wp

from goggles.errors import ConfigError
from goggles.runtime.kernel_options import TRACING
from goggles.runtime.progress import busy, load_kernels
from goggles.scene.splats import FILTERS, MIN_OPACITY, SplatCloud, merge_splats
from goggles.world.box_tree import BoxTree, build_box_tree, empty_box_tree, near_stack_t, node_stack_t, refit
from goggles.world.queries import inverse_direction
from goggles.world.ray_bvh import LEAF_BITS, LEAF_MASK, ROBUST_FAR, slab

wp.set_module_options(TRACING)

#: Hits gathered per BVH pass: each pass walks the BVH from its root again, so fewer passes of more
#: hits are faster on a CPU (256: 1.4x the frames/s of 64 on the houseplant, 2.2 against 1.6; with the
#: nearest-first walk, the demo's splat pass 58 ms of CPU a frame at 256, 66 at 64, 141 at 16), while
#: a GPU thread keeps its buffer in scarce registers (3DGRT keeps 16). Chosen once per process, by
#: whether the kernels may run on a GPU here.
HITS = 64 if wp.is_cuda_available() else 256
#: Most passes per ray (a ray through a very dense cloud stops there).
MAX_PASSES = 64
#: Compositing stops when the light left is under this: what lies behind could change an 8-bit colour by
#: at most half a level (the reference rasterizer goes on to 1e-4, which no 8-bit image can show).
MIN_TRANSMITTANCE = wp.constant(0.5 / 255.0)
MAX_ALPHA = wp.constant(0.99)
CUT_ALPHA = wp.constant(MIN_OPACITY)
#: Device bytes per Gaussian besides its colour's coefficients: mean, axes, variances, opacity, class,
#: frame, box and the BVH's share (its nodes and items: 23.3 bytes per Gaussian for the houseplant).
BYTES_PER_GAUSSIAN = 12 + 36 + 12 + 4 + 4 + 4 + 24 + 24


hits_t = wp.types.vector(length=HITS, dtype=wp.float32)
items_t = wp.types.vector(length=HITS, dtype=wp.int32)

SH_C0 = wp.constant(0.28209479177387814)
SH_C1 = wp.constant(0.4886025119029199)


@wp.struct
class SplatData:
    tree: BoxTree
    """The BVH of their boxes (``goggles.world.box_tree``), walked nearest first."""
    lower: wp.array(dtype=wp.vec3)
    upper: wp.array(dtype=wp.vec3)
    """Each Gaussian's box (the BVH's items)."""
    mean: wp.array(dtype=wp.vec3)
    axes: wp.array(dtype=wp.mat33)
    """R^T: a world offset from the mean into the Gaussian's own axes."""
    variance: wp.array(dtype=wp.vec3)
    """Its variance along each of its axes (its scales squared), m^2."""
    opacity: wp.array(dtype=float)
    sh: wp.array2d(dtype=wp.vec3)
    degree: int
    segment: wp.array(dtype=wp.int32)
    frame: wp.array(dtype=wp.int32)
    frames: wp.array(dtype=wp.mat33)
    dilation: wp.array(dtype=float)
    """Per frame (file): the screen-space filter its capture was trained with, px^2 (0: none)."""
    compensated: wp.array(dtype=wp.int32)
    """Per frame: 1 where the filter scales the opacity to keep the Gaussian's integral."""
    shown: wp.array(dtype=wp.int32)
    """Per frame: 0 where its Gaussians are not in the world (a splat prop's instance not placed)."""
    count: int


@wp.struct
class SplatTrace:
    rgb: wp.vec3
    """The splats' colour, composited front to back (the light they let through not added)."""
    transmittance: float
    """The light they let through, of what lies behind them."""
    t_half: float
    """Distance along the ray where their accumulated opacity reached one half; -1: it never did."""
    segment: int
    """The class of the Gaussian that took it past one half (0: none)."""


@wp.func
def sh_colour(sh: wp.array2d(dtype=wp.vec3), i: int, degree: int, d: wp.vec3) -> wp.vec3:
    """The colour of Gaussian ``i`` seen along unit direction ``d`` (real SH basis to degree 3), + 0.5,
    clamped at 0, as the reference's ``eval_sh``."""
    c = SH_C0 * sh[i, 0]
    if degree > 0:
        x = d[0]
        y = d[1]
        z = d[2]
        c = c - SH_C1 * y * sh[i, 1] + SH_C1 * z * sh[i, 2] - SH_C1 * x * sh[i, 3]
        if degree > 1:
            xx = x * x
            yy = y * y
            zz = z * z
            c = c + 1.0925484305920792 * x * y * sh[i, 4]
            c = c - 1.0925484305920792 * y * z * sh[i, 5]
            c = c + 0.31539156525252005 * (2.0 * zz - xx - yy) * sh[i, 6]
            c = c - 1.0925484305920792 * x * z * sh[i, 7]
            c = c + 0.5462742152960396 * (xx - yy) * sh[i, 8]
            if degree > 2:
                c = c - 0.5900435899266435 * y * (3.0 * xx - yy) * sh[i, 9]
                c = c + 2.890611442640554 * x * y * z * sh[i, 10]
                c = c - 0.4570457994644658 * y * (4.0 * zz - xx - yy) * sh[i, 11]
                c = c + 0.3731763325901154 * z * (2.0 * zz - 3.0 * xx - 3.0 * yy) * sh[i, 12]
                c = c - 0.4570457994644658 * x * (4.0 * zz - xx - yy) * sh[i, 13]
                c = c + 1.445305721320277 * z * (xx - yy) * sh[i, 14]
                c = c - 0.5900435899266435 * x * (xx - 3.0 * yy) * sh[i, 15]
    c = c + wp.vec3(0.5)
    return wp.vec3(wp.max(c[0], 0.0), wp.max(c[1], 0.0), wp.max(c[2], 0.0))


@wp.func
def whiten(s: SplatData, i: int, origin: wp.vec3, direction: wp.vec3, footprint: float):
    """A ray in Gaussian ``i``'s own axes, each scaled by its standard deviation there (its covariance
    grown by the filter a pixel of ``footprint`` rad^2 shows it): (origin, direction, its own
    variances, the filter's growth of each)."""
    A = s.axes[i]
    mean = s.mean[i]
    r = wp.max(wp.dot(mean - origin, direction), 0.0)
    grow = s.dilation[s.frame[i]] * footprint * r * r
    own = s.variance[i]
    v = own + wp.vec3(grow)
    inverse = wp.vec3(1.0 / wp.sqrt(v[0]), 1.0 / wp.sqrt(v[1]), 1.0 / wp.sqrt(v[2]))
    return wp.cw_mul(A * (origin - mean), inverse), wp.cw_mul(A * direction, inverse), own, grow


@wp.func
def peak_distance(s: SplatData, i: int, origin: wp.vec3, direction: wp.vec3, footprint: float) -> float:
    """Where along the ray Gaussian ``i`` answers most (``response``'s t, without its alpha)."""
    o, d, own, grow = whiten(s, i, origin, direction, footprint)
    dd = wp.dot(d, d)
    if dd <= 0.0:
        return 0.0
    return -wp.dot(o, d) / dd


@wp.func
def response(s: SplatData, i: int, origin: wp.vec3, direction: wp.vec3, footprint: float) -> wp.vec2:
    """(t, alpha): where along the ray Gaussian ``i`` answers most, and how much (0: not at all), for a
    ray whose pixel spans ``footprint`` rad^2 (0: a thin ray, no filter)."""
    frame = s.frame[i]
    if s.shown[frame] == 0:
        return wp.vec2(0.0)
    o, d, own, grow = whiten(s, i, origin, direction, footprint)
    dd = wp.dot(d, d)
    if dd <= 0.0:
        return wp.vec2(0.0)
    t = -wp.dot(o, d) / dd
    closest = o + d * t
    opacity = s.opacity[i]
    if s.compensated[frame] != 0 and grow > 0.0:
        # det of the covariance across the ray, unfiltered over filtered: det(S) d^T S^-1 d each.
        v = own + wp.vec3(grow)
        along = s.axes[i] * direction
        shrink = (own[0] / v[0]) * (own[1] / v[1]) * (own[2] / v[2])
        opacity = opacity * wp.sqrt(shrink * wp.dot(wp.cw_div(along, own), along) / dd)
    alpha = wp.min(MAX_ALPHA, opacity * wp.exp(-0.5 * wp.dot(closest, closest)))
    if alpha < CUT_ALPHA:
        return wp.vec2(t, 0.0)
    return wp.vec2(t, alpha)


@wp.func
def exit_distance(lower: wp.vec3, upper: wp.vec3, origin: wp.vec3, inverse: wp.vec3) -> float:
    """Where a ray (its direction's inverse) leaves a box."""
    a = wp.cw_mul(lower - origin, inverse)
    b = wp.cw_mul(upper - origin, inverse)
    far = wp.max(a, b)
    return wp.min(far[0], wp.min(far[1], far[2]))


@wp.func
def child_spans(s: SplatData, node: int, origin: wp.vec3, inverse: wp.vec3, reach: float) -> wp.vec4:
    """Where the ray enters and leaves inner ``node``'s two child boxes before ``reach``: (near0, far0,
    near1, far1); a child is crossed where its near <= far."""
    xy0 = s.tree.boxes[node, 0]
    xy1 = s.tree.boxes[node, 1]
    zz = s.tree.boxes[node, 2]
    x = slab(xy0[0], xy0[1], origin[0], inverse[0])
    y = slab(xy0[2], xy0[3], origin[1], inverse[1])
    z = slab(zz[0], zz[1], origin[2], inverse[2])
    near0 = wp.max(wp.max(x[0], y[0]), wp.max(z[0], 0.0))
    far0 = wp.min(wp.min(x[1], y[1]), wp.min(z[1], reach)) * ROBUST_FAR
    x = slab(xy1[0], xy1[1], origin[0], inverse[0])
    y = slab(xy1[2], xy1[3], origin[1], inverse[1])
    z = slab(zz[2], zz[3], origin[2], inverse[2])
    near1 = wp.max(wp.max(x[0], y[0]), wp.max(z[0], 0.0))
    far1 = wp.min(wp.min(x[1], y[1]), wp.min(z[1], reach)) * ROBUST_FAR
    return wp.vec4(near0, far0, near1, far1)


@wp.func
def enters(spans: wp.vec4, child: int, after: float) -> bool:
    """Is child ``child`` (0 or 1) of ``child_spans`` crossed beyond ``after``?"""
    near = spans[2 * child]
    far = spans[2 * child + 1]
    return near <= far and far > after


@wp.func
def trace_splats(
    s: SplatData, origin: wp.vec3, direction: wp.vec3, t_start: float, t_end: float, footprint: float
) -> SplatTrace:
    """What a ray (unit ``direction``, its pixel ``footprint`` rad^2) meets in the splats between
    ``t_start`` and ``t_end``."""
    out = SplatTrace()
    out.rgb = wp.vec3(0.0)
    out.transmittance = 1.0
    out.t_half = -1.0
    out.segment = 0
    if s.count == 0:
        return out
    after = t_start
    inverse = inverse_direction(direction)
    root = child_spans(s, 0, origin, inverse, t_end)  # the walk's first step, before any buffer is made:
    if not (enters(root, 0, after) or enters(root, 1, after)):  # most rays miss a capture
        return out
    passes = int(0)  # noqa: UP018 (Warp: a variable the loop below changes)
    more = bool(True)  # noqa: UP018 (Warp: a variable the loop below changes)
    while more and passes < MAX_PASSES and out.transmittance > MIN_TRANSMITTANCE:
        passes += 1
        ts = hits_t()
        alphas = hits_t()
        items = items_t()
        kept = int(0)  # noqa: UP018
        full = bool(False)  # noqa: UP018
        reach = t_end
        # The tree nearest first: a node entered beyond the farthest hit kept (once ``HITS`` are)
        # holds none nearer; one left before ``after`` holds none the last pass did not composite.
        nodes = node_stack_t()
        nears = near_stack_t()
        depth = int(0)  # noqa: UP018
        node = int(0)  # noqa: UP018
        walking = bool(True)  # noqa: UP018
        while walking:
            if node >= 0:
                spans = child_spans(s, node, origin, inverse, reach)
                near0 = spans[0]
                near1 = spans[2]
                child = s.tree.children[node]
                in0 = enters(spans, 0, after)
                in1 = enters(spans, 1, after)
                if in0 and in1:  # the nearer now, the other on the stack with its entry
                    node = child[0]
                    later = child[1]
                    later_near = near1
                    if near1 < near0:
                        node = child[1]
                        later = child[0]
                        later_near = near0
                    nodes[depth] = later
                    nears[depth] = later_near
                    depth += 1
                    continue
                if in0:
                    node = child[0]
                    continue
                if in1:
                    node = child[1]
                    continue
            else:
                code = -node - 1
                first = code >> LEAF_BITS
                for leaf_k in range(code & LEAF_MASK):
                    i = s.tree.items[first + leaf_k]
                    if passes > 1 and exit_distance(s.lower[i], s.upper[i], origin, inverse) <= after:
                        continue  # wholly before what the last pass composited: its peak too
                    hit = response(s, i, origin, direction, footprint)
                    t = hit[0]
                    if hit[1] <= 0.0 or t <= after or t >= reach:
                        continue
                    if kept == HITS:
                        full = True
                        kept = HITS - 1  # the farthest makes room
                    j = kept
                    while j > 0 and ts[j - 1] > t:  # sorted insertion, nearest first
                        ts[j] = ts[j - 1]
                        alphas[j] = alphas[j - 1]
                        items[j] = items[j - 1]
                        j -= 1
                    ts[j] = t
                    alphas[j] = hit[1]
                    items[j] = i
                    kept += 1
                    if kept == HITS:
                        full = True
                        reach = ts[HITS - 1]  # nothing beyond the farthest kept can enter
            # The next node on the stack that begins before the reach, or the walk is over.
            node = int(-1)  # noqa: UP018 (Warp: a variable the loop below changes)
            while depth > 0 and node == -1:
                depth -= 1
                if nears[depth] < reach:
                    node = nodes[depth]
            if node == -1:
                walking = False
        for k in range(kept):
            g = items[k]
            alpha = alphas[k]
            seen = s.frames[s.frame[g]] * wp.normalize(s.mean[g] - origin)
            out.rgb = out.rgb + sh_colour(s.sh, g, s.degree, seen) * (alpha * out.transmittance)
            before = out.transmittance
            out.transmittance = before * (1.0 - alpha)
            if before > 0.5 and out.transmittance <= 0.5:
                out.t_half = ts[k]
                out.segment = s.segment[g]
            after = ts[k]
            if out.transmittance <= MIN_TRANSMITTANCE:
                break
        more = full
    return out


class DeviceSplats:
    """Splats on a device: the scene's captures, and room for splat props (objects captured apart,
    a chair a person carries), each prop's Gaussians once per instance it may have placed at once;
    their arrays, their BVH and the ``SplatData`` kernels read.

    Args:
        cloud: the scene's Gaussians in the world (None: none).
        device: where.
        props: each splat prop's Gaussians in its own frame, and how many of it may be placed at once.
    """

    def __init__(self, cloud: SplatCloud | None, device, props: Sequence[tuple[SplatCloud, int]] = ()):
        d = wp.get_device(device)
        scene_frames = len(cloud.frames) if cloud is not None else 0
        parts = [cloud] if cloud is not None else []
        self._slots: list[list[tuple[int, int, int]]] = []
        """Per prop, per instance: (first Gaussian, count, frame)."""
        start, frame = len(cloud) if cloud is not None else 0, scene_frames
        for prop, instances in props:
            self._slots.append([(start + k * len(prop), len(prop), frame + k) for k in range(instances)])
            parts += [prop] * instances
            start, frame = start + instances * len(prop), frame + instances
        merged = merge_splats(parts)
        if merged is None:
            raise ConfigError("DeviceSplats needs a cloud or a splat prop")
        count = len(merged)
        R = _rotation_matrices(merged.rotations.astype(np.float64))  # (N, 3, 3) axes in the world
        scales = np.maximum(merged.scales.astype(np.float64), 1e-9)
        self.device = d
        self.count = count
        self.degree = merged.degree
        self.nbytes = count * (BYTES_PER_GAUSSIAN + merged.sh.shape[1] * 12)
        dilation = np.array([FILTERS[name][0] for name in merged.filters], np.float32)
        compensated = np.array([FILTERS[name][1] for name in merged.filters], np.int32)
        self.filtered = bool(np.any(dilation > 0.0))
        """Was any of its captures trained with a screen-space filter (its boxes then follow the cameras)?"""
        data = SplatData()
        data.mean = wp.array(merged.positions, dtype=wp.vec3, device=d)
        data.axes = wp.array(R.transpose(0, 2, 1).astype(np.float32), dtype=wp.mat33, device=d)
        data.variance = wp.array((scales**2).astype(np.float32), dtype=wp.vec3, device=d)
        data.opacity = wp.array(merged.opacity, dtype=float, device=d)
        data.sh = wp.array(merged.sh, dtype=wp.vec3, device=d)
        data.degree = merged.degree
        data.segment = wp.array(merged.segment, dtype=wp.int32, device=d)
        data.frame = wp.array(merged.frame, dtype=wp.int32, device=d)
        data.frames = wp.array(merged.frames, dtype=wp.mat33, device=d)
        data.dilation = wp.array(dilation, dtype=float, device=d)
        data.compensated = wp.array(compensated, dtype=wp.int32, device=d)
        shown = np.zeros(len(merged.frames), np.int32)
        shown[:scene_frames] = 1
        data.shown = wp.array(shown, dtype=wp.int32, device=d)
        data.count = count
        self.data = data
        # Each prop's own frame, once (its first instance, placed nowhere yet): a placement writes from it.
        self._own = [
            (wp.clone(data.mean[s : s + n]), wp.clone(data.axes[s : s + n]), prop.frames[0].astype(np.float64))
            for (prop, _), ((s, n, _), *_) in zip(props, self._slots)
        ]
        self.lowers = wp.zeros(count, dtype=wp.vec3, device=d)
        self.uppers = wp.zeros(count, dtype=wp.vec3, device=d)
        self._cameras_box = wp.zeros(2, dtype=wp.vec3, device=d)
        self._no_cameras = wp.zeros((1, 1), dtype=wp.vec3, device=d)
        load_kernels(trace_kernel.module, d)
        self._boxes(self._no_cameras, 0.0)  # each Gaussian's own box: where a thin ray can meet it
        with busy(f"building the splats' BVH ({count:,} Gaussians on {d})"):
            self.tree = build_box_tree(self.lowers.numpy(), self.uppers.numpy(), d)
        data.tree = self.tree.tree
        data.lower, data.upper = self.lowers, self.uppers
        self._moved = False
        self.bounds = np.zeros((2, 3))
        """(2, 3) the scene's captures' world box where a thin ray can meet them, m (zeros: none)."""
        self.growth = 0.0
        """How much the filter may grow the captures' boxes: a box seen from r metres through pixels of
        ``footprint`` rad^2 grows by at most ``growth * sqrt(footprint) * r`` along each axis (k sigma of
        the dilation's variance, ``splat_boxes_kernel``)."""
        if cloud is not None:  # their own boxes, just made
            scene = slice(0, len(cloud))
            self.bounds = np.stack([self.lowers.numpy()[scene].min(axis=0), self.uppers.numpy()[scene].max(axis=0)])
            k2 = 2.0 * np.log(np.maximum(data.opacity.numpy()[scene] / MIN_OPACITY, 1.000001))
            dilation = data.dilation.numpy()[data.frame.numpy()[scene]]
            self.growth = float(np.sqrt(np.max(k2 * dilation))) if self.filtered else 0.0
        self.has_props = bool(self._slots)
        """Splat props may be placed (their boxes move: no fixed bounds)."""

    def instances(self, prop: int) -> int:
        """How many of splat prop ``prop`` may be placed at once."""
        return len(self._slots[prop])

    def place(self, prop: int, instance: int, T_WA: np.ndarray | None) -> None:
        """Place instance ``instance`` of splat prop ``prop`` at ``T_WA`` (a rigid (4, 4) pose of its
        frame), or take it out of the world (None)."""
        start, count, frame = self._slots[prop][instance]
        d = self.device
        if T_WA is None:
            self.data.shown[frame : frame + 1].fill_(0)
        else:
            mean, axes, own_frame = self._own[prop]
            R = np.asarray(T_WA[:3, :3], np.float64)
            inputs = [
                mean,
                axes,
                wp.mat33(*R.astype(np.float32).ravel()),
                wp.vec3(*np.asarray(T_WA[:3, 3], np.float32)),
            ]
            outputs = [self.data.mean[start : start + count], self.data.axes[start : start + count]]
            wp.launch(place_splats_kernel, dim=count, inputs=inputs, outputs=outputs, device=d)
            self.data.frames[frame : frame + 1].assign(np.asarray([own_frame @ R.T], np.float32))
            self.data.shown[frame : frame + 1].fill_(1)
        self._moved = True

    def remove_props(self) -> None:
        """Take every splat prop's instance out of the world (a world reused by another run)."""
        for prop, slots in enumerate(self._slots):
            for instance in range(len(slots)):
                self.place(prop, instance, None)

    def fit(self, positions: wp.array | None, footprint: float) -> None:
        """Make the BVH hold every Gaussian for rays from ``positions`` ((n, H): every row's camera
        position, read on the device; None for thin rays) whose pixels span at most ``footprint``
        rad^2: each Gaussian's box grown by the filter it shows them, after any prop that moved.
        A thin ray (no filter) stays inside any of the boxes: for it only a move refits."""
        grow = self.filtered and footprint > 0.0 and positions is not None
        if not (grow or self._moved):
            return
        if grow and positions.shape[0] > FEW_CAMERAS:
            wp.launch(cameras_box_kernel, dim=1, inputs=[positions], outputs=[self._cameras_box], device=self.device)
        self._boxes(positions if grow else self._no_cameras, footprint if grow else 0.0)
        refit(self.tree, self.lowers, self.uppers)
        self._moved = False

    def _boxes(self, positions: wp.array, footprint: float) -> None:
        inputs = [self.data, positions, self._cameras_box, footprint]
        wp.launch(
            splat_boxes_kernel, dim=self.count, inputs=inputs, outputs=[self.lowers, self.uppers], device=self.device
        )


def empty_splats(device) -> SplatData:
    """A ``SplatData`` of no Gaussians (kernels that see splats, in a world without any)."""
    d = wp.get_device(device)
    data = SplatData()
    data.tree = empty_box_tree(d)
    data.lower = wp.zeros(0, dtype=wp.vec3, device=d)
    data.upper = wp.zeros(0, dtype=wp.vec3, device=d)
    data.mean = wp.zeros(0, dtype=wp.vec3, device=d)
    data.axes = wp.zeros(0, dtype=wp.mat33, device=d)
    data.variance = wp.zeros(0, dtype=wp.vec3, device=d)
    data.opacity = wp.zeros(0, dtype=float, device=d)
    data.sh = wp.zeros((0, 1), dtype=wp.vec3, device=d)
    data.degree = 0
    data.segment = wp.zeros(0, dtype=wp.int32, device=d)
    data.frame = wp.zeros(0, dtype=wp.int32, device=d)
    data.frames = wp.zeros(0, dtype=wp.mat33, device=d)
    data.dilation = wp.zeros(0, dtype=float, device=d)
    data.compensated = wp.zeros(0, dtype=wp.int32, device=d)
    data.shown = wp.zeros(0, dtype=wp.int32, device=d)
    data.count = 0
    return data


@wp.kernel
def place_splats_kernel(
    own_mean: wp.array(dtype=wp.vec3),
    own_axes: wp.array(dtype=wp.mat33),
    R: wp.mat33,
    p: wp.vec3,
    mean: wp.array(dtype=wp.vec3),
    axes: wp.array(dtype=wp.mat33),
):
    """An instance's Gaussians placed: means R m + p, axes A R^T."""
    i = wp.tid()
    mean[i] = R * own_mean[i] + p
    axes[i] = own_axes[i] * wp.transpose(R)


@wp.kernel
def cameras_box_kernel(positions: wp.array2d(dtype=wp.vec3), box: wp.array(dtype=wp.vec3)):
    """The box of every camera's first and last row's positions (a rolling shutter's travel)."""
    last = positions.shape[1] - 1
    lower = positions[0, 0]
    upper = lower
    for c in range(positions.shape[0]):
        for row in range(2):
            p = positions[c, row * last]
            lower = wp.min(lower, p)
            upper = wp.max(upper, p)
    box[0] = lower
    box[1] = upper


#: Up to this many cameras, a Gaussian's box grows for the farthest of them; past it, for the farthest
#: corner of their box (a learning batch's thousands).
FEW_CAMERAS = 16


@wp.kernel
def splat_boxes_kernel(
    s: SplatData,
    positions: wp.array2d(dtype=wp.vec3),
    cameras: wp.array(dtype=wp.vec3),
    footprint: float,
    lowers: wp.array(dtype=wp.vec3),
    uppers: wp.array(dtype=wp.vec3),
):
    """Each Gaussian's box where its response reaches 1/255 (k sigma along each world axis, k^2 = 2
    ln(255 opacity)), its covariance grown by the filter it shows the farthest camera (of a few; of
    many, the farthest corner of their box)."""
    i = wp.tid()
    mean = s.mean[i]
    if s.shown[s.frame[i]] == 0:  # not in the world: a box no ray crosses
        lowers[i] = mean
        uppers[i] = mean
        return
    r2 = float(0.0)  # noqa: UP018 (Warp: a variable the loop below changes)
    if footprint > 0.0:
        n = positions.shape[0]
        if n <= FEW_CAMERAS:
            last = positions.shape[1] - 1
            for c in range(n):
                for row in range(2):
                    r2 = wp.max(r2, wp.length_sq(mean - positions[c, row * last]))
        else:
            far = wp.max(wp.abs(mean - cameras[0]), wp.abs(mean - cameras[1]))
            r2 = wp.dot(far, far)
    v = s.variance[i] + wp.vec3(s.dilation[s.frame[i]] * footprint * r2)
    A = s.axes[i]
    k2 = 2.0 * wp.log(wp.max(s.opacity[i] / CUT_ALPHA, 1.000001))
    half = wp.vec3()
    for j in range(3):
        half[j] = wp.sqrt(k2 * (A[0, j] * A[0, j] * v[0] + A[1, j] * A[1, j] * v[1] + A[2, j] * A[2, j] * v[2]))
    lowers[i] = mean - half
    uppers[i] = mean + half


def check_splats_fit(count: int, coefficients: int, device, what: str) -> None:
    """Refuse, before any upload, ``count`` Gaussians of ``coefficients`` SH coefficients each that the
    device cannot hold (with the GiB they need)."""
    from goggles.runtime.device_memory import check_fits

    need = count * (BYTES_PER_GAUSSIAN + coefficients * 12)
    check_fits(wp.get_device(device), need, what, "use a smaller splat (fewer Gaussians or a lower SH degree)")


@wp.kernel
def trace_kernel(
    s: SplatData,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    t_end: float,
    footprint: float,
    rgb: wp.array(dtype=wp.vec3),
    transmittance: wp.array(dtype=float),
    t_half: wp.array(dtype=float),
    segment: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    hit = trace_splats(s, origins[i], wp.normalize(directions[i]), 0.0, t_end, footprint)
    rgb[i] = hit.rgb
    transmittance[i] = hit.transmittance
    t_half[i] = hit.t_half
    segment[i] = hit.segment


def trace_rays(
    splats: DeviceSplats, origins: np.ndarray, directions: np.ndarray, t_end: float = 1e30, footprint: float = 0.0
) -> dict:
    """What rays meet in the splats, on the host: ``rgb`` (n, 3), ``transmittance``, ``t_half`` (-1:
    their opacity never reached one half) and ``segment`` (n,); each ray's pixel spans ``footprint``
    rad^2 (0: thin rays, no filter). For tests and tools; the renderer composites the same in its
    own pass."""
    if origins.shape != directions.shape or origins.ndim != 2 or origins.shape[1] != 3:
        raise ConfigError("origins and directions must be (n, 3) each")
    d, n = splats.device, len(origins)
    out = {
        "rgb": wp.zeros(n, dtype=wp.vec3, device=d),
        "transmittance": wp.zeros(n, dtype=float, device=d),
        "t_half": wp.zeros(n, dtype=float, device=d),
        "segment": wp.zeros(n, dtype=wp.int32, device=d),
    }
    starts = wp.array(origins, dtype=wp.vec3, device=d)
    splats.fit(starts.reshape((n, 1)), footprint)
    inputs = [splats.data, starts, wp.array(directions, dtype=wp.vec3, device=d), float(t_end), float(footprint)]
    wp.launch(trace_kernel, dim=n, inputs=inputs, outputs=list(out.values()), device=d)
    return {k: v.numpy() for k, v in out.items()}


def _rotation_matrices(q: np.ndarray) -> np.ndarray:
    """(N, 3, 3) rotation matrices of (N, 4) unit quaternions (w, x, y, z)."""
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1),
        ],
        axis=1,
    )
