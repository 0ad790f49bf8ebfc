"""The mocap bridge against a NatNet server on loopback, received by the real natnet client."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import struct
import threading
import time

import numpy as np
import pytest
import zmq

from bridges.mocap import (
    MocapBridge,
    MocapFrame,
    Publisher,
    RoomCalibration,
    load_room_calibration,
    run_bridge,
    status_line,
)
from bridges.natnet_emulator import NatNetEmulator, SyntheticBody, circle
from bridges.sources import NatNetSource
from goggles.errors import ConfigError
from goggles.frames import quat_to_matrix
from goggles.transport.buses import split_frame
from goggles.transport.schema import decode_any
from tests.support import Running as EngineRunning
from tests.support import endpoints, free_port, group_gone, kill_group, run_config


class Receiver:
    """A SUB socket bound where the bridge publishes (as the engine's input socket is).

    It must be polled while the bridge runs: a bound SUB socket sends its subscription to a newly
    connected publisher only when the application calls into it (as the engine's loop does)."""

    def __init__(self):
        self.port = free_port()
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.bind(f"tcp://127.0.0.1:{self.port}")
        self.messages: list = []

    def collect(self, seconds: float) -> list:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            self.drain(0.005)
        return self.messages

    def until(self, counts: dict[str, int], timeout: float = 20.0) -> list:
        """Collect until each channel has brought its count of messages (or ``timeout`` passes: the
        test's assertions then say what is missing), so a loaded machine only makes a test slower."""
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            self.drain(0.005)
            got = [sum(1 for _, c, _ in self.messages if c == channel) for channel in counts]
            if all(n >= want for n, want in zip(got, counts.values())):
                break
        return self.messages

    def drain(self, timeout: float = 0.05) -> list:
        while self.socket.poll(int(timeout * 1000)):
            channel, data = split_frame([self.socket.recv()])
            self.messages.append((time.perf_counter(), channel, decode_any(data)))
            timeout = 0.0
        return self.messages


class Running:
    def __init__(self, source, bridge):
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=run_bridge, args=(source, bridge), kwargs={"stop": self.stop}, daemon=True
        )
        self.thread.start()

    def finish(self):
        self.stop.set()
        self.thread.join(5)


def bridge_to(receiver: Receiver, calibration: RoomCalibration) -> MocapBridge:
    return MocapBridge(calibration, Publisher(f"tcp://127.0.0.1:{receiver.port}", None))


def test_real_natnet_packets_come_out_as_racequad_in_enu(shared):
    vectors = shared / "mocap-vectors" / "natnet-v3-mje-nz"
    frame = (vectors / "mocapframe_packet_v3.bin").read_bytes()
    # Parse the rigid body straight from the packet: after the header, frame number, marker sets, unlabeled.
    offset = 4 + 4
    (marker_sets,) = struct.unpack_from("<I", frame, offset)
    offset += 4
    for _ in range(marker_sets):
        offset = frame.index(b"\0", offset) + 1
        (count,) = struct.unpack_from("<I", frame, offset)
        offset += 4 + 12 * count
    (unlabeled,) = struct.unpack_from("<I", frame, offset)
    offset += 4 + 12 * unlabeled + 4  # and the rigid body count
    body_id, x, y, z, qx, qy, qz, qw = struct.unpack_from("<I3f4f", frame, offset)
    assert body_id == 2

    ports = free_port(), free_port()
    receiver = Receiver()
    with NatNetEmulator(command_port=ports[0], data_port=ports[1], replay=vectors):
        source = NatNetSource(command_port=ports[0], data_port=ports[1])
        running = Running(source, bridge_to(receiver, RoomCalibration.for_system("optitrack")))
        receiver.until({"pose/RaceQuad": 21})
        running.finish()
        source.close()
    poses = [m for _, channel, m in receiver.drain() if channel == "pose/RaceQuad"]
    assert len(poses) > 20
    pose = poses[-1]
    assert pose.name == "RaceQuad" and pose.valid
    # OptiTrack is y-up: ENU = (x, -z, y); the body frame is re-expressed the same way.
    np.testing.assert_allclose(pose.position, [x, -z, y], atol=1e-6)
    R_up = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])
    expected = R_up @ quat_to_matrix([qw, qx, qy, qz]) @ R_up.T
    np.testing.assert_allclose(quat_to_matrix(pose.orientation), expected, atol=1e-6)
    assert pose.position[2] == pytest.approx(1.447, abs=1e-3)  # 1.45 m up, as Motive's SampleClient printed


def test_synthetic_circle_within_a_millimetre_and_stall_flags_stale():
    radius, height, period = 1.5, 1.2, 4.0
    ports = free_port(), free_port()
    receiver = Receiver()
    rate = 120.0
    with NatNetEmulator(
        command_port=ports[0],
        data_port=ports[1],
        rate=rate,
        bodies=[SyntheticBody("quad0", 1, circle(radius, height, period))],
    ) as emulator:
        source = NatNetSource(command_port=ports[0], data_port=ports[1])
        running = Running(source, bridge_to(receiver, RoomCalibration.for_system("optitrack")))
        receiver.collect(1.0)
        emulator.stall()
        stalled_at = time.perf_counter()
        receiver.collect(0.3)
        running.finish()
        source.close()
    poses = [(t, m) for t, channel, m in receiver.drain() if channel == "pose/quad0"]
    valid = [m for t, m in poses if m.valid]
    assert len(valid) > 80
    for pose in valid:
        p = np.array(pose.position)
        assert abs(np.hypot(p[0], p[1]) - radius) < 1e-3 and abs(p[2] - height) < 1e-3
        angle = math.atan2(p[1], p[0])
        R = quat_to_matrix(pose.orientation)  # the body faces along the circle's tangent, level
        np.testing.assert_allclose(R[:, 0], [-math.sin(angle), math.cos(angle), 0.0], atol=1e-3)
        np.testing.assert_allclose(R[:, 2], [0.0, 0.0, 1.0], atol=1e-6)
    # Flagged once for the stall. (A loaded machine may also stall the emulator's own sends for three
    # frame periods before it, which the bridge rightly flags: only the flags after the stall are its.)
    stale = [t for t, m in poses if not m.valid and t >= stalled_at]
    assert len(stale) == 1
    # Within three frame periods, plus what a loaded two-core machine may add to waking up and the wire.
    assert stale[0] - stalled_at < 3.0 / rate + 0.25


def test_garbage_and_jumps_do_not_break_the_bridge():
    jump = {"on": False}

    def teleporting(t):
        p, q = circle()(t)
        return (p + [50.0, 0.0, 0.0], q) if jump["on"] else (p, q)

    ports = free_port(), free_port()
    receiver = Receiver()
    with NatNetEmulator(
        command_port=ports[0], data_port=ports[1], bodies=[SyntheticBody("quad0", 1, teleporting)]
    ) as emulator:
        source = NatNetSource(command_port=ports[0], data_port=ports[1])
        bridge = bridge_to(receiver, RoomCalibration.for_system("optitrack"))
        running = Running(source, bridge)
        receiver.collect(0.3)
        rng = np.random.default_rng(0)
        for _ in range(300):
            emulator.send_raw(struct.pack("<HH", 7, 60) + rng.integers(0, 256, 60, dtype=np.uint8).tobytes())
            emulator.send_raw(rng.integers(0, 256, int(rng.integers(1, 40)), dtype=np.uint8).tobytes())
        receiver.collect(0.3)
        jump["on"] = True
        receiver.collect(0.2)
        jump["on"] = False
        receiver.collect(0.3)
        running.finish()
        source.close()
    assert running.thread.is_alive() is False and source.malformed > 0
    poses = [m for _, channel, m in receiver.drain() if channel == "pose/quad0"]
    assert all(np.hypot(*m.position[:2]) < 2.0 for m in poses)  # the 50 m jump never went out
    assert bridge.rejected() > 0
    assert len(poses) > 60  # and the stream went on after the garbage and the jump


def test_room_calibration_file(tmp_path):
    path = tmp_path / "room.toml"
    path.write_text(
        '[room]\nup = "+y"\nunits = "mm"\nposition = [10.0, 0.0, 0.0]\nrpy_deg = [0.0, 0.0, 90.0]\n'
        '[[body]]\nname = "RaceQuad"\nrename = "quad0"\noffset_position = [0.0, 0.0, -0.05]\n'
    )
    room = load_room_calibration(path, "optitrack")
    name, p, q = room.to_world("RaceQuad", np.array([1000.0, 2000.0, -3000.0]), np.array([1.0, 0, 0, 0]))
    # mm -> m, y-up -> ENU: (1, 3, 2); turned 90 deg about z: (-3, 1, 2); shifted 10 m: (7, 1, 2);
    # the body origin 5 cm below the pivot.
    assert name == "quad0"
    np.testing.assert_allclose(p, [7.0, 1.0, 1.95], atol=1e-9)
    assert room.skeleton_coordinates == "global"
    path.write_text('[room]\nskeleton_coordinates = "local"\n')
    assert load_room_calibration(path, "optitrack").skeleton_coordinates == "local"
    for text, message in (
        ("[room]\nupp = 1\n", "unknown key 'upp'"),
        ("[room]\nmax_speed = true\n", "'max_speed' must be a finite number > 0"),
        ("[room]\nstale_after = -1\n", "'stale_after' must be a finite number > 0"),
        ('[room]\nskeleton_coordinates = "sideways"\n', "'skeleton_coordinates' must be 'global' or 'local'"),
        ("[[body]]\nrename = 'x'\n", "missing key 'name'"),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_room_calibration(path, "optitrack")


def test_no_server_is_a_clear_error():
    with pytest.raises(ConfigError, match="no NatNet server answered"):
        NatNetSource(command_port=free_port(), data_port=free_port(), timeout=0.3)


def test_motioncapture_mock_and_optitrack_backends(shared):
    """The motioncapture package's own client code: its mock, and its optitrack backend receiving
    the real packets from the emulator (it listens on port 1511)."""
    from bridges.sources import MotionCaptureSource

    receiver = Receiver()
    source = MotionCaptureSource(
        "mock", "", options={"rigid_bodies": "quad0(1,2,0.5,0.7071068,0,0,0.7071068)", "frequency": "100"}
    )
    running = Running(source, bridge_to(receiver, RoomCalibration.for_system("mock")))
    receiver.until({"pose/quad0": 1})
    running.finish()
    source.close()
    pose = [m for _, channel, m in receiver.drain() if channel == "pose/quad0"][-1]
    np.testing.assert_allclose(pose.position, [1.0, 2.0, 0.5], atol=1e-6)  # z up, metres: as given
    np.testing.assert_allclose(pose.orientation, [0.7071068, 0, 0, 0.7071068], atol=1e-6)

    receiver = Receiver()
    command_port = free_port()
    with NatNetEmulator(command_port=command_port, data_port=1511, replay=shared / "mocap-vectors/natnet-v3-mje-nz"):
        source = MotionCaptureSource("optitrack", "127.0.0.1", options={"port_command": str(command_port)})
        running = Running(source, bridge_to(receiver, RoomCalibration.for_system("optitrack")))
        receiver.until({"pose/RaceQuad": 1})
        running.finish()
        source.close()
    pose = [m for _, channel, m in receiver.drain() if channel == "pose/RaceQuad"][-1]
    np.testing.assert_allclose(pose.position, [0.1744466, 0.7343040, 1.4471314], atol=1e-5)
    with pytest.raises(ConfigError, match="no vicon frames"):
        MotionCaptureSource("vicon", "127.0.0.1", timeout=0.5)


@pytest.mark.slow
def test_a_crash_of_libmotioncapture_is_said_as_one_and_its_client_started_again(caplog):
    """libmotioncapture's mock crashes (SIGSEGV) on a body name over 120 characters: at the start the
    bridge said "no mock frames ... is the mocap system streaming" after the whole timeout. A client
    that dies mid-stream is told as such, and started again."""
    import signal

    from bridges.sources import MotionCaptureSource

    with pytest.raises(ConfigError, match="mock client crashed with SIGSEGV before any frame"):
        MotionCaptureSource("mock", "", options={"rigid_bodies": "x" * 200 + "(0,0,1,1,0,0,0)"}, timeout=30.0)

    receiver = Receiver()
    source = MotionCaptureSource("mock", "", options={"rigid_bodies": "quad0(1,2,0.5,1,0,0,0)", "frequency": "100"})
    running = Running(source, bridge_to(receiver, RoomCalibration.for_system("mock")))
    receiver.until({"pose/quad0": 5})
    caplog.set_level(logging.WARNING, logger="bridges.sources")
    os.kill(source._process.pid, signal.SIGKILL)
    before = sum(1 for _, channel, _ in receiver.drain() if channel == "pose/quad0")
    receiver.until({"pose/quad0": before + 5}, timeout=30.0)
    running.finish()
    source.close()
    assert "mock: libmotioncapture's client crashed with SIGKILL: starting it again" in caplog.text
    assert source.restarts >= 1


def test_the_optitrack_backend_recovers_from_lost_model_definitions(shared):
    """libmotioncapture asks for the bodies' names once; with that reply lost (the emulator drops
    the first request) its frames carry bodies named '' for ever. The source connects again and the
    real RaceQuad is published (the CI once saw this test's sibling miss every pose for 20 s)."""
    from bridges.sources import MotionCaptureSource

    receiver = Receiver()
    command_port = free_port()
    vectors = shared / "mocap-vectors/natnet-v3-mje-nz"
    with NatNetEmulator(command_port=command_port, data_port=1511, replay=vectors, lose_model_definitions=1):
        source = MotionCaptureSource("optitrack", "127.0.0.1", options={"port_command": str(command_port)})
        running = Running(source, bridge_to(receiver, RoomCalibration.for_system("optitrack")))
        receiver.until({"pose/RaceQuad": 1})
        running.finish()
        source.close()
    poses = [m for _, channel, m in receiver.drain() if channel == "pose/RaceQuad"]
    assert poses, "no pose/RaceQuad: the nameless connection was never opened again"
    np.testing.assert_allclose(poses[-1].position, [0.1744466, 0.7343040, 1.4471314], atol=1e-5)
    assert not [channel for _, channel, _ in receiver.messages if channel in ("pose/", "pose")]


def test_the_optitrack_backend_keeps_connecting_when_the_server_does_not_answer_at_once(shared):
    """Opening the nameless connection again raised "Could not query NatNet version!" once on a loaded
    CI machine, which ended the worker and with it the bridge's poses, for good. The emulator now
    leaves that reconnect unanswered (libmotioncapture then waits for ever): the source starts its
    worker again after ``RESTART_AFTER_S`` without a frame, and RaceQuad is published."""
    from bridges.sources import MotionCaptureSource

    receiver = Receiver()
    command_port = free_port()
    vectors = shared / "mocap-vectors/natnet-v3-mje-nz"
    with NatNetEmulator(
        command_port=command_port, data_port=1511, replay=vectors, lose_model_definitions=1, lose_reconnects=1
    ) as emulator:
        source = MotionCaptureSource("optitrack", "127.0.0.1", options={"port_command": str(command_port)})
        running = Running(source, bridge_to(receiver, RoomCalibration.for_system("optitrack")))
        receiver.until({"pose/RaceQuad": 1}, timeout=40.0)
        running.finish()
        source.close()
        connects = emulator.connects
    poses = [m for _, channel, m in receiver.drain() if channel == "pose/RaceQuad"]
    assert poses and connects >= 3, f"{len(poses)} RaceQuad poses after {connects} connects"


def waved(depth: list, segmentation: list, frames: int = 60) -> tuple[bool, bool, bool]:
    """Over the last ``frames`` images: is the person seen (over 20 pixels), does the arm cover some
    pixels only part of the time (over 5), and does their depth change by over a metre (over 5)?"""
    from goggles.client import image_array
    from goggles.scene.avatar import HUMAN_CLASS

    if min(len(depth), len(segmentation)) < frames:
        return False, False, False
    human = np.array([image_array(s) == HUMAN_CLASS for s in segmentation[-frames:]])
    seen = human.any(axis=0).sum() > 20
    moved = (human.any(axis=0) & ~human.all(axis=0)).sum() > 5
    depths = np.array([np.nan_to_num(image_array(d), posinf=99.0) for d in depth[-frames:]])
    nearer = (depths.max(axis=0) - depths.min(axis=0) > 1.0).sum() > 5
    return bool(seen), bool(moved), bool(nearer)


@pytest.mark.slow
def test_live_engine_renders_the_tracked_body_and_a_waving_skeleton():
    """End to end on loopback: NatNet emulator -> natnet client -> bridge -> engine (live) -> depth.
    The vehicle's camera pose comes from the tracked body; the arm's pixels change as it waves."""
    from bridges.natnet_emulator import SyntheticSkeleton, waving_person
    from goggles.client import Client

    config = run_config(
        mode="live",
        cameras=[
            {
                "vehicle": "quad0",
                "name": "front",
                "width": 64,
                "height": 48,
                "vfov_deg": 50.0,
                "rate": 30.0,
                "outputs": ["depth", "segmentation"],
            }
        ],
    )
    bones, waving = waving_person(x=4.0, period=1.0)
    hover = SyntheticBody("quad0", 1, lambda t: (np.array([0.0, 0.0, 1.3]), np.array([1.0, 0.0, 0.0, 0.0])))
    ports = free_port(), free_port()
    engine = EngineRunning(config, duration=None)
    client = Client(endpoints(config))
    client.subscribe("quad0/front/")
    with NatNetEmulator(
        command_port=ports[0],
        data_port=ports[1],
        rate=100.0,
        bodies=[hover],
        skeletons=[SyntheticSkeleton("alice", 1, bones, waving)],
    ):
        source = NatNetSource(command_port=ports[0], data_port=ports[1])
        bridge = MocapBridge(RoomCalibration.for_system("optitrack"), Publisher(config.zmq.inputs, None))
        running = Running(source, bridge)
        depth, segmentation = [], []
        # Until the person has been seen waving over the last 60 frames (2 s at 30 Hz; a loaded machine
        # starves the emulator's stream or the engine for a while), or a minute has passed.
        end = time.monotonic() + 60.0
        while time.monotonic() < end and not (
            min(len(depth), len(segmentation)) >= 90 and all(waved(depth, segmentation))
        ):
            item = client.receive(timeout=0.1)
            if item is None:
                continue
            channel, image = item
            (depth if channel.endswith("depth") else segmentation).append(image)
        running.finish()
        source.close()
    engine.stop.set()
    engine.finish()
    client.close()
    assert len(depth) > 30 and "alice" in engine.engine.avatars
    np.testing.assert_allclose(depth[-1].position, [0.0, 0.0, 1.3], atol=1e-4)  # the tracked body's camera
    seen, moved, nearer = waved(depth, segmentation)
    assert seen and moved and nearer, (seen, moved, nearer)


def test_qualisys_bodies_and_skeletons_through_qtm_rt():
    """A QTM real-time fake on loopback, received by the real qtm-rt client: bodies in mm, z up."""
    from bridges.natnet_emulator import SyntheticSkeleton, waving_person
    from bridges.qtm_emulator import QtmEmulator
    from bridges.sources import QtmSource

    bones, waving = waving_person()
    receiver = Receiver()
    port = free_port()
    with QtmEmulator(
        port=port,
        bodies=[SyntheticBody("quad0", 1, circle(1.5, 1.2, 4.0))],
        skeletons=[SyntheticSkeleton("alice", 1, bones, waving)],
    ):
        source = QtmSource("127.0.0.1", port=port)
        running = Running(source, bridge_to(receiver, RoomCalibration.for_system("qualisys")))
        receiver.until({"pose/quad0": 31, "skeleton/alice": 31})
        running.finish()
        source.close()
    messages = receiver.drain()
    poses = [m for _, channel, m in messages if channel == "pose/quad0"]
    skeletons = [m for _, channel, m in messages if channel == "skeleton/alice"]
    assert len(poses) > 30 and len(skeletons) > 30
    for pose in poses:
        assert abs(np.hypot(*pose.position[:2]) - 1.5) < 1e-3 and abs(pose.position[2] - 1.2) < 1e-3
        angle = math.atan2(pose.position[1], pose.position[0])
        np.testing.assert_allclose(
            quat_to_matrix(pose.orientation)[:, 0], [-math.sin(angle), math.cos(angle), 0], atol=1e-3
        )
    assert list(skeletons[-1].bone_names) == [b for b, _ in bones] and list(skeletons[-1].parents) == [
        -1,
        0,
        1,
        1,
        3,
        4,
    ]
    np.testing.assert_allclose(skeletons[-1].positions[2], [4.0, 0.0, 1.7], atol=1e-3)  # the head, in metres
    with pytest.raises(ConfigError, match="no QTM real-time server"):
        QtmSource("127.0.0.1", port=free_port(), timeout=0.5)


def _forged_frame(frame_number: int, body_id: int = 1, position=(9.0, 9.0, 9.0)) -> bytes:
    """A well-formed NatNet 3.0 frame of one rigid body, as another process on the network could send."""
    from bridges.natnet_emulator import NAT_FRAMEOFDATA, _packet

    body = struct.pack("<I3f4f", body_id, *position, 0.0, 0.0, 0.0, 1.0) + struct.pack("<fh", 0.0, 1)
    payload = (
        struct.pack("<iII", frame_number, 0, 0)  # frame number, no marker sets, no unlabeled markers
        + struct.pack("<I", 1)
        + body
        + struct.pack("<I", 0)  # no skeletons
        + struct.pack("<I", 0)  # no labeled markers
        + struct.pack("<I", 0)
        + struct.pack("<I", 0)  # no force plates, no devices
        + struct.pack("<IIfdqqqh", 0, 0, 0.0, 1.0, 0, 0, 0, 0)  # timecode, latency, timestamps, params
    )
    return _packet(NAT_FRAMEOFDATA, payload)


@contextlib.contextmanager
def _natnet_bridge(receiver: Receiver):
    """An emulated Motive streaming one body flying circles, and the bridge publishing it to ``receiver``."""
    ports = free_port(), free_port()
    with NatNetEmulator(command_port=ports[0], data_port=ports[1], bodies=[SyntheticBody("quad0", 1, circle())]) as em:
        source = NatNetSource(command_port=ports[0], data_port=ports[1])
        running = Running(source, bridge_to(receiver, RoomCalibration.for_system("optitrack")))
        try:
            yield em, source
        finally:
            running.finish()
            source.close()


def _natnet_client_address(emulator) -> tuple[str, int]:
    deadline = time.monotonic() + 5
    while not emulator.clients and time.monotonic() < deadline:
        time.sleep(0.01)
    return next(iter(emulator.clients))


@pytest.mark.slow
def test_the_qualisys_source_connects_again_when_qtm_drops_its_connection():
    """QTM closed or restarted drops its real-time clients; the source sat on the dead connection and
    the bridge published nothing more. It connects again once silent for ``RESTART_AFTER_S``."""
    from bridges.qtm_emulator import QtmEmulator
    from bridges.sources import QtmSource

    receiver = Receiver()
    port = free_port()
    with QtmEmulator(port=port, bodies=[SyntheticBody("quad0", 1, circle(1.5, 1.2, 4.0))]) as emulator:
        source = QtmSource("127.0.0.1", port=port)
        running = Running(source, bridge_to(receiver, RoomCalibration.for_system("qualisys")))
        receiver.until({"pose/quad0": 5})
        emulator.drop_clients()
        before = sum(1 for _, channel, _ in receiver.drain() if channel == "pose/quad0")
        receiver.until({"pose/quad0": before + 5}, timeout=30.0)
        running.finish()
        restarts = source.restarts
        source.close()
    after = sum(1 for _, channel, _ in receiver.messages if channel == "pose/quad0")
    assert after >= before + 5 and restarts >= 1, f"{before} poses before the drop, {after} after, {restarts} restarts"


def test_frames_from_other_senders_are_dropped():
    receiver = Receiver()
    with _natnet_bridge(receiver) as (em, source):
        receiver.collect(0.3)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
            forger.bind(("127.0.0.2", 0))  # another address on the same network
            target = _natnet_client_address(em)
            for k in range(50):
                forger.sendto(_forged_frame(10**6 + k), target)
        receiver.collect(0.3)
    poses = [m for _, channel, m in receiver.drain() if channel == "pose/quad0"]
    assert len(poses) > 40
    assert all(np.hypot(*m.position[:2]) < 2.0 for m in poses)  # no pose at (9, 9, 9)
    assert source.foreign == 50


def test_frames_going_back_or_unlike_the_model_are_dropped():
    receiver = Receiver()
    with _natnet_bridge(receiver) as (em, source):
        receiver.collect(0.3)
        for k in range(20):
            em.send_raw(_forged_frame(k))  # from the server's address, but numbered in the past
            em.send_raw(_forged_frame(10**7 + k, body_id=77))  # a body the model does not describe
        receiver.collect(0.3)
    poses = [m for _, channel, m in receiver.drain() if channel == "pose/quad0"]
    assert all(np.hypot(*m.position[:2]) < 2.0 for m in poses)
    assert all(m.valid for m in poses), "garbage frames must not raise stale flags"
    assert source.malformed >= 40


@pytest.mark.slow
def test_the_bridge_reconnects_after_the_server_restarts_and_keeps_alive_at_1_hz():
    receiver = Receiver()
    with _natnet_bridge(receiver) as (em, source):
        receiver.collect(0.5)
        em.stall()
        em.restart()  # Motive restarted: it forgets its clients and numbers frames from 0 again
        receiver.collect(0.5)
        em.resume()
        restarted_at = time.perf_counter()
        receiver.collect(3.0)
        keepalives, elapsed = em.keepalives, 4.0
    after = [t for t, channel, m in receiver.drain() if channel == "pose/quad0" and m.valid and t > restarted_at]
    assert len(after) > 100, "no poses after the server restarted"
    assert after[0] - restarted_at < 2.5
    assert keepalives <= elapsed * 1.5 + 2, f"{keepalives} keep-alives in {elapsed} s"


@pytest.mark.slow
@pytest.mark.parametrize("system", ["qualisys", "mock"])
def test_goggles_bridge_mocap_reaches_its_source(system):
    """The command line end to end: qualisys goes to the QTM source (against the QTM emulator)."""
    import subprocess
    import sys

    from bridges.qtm_emulator import QtmEmulator

    receiver = Receiver()
    port = free_port()
    extra = ["--qtm-port", str(port)] if system == "qualisys" else ["--mock-bodies", "quad0(1,2,1.5,1,0,0,0)"]
    with QtmEmulator(port=port, bodies=[SyntheticBody("quad0", 1, circle(1.5, 1.2, 4.0))]):
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "goggles.cli",
                "bridge",
                "mocap",
                "--system",
                system,
                *extra,
                "--duration",
                "2",
                "--no-lcm",
                "--zmq",
                f"tcp://127.0.0.1:{receiver.port}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        while process.poll() is None:
            receiver.collect(0.1)
        receiver.drain()
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    poses = [m for _, channel, m in receiver.messages if channel == "pose/quad0"]
    assert len(poses) > 10, err
    if system == "qualisys":
        assert abs(np.hypot(*poses[-1].position[:2]) - 1.5) < 1e-3
    else:
        np.testing.assert_allclose(poses[-1].position, [1.0, 2.0, 1.5], atol=1e-6)


@pytest.mark.slow
def test_a_bridge_killed_outright_leaves_no_mocap_process_behind():
    """libmotioncapture runs in a child process; a bridge killed with SIGKILL (an OOM kill, a crash)
    must not leave it running, holding the mocap stream's ports for the next bridge."""
    import os
    import signal
    import subprocess
    import sys

    pytest.importorskip("motioncapture")
    receiver = Receiver()
    process = subprocess.Popen(
        [sys.executable, "-m", "goggles.cli", "bridge", "mocap", "--system", "mock"]
        + ["--mock-bodies", "quad0(1,2,1.5,1,0,0,0)", "--no-lcm", "--zmq", f"tcp://127.0.0.1:{receiver.port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the bridge and its child
    )
    try:
        deadline = time.monotonic() + 60
        while not receiver.messages and time.monotonic() < deadline and process.poll() is None:  # streaming
            receiver.collect(0.1)
        assert receiver.messages, "no pose from the bridge"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        assert group_gone(process.pid, 30), "the mocap child outlived its bridge"
    finally:
        kill_group(process.pid)


def test_a_body_whose_channel_lcm_cannot_carry_still_goes_out_on_zeromq(caplog):
    """A rigid body named beyond LCM's 63-character channel limit ended the bridge ('Resource temporarily
    unavailable') at its first frame; it is published on ZeroMQ, left out on LCM (said once, counted),
    and every other body goes on on both."""
    import lcm

    long_name = "RaceQuad_" + "x" * 60
    url = f"udpm://239.255.76.67:{free_port()}?ttl=0"
    listener, heard = lcm.LCM(url), []
    listener.subscribe("pose/.*", lambda channel, data: heard.append(channel))
    receiver = Receiver()
    publisher = Publisher(f"tcp://127.0.0.1:{receiver.port}", url)
    bridge = MocapBridge(RoomCalibration.for_system("mock"), publisher)
    still = (np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]), True)
    frames, deadline = 0, time.monotonic() + 30
    while len(receiver.messages) < 6 and time.monotonic() < deadline:  # until ZeroMQ has joined
        bridge.handle(MocapFrame(bodies={long_name: still, "quad0": still}, received=time.perf_counter()))
        frames += 1
        receiver.drain(0.02)
    while listener.handle_timeout(200) > 0:
        pass
    on_zmq = [channel for _, channel, _ in receiver.messages]
    assert on_zmq.count(f"pose/{long_name}") >= 3 and on_zmq.count("pose/quad0") >= 3
    assert heard == ["pose/quad0"] * frames
    assert publisher.lcm_dropped == frames and caplog.text.count("not published on LCM") == 1
    assert f"not on LCM {frames}" in status_line(type("Source", (), {"malformed": 0})(), bridge)


@pytest.mark.slow
def test_a_bridge_on_both_buses_leaves_live_extrapolation_working():
    """The bridge sends each pose on ZeroMQ and LCM, and a live engine reads both: the second copy was
    taken as a new pose at the same instant, so no motion was left between the last two poses and
    extrapolation stopped. The body moves at 1 m/s, its poses stamped a second back, so a render
    carries each pose the whole 0.05 s horizon ahead: 5 cm."""
    import dataclasses

    from goggles.client import Client

    front = {"vehicle": "quad0", "name": "front", "width": 32, "height": 24, "rate": 30.0, "outputs": ["depth"]}
    config = dataclasses.replace(run_config(mode="live", lcm_port=free_port(), cameras=[front]), extrapolate=0.05)
    running = EngineRunning(config, duration=None)
    client = Client(endpoints(config))
    client.subscribe("quad0/front/depth")
    client.wait_for_subscriptions(30.0)
    publisher = Publisher(config.zmq.inputs, config.lcm_url)
    sent, ahead = {}, []
    start = time.time_ns() // 1000 - 1_000_000
    for k in range(200):
        utime = start + 10_000 * k
        sent[utime] = -4.0 + 0.01 * k
        publisher.pose("quad0", utime, [sent[utime], 0.0, 1.5], [1.0, 0.0, 0.0, 0.0], True)
        time.sleep(0.01)
        for _, image in iter(lambda: client.receive(timeout=0.0), None):
            if image.pose_utime in sent and image.pose_utime > start:  # a pose before it: a motion
                ahead.append(image.position[0] - sent[image.pose_utime])
    received = running.engine.counters.received
    running.stop.set()
    running.finish()
    publisher.close()
    client.close()
    assert received > 300  # both buses delivered (UDP may lose a few)
    assert len(ahead) > 20 and np.mean(np.isclose(ahead, 0.05, atol=1e-4)) > 0.9, np.round(ahead, 4)


def test_a_late_copy_of_a_pose_is_dropped_and_a_restarted_source_starts_afresh():
    from goggles.frames import transform
    from goggles.rig.vehicles import Vehicle

    def at(x):
        return transform([x, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0])

    body = Vehicle("quad0", None)
    assert body.take_live_pose(at(0.0), 10_000_000) and body.previous is None  # the first: nothing before it
    assert body.take_live_pose(at(0.01), 10_010_000) and body.previous[1] == 10_000_000
    assert not body.take_live_pose(at(0.01), 10_010_000)  # the other bus's copy
    assert not body.take_live_pose(at(0.0), 10_000_000)  # a copy that came late: the body never goes back
    assert body.pose_utime == 10_010_000 and body.previous[1] == 10_000_000
    assert body.take_live_pose(at(5.0), 10_010_000)  # another pose at the same instant (a source without times)
    assert body.take_live_pose(at(0.0), 2_000_000)  # 8 s back: a source that restarted
    assert body.pose_utime == 2_000_000 and body.previous is None  # no motion across the restart
