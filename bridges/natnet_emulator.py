"""A NatNet 3.0 server on loopback: replays real Motive packets, or streams synthetic bodies and skeletons.

For tests and for trying the mocap bridge without a motion-capture room::

    python -m bridges.natnet_emulator --replay ../shared/mocap-vectors/natnet-v3-mje-nz   # the real RaceQuad
    python -m bridges.natnet_emulator --circle quad0                                      # a body flying circles

It answers NAT_CONNECT with server info and NAT_REQUEST_MODELDEF with model definitions on the
command port (1510), and streams NAT_FRAMEOFDATA at ``rate`` Hz both to every client that connected
(NatNet unicast: the ``natnet`` package reads frames on its command socket) and to the data port
(1511) on the same host (where ``motioncapture``'s optitrack backend listens). OptiTrack's world is
y-up; synthetic motions are generated in goggles' ENU and converted, so tests can compare.
"""

from __future__ import annotations

import argparse
import math
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NAT_CONNECT, NAT_SERVERINFO, NAT_REQUEST_MODELDEF, NAT_MODELDEF, NAT_FRAMEOFDATA, NAT_KEEPALIVE = 0, 1, 4, 5, 7, 10

#: ENU -> OptiTrack y-up (x east stays x, up becomes y, north becomes -z).
R_OPTI_ENU = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])

Pose = tuple[np.ndarray, np.ndarray]
"""Position (3,) m and quaternion (w, x, y, z), both in goggles' ENU world."""


@dataclass
class SyntheticBody:
    name: str
    id: int
    motion: Callable[[float], Pose]
    """t (s) -> ENU pose of the body."""


@dataclass
class SyntheticSkeleton:
    name: str
    id: int
    bones: list[tuple[str, int]]
    """(name, parent index or -1), root first."""
    motion: Callable[[float], list[Pose]]
    """t (s) -> ENU world pose of every bone."""


def circle(radius: float = 1.5, height: float = 1.2, period: float = 4.0, centre=(0.0, 0.0)) -> Callable[[float], Pose]:
    """A body flying a horizontal circle counter-clockwise, facing along its velocity."""

    def motion(t: float) -> Pose:
        a = 2.0 * math.pi * t / period
        position = np.array([centre[0] + radius * math.cos(a), centre[1] + radius * math.sin(a), height])
        yaw = a + math.pi / 2.0
        return position, np.array([math.cos(yaw / 2.0), 0.0, 0.0, math.sin(yaw / 2.0)])

    return motion


def waving_person(x: float = 4.0, period: float = 1.0):
    """A person standing at (x, 0) facing -x, waving the right arm up and down: six bones."""
    from goggles.frames import quat_from_axis_angle, quat_to_matrix

    bones = [("hips", -1), ("chest", 0), ("head", 1), ("shoulder", 1), ("upper_arm", 3), ("forearm", 4)]
    rest = np.array([[x, 0, 1.0], [x, 0, 1.4], [x, 0, 1.7], [x, -0.2, 1.5], [x, -0.3, 1.5], [x, -0.3, 1.2]])

    def motion(t: float) -> list[Pose]:
        angle = 1.2 * (1.0 - math.cos(2.0 * math.pi * t / period))  # 0 .. 2.4 rad
        q = quat_from_axis_angle([1.0, 0.0, 0.0], -angle)
        R = quat_to_matrix(q)
        poses = []
        for j, p in enumerate(rest):
            if j >= 4:  # the arm turns about the shoulder's x axis
                poses.append((rest[4] + R @ (p - rest[4]), q))
            else:
                poses.append((p.copy(), np.array([1.0, 0.0, 0.0, 0.0])))
        return poses

    return bones, motion


def to_optitrack(position: np.ndarray, q_wxyz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ENU pose -> OptiTrack y-up position and quaternion (x, y, z, w) as Motive sends them."""
    from goggles.frames import matrix_to_quat, quat_to_matrix

    R = R_OPTI_ENU @ quat_to_matrix(q_wxyz) @ R_OPTI_ENU.T
    q = matrix_to_quat(R)
    return R_OPTI_ENU @ np.asarray(position, dtype=np.float64), np.array([q[1], q[2], q[3], q[0]])


def _string(text: str) -> bytes:
    return text.encode() + b"\0"


def _packet(message_id: int, payload: bytes) -> bytes:
    return struct.pack("<HH", message_id, len(payload)) + payload


def server_info_packet() -> bytes:
    """NAT_SERVERINFO: application "goggles-emulator" 1.0, NatNet 3.0."""
    name = b"goggles-emulator".ljust(256, b"\0")
    return _packet(NAT_SERVERINFO, name + bytes([1, 0, 0, 0]) + bytes([3, 0, 0, 0]))


def _rigid_body_description(name: str, body_id: int, parent: int = -1, offset=(0.0, 0.0, 0.0)) -> bytes:
    return (
        _string(name) + struct.pack("<ii3f", body_id, parent, *offset) + struct.pack("<I", 0)
    )  # no markers in the description


def model_definitions_packet(bodies: list[SyntheticBody], skeletons: list[SyntheticSkeleton]) -> bytes:
    datasets = [struct.pack("<I", 1) + _rigid_body_description(b.name, b.id) for b in bodies]
    for s in skeletons:
        bones = b"".join(
            _rigid_body_description(name, (s.id << 16) | (i + 1), -1 if parent < 0 else (s.id << 16) | (parent + 1))
            for i, (name, parent) in enumerate(s.bones)
        )
        datasets.append(struct.pack("<I", 2) + _string(s.name) + struct.pack("<II", s.id, len(s.bones)) + bones)
    return _packet(NAT_MODELDEF, struct.pack("<I", len(datasets)) + b"".join(datasets))


def _rigid_body(body_id: int, position_opti: np.ndarray, q_xyzw: np.ndarray, valid: bool = True) -> bytes:
    return struct.pack("<I3f4ffH", body_id, *position_opti, *q_xyzw, 0.0, 1 if valid else 0)


def frame_packet(frame: int, t: float, bodies: list[SyntheticBody], skeletons: list[SyntheticSkeleton]) -> bytes:
    """NAT_FRAMEOFDATA (NatNet 3.0) of the synthetic bodies and skeletons at time t."""
    parts = [struct.pack("<I", frame), struct.pack("<I", 0), struct.pack("<I", 0)]  # frame, marker sets, unlabeled
    parts.append(struct.pack("<I", len(bodies)))
    for body in bodies:
        parts.append(_rigid_body(body.id, *to_optitrack(*body.motion(t))))
    parts.append(struct.pack("<I", len(skeletons)))
    for s in skeletons:
        poses = s.motion(t)
        parts.append(struct.pack("<II", s.id, len(poses)))
        for i, pose in enumerate(poses):
            parts.append(_rigid_body((s.id << 16) | (i + 1), *to_optitrack(*pose)))
    parts.append(struct.pack("<III", 0, 0, 0))  # labeled markers, force plates, devices
    ticks = int(t * 1e6)
    parts.append(struct.pack("<IIdQQQH", 0, 0, t, ticks, ticks, ticks, 0))
    parts.append(struct.pack("<I", 0))  # end of data
    return _packet(NAT_FRAMEOFDATA, b"".join(parts))


class NatNetEmulator:
    """The server. Use as a context manager; ``stall()``/``resume()`` pause the stream for tests.

    Args:
        host: address to serve on (loopback).
        command_port: NatNet command port.
        data_port: where frames are also sent on ``host`` (motioncapture listens there).
        rate: frames per second.
        replay: a folder of real packets (``serverinfo_packet_v3.bin``, ``modeldef_packet_v3.bin``,
            ``mocapframe_packet_v3.bin``): served and streamed verbatim instead of synthetic data.
        bodies, skeletons: synthetic data to stream (ignored when replaying).
        lose_model_definitions: how many model-definition requests go unanswered (a reply lost on
            the way, as UDP may lose it).
        lose_reconnects: how many connect requests after the first go unanswered (a server that does
            not answer a client connecting again at once).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        command_port: int = 1510,
        data_port: int = 1511,
        rate: float = 120.0,
        replay: Path | None = None,
        bodies=(),
        skeletons=(),
        lose_model_definitions: int = 0,
        lose_reconnects: int = 0,
    ):
        self.host, self.command_port, self.data_port, self.rate = host, command_port, data_port, rate
        self.lose_model_definitions, self.lose_reconnects = lose_model_definitions, lose_reconnects
        self.bodies, self.skeletons = list(bodies), list(skeletons)
        self.replay = None
        if replay is not None:
            replay = Path(replay)
            self.replay = {
                name: (replay / f"{name}_packet_v3.bin").read_bytes()
                for name in ("serverinfo", "modeldef", "mocapframe")
            }
        self.frames_sent = 0
        self.keepalives = 0
        """NAT_KEEPALIVE requests received."""
        self.connects = 0
        self.clients: set[tuple[str, int]] = set()
        self._streaming = threading.Event()
        self._restarted = False
        self._stop = threading.Event()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, command_port))
        self._socket.settimeout(0.05)
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._serve, daemon=True),
            threading.Thread(target=self._stream, daemon=True),
        ]
        self._start = time.monotonic()

    def __enter__(self) -> NatNetEmulator:
        self._streaming.set()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2.0)
        self._socket.close()

    def restart(self) -> None:
        """A server restart: it forgets its clients and numbers its frames from zero again."""
        with self._lock:
            self.clients.clear()
        self._restarted = True

    def stall(self) -> None:
        self._streaming.clear()

    def resume(self) -> None:
        self._streaming.set()

    def send_raw(self, data: bytes) -> None:
        """Send arbitrary bytes to every client and the data port (for garbage tests)."""
        self._send(data)

    def _send(self, data: bytes) -> None:
        with self._lock:
            targets = set(self.clients) | {(self.host, self.data_port)}
        for target in targets:
            try:
                self._socket.sendto(data, target)
            except OSError:
                pass

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, address = self._socket.recvfrom(65536)
            except (TimeoutError, OSError):
                continue
            if len(data) < 4:
                continue
            message_id = struct.unpack_from("<H", data)[0]
            if message_id == NAT_KEEPALIVE:
                self.keepalives += 1
                continue
            if message_id == NAT_CONNECT:
                self.connects += 1
                if self.connects > 1 and self.lose_reconnects > 0:
                    self.lose_reconnects -= 1
                    continue
                with self._lock:
                    self.clients.add(address)
                reply = self.replay["serverinfo"] if self.replay else server_info_packet()
            elif message_id == NAT_REQUEST_MODELDEF:
                if self.lose_model_definitions > 0:  # the reply lost on the way (UDP)
                    self.lose_model_definitions -= 1
                    continue
                reply = (
                    self.replay["modeldef"] if self.replay else model_definitions_packet(self.bodies, self.skeletons)
                )
            else:
                continue
            self._socket.sendto(reply, address)

    def _stream(self) -> None:
        period = 1.0 / self.rate
        next_time = time.monotonic()
        frame = 0
        while not self._stop.is_set():
            if self._restarted:
                self._restarted, frame = False, 0
            next_time += period
            delay = next_time - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if not self._streaming.is_set():
                continue
            t = time.monotonic() - self._start
            if self.replay:  # the recorded frame, numbered as a live server numbers its frames
                packet = bytearray(self.replay["mocapframe"])
                struct.pack_into("<i", packet, 4, frame)
                self._send(bytes(packet))
            else:
                self._send(frame_packet(frame, t, self.bodies, self.skeletons))
            frame += 1
            self.frames_sent += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replay", type=Path, default=None, help="folder of real NatNet 3.0 packets to replay")
    parser.add_argument("--circle", action="append", default=[], help="a synthetic body flying circles (repeatable)")
    parser.add_argument("--rate", type=float, default=120.0)
    parser.add_argument("--command-port", type=int, default=1510)
    parser.add_argument("--data-port", type=int, default=1511)
    args = parser.parse_args()
    bodies = [SyntheticBody(name, i + 1, circle(centre=(0.0, 2.0 * i))) for i, name in enumerate(args.circle)]
    with NatNetEmulator(
        command_port=args.command_port, data_port=args.data_port, rate=args.rate, replay=args.replay, bodies=bodies
    ):
        try:
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
