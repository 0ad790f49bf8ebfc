"""An event camera renders as often as what it sees moves: its own motion, and that of the people,
props and other vehicles near it. A still camera watching another drone fly by renders at the
half-pixel pace of the drone's image (it rendered at ``min_rate``, the image jumping 3.4 px), and a
still camera watching nothing move renders at ``min_rate`` and fires nothing."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.engine import Engine
from goggles.rig.runfile import parse_run_config
from goggles.transport.schema import EVENT_DTYPE, decode_any
from tests.support import Kept

VFOV_DEG, HEIGHT, CAMERA_UP = 45.0, 48, 0.3


def run(tmp_path, route):
    (tmp_path / "floor.obj").write_text("v -20 -20 0\nv 20 -20 0\nv 20 20 0\nv -20 20 0\nf 1 2 3\nf 1 3 4\n")
    (tmp_path / "floor.toml").write_text(
        '[scene]\nname = "floor"\n[[asset]]\nname = "floor"\nfile = "floor.obj"\nunits = "m"\nup = "+z"\n'
    )
    config = parse_run_config(
        {
            "run": {"mode": "sim", "seed": 5, "scene": str(tmp_path / "floor.toml")},
            "clock": {"scale": 1000.0},
            "lcm": {"enabled": False},
            "zmq": {"enabled": False},
            "vehicle": [  # the watcher sits on the floor, looking along +x; the passer crosses 4 m ahead
                {"name": "watcher", "start": [0.0, 0.0, 0.0, 0.0], "state_rate": 960.0, "route": []},
                {"name": "passer", "start": [4.0, -3.0, 0.0, 0.0], "state_rate": 960.0, "route": route},
            ],
            "camera": [
                {
                    "vehicle": "watcher",
                    "name": "dvs",
                    "width": 64,
                    "height": HEIGHT,
                    "vfov_deg": VFOV_DEG,
                    "position": [0.0, 0.0, CAMERA_UP],
                    "outputs": ["events"],
                    "rate": 960.0,
                    "min_rate": 20.0,
                }
            ],
        }
    )
    sink = Kept()
    engine = Engine(config, device="cpu", sinks=[sink])
    try:
        engine.run(duration=3.0)
    finally:
        engine.close()
    packets = [decode_any(d) for c, d in sink.messages if c == "watcher/dvs/events"]
    passer = [decode_any(d) for c, d in sink.messages if c == "passer/state"]
    states = {m.header.utime: np.array(m.position) for m in passer}
    return packets, states


@pytest.mark.slow
def test_a_still_event_camera_renders_at_the_pace_of_a_drone_flying_by(tmp_path):
    packets, states = run(tmp_path, [[4.0, -3.0, 1.0], [4.0, 3.0, 1.0]])
    focal = (HEIGHT / 2) / np.tan(np.radians(VFOV_DEG / 2))
    camera = np.array([0.0, 0.0, CAMERA_UP])
    worst, windows = 0.0, 0
    for packet in packets:  # the passer's centre in the image at each window's start and end (pinhole)
        a, b = states.get(packet.header.utime), states.get(packet.end_utime)
        if a is None or b is None:
            continue
        (xa, ya, za), (xb, yb, zb) = a - camera, b - camera
        worst = max(worst, focal * np.hypot(yb / xb - ya / xa, zb / xb - za / xa))
        windows += 1
    assert windows > 100
    assert worst < 1.0  # half a pixel asked, its prediction from the last window (3.4 px at min_rate)
    rates = np.histogram([p.header.utime for p in packets], bins=6, range=(0, 3_000_000))[0] / 0.5
    assert rates.max() >= 80.0  # renders per second while it passes (20 at min_rate)
    assert sum(len(np.frombuffer(p.data, EVENT_DTYPE)) for p in packets) > 500


@pytest.mark.slow
def test_a_still_event_camera_watching_nothing_move_renders_at_its_min_rate_and_fires_nothing(tmp_path):
    packets, _ = run(tmp_path, [])
    assert len(packets) == pytest.approx(3.0 * 20.0, abs=2)
    assert sum(len(np.frombuffer(p.data, EVENT_DTYPE)) for p in packets) == 0


def test_an_engine_with_an_event_camera_runs_again_after_a_run(tmp_path):
    """A second ``run`` of the same engine (``goggles bench latency --breakdown`` warms up with one) starts
    its warm-up render after the first run's events, not at time 0 (it said 'event camera time went back')."""
    (tmp_path / "floor.obj").write_text("v -20 -20 0\nv 20 -20 0\nv 20 20 0\nv -20 20 0\nf 1 2 3\nf 1 3 4\n")
    (tmp_path / "floor.toml").write_text(
        '[scene]\nname = "floor"\n[[asset]]\nname = "floor"\nfile = "floor.obj"\nunits = "m"\nup = "+z"\n'
    )
    config = parse_run_config(
        {
            "run": {"mode": "sim", "scene": str(tmp_path / "floor.toml")},
            "clock": {"scale": 1000.0},
            "lcm": {"enabled": False},
            "zmq": {"enabled": False},
            "vehicle": [{"name": "q", "start": [0.0, 0.0, 1.0, 0.0]}],
            "camera": [
                {"vehicle": "q", "name": "dvs", "width": 32, "height": 24, "outputs": ["events"], "rate": 200.0}
            ],
        }
    )
    sink = Kept()
    with Engine(config, device="cpu", sinks=[sink]) as engine:
        engine.run(duration=0.2)
        engine.run(duration=0.4)  # to 0.4 s of sim time
    times = [decode_any(d).header.utime for c, d in sink.messages if c == "q/dvs/events"]
    assert times and times == sorted(times) and max(times) > 0.2e6  # the second run's events came, in order
