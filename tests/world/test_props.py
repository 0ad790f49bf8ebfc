"""Props: objects scene edits (``scene/edit``) spawn, move and remove while a run goes on, over real
ZeroMQ and LCM: seen by the cameras at the depth a closed form gives, obstacles to the vehicles,
replayed as the run applied them, bad run files named, and every bad edit counted and dropped."""

from __future__ import annotations

import contextlib
import threading
import time

import lcm
import numpy as np
import pytest
import trimesh

import goggles_lcm
from goggles.client import Client, image_array
from goggles.engine import Engine
from goggles.errors import ConfigError
from goggles.logs.record import Recorder, read_log
from goggles.logs.replay import replay_file
from goggles.rig.runfile import load_run_config
from goggles.transport.schema import decode_any
from goggles.world.props import MAX_PROPS
from tests.support import Kept, free_port, goggles

#: The centre pixels of the 32x24 forward camera.
CENTRE = (slice(10, 14), slice(14, 18))


def write_run_file(tmp_path, *, lcm_port=None, start="[0.0, 0.0, 0.1, 0.0]", camera=True, props=None) -> str:
    """A lockstep run on a floor: the vehicle resting 0.1 m up (``floor_z``), a forward camera 0.5 m
    above it (optical axis along world +x at z = 0.6), a crate and a cone scene edits may spawn."""
    trimesh.creation.cone(radius=0.3, height=1.0).export(tmp_path / "cone.stl")
    floor = trimesh.creation.box(extents=[200.0, 200.0, 0.2])
    floor.apply_translation([0.0, 0.0, -0.1])  # its top at z = 0
    floor.export(tmp_path / "floor.stl")
    ports = [free_port() for _ in range(3)]
    text = f"""
[run]
mode = "lockstep"
scene = "floor.stl"
seed = 3
[lcm]
enabled = {"true" if lcm_port else "false"}
url = "udpm://239.255.76.67:{lcm_port or 7667}?ttl=0&recv_buf_size=8388608"
[zmq]
publish = "tcp://127.0.0.1:{ports[0]}"
inputs = "tcp://127.0.0.1:{ports[1]}"
control = "tcp://127.0.0.1:{ports[2]}"
[[vehicle]]
name = "quad0"
start = {start}
floor_z = 0.1
"""
    if camera:
        text += """
[[camera]]
vehicle = "quad0"
name = "front"
width = 32
height = 24
vfov_deg = 60.0
rate = 30.0
outputs = ["depth", "segmentation"]
position = [0.0, 0.0, 0.5]
max_depth = 100.0
"""
    text += (
        props
        if props is not None
        else """
[[prop]]
name = "crate"
box = [1.0, 1.0, 1.0]     # m
rgb = [0.9, 0.1, 0.1]
segmentation = 20
[[prop]]
name = "cone"
mesh = "cone.stl"
units = "m"
up = "+z"
segmentation = 21
"""
    )
    path = tmp_path / "run.toml"
    path.write_text(text)
    return str(path)


@contextlib.contextmanager
def running(config, device, recorder=None):
    """The engine in a thread, a sink keeping what it publishes, and a ZeroMQ client."""
    sink = Kept()
    engine = Engine(config, device=device, sinks=[sink], recorder=recorder)
    stop = threading.Event()
    thread = threading.Thread(target=engine.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    client = Client(config.zmq)
    try:
        yield engine, sink, client
    finally:
        stop.set()
        thread.join(10)
        engine.close()
        client.close()


def taken(engine, count: int) -> None:
    """Inputs and step requests travel on different sockets: step once the engine has taken ``count``
    inputs (its counter is the acknowledgement), never after a guessed sleep."""
    deadline = time.monotonic() + 10.0
    while engine.counters.received < count and time.monotonic() < deadline:
        time.sleep(0.001)
    assert engine.counters.received >= count


def joined(engine, client) -> int:
    """Wait until the client's PUB socket reaches the engine (a publisher drops what it sends before
    its connection is up), and return how many inputs the engine has taken then: harmless edits are
    resent until one arrives, then a marker spawned and removed (one connection keeps its order, so
    once the marker is gone every earlier edit has been taken)."""
    deadline = time.monotonic() + 10.0
    while engine.counters.received == 0:
        assert time.monotonic() < deadline, "the engine never heard the client"
        client.remove("nobody")
        time.sleep(0.05)
    client.spawn("marker", "crate", [90.0, 90.0, 0.5])
    while "marker" not in engine.rig.props.placed:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    client.remove("marker")
    while "marker" in engine.rig.props.placed:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    return engine.counters.received


def last(sink, channel: str):
    return [decode_any(d) for c, d in sink.messages if c == channel][-1]


def plane_depth(state, value: float, axis: int = 0) -> np.ndarray:
    """Depth of the plane {x, y, z}[axis] = ``value`` at the centre pixels of the forward camera
    (+inf where the ray meets it behind or beyond max_depth), in closed form
    from the vehicle's published pose: pinhole rays (u - cx) / f, (v - cy) / f, 1 of the 32x24,
    60-degree camera, turned from the optical frame (z forward, x right, y down) to the body's (FLU)."""
    from goggles.frames import quat_to_matrix

    R_WB = quat_to_matrix(np.asarray(state.orientation))
    p_WC = np.asarray(state.position) + R_WB @ [0.0, 0.0, 0.5]
    R_BO = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
    f = 12.0 / np.tan(np.radians(30.0))
    v, u = np.mgrid[CENTRE]
    rays_O = np.stack([(u - 15.5) / f, (v - 11.5) / f, np.ones(u.shape)], axis=-1)  # z = 1: t is the depth
    along = (rays_O @ (R_WB @ R_BO).T)[..., axis]
    with np.errstate(divide="ignore"):
        depth = (value - p_WC[axis]) / along
    return np.where((depth > 0.0) & (depth <= 100.0), depth, np.inf)


def test_edits_spawn_move_and_remove_a_prop_the_camera_sees(tmp_path, device):
    """A 1 m crate spawned 3 m ahead: its near face at 2.5 m is the depth of the centre pixels (a
    plane across the optical axis), in the crate's class; moved to 5 m it reads 4.5; a cone from a
    mesh file shows its class; removed, the floor is back. The move comes over LCM, the rest over
    ZeroMQ."""
    lcm_port = free_port()
    config = load_run_config(write_run_file(tmp_path, lcm_port=lcm_port))
    bus = lcm.LCM(config.lcm_url)
    with running(config, device) as (engine, sink, client):
        base = joined(engine, client)
        ignored = engine.counters.ignored
        client.step(32)
        depth = image_array(last(sink, "quad0/front/depth"))[CENTRE]
        np.testing.assert_allclose(depth, plane_depth(last(sink, "quad0/state"), 0.0, axis=2), rtol=1e-5)
        assert np.all(depth > 6.0)  # the floor far ahead, or nothing: beyond where the crate goes

        client.spawn("crate1", "crate", [3.0, 0.0, 0.6])
        taken(engine, base + 1)
        client.step(32)
        depth = image_array(last(sink, "quad0/front/depth"))[CENTRE]
        np.testing.assert_allclose(depth, plane_depth(last(sink, "quad0/state"), 2.5), rtol=1e-5)
        assert np.all(image_array(last(sink, "quad0/front/segmentation"))[CENTRE] == 20)

        moved = goggles_lcm.scene_edit_t()
        moved.action, moved.actor = 1, "crate1"
        moved.position, moved.orientation = [5.0, 0.0, 0.6], [1.0, 0.0, 0.0, 0.0]
        bus.publish("scene/edit", moved.encode())
        taken(engine, base + 2)
        client.step(32)
        depth = image_array(last(sink, "quad0/front/depth"))[CENTRE]
        np.testing.assert_allclose(depth, plane_depth(last(sink, "quad0/state"), 4.5), rtol=1e-5)

        client.spawn("cone1", "cone", [2.0, 0.0, 0.1])  # its base on the floor, its tip at 1.1 m
        taken(engine, base + 3)
        client.step(32)
        inner = image_array(last(sink, "quad0/front/segmentation"))[CENTRE][1:3, 1:3]  # the narrow cone's middle
        assert np.all(inner == 21)

        client.remove("cone1")
        client.remove("crate1")
        taken(engine, base + 5)
        client.step(32)
        depth = image_array(last(sink, "quad0/front/depth"))[CENTRE]
        np.testing.assert_allclose(depth, plane_depth(last(sink, "quad0/state"), 0.0, axis=2), rtol=1e-5)
        assert engine.counters.ignored == ignored and engine.counters.malformed == 0
        assert [a.name for a in engine.rig.viewed_actors()] == ["quad0"]  # viewers see no prop left
        assert engine.rig.scene_boxes() == []


def test_a_spawned_prop_is_an_obstacle(tmp_path, device):
    """A vehicle hovering in the open meets nothing; a crate spawned with a face through it is a
    collision."""
    config = load_run_config(write_run_file(tmp_path, start="[0.0, 0.0, 1.5, 0.0]", camera=False))
    with running(config, device) as (engine, sink, client):
        base = joined(engine, client)
        client.step(96)
        assert not [c for c, _ in sink.messages if c == "quad0/collision"]
        state = last(sink, "quad0/state")
        client.spawn("crate1", "crate", [state.position[0] + 0.5, state.position[1], state.position[2]])
        taken(engine, base + 1)
        client.step(32)
        collisions = [decode_any(d) for c, d in sink.messages if c == "quad0/collision"]
        assert len(collisions) == 1 and collisions[0].vehicle == "quad0"
        assert [a.name for a in engine.rig.viewed_actors()] == ["crate1", "quad0"]
        ((name, ((T, size),)),) = engine.rig.scene_boxes()  # the crate's box, where it was spawned
        np.testing.assert_allclose(T[:3, 3], [state.position[0] + 0.5, state.position[1], state.position[2]])
        np.testing.assert_allclose(size, [1.0, 1.0, 1.0], atol=1e-6)


def test_replay_applies_the_edits_where_the_run_did(tmp_path, device):
    """A recorded run whose crate came, moved and went replays to the same image bytes."""
    run_file = write_run_file(tmp_path)
    config = load_run_config(run_file)
    original = tmp_path / "flight.mcap"
    recorder = Recorder(original, metadata={"run_file": open(run_file).read(), "run_file_path": run_file})
    with running(config, device, recorder=recorder) as (engine, sink, client):
        base = joined(engine, client)
        client.step(40)
        for k, (edit, args) in enumerate(
            [
                (client.spawn, ("crate1", "crate", [3.0, 0.0, 0.6])),
                (client.move, ("crate1", [4.0, 0.5, 0.8], [0.9, 0.0, 0.0, 0.436])),
                (client.remove, ("crate1",)),
            ]
        ):
            edit(*args)
            taken(engine, base + k + 1)
            client.step(45)  # not a multiple of the frame period: edits fall between frames
    recorder.close()
    # As lcm-logger would have logged it: every log time the wall clock's (receipt), not sim time.
    received = tmp_path / "received.mcap"
    relogged = Recorder(received, metadata={"run_file": open(run_file).read(), "run_file_path": run_file})
    for t_ns, channel, data in read_log(original):
        relogged.write(channel, data, t_ns + 1_763_900_000_000_000_000)
    relogged.close()

    def depths(path):
        return {
            decode_any(d).header.utime: decode_any(d).data for _, c, d in read_log(path) if c == "quad0/front/depth"
        }

    first = depths(original)
    assert len(first) >= 5 and len(set(first.values())) >= 3  # the crate really came, moved and went
    for log in (original, received):
        replayed = tmp_path / f"replayed-{log.stem}.mcap"
        replay_file(log, record=replayed, device=device)
        second = depths(replayed)
        assert set(first) <= set(second) and all(first[t] == second[t] for t in first), log.name


def test_a_tracked_prop_stands_where_its_mocap_body_is_and_replays_there(tmp_path, device):
    """A real box with markers carried into the room: ``[[prop]] tracked`` makes each pose/box1 place
    the crate there (its near face at the closed-form depth of the centre pixels, in its class), a pose
    flagged lost leaves it where it was, and the recorded run replays to the same image bytes."""
    props = '\n[[prop]]\nname = "crate"\nbox = [1.0, 1.0, 1.0]\nsegmentation = 20\ntracked = ["box1"]\n'
    run_file = write_run_file(tmp_path, props=props)
    config = load_run_config(run_file)
    flight = tmp_path / "flight.mcap"
    recorder = Recorder(flight, metadata={"run_file": open(run_file).read(), "run_file_path": run_file})
    with running(config, device, recorder=recorder) as (engine, sink, client):
        while engine.counters.received == 0:  # the client's PUB socket reaches the engine
            client.send_pose("box1", [3.0, 0.0, 0.6], [1.0, 0.0, 0.0, 0.0], utime=1)
            time.sleep(0.05)
        for k, (x, valid) in enumerate([(3.0, True), (5.0, True), (9.0, False)]):
            base = engine.counters.received
            client.send_pose("box1", [x, 0.0, 0.6], [1.0, 0.0, 0.0, 0.0], utime=1000 * (k + 2), valid=valid)
            taken(engine, base + 1)
            client.step(32)
            depth = image_array(last(sink, "quad0/front/depth"))[CENTRE]
            near = 5.0 - 0.5 if k else 3.0 - 0.5  # the lost pose left it at 5 m
            np.testing.assert_allclose(depth, plane_depth(last(sink, "quad0/state"), near), rtol=1e-5)
            assert np.all(image_array(last(sink, "quad0/front/segmentation"))[CENTRE] == 20)
        assert [a.name for a in engine.rig.viewed_actors()] == ["box1", "quad0"]
    recorder.close()

    def depths(path):
        return {
            decode_any(d).header.utime: decode_any(d).data for _, c, d in read_log(path) if c == "quad0/front/depth"
        }

    replayed = tmp_path / "replayed.mcap"
    replay_file(flight, record=replayed, device=device)
    first, second = depths(flight), depths(replayed)
    assert len(set(first.values())) >= 2 and all(first[t] == second[t] for t in first)


def test_bad_edits_are_counted_and_dropped(tmp_path, device):
    """Edits that cannot apply (an unknown prop or actor, no room) are ignored; malformed ones (an
    unknown action, no name, a NaN or zero-quaternion pose) are counted as such; the run goes on."""
    config = load_run_config(write_run_file(tmp_path, camera=False))
    with running(config, device) as (engine, sink, client):
        received = joined(engine, client)
        ignored = engine.counters.ignored
        client.step(1)
        client.spawn("x", "piano", [0.0, 0.0, 1.0])  # no such prop
        client.move("ghost", [0.0, 0.0, 1.0])  # no such actor
        client.remove("ghost")
        for k in range(MAX_PROPS + 1):  # one too many
            client.spawn(f"post{k}", "crate", [20.0 + k, 20.0, 0.5])
        for action, actor, position, orientation in [
            (7, "a", [0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]),
            (0, "", [0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]),
            (0, "a" * 65, [0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]),
            (0, "a", [0.0, float("nan"), 0.0], [1.0, 0.0, 0.0, 0.0]),
            (1, "post0", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]),
        ]:
            message = goggles_lcm.scene_edit_t()
            message.action, message.actor, message.asset = action, actor, "crate"
            message.position, message.orientation = position, orientation
            client.send("scene/edit", message.encode())
        client.send("scene/edit", b"\x00garbage")
        deadline = time.monotonic() + 10.0
        while engine.counters.received - received + engine.counters.malformed < 3 + MAX_PROPS + 1 + 6:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        client.step(10)
        assert engine.counters.ignored - ignored == 4 and engine.counters.malformed == 6
        assert len(engine.rig.props.placed) == MAX_PROPS
        assert engine.rig.world.actors.count == MAX_PROPS


def test_a_flood_of_edits_that_cannot_apply_is_said_in_a_few_lines(monkeypatch, caplog):
    """300 spawns under new names with no room left said 300 warning lines (once per actor)."""
    import goggles.engine.inputs as inputs_module
    from goggles.engine.inputs import TOLD_EDITS, InputHandler
    from goggles.transport.messages import scene_edit_message

    class Full:  # a run's props with no room left
        def edit(self, action, actor, prop, T_WA):
            return f"no room for {actor!r}: {MAX_PROPS} props are placed already"

    clock = [100.0]
    monkeypatch.setattr(inputs_module.time, "monotonic", lambda: clock[0])
    inputs = InputHandler([], {}, None, Full())

    def spawn(actor):
        inputs.apply("scene/edit", scene_edit_message(0, 0, "spawn", actor, "crate", [0, 0, 1], [1, 0, 0, 0]).encode())

    for k in range(300):
        spawn(f"m{k}")
    lines = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(lines) == TOLD_EDITS + 1 and inputs.counters.ignored == 300
    why = Full().edit("spawn", "m16", "crate", None)
    assert lines[-1] == f"scene edits ignored: {TOLD_EDITS + 1} so far; the latest, of m16: {why}"
    clock[0] += 11.0
    spawn("m300")
    assert caplog.records[-1].getMessage().startswith("scene edits ignored: 301 so far; the latest, of m300")


@pytest.mark.parametrize(
    "table, says",
    [
        ('name = "a"\nbox = [1.0, 1.0]', "'box' must be a list of 3"),
        ('name = "a"\nbox = [1.0, 0.0, 1.0]', "three extents > 0"),
        ('name = "a"', "give 'box'"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\nmesh = "cone.stl"', "give 'box'"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\nrgb = [2.0, 0.0, 0.0]', "'rgb' must be three numbers in"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\nsegmentation = 0', "'segmentation' must be an integer"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\nup = "+z"', "'units' and 'up' are for a mesh"),
        ('name = "a"\nmesh = "cone.stl"\nunits = "furlong"\nup = "+z"', "'units' must be one of"),
        ('name = "a"\nmesh = "cone.stl"\nup = "+z"', "missing key 'units'"),
        ('name = "a"\nmesh = "cone.stl"\nunits = "m"\nup = "z"', "'up' must be one of"),
        ('name = "a"\nmesh = "cone.stl"\nrgb = [0.5, 0.5, 0.5]', "'rgb' is for a box"),
        ("box = [1.0, 1.0, 1.0]", "missing key 'name'"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\ncolour = 1', "unknown key 'colour'"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\n[[prop]]\nname = "a"\nbox = [1.0, 1.0, 1.0]', "names must be unique"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\ntracked = "box1"', "'tracked' must be a list of mocap body names"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\ntracked = ["a b"]', "'tracked' must be a list of mocap body names"),
        ('name = "a"\nbox = [1.0, 1.0, 1.0]\ntracked = ["quad0"]', r"\['quad0'\] are vehicles of this run"),
        (
            'name = "a"\nbox = [1, 1, 1]\ntracked = ["b"]\n[[prop]]\nname = "c"\nbox = [1, 1, 1]\ntracked = ["b"]',
            "tracked as two props",
        ),
        ('name = "a"\nbox = [1, 1, 1]\ntracked = [' + ", ".join(f'"b{k}"' for k in range(33)) + "]", "33 bodies"),
    ],
)
def test_bad_prop_tables_name_the_file_and_key(tmp_path, table, says):
    path = write_run_file(tmp_path, camera=False, props=f"\n[[prop]]\n{table}\n")
    with pytest.raises(ConfigError, match=says) as error:
        load_run_config(path)
    assert str(tmp_path / "run.toml") in str(error.value)


def test_a_missing_prop_mesh_is_named_when_the_run_starts(tmp_path):
    from goggles.errors import GogglesError

    missing = '\n[[prop]]\nname = "a"\nmesh = "nowhere.obj"\nunits = "m"\nup = "+z"\n'
    path = write_run_file(tmp_path, camera=False, props=missing)
    with pytest.raises(GogglesError, match="nowhere.obj"):
        Engine(load_run_config(path), device="cpu")


@pytest.mark.slow
def test_the_edit_command_reaches_a_running_engine_on_both_buses(tmp_path):
    """``goggles edit`` spawns over ZeroMQ (waiting until the engine listens), moves over LCM and
    removes, each time telling what the engine answered (``scene/edited``): applied, or not and why
    (exit code 1: a prop the run file does not declare, an actor not placed); with no engine
    listening it says so in one line."""
    config = load_run_config(write_run_file(tmp_path, lcm_port=free_port(), camera=False))
    with running(config, "cpu") as (engine, sink, client):
        zmq = ["--inputs", config.zmq.inputs, "--endpoint", config.zmq.publish]
        done = goggles("edit", "spawn", "crate1", "crate", "--at", "3,1,0.5,1.5708", *zmq)
        assert done.returncode == 0 and "spawn crate1 (crate)" in done.stdout and "applied" in done.stdout, done
        T = engine.rig.props.placed["crate1"][1]  # the answer came after it was placed: no waiting here
        np.testing.assert_allclose(T[:3, 3], [3.0, 1.0, 0.5])
        np.testing.assert_allclose(T[:3, 0], [0.0, 1.0, 0.0], atol=1e-5)  # turned 90 degrees about +z
        done = goggles("edit", "move", "crate1", "--at=-2,0,0.5", "--lcm-url", config.lcm_url)
        assert done.returncode == 0 and "applied" in done.stdout, done
        assert engine.rig.props.placed["crate1"][1][0, 3] == -2.0
        typo = goggles("edit", "spawn", "crate2", "crat", "--at", "1,1,1", *zmq, check=False)
        assert typo.returncode == 1 and "not applied: no prop 'crat' to spawn" in typo.stdout, typo
        assert "crate2" not in engine.rig.props.placed
        assert goggles("edit", "remove", "crate1", *zmq).returncode == 0
        assert "crate1" not in engine.rig.props.placed
        gone = goggles("edit", "remove", "crate1", "--lcm-url", config.lcm_url, check=False)
        assert gone.returncode == 1 and "no actor 'crate1' to remove" in gone.stdout, gone
    elsewhere = f"tcp://127.0.0.1:{free_port()}"
    nobody = goggles("edit", "remove", "crate1", "--inputs", elsewhere, "--timeout", "0.3", check=False)
    assert nobody.returncode == 2 and nobody.stderr.count("\n") == 1 and "no engine subscribed" in nobody.stderr
    both = goggles("edit", "spawn", "a", "crate", "--at", "1,2,3,0.5", "--orientation", "1,0,0,0", check=False)
    assert both.returncode == 2 and "not both" in both.stderr


def _captured_wall(path) -> None:
    """A captured wall as a splat PLY: a 2 x 2 m sheet of opaque flat Gaussians in its y-z plane
    (its x = 0), 2 cm apart."""
    from goggles.scene.splats import SH_C0, SplatCloud, write_splat_ply

    y, z = np.meshgrid(np.arange(-1.0, 1.0, 0.02), np.arange(-1.0, 1.0, 0.02))
    n = y.size
    positions = np.column_stack([np.zeros(n), y.ravel(), z.ravel()]).astype(np.float32)
    scales = np.tile([0.002, 0.015, 0.015], (n, 1)).astype(np.float32)
    sh = np.tile((np.array([0.2, 0.6, 0.3]) - 0.5) / SH_C0, (n, 1))[:, None, :].astype(np.float32)
    cloud = SplatCloud(
        positions,
        scales,
        np.tile([1.0, 0.0, 0.0, 0.0], (n, 1)).astype(np.float32),
        np.full(n, 0.9, np.float32),
        sh,
        np.ones(n, np.int32),
        np.zeros(n, np.int32),
        np.eye(3, dtype=np.float32)[None],
    )
    write_splat_ply(cloud, path)


def test_a_captured_prop_is_spawned_moved_and_removed_and_the_cameras_see_it(tmp_path, device):
    """A splat prop (a captured wall) spawned 3 m ahead across the optical axis: the centre pixels'
    depth is the sheet's (where its opacity passes one half), in its class; moved to 5 m; turned a
    quarter about z it runs away from the camera (depths 4 to 6 m); a second instance past its
    'instances' is refused; removed, the floor is back. Viewers draw no mesh for it."""
    _captured_wall(tmp_path / "wall.ply")
    props = """
[[prop]]
name = "crate"
box = [1.0, 1.0, 1.0]
segmentation = 20
[[prop]]
name = "wall"
splat = "wall.ply"
units = "m"
up = "+z"
instances = 1
segmentation = 30
"""
    config = load_run_config(write_run_file(tmp_path, props=props))
    with running(config, device) as (engine, sink, client):
        base = joined(engine, client)
        ignored = engine.counters.ignored
        client.spawn("wall1", "wall", [3.0, 0.0, 0.6])
        taken(engine, base + 1)
        client.step(32)
        depth = image_array(last(sink, "quad0/front/depth"))[CENTRE]
        np.testing.assert_allclose(depth, plane_depth(last(sink, "quad0/state"), 3.0), rtol=0.01)
        assert np.all(image_array(last(sink, "quad0/front/segmentation"))[CENTRE] == 30)

        client.spawn("wall2", "wall", [8.0, 0.0, 0.6])  # its one instance is placed: refused, counted
        client.move("wall1", [5.0, 0.0, 0.6])
        taken(engine, base + 3)
        client.step(32)
        assert engine.counters.ignored == ignored + 1 and "wall2" not in engine.rig.props.placed
        depth = image_array(last(sink, "quad0/front/depth"))[CENTRE]
        np.testing.assert_allclose(depth, plane_depth(last(sink, "quad0/state"), 5.0), rtol=0.01)

        # A quarter turn about z, 1.5 m to the left: the sheet runs away from the camera, 4 to 6 m ahead.
        client.move("wall1", [5.0, 1.5, 0.6], orientation=[np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)])
        taken(engine, base + 4)
        client.step(32)
        row = (slice(11, 13), slice(0, 14))
        seen = image_array(last(sink, "quad0/front/segmentation"))[row] == 30
        depth = image_array(last(sink, "quad0/front/depth"))[row][seen]
        assert seen.sum() >= 4 and np.ptp(depth) > 1.0 and 3.9 < depth.min() and depth.max() < 6.1

        client.remove("wall1")
        taken(engine, base + 5)
        client.step(32)
        depth = image_array(last(sink, "quad0/front/depth"))[CENTRE]
        np.testing.assert_allclose(depth, plane_depth(last(sink, "quad0/state"), 0.0, axis=2), rtol=1e-5)
        assert [a.name for a in engine.rig.viewed_actors()] == ["quad0"]


def test_range_sensors_and_beacons_see_a_captured_prop(tmp_path):
    """The downward ToF reads the sheet where it lies (not the floor beneath), and a beacon behind it
    is hidden; moved away, the floor and the beacon are back."""
    from goggles.frames import camera_pose_from_body, transform
    from goggles.render import CameraModel
    from goggles.scene.actors import PropSpec
    from goggles.sensors.beacons import BeaconSensor
    from goggles.sensors.ranges import FLIGHTGOGGLES_ALTIMETER, RangeSensor, downward_pose
    from goggles.world import build_world
    from goggles.world.build import Beacon

    _captured_wall(tmp_path / "wall.ply")
    floor = trimesh.creation.box(extents=[20.0, 20.0, 0.2])
    floor.apply_translation([0.0, 0.0, -0.1])
    floor.export(tmp_path / "floor.stl")
    wall = PropSpec("wall", 30, splat=tmp_path / "wall.ply", units="m", up="+z")
    world = build_world(tmp_path / "floor.stl", device="cpu", props=(wall,))
    splats = world.scene.splats
    tof = RangeSensor(world.scene, FLIGHTGOGGLES_ALTIMETER, noise=False)
    above = downward_pose(transform([0.0, 0.0, 3.0], [1.0, 0.0, 0.0, 0.0]))
    assert tof.measure(above[None])[0, 0, 0] == pytest.approx(3.0, abs=1e-4)  # the floor
    lying = np.eye(4)
    lying[:3, :3] = [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]]  # its x (the sheet's normal) up
    lying[:3, 3] = [0.0, 0.0, 1.0]
    splats.place(0, 0, lying)
    assert tof.measure(above[None])[0, 0, 0] == pytest.approx(2.0, abs=0.01)  # the sheet 1 m up

    camera = CameraModel.from_fov(64, 48, 60.0)
    eye = camera_pose_from_body(transform([-3.0, 0.0, 0.6], [1.0, 0.0, 0.0, 0.0]))
    sensor = BeaconSensor(world.scene, [Beacon("b/0", (2.0, 0.0, 0.6))], [camera])
    assert len(sensor.detect(eye[None])) == 1
    splats.place(0, 0, transform([0.0, 0.0, 0.6], [1.0, 0.0, 0.0, 0.0]))  # the sheet between them
    assert sensor.detect(eye[None]) == []
    splats.place(0, 0, None)
    assert len(sensor.detect(eye[None])) == 1
    assert tof.measure(above[None])[0, 0, 0] == pytest.approx(3.0, abs=1e-4)
    splats.place(0, 0, lying)
    world.reset()  # a world reused by another run: no capture left standing from the last
    assert tof.measure(above[None])[0, 0, 0] == pytest.approx(3.0, abs=1e-4)
