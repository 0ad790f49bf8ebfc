"""Sim mode: the clock's scale, the race's outputs, rates, the route pilot, commands, recorded work,
and physics on a device of its own."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

import goggles_lcm
from goggles.client import Client
from goggles.dynamics import ControlMode, SimulatorSettings
from goggles.engine import Engine
from goggles.errors import ConfigError
from goggles.render import Renderer
from tests.support import Kept, Running, endpoints, run_config


@pytest.mark.slow
def test_auto_scale_holds_the_camera_interval_under_a_slow_renderer(monkeypatch):
    original = Renderer.trace

    def slow(self):
        time.sleep(0.03)  # a renderer that needs 30 ms per frame: 0.9 s per sim second at 30 Hz
        original(self)

    monkeypatch.setattr(Renderer, "trace", slow)
    config = run_config(scale="auto")
    client = Client(endpoints(config))
    client.subscribe("quad0/stereo_left/depth")
    time.sleep(0.2)
    start = time.monotonic()
    running = Running(config, duration=3.0)
    frames = []
    while running.thread.is_alive():
        item = client.receive(timeout=0.1)
        if item:
            frames.append(item[1])
    wall = time.monotonic() - start
    running.finish()
    client.close()
    utimes = np.array([f.header.utime for f in frames])
    assert len(frames) >= 80  # the first frames may go out before the subscription joined
    np.testing.assert_allclose(np.diff(utimes), 1e6 / 30, atol=1.0)  # nominal interval, no frame skipped
    assert np.all(np.diff([f.header.seq for f in frames]) == 1)
    scale = running.engine.clock.scale
    assert 0.5 < scale < 1.0, scale  # slowed below real time, but not absurdly
    assert wall > 3.0  # 3 sim seconds could not be done in 3 wall seconds


@pytest.mark.slow
def test_race_outputs_beacons_ranges_and_collisions(tmp_path, device):
    """A run with the default course publishes beacon detections, altimeter ranges, and a collision
    when the vehicle is commanded into a gate."""
    from goggles.paths import default_course

    config = run_config(
        route=False,
        scale=3.0,
        cameras=[
            {
                "vehicle": "quad0",
                "name": "front",
                "width": 64,
                "height": 48,
                "vfov_deg": 70.0,
                "rate": 30.0,
                "outputs": ["beacons"],
                "position": [0.1, 0.0, 0.0],
            }
        ],
    )
    import dataclasses

    from goggles.rig.runfile import RangeSensorConfig
    from goggles.sensors.ranges import FLIGHTGOGGLES_ALTIMETER

    altimeter = RangeSensorConfig("quad0", "altimeter", FLIGHTGOGGLES_ALTIMETER, np.diag([1.0, -1.0, -1.0, 1.0]), 60.0)
    config = dataclasses.replace(config, course=default_course(), range_sensors=(altimeter,))
    running = Running(config, device=device)
    client = Client(endpoints(config))
    for channel in ("quad0/front/beacons", "quad0/altimeter/ranges", "quad0/collision"):
        client.latest(channel, timeout=0.0)
    # Resting on the pad is a contact, told at the engine's first look: often before a client has
    # joined (an H100 got there first), so it is read from the vehicle, and a copy that came is dropped.
    deadline = time.monotonic() + 60.0
    while "world" not in running.engine.vehicles["quad0"].touching:
        assert time.monotonic() < deadline and running.thread.is_alive(), "the vehicle never touched its pad"
        time.sleep(0.01)
    pad = client.latest("quad0/collision", timeout=0.2)
    assert pad is None or pad.normal[2] > 0.5
    client.send_command("quad0", ControlMode.POSITION, [0.0, 0.0, 1.8, 0.0])
    time.sleep(2.0)
    beacons = client.latest("quad0/front/beacons", timeout=2.0)
    assert beacons.num_beacons >= 4 and list(beacons.ids) == sorted(beacons.ids)
    assert {"gate1/0", "gate1/1", "gate1/2", "gate1/3"} <= set(beacons.ids)
    ranges = client.latest("quad0/altimeter/ranges", timeout=2.0)
    assert ranges.num_ranges == 1 and 1.4 < ranges.ranges[0] < 2.3
    assert "world" not in running.engine.vehicles["quad0"].touching  # off the pad
    client.send_command("quad0", ControlMode.POSITION, [3.0, 0.95, 1.8, 0.0])  # into gate1's left bar
    collision = client.latest("quad0/collision", timeout=10.0)
    while collision is not None and collision.normal[2] > 0.5:  # a late copy of the pad's contact
        collision = client.latest("quad0/collision", timeout=10.0)
    running.stop.set()
    running.finish()
    client.close()
    assert collision is not None and collision.vehicle == "quad0"
    assert collision.normal[0] < -0.5  # pushed back from the bar's face towards -x


@pytest.mark.parametrize(
    ("mode", "says"), [("sim", "fixed"), ("lockstep", "lockstep: client step requests"), ("live", "live (wall time")]
)
def test_status_line_says_what_drives_time(mode, says, device):
    engine = Engine(run_config(mode=mode, scale=2.0, route=False), device=device)
    try:
        line = engine.status_line()
    finally:
        engine.close()
    assert f"scale={'-' if mode != 'live' else ''}" in line and says in line, line
    assert "auto" not in line


@pytest.mark.parametrize("hexa_imu_hz", [240.0, 480.0])
def test_the_achieved_imu_rate_of_two_fleets_is_their_rate_not_its_double(hexa_imu_hz):
    """Two airframes are two simulators (fleets), each sampling its IMU: at one rate, the run's "imu"
    rate (status line, clock message) is that rate; at two rates, each fleet has its own."""
    alone = dataclasses.replace(run_config(scale=1000.0, cameras=[]), zmq=None)
    hexa = dataclasses.replace(
        alone.vehicles[0],
        name="hexa",
        preset="hexa-550",
        imu_rate=hexa_imu_hz,
        start=(0.0, 3.0, 0.0, 0.0),
        route=((0.0, 3.0, 1.5, 0.0),),
    )
    engine = Engine(dataclasses.replace(alone, vehicles=(alone.vehicles[0], hexa)), device="cpu")
    try:
        engine.run(duration=1.0)
        rates = engine.rates.rates()
    finally:
        engine.close()
    if hexa_imu_hz == 240.0:
        assert rates["imu"] == pytest.approx(240.0, rel=1e-6) and "hexa/imu" not in rates
    else:
        assert rates["quad0/imu"] == pytest.approx(240.0, rel=1e-6)
        assert rates["hexa/imu"] == pytest.approx(480.0, rel=1e-6) and "imu" not in rates


@pytest.mark.slow
def test_every_camera_of_a_render_group_reports_its_rate():
    """Cameras of one size and rate on two vehicles render in one group; the status line and the clock
    message gave the group's rate under its first camera's name only, and the second camera had none."""

    alone = dataclasses.replace(run_config(scale=1000.0, route=False), zmq=None)
    second = dataclasses.replace(alone.vehicles[0], name="quad1", start=(0.0, 2.0, 0.0, 0.0))
    down = dataclasses.replace(alone.cameras[0], vehicle="quad1")
    sink = Kept()
    engine = Engine(
        dataclasses.replace(alone, vehicles=(alone.vehicles[0], second), cameras=(*alone.cameras, down)),
        device="cpu",
        sinks=[sink],
    )
    try:
        engine.run(duration=1.0)
        assert len(engine.rig.groups) == 1 and len(engine.rig.groups[0].cameras) == 4  # two stereo pairs, one render
        rates, line = engine.rates.rates(), engine.status_line()
    finally:
        engine.close()
    for name in ("quad0/stereo", "quad1/stereo"):
        assert rates[name] == pytest.approx(30.0, rel=1e-6) and f"{name} 30.0 Hz" in line
    clock = goggles_lcm.clock_t.decode([d for c, d in sink.messages if c == "clock"][-1])
    assert {"quad0/stereo", "quad1/stereo"} <= set(clock.rate_names)


def test_the_route_pilot_flies_its_waypoints_in_turn_and_starts_over(device):
    """A run file's route is flown waypoint after waypoint (each taken within the tolerance), and a
    closed route starts over: the state messages pass each in order, then the first again."""

    route = ((0.0, 0.0, 1.5, 0.0), (2.0, 0.0, 1.5, 0.0), (2.0, 2.0, 2.0, 0.0))
    config = dataclasses.replace(run_config(scale=1000.0, cameras=[]), zmq=None)
    config = dataclasses.replace(config, vehicles=(dataclasses.replace(config.vehicles[0], route=route),))
    sink = Kept()
    engine = Engine(config, device=device, sinks=[sink])
    try:
        engine.run(duration=12.0)
    finally:
        engine.close()
    positions = [goggles_lcm.vehicle_state_t.decode(d).position for c, d in sink.messages if c == "quad0/state"]
    visits = []  # the waypoints passed within the tolerance, in order, each once per pass
    for p in positions:
        near = [k for k, w in enumerate(route) if np.linalg.norm(np.subtract(p, w[:3])) < 0.4]
        if near and (not visits or visits[-1] != near[0]):
            visits.append(near[0])
    assert visits[:4] == [0, 1, 2, 0]


@pytest.mark.slow
def test_a_vehicle_on_a_raised_pad_starts_at_rest_and_one_above_it_hovering():
    """The demo's quad starts on its 0.1 m landing pad (floor_z 0.1): at rest there, its rotors still,
    as on the ground; one 2 m above the same floor starts hovering. Before, any start above z = 0
    started the rotors at hover speed, the one on the pad too."""
    config = run_config(mode="lockstep", route=False, start=[0, 0, 0.1, 0], floor_z=0.1)
    above = dataclasses.replace(config.vehicles[0], name="quad1", start=(3.0, 0.0, 2.0, 0.0))
    engine = Engine(dataclasses.replace(config, vehicles=(config.vehicles[0], above), zmq=None), device="cpu")
    try:
        states = engine.rig.fleets[0].sim.states()
        assert np.all(states.rotor_speed[0] == 0.0)
        assert np.allclose(states.rotor_speed[1], engine.rig.fleets[0].sim.airframe.hover_speed)
    finally:
        engine.close()


def test_a_command_reaches_only_its_vehicle(device):
    from goggles.dynamics import MultirotorSim, load_airframe

    sim = MultirotorSim(
        load_airframe("fg-quad"), 3, SimulatorSettings(floor_z=None, disturbances=False, seed=2), device=device
    )
    sim.reset(position=[[0.0, 0.0, 1.0], [2.0, 0.0, 1.0], [4.0, 0.0, 1.0]], rotor_speed=sim.airframe.hover_speed)
    sim.set_command(ControlMode.POSITION, [[0.0, 0.0, 1.0, 0.0], [2.0, 0.0, 1.0, 0.0], [4.0, 0.0, 1.0, 0.0]])
    sim.set_command(ControlMode.POSITION, [2.0, 1.5, 2.0, 0.0], vehicles=[1])
    sim.step(3 * 960)
    p = sim.states().position
    np.testing.assert_allclose(p[1], [2.0, 1.5, 2.0], atol=0.1)
    np.testing.assert_allclose(p[[0, 2]], [[0.0, 0.0, 1.0], [4.0, 0.0, 1.0]], atol=0.1)
    with pytest.raises(ConfigError, match="vehicles must be indices 0..2"):
        sim.set_command(ControlMode.POSITION, [0.0, 0.0, 1.0, 0.0], vehicles=[3])
    sim.close()


@pytest.mark.slow
def test_recorded_steps_and_frames_publish_what_eager_ones_do(device):
    """Replaying recordings (``goggles.runtime.recorded_work``: CUDA graphs there) of the physics steps and of each
    camera group's frame publishes byte for byte what launching every kernel does: a noisy stereo
    pair and a rolling-shutter colour camera with noise, a vehicle that collides with a gate's bar."""
    from goggles.paths import default_course

    cameras = [
        {"vehicle": "quad0", "name": "stereo", "width": 40, "height": 24, "baseline": 0.1, "rate": 30.0,
         "outputs": ["depth", "segmentation"], "depth_model": "d435"},
        {"vehicle": "quad0", "name": "front", "width": 32, "height": 24, "rate": 60.0, "outputs": ["rgb"],
         "noise_model": "global-shutter", "readout_s": 0.01},
    ]  # fmt: skip
    config = run_config(scale=1000.0, route=True, cameras=cameras)
    into_the_bar = dataclasses.replace(config.vehicles[0], route=((3.0, 0.95, 1.8, 0.0),))
    config = dataclasses.replace(config, zmq=None, course=default_course(), vehicles=(into_the_bar,))
    runs = {}
    for recorded in (False, True):
        sink = Kept()
        engine = Engine(config, device=device, backend="warp", recorded=recorded, sinks=[sink])
        engine.run(duration=3.0)
        assert all(group._frame.recordings > 0 for group in engine.rig.groups) == recorded
        assert all(fleet.sim._recorded.recordings > 0 for fleet in engine.rig.fleets) == recorded
        engine.close()
        runs[recorded] = [(c, d[:16] + d[24:]) for c, d in sink.messages if c != "clock"]  # wall clocks apart
    assert runs[True] == runs[False]
    channels = {c for c, _ in runs[True]}
    assert {"quad0/stereo_left/depth", "quad0/front/rgb", "quad0/collision"} <= channels


@pytest.mark.slow
def test_physics_on_a_world_of_its_own_flies_and_collides_as_on_the_render_world(device):
    """``physics_device``: the vehicles simulate on their own copy of the scene and gates (here on the
    same kind of device, so the two runs can be compared) and publish byte for byte what a run sharing
    the render world publishes: states, IMU, the collision with a gate's bar, and the images."""
    from goggles.paths import default_course

    config = run_config(scale=1000.0, route=True)
    into_the_bar = dataclasses.replace(config.vehicles[0], route=((3.0, 0.95, 1.8, 0.0),))
    config = dataclasses.replace(config, zmq=None, course=default_course(), vehicles=(into_the_bar,))
    runs = {}
    for name, physics_device in (("shared", None), ("own", device)):
        sink = Kept()
        engine = Engine(config, device=device, physics_device=physics_device, sinks=[sink])
        assert (engine.rig.physics_world is engine.rig.world) == (physics_device is None)
        engine.run(duration=4.0)
        engine.close()
        # Every message begins with its header after the 8-byte fingerprint: utime, then the wall clock's
        # (left out, as is the clock's message: its measured scale is this machine's speed).
        runs[name] = [(c, d[:16] + d[24:]) for c, d in sink.messages if c != "clock"]
    assert runs["own"] == runs["shared"]
    collisions = [goggles_lcm.collision_t.decode(d) for c, d in sink.messages if c == "quad0/collision"]
    assert any(c.normal[0] < -0.5 for c in collisions)  # pushed back from the bar's face, towards -x
    assert any(c.endswith("/depth") for c, _ in runs["own"])
