"""The splats' pass as 3DGS rasterises it (Kerbl et al. 2023), for undistorted global-shutter pinhole
cameras: what the ray tracer (``goggles.render.splats``) finds again for every ray, a Gaussian's
projection gives once for all its pixels.

Each Gaussian is projected once per camera (EWA, Zwicker et al. 2001: Sigma2D = J W Sigma W^T J^T,
plus its capture's screen-space filter, 0.3 px^2 for 3DGS, its opacity kept or, for an antialiased
capture, scaled by sqrt(det Sigma2D / det(Sigma2D + filter))), its colour evaluated for the direction
from the camera, and listed in each band of ``BAND_ROWS`` rows its ellipse reaches (where its alpha
falls to 1/255); one radix sort of (camera's band, depth) keys orders every list; each band's
Gaussians are splatted, nearest first, onto the pixels of their ellipse: alpha = min(0.99, o
exp(-d^T Sigma2D^-1 d / 2)), nothing under 1/255, a pixel done once less than half a level of light is
left. Per pixel that is the published method's front-to-back compositing in its order, which captures
are trained with and their viewers show. A GPU rasteriser's tiles share the work of finding each
pixel's Gaussians; here each Gaussian's own box finds its pixels (113,000 houseplant Gaussians touch
about 16 pixels each, where a pixel of a 16 x 16 tile would scan a list of 2,000), and cells of 4 x 4
pixels that are opaque already, or whose meshes hide the Gaussian, skip it whole.

What a pixel keeps is as the ray tracer keeps it: a Gaussian counts only where its peak along the
pixel's ray (``peak_distance``) lies before what the meshes hit (asked only where its reach from its
mean's foot on the ray may cross the hit); the depth, class and normal are those of the Gaussian that
gave the pixel the most of the first half of its opacity, at its peak (the one that tipped it past one
half, in the means' order, may be a faint neighbour). The two passes differ in a Gaussian's alpha at a
pixel (its projected 2D Gaussian here, its peak along the ray there) and in the order they composite
(the means' depths here, each ray's peaks there): within a level of an independent 3DGS rasteriser
here, 36-38 dB from it there (``tests/render/test_splat_raster.py``).

The threads take bands (on CUDA a thread per band and camera, correct but not fast: the tracer is
CUDA's default): no two write one pixel, so the image is the same for any number of threads.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from goggles.render.kernels import STATUS_OUTSIDE_LENS, CameraBatch, ImageBuffers, OutputFlags
from goggles.render.splats import composite, reach
from goggles.runtime.kernel_options import TRACING
from goggles.runtime.launches import Launches
from goggles.runtime.profile import stage
from goggles.world.splats import (
    CUT_ALPHA,
    MAX_ALPHA,
    MIN_TRANSMITTANCE,
    SplatData,
    SplatTrace,
    peak_distance,
    sh_colour,
)

wp.set_module_options(TRACING)

#: A Gaussian's mean nearer the camera than this (m, along its axis) is not projected (gsplat's near plane).
NEAR = wp.constant(0.01)
#: Gaussians one CPU thread projects in a launch (Warp copies a kernel's arguments into each thread).
SPAN = 512
#: Rows of a band (each band's Gaussians are listed apart: fewer rows balance the threads better,
#: more list a Gaussian in fewer bands).
BAND_ROWS = 16
#: Bits of a Gaussian's depth in its sort key (the log of its depth: steps of 5e-7 of it up to 50 m);
#: with a batch's bands' bits, two of the CPU sort's 16-bit passes.
DEPTH_BITS = 24
DEPTH_SHIFT = wp.constant(wp.int64(DEPTH_BITS))
DEPTH_TOP = wp.constant(float(2**DEPTH_BITS - 1))
#: Pixels on a side of a cell whose pixels' opacity is counted (``Pixels.live``); BAND_ROWS is a multiple.
CELL = wp.constant(4)


@wp.struct
class Imaged:
    """One Gaussian as one camera images it: one record, read in one go where its pixels are drawn
    (its box apart: most of a far capture's Gaussians fall on pixels already opaque, known from it)."""

    centre: wp.vec2
    """Its mean's pixel (x, y: pixel centres at whole numbers)."""
    conic: wp.vec3
    """Sigma2D^-1 as (a, b, c): d^T Sigma2D^-1 d = a dx^2 + 2 b dx dy + c dy^2."""
    opacity: float
    reach2: float
    """k^2: its alpha falls to 1/255 where d^T Sigma2D^-1 d = k^2 (its ellipse)."""
    colour: wp.vec3
    mean_C: wp.vec3
    """Its mean in the camera's frame, m (its depth: z)."""
    extent: float
    """How far from its mean it reaches, m (where its alpha falls to 1/255 along its longest axis, the
    filter's growth included): a ray's peak of it lies within this of the mean's foot on the ray."""


@wp.struct
class Pixels:
    """Each pixel's compositing so far, (n, H, W) each."""

    transmittance: wp.array3d(dtype=float)
    rgb: wp.array3d(dtype=wp.vec3)
    weight: wp.array3d(dtype=float)
    """The largest share of its light a Gaussian has taken until its opacity passed one half; -1 once
    it has."""
    best: wp.array3d(dtype=wp.int32)
    """That Gaussian (-1: none yet)."""
    limit: wp.array3d(dtype=float)
    """How far along its ray the splats may lie: what the meshes hit, or the camera's reach, m."""
    live: wp.array3d(dtype=wp.int32)
    """(n, H / CELL, W / CELL) how many of each cell's pixels still let light through: a Gaussian
    whose box holds no live cell changes nothing."""
    deepest: wp.array3d(dtype=float)
    """Each cell's farthest ``limit``: a Gaussian wholly beyond it there is hidden there."""


@wp.kernel
def project_kernel(
    cameras: CameraBatch,
    s: SplatData,
    width: int,
    height: int,
    footprint: float,
    span: int,
    block_stride: int,
    block_offset: int,
    band_rows: int,
    imaged: wp.array2d(dtype=Imaged),
    boxes: wp.array2d(dtype=wp.vec4i),
    count: wp.array(dtype=wp.int32),
):
    """Project Gaussians ``span`` at a time (blocks ``block_offset + k * block_stride``) into camera
    ``c``, and count the bands of rows each reaches (0: none)."""
    c, k = wp.tid()
    block = block_offset + k * block_stride
    R = cameras.R_WC[c, 0]
    origin = cameras.p_WC[c, 0]
    R_CW = wp.transpose(R)
    f = cameras.intrinsics[c]
    fx, fy, cx, cy = f[0], f[1], f[2], f[3]
    # The slopes x/z, y/z where the Jacobian stops following a mean off to the side (3DGS's: the view's
    # edge, with pixel centres at +0.5, and 0.3 of the half-view beyond), so that it does not smear.
    right = (float(width) - cx - 0.5) / fx + 0.15 * float(width) / fx
    left = (cx + 0.5) / fx + 0.15 * float(width) / fx
    bottom = (float(height) - cy - 0.5) / fy + 0.15 * float(height) / fy
    top = (cy + 0.5) / fy + 0.15 * float(height) / fy
    far = cameras.max_depth[c]
    # The image's four sides as planes through the camera (unit normals, pointing out of the view).
    side_right = wp.normalize(wp.vec3(1.0, 0.0, -(float(width) - 1.0 - cx) / fx))
    side_left = wp.normalize(wp.vec3(-1.0, 0.0, -cx / fx))
    side_bottom = wp.normalize(wp.vec3(0.0, 1.0, -(float(height) - 1.0 - cy) / fy))
    side_top = wp.normalize(wp.vec3(0.0, -1.0, -cy / fy))
    for j in range(span):
        i = block * span + j
        if i >= s.count:
            return
        flat = c * s.count + i
        count[flat] = 0
        frame = s.frame[i]
        if s.shown[frame] == 0:
            continue
        m = R_CW * (s.mean[i] - origin)
        z = m[2]
        if z < NEAR or z > far:
            continue
        v = s.variance[i]
        dilation = s.dilation[frame]
        opacity = s.opacity[i]
        if opacity <= CUT_ALPHA:
            continue
        # Wholly beyond a side of the image (its 1/255 ellipsoid and the filter's growth, a pixel more)?
        k2 = 2.0 * wp.log(opacity / CUT_ALPHA)
        spread = wp.sqrt(k2 * wp.max(v[0], wp.max(v[1], v[2]))) + (wp.sqrt(k2 * dilation) + 1.0) * z / wp.min(fx, fy)
        outside = wp.dot(m, side_right) > spread or wp.dot(m, side_left) > spread
        if outside or wp.dot(m, side_bottom) > spread or wp.dot(m, side_top) > spread:
            continue
        A = s.axes[i]  # world -> its own axes
        T = R_CW * wp.transpose(A)  # its own axes -> the camera's
        S = T * wp.diag(v) * wp.transpose(T)
        sx = z * wp.clamp(m[0] / z, -left, right)
        sy = z * wp.clamp(m[1] / z, -top, bottom)
        J0 = wp.vec3(fx / z, 0.0, -fx * sx / (z * z))
        J1 = wp.vec3(0.0, fy / z, -fy * sy / (z * z))
        a = wp.dot(J0, S * J0)
        b = wp.dot(J0, S * J1)
        cc = wp.dot(J1, S * J1)
        own = a * cc - b * b
        a += dilation
        cc += dilation
        det = a * cc - b * b
        if det <= 0.0:
            continue
        if s.compensated[frame] != 0 and dilation > 0.0:
            opacity = opacity * wp.sqrt(wp.max(own / det, 0.0))
            if opacity <= CUT_ALPHA:
                continue
            k2 = 2.0 * wp.log(opacity / CUT_ALPHA)  # alpha falls to 1/255 at Mahalanobis radius k
        u = fx * m[0] / z + cx
        w = fy * m[1] / z + cy
        hx = wp.sqrt(k2 * a)
        hy = wp.sqrt(k2 * cc)
        # Its box's pixels, clamped to the image before they become integers (a huge box stays finite).
        x0 = wp.max(int(wp.floor(wp.clamp(u - hx, -1.0, float(width)))), 0)
        x1 = wp.min(int(wp.ceil(wp.clamp(u + hx, -1.0, float(width)))), width - 1)
        y0 = wp.max(int(wp.floor(wp.clamp(w - hy, -1.0, float(height)))), 0)
        y1 = wp.min(int(wp.ceil(wp.clamp(w + hy, -1.0, float(height)))), height - 1)
        if x0 > x1 or y0 > y1:
            continue
        count[flat] = wp.int32(y1 // band_rows - y0 // band_rows + 1)
        boxes[c, i] = wp.vec4i(x0, y0, x1, y1)
        r = Imaged()
        r.centre = wp.vec2(u, w)
        r.conic = wp.vec3(cc / det, -b / det, a / det)
        r.opacity = opacity
        r.reach2 = k2
        r.mean_C = m
        grow = dilation * footprint * wp.length_sq(m)
        r.extent = wp.sqrt(k2 * (wp.max(v[0], wp.max(v[1], v[2])) + grow)) * 1.001 + 1e-5
        seen = s.frames[frame] * wp.normalize(s.mean[i] - origin)
        r.colour = sh_colour(s.sh, i, s.degree, seen)
        imaged[c, i] = r


@wp.kernel
def list_kernel(
    imaged: wp.array2d(dtype=Imaged),
    boxes: wp.array2d(dtype=wp.vec4i),
    count: wp.array(dtype=wp.int32),
    offsets: wp.array(dtype=wp.int32),
    gaussians: int,
    bands: int,
    band_rows: int,
    far: wp.array(dtype=float),
    shift: wp.array(dtype=wp.int32),
    span: int,
    block_stride: int,
    block_offset: int,
    keys: wp.array(dtype=wp.int64),
    values: wp.array(dtype=wp.int32),
):
    """Each seen Gaussian's entry in every band it reaches: key (the camera's band << DEPTH_BITS | its
    depth: the log of its ratio to the near plane, up to the camera's reach), value its index; at its
    place in the listing (``offsets``) moved on by its camera's ``shift`` (room for its sort group's)."""
    c, k = wp.tid()
    block = block_offset + k * block_stride
    scale = DEPTH_TOP / wp.log(far[c] / NEAR)
    for j in range(span):
        i = block * span + j
        if i >= gaussians:
            return
        flat = c * gaussians + i
        if count[flat] == 0:
            continue
        at = offsets[flat] + shift[c]
        box = boxes[c, i]
        depth = wp.int64(wp.clamp(wp.log(imaged[c, i].mean_C[2] / NEAR) * scale, 0.0, DEPTH_TOP))
        for band in range(box[1] // band_rows, box[3] // band_rows + 1):
            keys[at] = (wp.int64(c * bands + band) << DEPTH_SHIFT) | depth
            values[at] = wp.int32(i)
            at += 1


@wp.kernel
def ranges_kernel(
    keys: wp.array(dtype=wp.int64),
    start: int,
    end: int,
    first: wp.array(dtype=wp.int32),
    last: wp.array(dtype=wp.int32),
):
    """Where each band's run of the sorted keys[start:end] begins and ends."""
    k = start + wp.tid()
    band = int(keys[k] >> DEPTH_SHIFT)
    if k == start:
        first[band] = k
    elif int(keys[k - 1] >> DEPTH_SHIFT) != band:
        first[band] = k
    if k == end - 1:
        last[band] = k + 1
    elif int(keys[k + 1] >> DEPTH_SHIFT) != band:
        last[band] = k + 1


@wp.func
def peak(
    cameras: CameraBatch, splats: SplatData, footprints: wp.array3d(dtype=float), c: int, y: int, x: int, g: int
) -> float:
    """Where along pixel (x, y)'s ray Gaussian ``g`` answers most (``peak_distance``)."""
    table = cameras.ray_table[c]
    direction = cameras.R_WC[c, 0] * cameras.rays_C[table, y, x]
    return peak_distance(splats, g, cameras.p_WC[c, 0], direction, footprints[table, y, x])


@wp.kernel
def splat_rows_kernel(
    cameras: CameraBatch,
    footprints: wp.array3d(dtype=float),
    splats: SplatData,
    imaged: wp.array2d(dtype=Imaged),
    boxes: wp.array2d(dtype=wp.vec4i),
    values: wp.array(dtype=wp.int32),
    first: wp.array(dtype=wp.int32),
    last: wp.array(dtype=wp.int32),
    band_rows: int,
    shaded: int,
    tint: wp.array(dtype=wp.vec3),
    tinted: int,
    wanted: OutputFlags,
    band_stride: int,
    band_offset: int,
    px: Pixels,
    out: ImageBuffers,
):
    """Splat the Gaussians of camera ``c``'s band ``band_offset + k * band_stride``, nearest first, onto
    its rows, then composite them over what the meshes gave there."""
    c, k = wp.tid()
    band = band_offset + k * band_stride
    height = out.depth.shape[1]
    width = out.depth.shape[2]
    bands = (height + band_rows - 1) // band_rows
    if band >= bands:
        return
    begin = first[c * bands + band]
    end = last[c * bands + band]
    if begin == end:
        return  # no Gaussian reaches it
    row0 = band * band_rows
    row1 = wp.min(row0 + band_rows, height) - 1
    table = cameras.ray_table[c]
    # This camera's planes, once: the loops below index them, not the structs' fields.
    transmittance = px.transmittance[c]
    rgb = px.rgb[c]
    weights = px.weight[c]
    best = px.best[c]
    limits = px.limit[c]
    rays = cameras.rays_C[table]
    status = out.status[c]
    depth = out.depth[c]
    min_depth = cameras.min_depth[c]
    max_depth = cameras.max_depth[c]
    live = px.live[c]
    deepest = px.deepest[c]
    for cy in range(row0 // CELL, (row1 + CELL) // CELL):
        for cx in range(live.shape[1]):
            rows = wp.min(CELL * cy + CELL, row1 + 1) - CELL * cy
            live[cy, cx] = rows * (wp.min(CELL * cx + CELL, width) - CELL * cx)
            deepest[cy, cx] = 0.0
    for y in range(row0, row1 + 1):
        for x in range(width):
            transmittance[y, x] = 1.0
            rgb[y, x] = wp.vec3(0.0)
            weights[y, x] = 0.0
            best[y, x] = -1
            limit = reach(int(status[y, x]), depth[y, x], min_depth, max_depth) / rays[y, x][2]
            limits[y, x] = limit
            deepest[y // CELL, x // CELL] = wp.max(deepest[y // CELL, x // CELL], limit)
    for e in range(begin, end):
        g = values[e]
        box = boxes[c, g]
        y0 = wp.max(box[1], row0)
        y1 = wp.min(box[3], row1)
        r = imaged[c, g]
        nearest = wp.length(r.mean_C) - r.extent  # no ray meets it nearer than this
        seen = bool(False)  # noqa: UP018 (Warp: a variable the loops below change)
        for cy in range(y0 // CELL, y1 // CELL + 1):
            for cx in range(box[0] // CELL, box[2] // CELL + 1):
                if live[cy, cx] > 0 and deepest[cy, cx] > nearest:
                    seen = True
        if not seen:
            continue  # every pixel it reaches is already opaque, or hides it
        centre = r.centre
        q = r.conic
        opacity = r.opacity
        colour = r.colour
        mean_C = r.mean_C
        extent = r.extent
        k2 = r.reach2
        cut = -0.5 * k2 * 1.0001
        inverse_a = 1.0 / q[0]
        wide = box[2] - box[0] > 4  # a narrow box's rows are walked whole: the span's sums cost more
        for y in range(y0, y1 + 1):
            dy = float(y) - centre[1]
            x0 = box[0]
            x1 = box[2]
            if wide:  # the row's pixels inside its ellipse: a dx^2 + 2 b dy dx + c dy^2 <= k^2
                spread = q[1] * q[1] * dy * dy - q[0] * (q[2] * dy * dy - k2)
                if spread < 0.0:
                    continue
                middle = centre[0] - q[1] * dy * inverse_a
                half = wp.sqrt(spread) * inverse_a + 1e-3
                x0 = wp.max(x0, int(wp.ceil(middle - half)))
                x1 = wp.min(x1, int(wp.floor(middle + half)))
            across = -0.5 * q[2] * dy * dy
            for x in range(x0, x1 + 1):
                before = transmittance[y, x]
                if before <= MIN_TRANSMITTANCE:
                    continue
                dx = float(x) - centre[0]
                power = across - (0.5 * q[0] * dx + q[1] * dy) * dx
                if power > 0.0 or power < cut:
                    continue  # (outside its ellipse: under 1/255, known without its exp)
                alpha = wp.min(MAX_ALPHA, opacity * wp.exp(power))
                if alpha < CUT_ALPHA:
                    continue
                # Its peak along the ray lies within its reach of the mean's foot on the ray: wholly
                # beyond what the meshes hit, it is hidden; across it, the peak itself says.
                limit = limits[y, x]
                foot = wp.dot(mean_C, rays[y, x])
                if foot - extent >= limit:
                    continue
                if foot + extent >= limit:
                    t = peak(cameras, splats, footprints, c, y, x, g)
                    if t <= 0.0 or t >= limit:
                        continue
                rgb[y, x] = rgb[y, x] + colour * (alpha * before)
                after = before * (1.0 - alpha)
                transmittance[y, x] = after
                if after <= MIN_TRANSMITTANCE:
                    live[y // CELL, x // CELL] = live[y // CELL, x // CELL] - 1
                weight = weights[y, x]
                if weight >= 0.0:  # its opacity has not passed one half yet
                    share = before - wp.max(after, 0.5)
                    if share > weight:
                        best[y, x] = g
                        weight = share
                    if after <= 0.5:
                        weight = -1.0
                    weights[y, x] = weight
    R = cameras.R_WC[c, 0]
    for y in range(row0, row1 + 1):
        for x in range(width):
            if transmittance[y, x] >= 1.0 or int(status[y, x]) == STATUS_OUTSIDE_LENS:
                continue  # no splat here (the common case: ``composite`` takes the structs)
            hit = SplatTrace()
            hit.transmittance = transmittance[y, x]
            hit.rgb = rgb[y, x]
            hit.t_half = -1.0
            hit.segment = 0
            if weights[y, x] < 0.0:  # the pixel's depth and class: the Gaussian that gave it most
                g = best[y, x]
                hit.t_half = peak(cameras, splats, footprints, c, y, x, g)
                hit.segment = splats.segment[g]
            ray_C = rays[y, x]
            composite(out, wanted, min_depth, c, y, x, hit, R * ray_C, ray_C[2], shaded, tint, tinted)


#: Bytes a camera holds per Gaussian (its record, box, count and offset), and per pixel.
BYTES_PER_IMAGED = 80
BYTES_PER_PIXEL = 28


def raster_bytes(cameras: int, gaussians: int, width: int, height: int) -> int:
    """Device bytes a rasteriser of ``cameras`` cameras holds for ``gaussians`` Gaussians, besides its
    lists (12 bytes twice per entry a frame makes)."""
    return cameras * (gaussians * BYTES_PER_IMAGED + width * height * BYTES_PER_PIXEL)


class SplatRaster:
    """The rasteriser's arrays for ``cameras`` cameras of ``width`` x ``height`` seeing ``splats`` (a
    ``DeviceSplats``), kept from frame to frame (the lists' grow as they need)."""

    def __init__(self, splats, cameras: int, width: int, height: int, device):
        self.splats = splats
        self.device = d = wp.get_device(device)
        self.width, self.height = width, height
        n, count = cameras, splats.count
        self.bands = -(-height // BAND_ROWS)
        self._launches = Launches(d, keep=16)  # a frame's projections and listings, per thread
        self._imaged = wp.zeros((n, count), dtype=Imaged, device=d)
        self._boxes = wp.zeros((n, count), dtype=wp.vec4i, device=d)
        self._count = wp.zeros(n * count, dtype=wp.int32, device=d)
        self._offsets = wp.zeros(n * count, dtype=wp.int32, device=d)
        px = Pixels()
        px.transmittance = wp.zeros((n, height, width), dtype=float, device=d)
        px.rgb = wp.zeros((n, height, width), dtype=wp.vec3, device=d)
        px.weight = wp.zeros((n, height, width), dtype=float, device=d)
        px.best = wp.zeros((n, height, width), dtype=wp.int32, device=d)
        px.limit = wp.zeros((n, height, width), dtype=float, device=d)
        cells = (n, -(-height // int(CELL)), -(-width // int(CELL)))
        px.live = wp.zeros(cells, dtype=wp.int32, device=d)
        px.deepest = wp.zeros(cells, dtype=float, device=d)
        self.pixels = px
        self._first = wp.zeros(n * self.bands, dtype=wp.int32, device=d)
        self._last = wp.zeros(n * self.bands, dtype=wp.int32, device=d)
        self._keys = wp.zeros(0, dtype=wp.int64, device=d)
        self._values = wp.zeros(0, dtype=wp.int32, device=d)
        self._band_bits = max(1, (n * self.bands - 1).bit_length())
        self._shift = wp.zeros(n, dtype=wp.int32, device=d)
        """Per camera, how far its sort group's entries lie past their place in the listing."""
        self.entries = 0
        """How many (Gaussian, band) entries the last frame listed."""

    def render(
        self, cameras: CameraBatch, n: int, footprints: wp.array, largest_footprint: float, run, threads: int, draw
    ) -> None:
        """Project and list the Gaussians for the cameras' poses (``run(work, items)`` maps the CPU's
        ``threads``), then ``draw(inputs, pixels)`` the bands (the renderer's launch over them)."""
        d, s = self.device, self.splats.data
        count = self.splats.count
        span = SPAN if d.is_cpu else 1
        blocks = -(-count // span)
        threads = max(1, min(threads, blocks)) if d.is_cpu else 1

        def project(offset: int) -> None:
            dim = (n, -(-(blocks - offset) // threads))
            args = [cameras, s, self.width, self.height, largest_footprint, span, threads, offset, BAND_ROWS]
            outputs = [self._imaged, self._boxes, self._count]
            self._launches(project_kernel, dim, args, outputs)

        def emit(offset: int) -> None:
            dim = (n, -(-(blocks - offset) // threads))
            args = [self._imaged, self._boxes, self._count, self._offsets, count, self.bands, BAND_ROWS]
            args += [cameras.max_depth, self._shift]
            args += [span, threads, offset]
            self._launches(list_kernel, dim, args, [self._keys, self._values])

        def sort(group: tuple[int, int]) -> None:  # a group's entries, then as much room for the sort
            start, length = group
            keys, values = self._keys[start : start + 2 * length], self._values[start : start + 2 * length]
            wp.utils.radix_sort_pairs(keys, values, length, end_bit=DEPTH_BITS + self._band_bits)
            ranges = [self._keys, start, start + length, self._first, self._last]
            wp.launch(ranges_kernel, dim=length, inputs=ranges, device=d)

        with stage("splats: projected"):
            run(project, range(threads))
        with stage("splats: sorted"):
            wp.utils.array_scan(self._count, self._offsets, inclusive=False)
            total = int(self._offsets[-1:].numpy()[0]) + int(self._count[-1:].numpy()[0])
            self.entries = total
            if total == 0:
                return
            if 2 * total > len(self._keys):  # the radix sort's room: twice the entries
                size = max(2 * total, 2 * len(self._keys))
                self._keys = wp.empty(size, dtype=wp.int64, device=d)
                self._values = wp.empty(size, dtype=wp.int32, device=d)
            groups = self._sort_groups(n, count, total, threads)
            run(emit, range(threads))
            self._first.zero_()
            self._last.zero_()
            run(sort, [g for g in groups if g[1] > 0])
        with stage("splats: composited"):
            lists = [self._imaged, self._boxes, self._values, self._first, self._last]
            draw([cameras, footprints, s, *lists, BAND_ROWS], self.pixels)

    def _sort_groups(self, n: int, count: int, total: int, threads: int) -> list[tuple[int, int]]:
        """The sorts that order the lists: on the CPU one per thread, each a run of whole cameras
        (Warp's CPU radix sort is one thread's), else one; as (start, entries), a group's room for its
        sort after its entries (its cameras' ``shift``). The order within each is the one sort's."""
        groups = min(n, threads) if self.device.is_cpu else 1
        if groups == 1:
            self._shift.zero_()
            return [(0, total)]
        starts = np.append(self._offsets.numpy()[::count][:n], total).astype(np.int64)  # each camera's first entry
        cuts = np.linspace(0, n, groups + 1).round().astype(int)
        shift = np.repeat(starts[cuts[:-1]], np.diff(cuts)).astype(np.int32)  # the entries before the group
        self._shift.assign(shift)
        return [(2 * int(starts[a]), int(starts[b] - starts[a])) for a, b in zip(cuts[:-1], cuts[1:])]
