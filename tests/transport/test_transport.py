"""The schema: generated code in sync with the .lcm files, decoding, input validation."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import goggles_lcm
from goggles.transport.buses import split_frame
from goggles.transport.schema import MAX_INPUT_BYTES, MalformedMessage, decode_any, decode_input
from tests.support import free_port

REPO = Path(__file__).resolve().parents[2]


def test_generated_python_matches_the_lcm_files(tmp_path):
    lcm_gen = shutil.which("lcm-gen")
    if lcm_gen is None:
        pytest.skip("lcm-gen not on PATH (it ships with the lcm wheel)")
    sources = sorted((REPO / "goggles/transport/lcm").glob("*.lcm"))
    subprocess.run([lcm_gen, "--python", "--ppath", str(tmp_path), *map(str, sources)], check=True)
    generated = sorted(p.name for p in (tmp_path / "goggles_lcm").glob("*.py"))
    committed = sorted(p.name for p in (REPO / "goggles_lcm").glob("*.py"))
    assert generated == committed, "regenerate: lcm-gen --python --ppath . goggles/transport/lcm/*.lcm"
    for name in generated:
        assert filecmp.cmp(tmp_path / "goggles_lcm" / name, REPO / "goggles_lcm" / name, shallow=False), (
            f"goggles_lcm/{name} is out of date: lcm-gen --python --ppath . goggles/transport/lcm/*.lcm"
        )


def pose(position=(1.0, 2.0, 3.0), orientation=(1.0, 0.0, 0.0, 0.0)) -> bytes:
    message = goggles_lcm.pose_t()
    message.name = "body"
    message.position = list(position)
    message.orientation = list(orientation)
    message.valid = True
    return message.encode()


def test_decode_and_validate_inputs():
    assert list(decode_input(pose(), goggles_lcm.pose_t).position) == [1.0, 2.0, 3.0]
    assert isinstance(decode_any(pose()), goggles_lcm.pose_t)
    for bad, reason in [
        (pose(position=(0.0, float("nan"), 0.0)), "non-finite"),
        (pose(orientation=(0.0, 0.0, 0.0, 0.0)), "zero quaternion"),
        (pose(orientation=(float("inf"), 0.0, 0.0, 1.0)), "non-finite"),
        (pose()[:20], "cannot decode"),
        (b"\x00" * 7, "unknown message type"),
        (b"x" * (MAX_INPUT_BYTES + 1), "input limit"),
    ]:
        with pytest.raises(MalformedMessage, match=reason):
            decode_input(bad, goggles_lcm.pose_t)
    with pytest.raises(MalformedMessage, match="expected command_t"):
        decode_input(pose(), goggles_lcm.command_t)


def test_zeromq_frames():
    assert split_frame([b"quad0/imu\0\x01\x02"]) == ("quad0/imu", b"\x01\x02")
    assert split_frame([b"a\0b\0c"]) == ("a", b"b\0c")  # only the first NUL separates
    for frames in ([b"no separator"], [b"a\0", b"b"], [b"\xff\0data"]):
        with pytest.raises(ValueError):
            split_frame(frames)


@pytest.mark.parametrize(
    "output, pixels",
    [
        ("depth", np.random.default_rng(0).random((480, 640), np.float32)),
        ("rgb", np.random.default_rng(1).integers(0, 256, (240, 320, 3), np.uint8)),
        ("segmentation", np.random.default_rng(2).integers(-1, 40, (24, 32), np.int32)),
    ],
)
def test_an_image_is_framed_once_as_lcm_encodes_it(output, pixels):
    """The engine frames an image from its header and its pixels' buffer; the bytes are lcm-gen's own
    encoding of the whole image_t, and they arrive over a real ZeroMQ socket as they were."""
    import zmq

    from goggles.client import image_array
    from goggles.render import CameraModel
    from goggles.transport import messages
    from goggles.transport.buses import framed

    height, width = pixels.shape[:2]
    image, payload = messages.image_message(
        7, 3, camera="quad0/stereo_left", output=output, model=CameraModel.from_fov(width, height, 60.0),
        T_WC=np.eye(4), pose_utime=5, pixels=pixels,
    )  # fmt: skip
    channel = f"quad0/stereo_left/{output}"
    buffer, data = framed(channel, image.encode(), payload)
    image.data = pixels.tobytes()  # the whole message, encoded by lcm-gen: the reference
    reference = image.encode()
    assert bytes(data) == reference and bytes(buffer) == channel.encode() + b"\0" + reference
    assert data.readonly
    context = zmq.Context()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    port = sender.bind_to_random_port("tcp://127.0.0.1")
    receiver.connect(f"tcp://127.0.0.1:{port}")
    sender.send(buffer, copy=False)
    received_channel, received = split_frame([receiver.recv(copy=False)])
    decoded = decode_any(received)
    assert received_channel == channel and decoded.data_size == pixels.nbytes
    np.testing.assert_array_equal(image_array(decoded), pixels)
    sender.close()
    receiver.close()
    context.term()


def test_decoding_a_view_equals_decoding_its_bytes():
    """Small messages decode from a copy, large ones field by field from the buffer: the same message."""
    small = pose()
    state = goggles_lcm.image_t()
    state.camera, state.data = "c", bytes(range(256)) * 1024
    state.data_size = len(state.data)
    large = state.encode()
    for data in (small, large):
        for form in (data, memoryview(data), memoryview(bytearray(data)).toreadonly()):
            assert decode_any(form).encode() == data
    with pytest.raises(MalformedMessage, match="cannot decode"):
        decode_any(memoryview(large)[:40])


@pytest.mark.slow
def test_a_client_refuses_an_endless_wait_and_a_pose_its_message_cannot_hold():
    """``latest(timeout=-1)`` waited for ever (ZeroMQ polls without end for a negative time), and a
    two-number position was struct.error from inside the LCM encoder. A NaN pose is still sent as
    given: the engine's own check counts and drops it (tests of the engine send them)."""
    from goggles.client import Client
    from goggles.errors import ConfigError
    from goggles.transport.buses import ZmqEndpoints

    endpoints = ZmqEndpoints("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3")  # nobody there
    with Client(endpoints) as client:
        for timeout in (-1, float("nan"), "1"):
            with pytest.raises(ConfigError, match="timeout must be 0 or more seconds"):
                client.latest("quad0/imu", timeout=timeout)
        with pytest.raises(ConfigError, match="timeout must be 0 or more"):
            client.receive(timeout=-0.5)
        assert client.latest("quad0/imu", timeout=np.float32(0.0)) is None
        with pytest.raises(ConfigError, match=r"position must be 3 numbers, got \[0, 0\]"):
            client.spawn("crate1", "crate", [0, 0])
        with pytest.raises(ConfigError, match="orientation must be 4 numbers"):
            client.send_pose("quad0", [0, 0, 0], "w x y z")
        for utime in (2**70, float("nan"), "soon"):  # 2**70 was "int too large to convert" from the encoder
            with pytest.raises(ConfigError, match=r"utime must be a whole number of microseconds \(int64\)"):
                client.send_pose("quad0", [0, 0, 0], [1, 0, 0, 0], utime=utime)
        assert client.send_pose("quad0", [0, 0, 0], [1, 0, 0, 0], utime=np.int64(5)) == 5
        for mode in (1.5, 2**40, None):  # 1.5 went out as mode 1, 2**40 was struct.error
            with pytest.raises(ConfigError, match="control mode"):
                client.send_command("quad0", mode, [0, 0, 0, 0])
        with pytest.raises(ConfigError, match="command values must be numbers, got None"):
            client.send_command("quad0", "velocity", None)
        client.send_command("quad0", 99, [float("nan")])  # what the engine refuses is still sent, to test it
        # What a tool prints in one line when no lockstep engine answers (it was a traceback).
        with pytest.raises(TimeoutError, match="within 0.2 s: is goggles run --mode lockstep running there"):
            client.step(1, timeout=0.2)


def test_an_output_lcm_refuses_is_counted_and_the_bus_goes_on(caplog):
    """A send LCM itself refuses (here a channel over its 63 characters; in a run, a network gone)
    raised out of the engine's publish and ended the run."""
    import lcm

    from goggles.transport.buses import LcmBus

    port = free_port()
    bus = LcmBus(f"udpm://239.255.76.67:{port}?ttl=0")
    listener, heard = lcm.LCM(f"udpm://239.255.76.67:{port}?ttl=0"), []
    listener.subscribe("quad0/.*", lambda channel, data: heard.append((channel, data)))
    bus.publish("quad0/" + "x" * 80, b"lost")
    bus.publish("quad0/state", memoryview(b"kept"))
    while listener.handle_timeout(200) > 0:
        pass
    assert bus.failed == 1 and heard == [("quad0/state", b"kept")]
    assert "LCM could not send quad0/xxx" in caplog.text
    bus.close()
