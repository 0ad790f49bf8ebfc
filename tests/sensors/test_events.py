"""The event camera against the DVS pixel's definition (ESIM, Rebecq et al. 2018) on rendered scenes of
known contrast and motion: events per pixel an edge crosses, their times and polarity, no events
from a static scene, the count's 1/C scaling, the noise rate, refractory periods, lenses."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.errors import ConfigError
from goggles.frames import camera_pose_from_body, transform
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.sensors.events import EventCameraModel, EventSensor
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

DARK, BRIGHT = 40, 200
DISTANCE = 2.0
EPS = 1e-3


def edge_wall(dark=DARK, bright=BRIGHT):
    """A wall 2 m ahead of the origin (x = 2), dark where y > 0 (the image's left), bright where y < 0."""
    texture = np.full((8, 4096, 3), dark, np.uint8)
    texture[:, 2048:] = bright
    uv = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    corners = [[DISTANCE, 8, -8], [DISTANCE, -8, -8], [DISTANCE, -8, 8], [DISTANCE, 8, 8]]
    return quad(corners, uv, texture)


def textured_wall(seed: int = 0):
    """Blocks of two levels far apart in log intensity (ln(235 / 20) = 2.5): each edge that passes a
    pixel fires many events at any C here, so the count's rounding is small."""
    levels = np.random.default_rng(seed).choice(np.uint8([20, 235]), (16, 16))
    texture = np.repeat(np.repeat(np.repeat(levels[..., None], 3, axis=2), 32, axis=0), 32, axis=1)  # sharp edges
    uv = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    return quad([[DISTANCE, 3, -3], [DISTANCE, -3, -3], [DISTANCE, -3, 3], [DISTANCE, 3, 3]], uv, texture)


def sensor(device, wall, model, camera=None, **kwargs):
    camera = camera or CameraModel.from_fov(64, 48, 60.0)
    settings = RenderSettings(shading=Shading.UNLIT, outputs={"rgb", "range"})
    renderer = Renderer(DeviceScene(scene_of((wall, 1)), device), [camera], settings)
    return renderer, EventSensor([model], renderer, **kwargs)


def fly(renderer, events, y_at, times):
    """Render at each time from a camera at body y = ``y_at(t)`` looking along +x; every event."""
    out = []
    for t in times:
        renderer.render(camera_pose_from_body(transform([0.0, y_at(t), 0.0], [1, 0, 0, 0]))[None])
        events.update(int(round(t * 1e9)))
        out.append(events.events()[0])
    return np.concatenate(out)


def test_a_moving_edge_fires_its_contrast_over_c_events_per_pixel_at_the_crossing_times(device):
    """The edge sweeps right (the camera moves left at v): each pixel it crosses goes from bright to
    dark, so fires floor(|ln((I_d + eps) / (I_b + eps))| / C) OFF events within one render of the time
    the edge passes its centre."""
    camera = CameraModel.from_fov(64, 48, 60.0)
    renderer, events = sensor(device, edge_wall(), EventCameraModel(0.2, 0.2), camera)
    dt, v = 0.002, 10.0  # 0.4 px per render
    y0 = -0.05
    times = np.arange(0.0, 0.1, dt)
    fired = fly(renderer, events, lambda t: y0 + v * t, times)
    change = np.log((DARK / 255 + EPS) / (BRIGHT / 255 + EPS))
    expected = int(abs(change) // 0.2)
    assert np.all(fired["polarity"] == -1)
    columns = np.unique(fired["x"])
    # The edge's column: u = cx + f y / d (optical x is the body's -y, and the edge at y = 0 sits at
    # optical x = camera y); it crosses column u when the camera is at y = (u - cx) d / f.
    crossing = ((columns - camera.cx) * DISTANCE / camera.fx - y0) / v
    reached = columns[(crossing > times[0] + dt) & (crossing < times[-1] - dt)]
    assert len(reached) >= 10
    for u in reached:
        mine = fired[fired["x"] == u]
        per_row = np.bincount(mine["y"], minlength=camera.height)
        assert np.all(np.abs(per_row - expected) <= 1), (u, per_row)
        t_u = ((u - camera.cx) * DISTANCE / camera.fx - y0) / v
        # Within the render interval the change falls in, widened by the time a texel's bilinear ramp
        # (3.9 mm) takes to pass: a change split over two intervals is interpolated within each.
        assert np.all(np.abs(mine["t"] * 1e-9 - t_u) <= dt + 16.0 / 4096 / v), u
    assert np.all(np.diff(fired["t"]) >= 0)  # in time order


def test_a_static_scene_fires_nothing_and_a_brightening_one_fires_on_events(device):
    renderer, events = sensor(device, textured_wall(), EventCameraModel())
    assert len(fly(renderer, events, lambda t: 0.0, np.arange(0.0, 0.05, 0.005))) == 0
    fired = fly(renderer, events, lambda t: 0.0 if t < 0.051 else 0.2, [0.06])  # it moves: both polarities
    assert {-1, 1} <= set(np.unique(fired["polarity"]).tolist())


def test_a_camera_whose_model_is_none_fires_nothing_beside_one_that_fires(device):
    """``EventSensor(models=[None, model])``: None means that camera of the batch is no event camera. A
    moving textured wall with noise asked for: the event camera fires, the other never (not even noise)."""
    camera = CameraModel.from_fov(64, 48, 60.0)
    settings = RenderSettings(shading=Shading.UNLIT, outputs={"rgb", "range"})
    renderer = Renderer(DeviceScene(scene_of((textured_wall(), 1)), device), [camera, camera], settings)
    events = EventSensor([None, EventCameraModel(noise_rate_hz=50.0)], renderer)
    counts = np.zeros(2, int)
    for t in np.arange(0.0, 0.2, 0.005):
        pose = camera_pose_from_body(transform([0.0, 0.6 * t, 0.0], [1, 0, 0, 0]))
        renderer.render(np.stack([pose, pose]))
        events.update(int(round(t * 1e9)))
        counts += [len(e) for e in events.events()]
    assert counts[0] == 0 and counts[1] > 500


def test_the_event_count_of_a_textured_scene_scales_as_one_over_c(device):
    counts = {}
    for c in (0.1, 0.2, 0.4):
        renderer, events = sensor(device, textured_wall(), EventCameraModel(c, c))
        counts[c] = len(fly(renderer, events, lambda t: 0.6 * t, np.arange(0.0, 0.3, 0.005)))
    assert counts[0.4] > 500
    assert counts[0.1] / counts[0.2] == pytest.approx(2.0, rel=0.2)
    assert counts[0.2] / counts[0.4] == pytest.approx(2.0, rel=0.2)


@pytest.mark.parametrize(("rate", "dt", "windows"), [(4.0, 0.01, 50), (200.0, 0.02, 10)])
def test_noise_events_come_at_their_rate_of_either_polarity(device, rate, dt, windows):
    """Background activity is a Poisson process per pixel: rate x time events, whatever the windows'
    length (at 200 Hz and 20 ms windows a pixel fires 4 per window on average; one per window at most
    delivered 50 Hz)."""
    renderer, events = sensor(device, textured_wall(), EventCameraModel(noise_rate_hz=rate))
    fired = fly(renderer, events, lambda t: 0.0, np.arange(0.0, dt * (windows + 1) - 1e-9, dt))
    pixels = 64 * 48
    expected = pixels * windows * rate * dt
    assert abs(len(fired) - expected) < 5.0 * np.sqrt(expected)
    assert abs(np.mean(fired["polarity"] == 1) - 0.5) < 0.05


def test_a_pixel_fires_at_most_once_per_refractory_period(device):
    refractory = 0.003
    renderer, events = sensor(device, edge_wall(), EventCameraModel(0.2, 0.2, refractory_s=refractory))
    fired = fly(renderer, events, lambda t: -0.05 + 10.0 * t, np.arange(0.0, 0.04, 0.002))
    assert len(fired) > 0
    for x, y in {(int(a), int(b)) for a, b in zip(fired["x"], fired["y"])}:
        times = fired["t"][(fired["x"] == x) & (fired["y"] == y)]
        assert np.all(np.diff(times) >= refractory * 1e9)


def test_threshold_mismatch_is_drawn_once_per_pixel_by_seed_and_stream(device):
    def run(seed, stream):
        renderer, events = sensor(
            device, textured_wall(), EventCameraModel(0.2, 0.2, 0.03), seed=seed, streams=[stream]
        )
        return fly(renderer, events, lambda t: 0.3 * t, np.arange(0.0, 0.1, 0.005))

    first = run(1, 7)
    assert np.array_equal(first, run(1, 7))  # a replay fires the same events, in the same order
    assert not np.array_equal(first, run(1, 8))


def test_pixels_outside_a_fisheye_never_fire(device):
    camera = CameraModel.fisheye(64, 48, 180.0)
    renderer, events = sensor(device, textured_wall(), EventCameraModel(noise_rate_hz=50.0), camera)
    fired = fly(renderer, events, lambda t: 0.3 * t, np.arange(0.0, 0.1, 0.005))
    radius = np.hypot(fired["x"] - camera.cx, fired["y"] - camera.cy)
    assert len(fired) > 100 and radius.max() <= 24.0


def test_the_next_render_comes_when_the_image_has_moved_half_a_pixel(device):
    """ESIM's optic-flow rule: a camera moving at v and turning at w sees a surface at distance Z move
    at most f (w + v / Z) pixels per second; the next render comes after half a pixel of that."""
    camera = CameraModel.from_fov(64, 48, 60.0)
    renderer, events = sensor(device, edge_wall(), EventCameraModel(0.2, 0.2), camera)
    fly(renderer, events, lambda t: 0.0, [0.0, 0.01])  # the wall's nearest point: 2 m straight ahead
    f = max(camera.fx, camera.fy)
    assert events.next_interval(1e-6, 1.0, [(1.0, 0.0)]) == pytest.approx(0.5 / (f * 1.0 / DISTANCE), rel=1e-3)
    assert events.next_interval(1e-6, 1.0, [(0.0, 2.0)]) == pytest.approx(0.5 / (f * 2.0), rel=1e-6)
    assert events.next_interval(0.001, 1.0, [(50.0, 0.0)]) == 0.001  # bounded by the fastest rate
    assert events.next_interval(1e-6, 0.1, [(0.0, 0.0)]) == 0.1  # still: the slowest


def test_bad_event_camera_settings_are_refused():
    with pytest.raises(ConfigError, match="contrast_positive"):
        EventCameraModel(contrast_positive=0.0)
    with pytest.raises(ConfigError, match="threshold_sigma"):
        EventCameraModel(0.2, 0.2, threshold_sigma=0.5)
    with pytest.raises(ConfigError, match="noise_rate_hz"):
        EventCameraModel(noise_rate_hz=float("nan"))


def test_a_camera_firing_past_what_a_bus_carries_is_told_once(device, caplog):
    """A scene that flickers from black to white every microsecond: every pixel fires its contrast
    over C events per window, billions per second; the run says so once, not at every window."""
    import logging

    renderer, events = sensor(device, textured_wall(), EventCameraModel(0.05, 0.05))
    rgb = renderer.buffers.rgb
    renderer.render(camera_pose_from_body(np.eye(4))[None])
    with caplog.at_level(logging.WARNING, logger="goggles.sensors.events"):
        for k in range(4):
            rgb.fill_(255 if k % 2 else 0)
            events.update(1000 * (k + 1))
            assert len(events.events()[0]) > 0 or k == 0
    told = [r for r in caplog.records if "events per sim second" in r.getMessage()]
    assert len(told) == 1 and "past the 100 M/s" in told[0].getMessage()
