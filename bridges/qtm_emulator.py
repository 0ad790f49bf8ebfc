"""A Qualisys QTM real-time (RT) protocol server on loopback: 6D bodies and skeletons, for tests.

Speaks the little-endian RT protocol (TCP 22223) as far as ``qtm-rt`` uses it: the welcome message,
``version``, ``getparameters`` (XML of the 6D bodies and skeletons), ``streamframes`` (data packets
with a 6D component: positions in mm and a rotation matrix stored column by column, and a skeleton
component: per segment an id, a position in mm and a quaternion x, y, z, w) and ``streamframes stop``.
Synthetic motions are given in goggles' ENU metres and streamed in QTM's z-up millimetres.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time

import numpy as np

from bridges.natnet_emulator import SyntheticBody, SyntheticSkeleton
from goggles.frames import quat_to_matrix

PACKET_ERROR, PACKET_COMMAND, PACKET_XML, PACKET_DATA = 0, 1, 2, 3
COMPONENT_6D, COMPONENT_SKELETON = 5, 18


def _packet(kind: int, payload: bytes) -> bytes:
    return struct.pack("<II", len(payload) + 8, kind) + payload


def _text(kind: int, text: str) -> bytes:
    return _packet(kind, text.encode() + b"\0")


def parameters_xml(bodies: list[SyntheticBody], skeletons: list[SyntheticSkeleton]) -> str:
    six_d = "".join(f"<Body><Name>{b.name}</Name></Body>" for b in bodies)
    skeleton_xml = ""
    for s in skeletons:
        segments = "".join(
            f'<Segment Name="{name}" ID="{i + 1}"' + (f' Parent_ID="{parent + 1}"' if parent >= 0 else "") + "/>"
            for i, (name, parent) in enumerate(s.bones)
        )
        skeleton_xml += f'<Skeleton Name="{s.name}"><Segments>{segments}</Segments></Skeleton>'
    return (
        f"<QTM_Parameters_Ver_1.25><The_6D><Bodies>{len(bodies)}</Bodies>{six_d}</The_6D>"
        f"<Skeletons>{skeleton_xml}</Skeletons></QTM_Parameters_Ver_1.25>"
    )


def data_packet(frame: int, t: float, bodies: list[SyntheticBody], skeletons: list[SyntheticSkeleton]) -> bytes:
    six_d = struct.pack("<ihh", len(bodies), 0, 0)
    for body in bodies:
        p, q = body.motion(t)
        R = quat_to_matrix(q)
        six_d += struct.pack("<3f", *(np.asarray(p) * 1000.0)) + struct.pack("<9f", *R.T.ravel())  # column by column
    skeleton = struct.pack("<i", len(skeletons))
    for s in skeletons:
        poses = s.motion(t)
        skeleton += struct.pack("<i", len(poses))
        for i, (p, q) in enumerate(poses):
            skeleton += struct.pack("<i3f4f", i + 1, *(np.asarray(p) * 1000.0), q[1], q[2], q[3], q[0])
    components = [(COMPONENT_6D, six_d), (COMPONENT_SKELETON, skeleton)]
    body = b"".join(struct.pack("<II", len(c) + 8, kind) + c for kind, c in components)
    return _packet(PACKET_DATA, struct.pack("<qII", int(t * 1e6), frame, len(components)) + body)


class QtmEmulator:
    """The server, in a thread of its own; use as a context manager."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 22223, rate: float = 100.0, bodies=(), skeletons=()):
        self.host, self.port, self.rate = host, port, rate
        self.bodies, self.skeletons = list(bodies), list(skeletons)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server = None
        self._start = time.monotonic()
        self._writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> QtmEmulator:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._client, self.host, self.port), self._loop)
        self._server = future.result(5.0)
        return self

    def __exit__(self, *exc) -> None:
        async def close():
            self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)

    def drop_clients(self) -> None:
        """Close every client's connection, as QTM does when it is closed or restarted."""

        async def drop():
            for writer in list(self._writers):
                writer.close()

        asyncio.run_coroutine_threadsafe(drop(), self._loop).result(5.0)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_text(PACKET_COMMAND, "QTM RT Interface connected"))
        self._writers.add(writer)
        streaming: asyncio.Task | None = None
        try:
            while True:
                size, _kind = struct.unpack("<II", await reader.readexactly(8))
                command = (await reader.readexactly(size - 8)).rstrip(b"\0").decode().strip()
                words = command.lower().split()
                if words[:1] == ["version"]:
                    writer.write(_text(PACKET_COMMAND, f"Version set to {words[1]}"))
                elif words[:1] == ["getparameters"]:
                    writer.write(_text(PACKET_XML, parameters_xml(self.bodies, self.skeletons)))
                elif words[:2] == ["streamframes", "stop"]:
                    if streaming is not None:
                        streaming.cancel()
                        streaming = None
                elif words[:1] == ["streamframes"]:
                    streaming = asyncio.ensure_future(self._stream(writer))
                else:
                    writer.write(_text(PACKET_ERROR, f"Parse error: {command}"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if streaming is not None:
                streaming.cancel()
            self._writers.discard(writer)
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter) -> None:
        frame = 0
        while True:
            writer.write(data_packet(frame, time.monotonic() - self._start, self.bodies, self.skeletons))
            await writer.drain()
            frame += 1
            await asyncio.sleep(1.0 / self.rate)
