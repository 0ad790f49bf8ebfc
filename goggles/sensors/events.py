"""An event camera (a DVS): each pixel fires when its log intensity has changed by a contrast threshold
since its last event, as ESIM models it (Rebecq, Gehrig and Scaramuzza, CoRL 2018).

Between two renders at t0 and t1, a pixel's log intensity L = ln(I + eps) (I the luminance of the
rendered colour, after its camera's noise model, in [0, 1]) is taken to move linearly from L0 to L1.
Every time it crosses its reference plus C+ (brighter) or minus C- (darker) the pixel fires an event
(x, y, t, polarity) at the crossing's interpolated time, and the reference moves by that threshold.
Each pixel's C+ and C- are drawn once, around the model's, with the mismatch sigma_C (the seed and
the camera's stream decide them, so a replay has the same pixels). An event within the refractory
period of the pixel's last one is not fired (its reference still moves: the pixel comes back in step
with the light). Background activity fires noise events at a rate per pixel, uniform in time, of
either polarity, drawn per window from the window's time (``goggles.sensors.draws``): a replay of
the same renders gives the same events, in the same order (sorted by time, row, column, polarity).

The renders follow the motion (``next_interval``, ESIM's optic-flow rule): the next comes when the
image has moved at most half a pixel, from the camera's speed and turn rate and the nearest surface
it saw, within the camera's render rates. Where the image is smooth at the pixel scale (textures,
shading) that keeps each pixel's change between two renders below a threshold; an edge that crosses
a pixel is a step at any render rate (each pixel is one ray), and its events fall within the window
that saw it. Pixels outside a lens see nothing and never fire.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles.errors import ConfigError
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.runtime.progress import load_kernels
from goggles.sensors.draws import NoiseDraws, draw_state, host_generator

wp.set_module_options(FORWARD_ONLY)

log = logging.getLogger(__name__)

#: Most threshold crossings a pixel fires in one window (a flash from black to white at C = 0.05 is ~140).
MAX_CROSSINGS = 255
#: The render interval's target: the image moves at most this many pixels between two renders.
PIXELS_PER_RENDER = 0.5
#: The draw key of the pixels' thresholds (measurements' keys are times, below 2^63).
THRESHOLDS_KEY = 2**64 - 1
#: Events, numpy, as ``EventSensor.events`` gives them: pixel, absolute time (ns) and polarity (+1, -1).
EVENTS = np.dtype([("x", "<u2"), ("y", "<u2"), ("t", "<i8"), ("polarity", "i1")])


@dataclass(frozen=True)
class EventCameraModel:
    """A DVS pixel array: thresholds, their mismatch, refractory period, noise, the log's offset."""

    contrast_positive: float = 0.2
    """C+: the log-intensity rise that fires an ON event (ESIM's and v2e's default 0.2)."""
    contrast_negative: float = 0.2
    """C-: the log-intensity fall that fires an OFF event."""
    threshold_sigma: float = 0.0
    """Pixel-to-pixel standard deviation of C+ and C- (v2e's default 0.03); each drawn once."""
    refractory_s: float = 0.0
    """After an event, the pixel fires none for this long, s."""
    noise_rate_hz: float = 0.0
    """Background activity: noise events per pixel per second (real sensors: ~0.1 Hz in light)."""
    log_eps: float = 1e-3
    """L = ln(I + eps), I in [0, 1]: keeps black finite (ESIM's log_eps)."""

    def __post_init__(self) -> None:
        for name in ("contrast_positive", "contrast_negative"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.01 <= value <= 2.0):
                raise ConfigError(f"event camera {name} = {value!r}: a log-intensity step in [0.01, 2]")
        checks = {
            "threshold_sigma": (0.0, 0.5 * min(self.contrast_positive, self.contrast_negative)),
            "refractory_s": (0.0, 1.0),
            "noise_rate_hz": (0.0, 1e4),
            "log_eps": (1e-9, 1.0),
        }
        for name, (low, high) in checks.items():
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
                raise ConfigError(f"event camera {name} = {value!r}: must be in [{low:g}, {high:g}]")


@wp.func
def log_intensity(rgb: wp.array4d(dtype=wp.uint8), c: int, y: int, x: int, eps: float) -> float:
    """ln(I + eps) of the pixel's Rec. 709 luminance, I in [0, 1]."""
    luminance = (
        0.2126 * float(rgb[c, y, x, 0]) + 0.7152 * float(rgb[c, y, x, 1]) + 0.0722 * float(rgb[c, y, x, 2])
    ) / 255.0
    return wp.log(luminance + eps)


@wp.struct
class PixelState:
    level: wp.array3d(dtype=float)
    """The last render's log intensity."""
    reference: wp.array3d(dtype=float)
    """The log intensity the pixel's next event is measured from."""
    last_event: wp.array3d(dtype=wp.int64)
    """The time of its last event, ns."""
    c_positive: wp.array3d(dtype=float)
    c_negative: wp.array3d(dtype=float)


@wp.struct
class EventBuffer:
    """Where events go: a region of ``capacity`` per launching thread, its count beside it (which
    may pass the capacity: the events past it are lost, and counted), and the event frame (n, 2, H, W)
    of positive and negative counts where asked for."""

    camera: wp.array(dtype=wp.int32)
    x: wp.array(dtype=wp.int32)
    y: wp.array(dtype=wp.int32)
    t: wp.array(dtype=wp.int64)
    polarity: wp.array(dtype=wp.int8)
    count: wp.array(dtype=wp.int32)
    capacity: int
    frame: wp.array4d(dtype=float)
    framed: int
    nearest: wp.array2d(dtype=float)
    """(threads, cameras): the nearest surface the window's render saw, m (the next render's interval)."""


@wp.func
def fire(buffer: EventBuffer, region: int, c: int, x: int, y: int, t: wp.int64, polarity: int):
    if buffer.framed != 0:
        channel = 0
        if polarity < 0:
            channel = 1
        buffer.frame[c, channel, y, x] = buffer.frame[c, channel, y, x] + 1.0
    if buffer.capacity > 0:
        slot = wp.atomic_add(buffer.count, region, 1)
        if slot < buffer.capacity:
            at = region * buffer.capacity + slot
            buffer.camera[at] = c
            buffer.x[at] = x
            buffer.y[at] = y
            buffer.t[at] = t
            buffer.polarity[at] = wp.int8(polarity)


#: Events per second past which an event camera is told to be overloaded: 12 bytes each, 1.2 GB/s on
#: the bus, past what any client reads.
OVERLOAD_EVENTS_PER_S = 1e8
#: Most noise events of one pixel in one window (a window of a second at 1 kHz of noise holds ~1000).
MAX_NOISE = wp.constant(256)


@wp.kernel
def events_kernel(
    rays_C: wp.array3d(dtype=wp.vec3),
    ray_table: wp.array(dtype=wp.int32),
    rgb: wp.array4d(dtype=wp.uint8),
    ranges: wp.array3d(dtype=float),
    window: wp.array(dtype=wp.int64),
    fresh: wp.array(dtype=wp.int32),
    starting: wp.array(dtype=wp.int32),
    eps: wp.array(dtype=float),
    refractory_ns: wp.array(dtype=wp.int64),
    noise_rate: wp.array(dtype=float),
    draws: wp.array(dtype=wp.int64),
    streams: wp.array(dtype=wp.int32),
    state: PixelState,
    buffer: EventBuffer,
    row_stride: int,
    row_offset: int,
    span: int,
):
    """The events of one window [window[0], window[1]) of every pixel of rows ``row_offset + k *
    row_stride`` (a camera ``fresh`` or ``starting`` only sets its pixels' levels: its first render)."""
    c, k, block = wp.tid()
    y = row_offset + k * row_stride
    width = rgb.shape[2]
    table = ray_table[c]
    t0 = window[0]
    t1 = window[1]
    first = fresh[c] != 0
    if starting.shape[0] > 0:
        if starting[c] != 0:
            first = True
    span_ns = float(t1 - t0)
    for column in range(span):
        x = block * span + column
        ray = rays_C[table, y, x]
        if ray[0] == 0.0 and ray[1] == 0.0 and ray[2] == 0.0:  # outside the lens
            continue
        now = log_intensity(rgb, c, y, x, eps[c])
        if ranges[c, y, x] > 0.0 and ranges[c, y, x] < 1e30:  # a surface (not the sky, not too close)
            wp.atomic_min(buffer.nearest, row_offset, c, ranges[c, y, x])
        if first:
            state.level[c, y, x] = now
            state.reference[c, y, x] = now
            state.last_event[c, y, x] = t0 - refractory_ns[c] - wp.int64(1)
            continue
        before = state.level[c, y, x]
        state.level[c, y, x] = now
        change = now - before
        reference = state.reference[c, y, x]
        last = state.last_event[c, y, x]
        step = state.c_positive[c, y, x]
        polarity = 1
        if now < reference:
            step = -state.c_negative[c, y, x]
            polarity = -1
        crossings = int(0)  # noqa: UP018 (Warp: a variable the loop below changes)
        while crossings < MAX_CROSSINGS and (now - (reference + step)) * float(polarity) >= 0.0:
            reference = reference + step
            crossings += 1
            fraction = float(0.0)  # noqa: UP018 (Warp: a variable the branch below changes)
            if change != 0.0:
                fraction = wp.clamp((reference - before) / change, 0.0, 1.0)
            t = t0 + wp.int64(fraction * span_ns)
            if t - last >= refractory_ns[c]:
                fire(buffer, row_offset, c, x, y, t, polarity)
                last = t
        state.reference[c, y, x] = reference
        state.last_event[c, y, x] = last
        if noise_rate[c] > 0.0:  # a Poisson process: as many as the window's length holds
            random = draw_state(draws, streams[c], y * width + x)
            count = wp.min(int(wp.poisson(random, noise_rate[c] * span_ns * 1e-9)), MAX_NOISE)
            for _ in range(count):
                t = t0 + wp.int64(wp.randf(random) * span_ns)
                sign = 1
                if wp.randf(random) < 0.5:
                    sign = -1
                fire(buffer, row_offset, c, x, y, t, sign)


class EventSensor:
    """Event cameras on a renderer's colour, one per camera of its batch (None: not an event camera).

    Args:
        models: an ``EventCameraModel`` per camera, or None.
        renderer: the ``goggles.render.Renderer`` whose colour (after any camera noise) it reads.
        seed, streams: the run's seed and each camera's stream (``draws.stream_of`` its name): they
            draw the pixels' thresholds and the noise events.
        frame: keep an event frame (``frame``: (n, 2, H, W) counts of ON and OFF events of the last
            window) instead of the events themselves (a learning environment's observation).
    """

    def __init__(self, models, renderer, seed: int = 0, streams=None, frame: bool = False):
        self.models = list(models)
        self._renderer = r = renderer
        d = r.device
        n, h, w = r.num_cameras, r.height, r.width
        if not {"rgb", "range"} <= set(r.outputs):
            raise ConfigError("an event camera reads the colour and the range: render 'rgb' and 'range'")
        self._stream_list = list(range(n) if streams is None else streams)
        streams = self._stream_list
        active = [m if m is not None else EventCameraModel() for m in self.models]
        self._active = active
        state = PixelState()
        state.level = wp.zeros((n, h, w), dtype=float, device=d)
        state.reference = wp.zeros((n, h, w), dtype=float, device=d)
        state.last_event = wp.zeros((n, h, w), dtype=wp.int64, device=d)
        state.c_positive = wp.zeros((n, h, w), dtype=float, device=d)
        state.c_negative = wp.zeros((n, h, w), dtype=float, device=d)
        self._state = state
        self._draw_thresholds(seed)
        self._eps = wp.array([m.log_eps for m in active], dtype=float, device=d)
        self._refractory = wp.array([round(m.refractory_s * 1e9) for m in active], dtype=wp.int64, device=d)
        noise = [0.0 if model is None else m.noise_rate_hz for model, m in zip(self.models, active)]
        self._noise = wp.array(noise, dtype=float, device=d)  # nor noise events
        self._most_noise = max(noise, default=0.0)
        self._window = wp.array(np.zeros(2, np.int64), dtype=wp.int64, device=d)
        self._fresh = wp.ones(n, dtype=wp.int32, device=d)
        self._none = wp.zeros(0, dtype=wp.int32, device=d)
        self._draws = NoiseDraws(seed, d)
        self._streams = wp.array(streams, dtype=wp.int32, device=d)
        self._threads = 1 if d.is_cuda else r.threads
        self._framed = frame
        self._capacity = 0 if frame else n * h * w
        self._buffer = self._allocate(self._capacity)
        self.frame = self._buffer.frame
        """(n, 2, H, W) ON and OFF counts of the last window (``frame=True``)."""
        self.window: tuple[int, int] | None = None
        """The last update's window, [start, end) in ns of sim time (None before the first)."""
        self.dropped = 0
        self._told_overload = False
        """Events lost to a full buffer since the start (the buffer then grows for the next window)."""
        load_kernels(events_kernel.module, d)

    def _draw_thresholds(self, seed: int) -> None:
        """Each pixel's C+ and C-, drawn from ``seed`` and its camera's stream (at least a quarter of the
        nominal: a pixel with no threshold would fire without end)."""
        r = self._renderer
        h, w = r.height, r.width
        positive, negative = np.empty((r.num_cameras, h, w), np.float32), np.empty((r.num_cameras, h, w), np.float32)
        for c, (m, stream) in enumerate(zip(self._active, self._stream_list)):
            if self.models[c] is None:  # not an event camera: no contrast ever reaches an endless threshold
                positive[c] = negative[c] = np.inf
                continue
            rng = host_generator(seed, stream, THRESHOLDS_KEY)  # each camera's own, whatever else is in the run
            floor = 0.25 * min(m.contrast_positive, m.contrast_negative)
            positive[c] = np.maximum(m.contrast_positive + m.threshold_sigma * rng.standard_normal((h, w)), floor)
            negative[c] = np.maximum(m.contrast_negative + m.threshold_sigma * rng.standard_normal((h, w)), floor)
        self._state.c_positive.assign(positive)
        self._state.c_negative.assign(negative)

    def reseed(self, seed: int) -> None:
        """Draw the pixels' thresholds and the noise from ``seed`` again, and start anew (``reset``)."""
        self._draw_thresholds(seed)
        self._draws.reseed(seed)
        self.reset()

    def _allocate(self, capacity: int) -> EventBuffer:
        d, r = self._renderer.device, self._renderer
        size = max(1, capacity * self._threads)
        buffer = EventBuffer()
        buffer.camera = wp.zeros(size, dtype=wp.int32, device=d)
        buffer.x = wp.zeros(size, dtype=wp.int32, device=d)
        buffer.y = wp.zeros(size, dtype=wp.int32, device=d)
        buffer.t = wp.zeros(size, dtype=wp.int64, device=d)
        buffer.polarity = wp.zeros(size, dtype=wp.int8, device=d)
        buffer.count = wp.zeros(self._threads, dtype=wp.int32, device=d)
        buffer.capacity = capacity
        shape = (r.num_cameras, 2, r.height, r.width) if self._framed else (1, 1, 1, 1)
        buffer.frame = wp.zeros(shape, dtype=float, device=d)
        buffer.framed = int(self._framed)
        buffer.nearest = wp.zeros((self._threads, r.num_cameras), dtype=float, device=d)
        return buffer

    def reset(self, cameras=None) -> None:
        """Forget the pixels' levels of ``cameras`` (indices; None: all): their next ``update`` only
        sets them (an environment's reset; a warm-up render)."""
        if cameras is None:
            self.window = None
            self._fresh.fill_(1)
            return
        fresh = self._fresh.numpy().copy()
        fresh[np.asarray(cameras, dtype=np.int64)] = 1
        self._fresh.assign(fresh)

    def update(self, t_ns: int, starting: wp.array | None = None) -> None:
        """Fire the events of the window from the last update to ``t_ns`` (sim time, ns) on the device,
        from the renderer's present colour; the first update only sets the pixels' levels, as it does
        for the cameras ``reset`` names and those where ``starting`` (an (n,) int32 device array: an
        environment's episode mask) is not 0."""
        r, b = self._renderer, self._buffer
        t0 = t_ns if self.window is None else self.window[1]
        if t_ns < t0:
            raise ValueError(f"event camera time went back: {t_ns} ns after {t0} ns")
        self._window.assign(np.array([t0, t_ns], np.int64))
        self._draws.at(t_ns // 1000)
        if not self._framed:  # room for the window's noise: lost events are lost for good
            mean = self._most_noise * (t_ns - t0) * 1e-9
            pixels = -(-r.num_cameras * r.height * r.width // self._threads)
            needed = int(pixels * (2.0 + mean + 6.0 * np.sqrt(mean)))
            if needed > b.capacity:
                self._capacity = needed
                self._buffer = b = self._allocate(needed)
        b.count.zero_()
        b.nearest.fill_(1e30)
        if self._framed:
            b.frame.zero_()
        starting = starting if starting is not None else self._none
        inputs = [r.rays_C, r.ray_table, r.buffers.rgb, r.buffers.range, self._window, self._fresh, starting, self._eps]
        inputs += [self._refractory, self._noise]
        r.launch_rows(events_kernel, [*inputs, self._draws.array, self._streams, self._state, b], [])
        self._fresh.zero_()
        self.window = (t0, t_ns)

    def events(self) -> list[np.ndarray]:
        """The last window's events of each camera (``EVENTS``: x, y, t in ns, polarity), in time order
        (then row, column, polarity): a copy to the host. Events past the buffer are counted in
        ``dropped`` and the buffer grows for the next window."""
        b = self._buffer
        counts = b.count.numpy()
        kept = np.minimum(counts, b.capacity)
        if (counts > b.capacity).any():
            lost = int((counts - kept).sum())
            self.dropped += lost
            log.warning(
                "event camera: %d events past its buffer of %d were lost; it grows for the next window",
                lost,
                b.capacity,
            )
            self._capacity = int(max(2 * b.capacity, counts.max()))
            self._buffer = self._allocate(self._capacity)
            self._buffer.nearest.assign(b.nearest)  # the window's measure still holds
        take = np.concatenate([np.arange(k) + i * b.capacity for i, k in enumerate(kept)]).astype(np.int64)
        camera, x, y = b.camera.numpy()[take], b.x.numpy()[take], b.y.numpy()[take]
        t, polarity = b.t.numpy()[take], b.polarity.numpy()[take]
        self._tell_overload(len(take))
        order = np.lexsort((polarity, x, y, t, camera))
        out = []
        bounds = np.searchsorted(camera[order], np.arange(self._renderer.num_cameras + 1))
        for c in range(self._renderer.num_cameras):
            pick = order[bounds[c] : bounds[c + 1]]
            events = np.empty(len(pick), EVENTS)
            events["x"], events["y"], events["t"], events["polarity"] = x[pick], y[pick], t[pick], polarity[pick]
            out.append(events)
        return out

    def _tell_overload(self, count: int) -> None:
        """Say once when the cameras fire past what a real one delivers (``OVERLOAD_EVENTS_PER_S``): a
        flickering scene's 750 M events per second took a run to 0.00 of real time, unsaid."""
        if self._told_overload or self.window is None or self.window[1] <= self.window[0]:
            return
        rate = count / ((self.window[1] - self.window[0]) * 1e-9)
        if rate > OVERLOAD_EVENTS_PER_S:
            self._told_overload = True
            log.warning(
                "event camera: %.3g events per sim second, past the %.0f M/s a real one delivers: the run slows "
                "to the events' pace (a flickering light? raise contrast_threshold or lower the resolution)",
                rate,
                OVERLOAD_EVENTS_PER_S * 1e-6,
            )

    def next_interval(self, shortest_s: float, longest_s: float, motions, others=None) -> float:
        """Seconds to the next render: the time the image takes to move ``PIXELS_PER_RENDER`` pixels,
        from each camera's ``(speed m/s, turn rate rad/s)`` in ``motions`` and the nearest surface it
        saw last, and from what else moves near it (``others``: per camera, ``(speed m/s, distance m)``
        of each moving thing), bounded by ``[shortest_s, longest_s]`` (the camera's render rates)."""
        nearest = self._buffer.nearest.numpy().min(axis=0)
        others = others or [()] * len(motions)
        fastest = 0.0
        for camera, (speed, turn), distance, near in zip(self._renderer.cameras, motions, nearest, others):
            focal = max(camera.fx, camera.fy)  # pixels per radian near the axis (an equidistant lens's everywhere)
            fastest = max(fastest, focal * (turn + speed / max(float(distance), 1e-3)))
            for moving, away in near:
                fastest = max(fastest, focal * moving / max(away, 1e-3))
        if fastest <= 0.0:
            return longest_s
        return float(min(max(PIXELS_PER_RENDER / fastest, shortest_s), longest_s))
