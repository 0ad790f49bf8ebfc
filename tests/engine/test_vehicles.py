"""Several vehicles in one run: one simulator per airframe, collisions between them, and each
vehicle's sensors seeing the others' bodies but never its own."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import goggles_lcm
from goggles.client import image_array
from goggles.dynamics import CollisionResponse
from goggles.engine import Engine
from goggles.rig.runfile import parse_run_config
from goggles.transport.schema import decode_any
from tests.support import Kept, run_config


@pytest.mark.slow
def test_a_swarm_of_one_airframe_flies_in_one_simulator(device):
    """Three quads of one airframe share one simulator (one physics launch per advance) and a hexa gets
    its own; each flies its own route, a command reaches only its vehicle, and the first quad's
    messages are byte for byte those of a run where it flies alone (batching changes nobody's flight)."""

    alone = dataclasses.replace(run_config(scale=1000.0), zmq=None)
    first = alone.vehicles[0]
    others = [
        dataclasses.replace(
            first, name=f"quad{k}", start=(2.0 * k, 0.0, 0.0, 0.0), route=((2.0 * k, 0.0, 1.0 + k, 0.0),)
        )
        for k in (1, 2)
    ]
    hexa = dataclasses.replace(
        first, name="hexa", preset="hexa-550", start=(0.0, 3.0, 0.0, 0.0), route=((0.0, 3.0, 1.0, 0.0),)
    )
    swarm = dataclasses.replace(alone, vehicles=(first, *others, hexa))

    def fields(data):
        message = goggles_lcm.vehicle_state_t.decode(data)
        return message.header.utime, message.position, message.orientation, message.rotor_speeds

    runs = {}
    for name, config in (("alone", alone), ("swarm", swarm)):
        sink = Kept()
        engine = Engine(config, device=device, sinks=[sink])
        engine.run(duration=1.5)
        runs[name] = {
            vehicle: [fields(d) for c, d in sink.messages if c == f"{vehicle}/state"]
            for vehicle in ("quad0", "quad1", "quad2", "hexa")
        }
        if name == "swarm":
            assert [len(f.vehicles) for f in engine.rig.fleets] == [3, 1]
            assert engine.vehicles["quad2"].sim is engine.vehicles["quad0"].sim
            assert engine.vehicles["quad2"].row == 2
        engine.close()
    assert runs["swarm"]["quad0"] == runs["alone"]["quad0"] and len(runs["alone"]["quad0"]) >= 90
    for vehicle, x, z in (("quad1", 2.0, 2.0), ("quad2", 4.0, 3.0), ("hexa", 0.0, 1.0)):
        _, position, *_ = runs["swarm"][vehicle][-1]
        assert abs(position[0] - x) < 0.2 and position[2] > 0.5 * z  # climbing towards its own waypoint
    assert runs["swarm"]["quad2"][-1][1][2] > runs["swarm"]["quad1"][-1][1][2] + 0.3


def _flown(config, seconds: float, device) -> tuple[list, Engine]:
    """The collision messages a run of ``config`` publishes in ``seconds`` of sim time, decoded, and
    its engine (closed)."""

    sink = Kept()
    engine = Engine(config, device=device, sinks=[sink])
    try:
        engine.run(duration=seconds)
    finally:
        engine.close()
    return [goggles_lcm.collision_t.decode(d) for c, d in sink.messages if c.endswith("/collision")], engine


@pytest.mark.slow
def test_the_vehicles_of_a_run_collide_with_each_other_and_name_whom_they_hit(device, caplog):
    """A quad (its own simulator) flies its route low into a hexa resting on the ground: each
    publishes a collision naming the other, after the one with the ground (the hexa touches it all
    along, and still hears the quad); both crash there. Vehicles that start inside each other are
    told, naming both; they touch from the start, and fly apart without a crash."""
    base = dataclasses.replace(run_config(scale=1000.0, cameras=[]), zmq=None)
    quad = dataclasses.replace(base.vehicles[0], route=((0.0, 0.0, 0.4, 0.0), (3.0, 0.0, 0.4, 0.0)))
    hexa = dataclasses.replace(quad, name="hexa", preset="hexa-550", start=(3.0, 0.0, 0.0, 0.0), route=())
    collisions, engine = _flown(dataclasses.replace(base, vehicles=(quad, hexa)), 6.0, device)
    met = {(c.vehicle, c.other): c for c in collisions}
    assert sorted(met) == [("hexa", "quad0"), ("hexa", "world"), ("quad0", "hexa"), ("quad0", "world")]
    quad_hit, hexa_hit = met["quad0", "hexa"], met["hexa", "quad0"]
    assert abs(quad_hit.header.utime - hexa_hit.header.utime) <= 2 * 1e6 / 960  # together, within a step
    assert quad_hit.normal[0] < -0.5 and quad_hit.normal[2] > 0.3  # pushed back and up, off the hexa's top
    np.testing.assert_allclose(hexa_hit.normal, -np.array(quad_hit.normal), atol=0.02)
    assert 0.0 < quad_hit.point[0] < 3.0 and all(vehicle.crashed for vehicle in engine.vehicles.values())
    assert "quad0 CRASHED  hexa CRASHED" in engine.status_line()  # a run that stopped says why

    # Collisions ignored, the quad flies on through (and back: its route is closed): the hexa, on the
    # ground all along, is told of the ground once and of the quad at each pass (the ground a pass
    # hid is not told again after it).
    ignoring = dataclasses.replace(base, vehicles=(quad, hexa), collisions=CollisionResponse.IGNORE)
    told = [c.other for c in _flown(ignoring, 6.0, device)[0] if c.vehicle == "hexa"]
    assert told[0] == "world" and told[1:] == ["quad0"] * (len(told) - 1) and len(told) >= 2

    close = dataclasses.replace(hexa, start=(0.3, 0.4, 0.0, 0.0), route=((3.0, 4.0, 1.0, 0.0),))  # 0.5 m apart
    away = dataclasses.replace(quad, route=((-3.0, -4.0, 1.0, 0.0),))
    collisions, engine = _flown(dataclasses.replace(base, vehicles=(away, close)), 3.0, device)
    assert "1 pair(s) of [[vehicle]]s start inside each other's collision spheres (quad0 and hexa (0.5 m" in caplog.text
    assert not any(vehicle.crashed for vehicle in engine.vehicles.values())
    assert {("quad0", "hexa"), ("hexa", "quad0")} <= {(c.vehicle, c.other) for c in collisions}


@pytest.mark.slow
def test_each_vehicles_sensors_see_the_others_bodies_and_never_their_own(device):
    """A quad hovers 2 m above a hexa. The quad's downward camera and altimeter see the hexa's body (its
    airframe's model, in the class its run file gives: the top of its body box, 0.075 x the mean arm
    above its centre, at depth = height difference minus that); the hexa's camera, LiDAR and every
    message are those of a run where it flies alone, though its sensors sit inside its own body (camera
    and LiDAR at its centre), which none of them sees."""
    from goggles.dynamics import load_airframe
    from goggles.scene.vehicle_model import VEHICLE_CLASS

    def config(vehicles):
        down = {"width": 25, "height": 25, "vfov_deg": 20.0, "rate": 30.0, "rpy_deg": [0.0, 90.0, 0.0]}
        return parse_run_config(
            {
                "run": {"mode": "sim", "seed": 5},
                "clock": {"scale": 1000.0},
                "lcm": {"enabled": False},
                "zmq": {"enabled": False},
                "vehicle": [
                    {"name": n, "preset": p, "start": [0.0, 0.0, z, 0.0], "state_rate": 30.0, **more}
                    for n, p, z, more in vehicles
                ],
                "camera": [
                    {"vehicle": n, "name": "down", "outputs": ["depth", "segmentation"], **down}
                    for n, _, _, _ in vehicles
                ],
                "range_sensor": [{"vehicle": "upper", "name": "alt", "preset": "flightgoggles-altimeter"}]
                * (len(vehicles) > 1),
                "lidar": [{"vehicle": "lower", "name": "scan", "preset": "vlp16", "position": [0.0, 0.0, 0.0]}],
            }
        )

    runs = {}
    lower, upper = ("lower", "hexa-550", 1.0, {"segmentation": 33}), ("upper", "fg-quad", 3.0, {})
    for name, vehicles in (("alone", [lower]), ("pair", [lower, upper])):
        sink = Kept()
        engine = Engine(config(vehicles), device=device, sinks=[sink])
        try:
            engine.run(duration=0.6)
            classes = [engine.rig.world.shapes[i].segmentation for i in engine.rig.built.bodies]
        finally:
            engine.close()
        runs[name] = sink.messages
    assert classes == [33, VEHICLE_CLASS]  # the hexa's own, the quad's the default

    def lower_messages(messages):  # every message of the hexa, but the wall time it was made at
        decoded = [(c, decode_any(d)) for c, d in messages if c.startswith("lower/")]
        for _, message in decoded:
            message.header.wall_utime = 0
        return [(c, m.encode()) for c, m in decoded]

    assert lower_messages(runs["pair"]) == lower_messages(runs["alone"])
    channels = {c for c, _ in lower_messages(runs["pair"])}
    assert channels >= {"lower/down/depth", "lower/down/segmentation", "lower/scan/lidar"}

    states = {
        (c.split("/")[0], m.header.utime): m
        for c, d in runs["pair"]
        if c.endswith("/state")
        for m in [goggles_lcm.vehicle_state_t.decode(d)]
    }
    hubs = load_airframe("hexa-550").rotor_positions
    top = 0.075 * np.linalg.norm(hubs[:, :2], axis=1).mean()
    frames = [goggles_lcm.image_t.decode(d) for c, d in runs["pair"] if c == "upper/down/depth"]
    labels = [image_array(goggles_lcm.image_t.decode(d)) for c, d in runs["pair"] if c == "upper/down/segmentation"]
    assert len(frames) >= 15
    for frame, label in zip(frames, labels):
        utime = frame.header.utime
        below = states[("upper", utime)].position[2] - states[("lower", utime)].position[2] - top
        assert image_array(frame)[12, 12] == pytest.approx(below, abs=0.003)
        assert label[12, 12] == 33
    readings = [goggles_lcm.ranges_t.decode(d).ranges[0] for c, d in runs["pair"] if c == "upper/alt/ranges"]
    assert len(readings) >= 30 and np.mean(readings) == pytest.approx(2.0 - top, abs=0.06)  # sigma 0.0949 m


@pytest.mark.slow
def test_a_vehicle_whose_client_stops_commanding_holds_its_position_and_the_next_command_flies_it():
    """Lockstep (inputs acknowledged, no wall-clock windows): a client flies the quad at 1 m/s along x,
    then says nothing. Past the run file's command_timeout (0.3 s here) it holds where it was, heading
    kept, and the status line and ``quad0/status`` say so; it does not drift on at its last command. A
    new command flies it."""
    import time

    from goggles.client import Client
    from goggles.dynamics import ControlMode
    from tests.support import Running, endpoints

    config = run_config(mode="lockstep", cameras=[], route=False, command_timeout=0.3)
    running = Running(config)
    client = Client(endpoints(config))
    client.subscribe("quad0/state", "quad0/status")
    client.wait_for_subscriptions(30.0)
    vehicle = running.engine.rig.vehicles["quad0"]

    def command(values, sent: int) -> None:
        client.send_command("quad0", ControlMode.VELOCITY, values)
        deadline = time.monotonic() + 10.0
        while running.engine.counters.received < sent and time.monotonic() < deadline:
            time.sleep(0.001)

    def x() -> float:
        return float(vehicle.sim.states().position[0][0])

    try:
        client.step(960)  # take-off position is held by the start command; 1 s
        for k in range(10):  # 1 m/s along x, climbing a little, for 1 s
            command([1.0, 0.0, 0.2, 0.0], k + 1)
            client.step(96)
        moving = x()  # the last command came at 1.9 s (seen at the state tick of 1.917 s)
        client.step(int(0.15 * 960))  # within the timeout: its last command goes on
        assert x() > moving + 0.1 and vehicle.holding_since is None
        client.step(960)  # past it: holds, from the first state tick after 1.917 + 0.3 s
        assert vehicle.holding_since == pytest.approx(2.2333, abs=1e-3)
        held = x()
        client.step(2 * 960)
        assert abs(x() - held) < 0.3 and np.linalg.norm(vehicle.sim.states().velocity[0]) < 0.1
        assert "quad0 HOLDING (no command since 1.92 s)" in running.engine.status_line()
        for k in range(5):  # commands again: they fly it
            command([-1.0, 0.0, 0.0, 0.0], 11 + k)
            client.step(96)
        assert vehicle.holding_since is None and vehicle.sim.states().velocity[0][0] < -0.3
        client.step(960)  # a second on: its status goes out again, unchanged
        said = []
        while (item := client.receive(timeout=2.0)) is not None:
            if item[0] == "quad0/status":
                m = item[1]
                said.append((m.header.utime, m.holding, round(m.command_at, 3), m.problem))
    finally:
        running.stop.set()
        running.finish()
        client.close()
    # What it said, in order: nothing wrong at first; holding from 2.2333 s (its last command at 1.917 s);
    # flown again by the next commands; holding again a second later. Said again each second between.
    changes = [said[0]] + [b for a, b in zip(said, said[1:]) if (a[1], a[3]) != (b[1], b[3])]
    assert [(holding, problem) for _, holding, _, problem in changes] == [
        (False, ""),
        (True, "HOLDING (no command since 1.92 s)"),
        (False, ""),
        (True, f"HOLDING (no command since {changes[3][2]:.2f} s)"),
    ]
    assert changes[0][2] == -1.0 and changes[1][2] == 1.917 and changes[3][2] > 4.0
    assert changes[1][0] == pytest.approx(2_233_333, abs=1_100)
    utimes = [u for u, *_ in said]
    assert max(np.diff(utimes)) <= 1_000_000 + 1_100  # at least once a second of sim time
