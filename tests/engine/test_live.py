"""Live mode: renders from poses on the bus, contacts of real drones with the virtual world, timed
sensors by wall time, bounded extrapolation, and what the status line says of a pose source."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from goggles.client import Client
from goggles.engine import Engine
from goggles.rig.runfile import parse_run_config
from goggles.transport.schema import EVENT_DTYPE
from tests.support import PAD_CONTACTS, PAD_DESCENT, Running, endpoints, run_config


@pytest.mark.slow
def test_live_mode_renders_from_poses_on_the_bus(device):
    config = run_config(
        mode="live",
        cameras=[
            {
                "vehicle": "quad0",
                "name": "front",
                "width": 32,
                "height": 24,
                "vfov_deg": 60.0,
                "rate": 30.0,
                "outputs": ["depth"],
                "position": [0.1, 0.0, 0.0],
            }
        ],
    )
    running = Running(config, duration=4.0, device=device)
    client = Client(endpoints(config))
    client.subscribe("quad0/front/depth")
    client.wait_for_subscriptions(30.0)
    sent = {}
    matched = []
    for k in range(40):
        position = [-4.0 + 0.05 * k, 0.2, 1.5]
        utime = client.send_pose("quad0", position, [1.0, 0.0, 0.0, 0.0])
        sent[utime] = position
        time.sleep(1 / 30)
        for item in iter(lambda: client.receive(timeout=0.0), None):
            if item[1].pose_utime in sent:
                matched.append(item[1])
    running.finish()
    client.close()
    assert len(matched) > 20
    for image in matched:
        expected = np.array(sent[image.pose_utime]) + [0.1, 0.0, 0.0]
        np.testing.assert_allclose(image.position, expected, atol=1e-6)


@pytest.mark.slow
def test_a_live_vehicle_that_touches_the_virtual_world_is_reported_once_per_contact(device):
    """A real drone posed over ZeroMQ onto the arena's virtual landing pad: each contact is published
    once, when it begins, stamped with its pose's time, at the pad's top, pushed up, as deep as the
    drone's sphere reaches into it; poses inside it say nothing more, and the next contact is new.
    Every pose counts: sent at once, poses come in polls of several, and a contact one pose long
    (a pass through a thin bar) is told though the pose after it is clear."""
    config = run_config(mode="live", cameras=[])
    running = Running(config, duration=60.0, device=device)
    client = Client(endpoints(config))
    client.subscribe("quad0/collision")
    client.wait_for_subscriptions(30.0)
    start = time.time_ns() // 1000
    sent = [client.send_pose("quad0", [0.0, 0.0, z], [1, 0, 0, 0], start + 4167 * k) for k, z in enumerate(PAD_DESCENT)]
    deadline = time.monotonic() + 10.0  # the engine's input counter acknowledges the poses
    while running.engine.counters.received < len(sent) and time.monotonic() < deadline:
        time.sleep(0.001)
    heard = [item[1] for item in iter(lambda: client.receive(timeout=2.0), None)]
    running.stop.set()
    running.finish()
    client.close()
    assert [m.header.utime for m in heard] == [sent[k] for k in PAD_CONTACTS]
    for message, k in zip(heard, PAD_CONTACTS):
        assert message.vehicle == "quad0" and message.other == "world"
        np.testing.assert_allclose(message.point, [0.0, 0.0, 0.1], atol=1e-6)
        np.testing.assert_allclose(message.normal, [0.0, 0.0, 1.0], atol=1e-6)
        assert message.depth == pytest.approx(0.18 - (PAD_DESCENT[k] - 0.1), abs=1e-5)


@pytest.mark.slow
def test_live_mode_measures_ranges_and_scans_and_keeps_the_clock_by_wall_time():
    """A live drone's range sensors and LiDARs, and the clock message, were never published: live mode
    rendered its cameras as poses came and ran nothing else. They run at their rates by wall time now,
    from the newest pose: an altimeter over the landing pad (its top 0.1 m up) reads the height above it."""
    sensors = parse_run_config(
        {
            "lcm": {"enabled": False},
            "vehicle": [{"name": "quad0", "route": []}],
            "range_sensor": [{"vehicle": "quad0", "name": "alt", "preset": "flightgoggles-altimeter"}],
            "lidar": [{"vehicle": "quad0", "name": "lidar", "preset": "vlp16"}],
        }
    )
    config = dataclasses.replace(
        run_config(mode="live", cameras=[]), range_sensors=sensors.range_sensors, lidars=sensors.lidars
    )
    running = Running(config, duration=120.0)
    client = Client(endpoints(config))
    client.subscribe("quad0/alt/ranges", "quad0/lidar/lidar", "clock")
    client.wait_for_subscriptions(30.0)
    got: dict[str, list] = {"quad0/alt/ranges": [], "quad0/lidar/lidar": [], "clock": []}
    end = time.monotonic() + 60.0  # about 2.5 s here; longer on a loaded machine

    def enough() -> bool:
        return len(got["quad0/alt/ranges"]) >= 60 and len(got["quad0/lidar/lidar"]) >= 5 and len(got["clock"]) >= 5

    while time.monotonic() < end and not enough():
        client.send_pose("quad0", [0.0, 0.0, 1.6], [1.0, 0.0, 0.0, 0.0])
        stop = time.monotonic() + 0.02
        while time.monotonic() < stop:
            item = client.receive(timeout=0.005)
            if item is not None and item[0] in got:
                got[item[0]].append(item[1])
    running.stop.set()
    running.finish()
    client.close()
    assert running.error is None
    ranges, scans, clocks = got["quad0/alt/ranges"], got["quad0/lidar/lidar"], got["clock"]
    assert len(ranges) >= 40 and len(scans) >= 5 and len(clocks) >= 5, (len(ranges), len(scans), len(clocks))
    readings = np.array([r.ranges[0] for r in ranges[-30:]])  # from the pose over the pad (σ 0.0949 m)
    assert abs(readings.mean() - 1.5) < 0.08, readings
    assert all(b.header.utime > a.header.utime for a, b in zip(ranges, ranges[1:]))  # wall time, in order
    assert "quad0/alt" in clocks[-1].rate_names and clocks[-1].scale == 1.0


@pytest.mark.slow
def test_live_pose_extrapolation_is_bounded_by_the_horizon(device):
    import dataclasses

    from goggles.frames import transform as pose

    config = run_config(mode="live", cameras=[])
    for horizon, expected_ahead in ((0.05, 0.02), (0.01, 0.01), (0.0, 0.0)):
        engine = Engine(dataclasses.replace(config, extrapolate=horizon, zmq=None), device=device)
        vehicle = engine.vehicles["quad0"]
        now = 1.7e9  # an injected clock: the pose is exactly 20 ms old when it is carried forward
        turn = 0.02  # rad over the 20 ms between the two poses
        vehicle.previous = (pose([1.0, 0.0, 1.0], [1, 0, 0, 0]), int((now - 0.04) * 1e6))
        vehicle.T_WB = pose([1.02, 0.0, 1.0], [np.cos(turn / 2), 0, 0, np.sin(turn / 2)])  # 1 m/s, 1 rad/s
        vehicle.pose_utime = int((now - 0.02) * 1e6)  # 20 ms old
        T = vehicle.pose(engine.config.extrapolate, now=now)
        assert T[0, 3] == pytest.approx(1.02 + expected_ahead, abs=1e-6)
        yaw = np.arctan2(T[1, 0], T[0, 0])
        assert yaw == pytest.approx(turn + expected_ahead, abs=1e-6)  # 1 rad/s for the same time
        vehicle.stale = True
        stale = vehicle.pose(engine.config.extrapolate, now=now)
        np.testing.assert_allclose(stale, vehicle.T_WB)  # a stale pose is not carried
        engine.close()


def test_the_status_line_says_when_a_live_body_has_no_pose_or_has_gone_silent():
    """A live run whose bridge never started, or stopped (it sends nothing more, not even
    ``valid = false``), rendered the last pose with nothing in the status line to say so."""
    import dataclasses

    from goggles.frames import transform as pose

    engine = Engine(dataclasses.replace(run_config(mode="live", cameras=[]), zmq=None), device="cpu")
    try:
        vehicle = engine.vehicles["quad0"]
        assert engine.status_line().endswith("quad0 NO POSE YET")
        vehicle.take_live_pose(pose([1.0, 0.0, 1.0], [1, 0, 0, 0]), 1_000_000)  # as the bus does
        assert "quad0" not in engine.status_line().split("host copies")[-1]
        heard = vehicle.heard_at
        assert vehicle.pose_source_problem(now=heard + 0.4) is None  # an injected clock
        assert vehicle.pose_source_problem(now=heard + 2.04) == "SILENT 2.0 s"
        vehicle.stale = True  # the source said it lost the body
        assert vehicle.pose_source_problem(now=heard) == "STALE" and engine.status_line().endswith("quad0 STALE")
    finally:
        engine.close()


def _edge_scene(folder) -> str:
    """A wall 2 m ahead (x = 2), dark where y > 0, bright where y < 0: an OBJ with two materials."""
    (folder / "edge.mtl").write_text("newmtl dark\nKd 0.1 0.1 0.1\nnewmtl bright\nKd 0.9 0.9 0.9\n")
    (folder / "edge.obj").write_text(
        "mtllib edge.mtl\n"
        "v 2 0 -8\nv 2 8 -8\nv 2 8 8\nv 2 0 8\nv 2 -8 -8\nv 2 -8 8\n"
        "usemtl dark\nf 1 4 3\nf 1 3 2\n"
        "usemtl bright\nf 5 6 4\nf 5 4 1\n"
    )
    return str(folder / "edge.obj")


@pytest.mark.slow
def test_live_events_fall_on_the_poses_clock_within_a_window_of_the_true_crossing(tmp_path, device):
    """A real drone's event camera in live mode, posed over ZeroMQ on a motion-capture clock far from
    wall time (stamps from 10^12 µs, 250 Hz), sliding sideways past an edge: each pixel's events come
    within one window (a pose interval) of the instant the edge crosses its centre, on the poses' clock
    (they were stamped by the render's wall clock, two windows late); a window per pose, none between."""
    camera = {"vehicle": "quad0", "name": "dvs", "width": 32, "height": 24, "vfov_deg": 60.0, "outputs": ["events"]}
    config = dataclasses.replace(run_config(mode="live", cameras=[camera]), scene=_edge_scene(tmp_path))
    running = Running(config, duration=120.0, device=device)
    client = Client(endpoints(config))
    client.subscribe("quad0/dvs/events")
    client.wait_for_subscriptions(30.0)
    start, period, speed, y0 = 10**12, 4000, 5.0, -0.3  # µs, µs, m/s, m
    stamps = [start + period * k for k in range(60)]
    packets = []
    for k, stamp in enumerate(stamps):  # each pose once the engine published the window it ended: no race
        client.send_pose("quad0", [0.0, y0 + speed * k * period * 1e-6, 1.0], [1, 0, 0, 0], stamp)
        deadline = time.monotonic() + 30.0
        if k == 0:  # the first render sets the pixels' levels, firing nothing; it follows its poll
            while running.engine.counters.received < 1:
                assert time.monotonic() < deadline, "the engine never took the first pose"
                time.sleep(0.001)
            continue
        while not packets or packets[-1].end_utime < stamp:
            assert time.monotonic() < deadline, f"no window ended at pose {k}"
            item = client.receive(timeout=0.1)
            if item is not None:
                packets.append(item[1])
    running.stop.set()
    running.finish()
    client.close()
    assert [p.end_utime for p in packets] == stamps[1:]  # a window per pose, ending at its stamp
    f = 12.0 / np.tan(np.radians(30.0))
    checked = 0
    for packet in packets:
        events = np.frombuffer(bytes(packet.data), EVENT_DTYPE)
        for x, t in zip(events["x"], events["t"]):
            # The pixel's ray meets the wall's edge (y = 0, 2 m ahead) when the camera is at y = 2 (x - cx) / f
            # (image x is body -y): the edge's image moves right as the drone slides left (+y).
            crossing = start + (2.0 * (float(x) - 15.5) / f - y0) / speed * 1e6
            window = packet.end_utime - packet.header.utime
            assert abs(packet.header.utime + t / 1000.0 - crossing) <= window, (x, t, crossing)
            checked += 1
    assert checked > 50
