"""Mocap sources: each yields ``MocapFrame``s in its system's own frame and units.

* ``NatNetSource``: OptiTrack Motive over NatNet with the ``natnet`` client: rigid bodies and skeletons.
* ``QtmSource``: Qualisys QTM with ``qtm-rt``: 6D bodies and skeletons.
* ``MotionCaptureSource``: rigid bodies from optitrack, vicon, qualisys, vrpn or mock through the
  ``motioncapture`` package, in a child process: its ``connect`` blocks forever without a server
  and holds the GIL, so it must run where it can be abandoned after a timeout.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import threading
import time

import numpy as np

from bridges.mocap import MocapFrame
from goggles.errors import ConfigError
from goggles.frames import matrix_to_quat

log = logging.getLogger(__name__)


class NatNetSource:
    """NatNet 3.x client (unicast by default; ``multicast`` for Motive's default multicast stream).

    Args:
        server: Motive's address.
        local: this machine's address on the mocap network.
        command_port, data_port: NatNet ports (1510, 1511).
        multicast: listen to the multicast group instead of unicast.
        timeout: s to wait for the server's answer before giving up with a clear error.
    """

    def __init__(
        self,
        server: str = "127.0.0.1",
        local: str = "127.0.0.1",
        *,
        command_port: int = 1510,
        data_port: int = 1511,
        multicast: bool = False,
        multicast_group: str = "239.255.42.99",
        timeout: float = 5.0,
    ):
        from natnet import NatNetClient

        self._client = NatNetClient(
            server_ip_address=server,
            local_ip_address=local,
            multicast_address=multicast_group,
            command_port=command_port,
            data_port=data_port,
            use_multicast=multicast,
        )
        self._frames: list = []
        self._names: dict[int, str] = {}
        self._skeletons: dict[int, tuple[str, list[str], list[int], list[int]]] = {}
        self.malformed = 0
        self._client.on_data_frame_received_event.handlers.append(self._on_frame)
        self._client.on_data_description_received_event.handlers.append(self._on_descriptions)
        try:
            self._client.connect(timeout=timeout)
        except TimeoutError as exc:
            raise ConfigError(
                f"no NatNet server answered at {server}:{command_port} within {timeout} s: is Motive "
                "streaming (Edit > Settings > Streaming), and are the address and ports right?"
            ) from exc
        self._client.request_modeldef()
        self._last_request = time.perf_counter()

    def _ask_for_descriptions(self, now: float) -> None:
        if now - self._last_request > 0.5:
            self._last_request = now
            self._client.request_modeldef()

    def _on_descriptions(self, descriptions) -> None:
        for body in descriptions.rigid_bodies:
            self._names[body.id_num] = body.name
        for skeleton in descriptions.skeletons:
            bone_ids = [b.id_num for b in skeleton.rigid_body_descriptions]
            index = {bone_id: i for i, bone_id in enumerate(bone_ids)}
            parents = [index.get(b.parent_id, -1) for b in skeleton.rigid_body_descriptions]
            self._skeletons[skeleton.id_num] = (
                skeleton.name,
                [b.name for b in skeleton.rigid_body_descriptions],
                parents,
                bone_ids,
            )

    def _on_frame(self, frame) -> None:
        received = time.perf_counter()
        bodies = {}
        for body in frame.rigid_bodies:
            name = self._names.get(body.id_num)
            if name is None:  # its description has not arrived: ask again, publish nothing unnamed
                self._ask_for_descriptions(received)
                continue
            x, y, z, w = body.rot
            bodies[name] = (np.array(body.pos), np.array([w, x, y, z]), bool(body.tracking_valid))
        skeletons = {}
        for skeleton in frame.skeletons:
            if skeleton.id_num not in self._skeletons:
                self._ask_for_descriptions(received)
                continue
            name, bones, parents, bone_ids = self._skeletons[skeleton.id_num]
            by_id = {b.id_num: b for b in skeleton.rigid_bodies}
            if not all(i in by_id for i in bone_ids):
                continue
            poses = [(np.array(by_id[i].pos), np.array([by_id[i].rot[3], *by_id[i].rot[:3]])) for i in bone_ids]
            skeletons[name] = (bones, parents, poses)
        self._frames.append(MocapFrame(received, bodies, skeletons, frame.suffix.timestamp))

    def frames(self, timeout: float = 0.01) -> list[MocapFrame]:
        """Frames received since the last call (waits up to ``timeout`` s for packets)."""
        deadline = time.perf_counter() + timeout
        while True:
            try:
                self._client.update_sync()
            except Exception as exc:  # a malformed packet: counted and dropped, the stream goes on
                self.malformed += 1
                if self.malformed <= 10:
                    log.warning("dropped a malformed NatNet packet (%d so far): %s", self.malformed, exc)
                continue
            if self._frames or time.perf_counter() >= deadline:
                break
            time.sleep(0.0005)
        frames, self._frames = self._frames, []
        return frames

    def close(self) -> None:
        self._client.shutdown()


def _motioncapture_worker(system: str, options: dict, out: mp.Queue) -> None:
    """Child process: read frames forever and hand the rigid bodies to the parent."""
    import motioncapture

    connection = motioncapture.connect(system, options)
    while True:
        connection.waitForNextFrame()
        bodies = {
            name: (
                [float(v) for v in body.position],
                [body.rotation.w, body.rotation.x, body.rotation.y, body.rotation.z],
            )
            for name, body in connection.rigidBodies.items()
        }
        out.put((time.time(), bodies))


class MotionCaptureSource:
    """Rigid bodies through ``motioncapture`` (optitrack, vicon, qualisys, vrpn, mock).

    ``options`` are the backend's own settings, e.g. ``{"rigid_bodies": "quad0(0,0,1,1,0,0,0)",
    "frequency": "100"}`` for the mock (static bodies), ``{"port_command": "1510"}`` for optitrack.

    Raises:
        ConfigError: when no frame arrives within ``timeout`` s (no server, wrong address).
    """

    def __init__(self, system: str, host: str, *, timeout: float = 5.0, options: dict | None = None):
        options = {"hostname": host, **(options or {})}  # e.g. port_command (optitrack); rigid_bodies (mock)
        self._queue: mp.Queue = mp.get_context("spawn").Queue(maxsize=1000)
        self._process = mp.get_context("spawn").Process(
            target=_motioncapture_worker, args=(system, options, self._queue), daemon=True
        )
        self._process.start()
        try:
            self._first = self._queue.get(timeout=timeout)
        except queue.Empty as exc:
            self.close()
            raise ConfigError(
                f"no {system} frames from {host!r} within {timeout} s: is the mocap system streaming, "
                "and is the address right?"
            ) from exc
        self.malformed = 0

    def frames(self, timeout: float = 0.01) -> list[MocapFrame]:
        items = [self._first] if self._first is not None else []
        self._first = None
        try:
            items.append(self._queue.get(timeout=timeout) if not items else self._queue.get_nowait())
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        received = time.perf_counter()
        return [
            MocapFrame(received, {name: (np.array(p), np.array(q), True) for name, (p, q) in bodies.items()})
            for _, bodies in items
        ]

    def close(self) -> None:
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(2.0)


class QtmSource:
    """Qualisys QTM over its real-time protocol with ``qtm-rt``: 6D bodies and skeletons.

    Positions come in millimetres with z up (the room calibration's Qualisys defaults); 6D rotation
    matrices are read column by column, skeleton segments as quaternions (x, y, z, w).
    """

    def __init__(self, host: str, *, port: int = 22223, timeout: float = 5.0):
        import asyncio

        import qtm_rt

        self._frames: list[MocapFrame] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.malformed = 0

        async def start():
            connection = await qtm_rt.connect(host, port=port, timeout=timeout)
            if connection is None:
                return None
            xml = await connection.get_parameters(parameters=["6d", "skeleton"])
            self._parse_parameters(xml)
            await connection.stream_frames(components=["6d", "skeleton"], on_packet=self._on_packet)
            return connection

        try:
            self._connection = asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout + 1.0)
        except Exception as exc:
            self._connection = None
            self.close()
            raise ConfigError(f"QTM at {host}:{port} did not stream: {exc}") from exc
        if self._connection is None:
            self.close()
            raise ConfigError(
                f"no QTM real-time server answered at {host}:{port} within {timeout} s: is QTM "
                "running with real-time output on, and is the address right?"
            )

    def _parse_parameters(self, xml: bytes) -> None:
        import xml.etree.ElementTree as ElementTree

        root = ElementTree.fromstring(xml)
        self._bodies = [body.findtext("Name") for body in root.iter("Body")]
        self._skeletons = []
        for skeleton in root.iter("Skeleton"):
            segments = list(skeleton.iter("Segment"))
            ids = [int(s.get("ID")) for s in segments]
            index = {segment_id: i for i, segment_id in enumerate(ids)}
            parents = [index.get(int(s.get("Parent_ID", -1)), -1) for s in segments]
            self._skeletons.append((skeleton.get("Name"), [s.get("Name") for s in segments], parents, ids))

    def _on_packet(self, packet) -> None:
        received = time.perf_counter()
        try:
            bodies = {}
            six_d = packet.get_6d()
            for name, (position, rotation) in zip(self._bodies, six_d[1] if six_d else []):
                R = np.array(rotation.matrix, dtype=np.float64).reshape(3, 3).T  # stored column by column
                valid = np.all(np.isfinite(position)) and np.all(np.isfinite(R))
                bodies[name] = (np.array(position), matrix_to_quat(R) if valid else np.full(4, np.nan), bool(valid))
            skeletons = {}
            skeleton_data = packet.get_skeletons()
            for (name, bones, parents, ids), segments in zip(
                self._skeletons, skeleton_data[1] if skeleton_data else []
            ):
                by_id = {segment_id: (p, q) for segment_id, p, q in segments}
                if all(i in by_id for i in ids):
                    poses = [
                        (np.array(by_id[i][0]), np.array([by_id[i][1].w, by_id[i][1].x, by_id[i][1].y, by_id[i][1].z]))
                        for i in ids
                    ]
                    skeletons[name] = (bones, parents, poses)
        except Exception as exc:  # a malformed packet: counted and dropped
            self.malformed += 1
            log.warning("dropped a malformed QTM packet (%d so far): %s", self.malformed, exc)
            return
        with self._lock:
            self._frames.append(MocapFrame(received, bodies, skeletons, packet.timestamp * 1e-6))

    def frames(self, timeout: float = 0.01) -> list[MocapFrame]:
        deadline = time.perf_counter() + timeout
        while True:
            with self._lock:
                frames, self._frames = self._frames, []
            if frames or time.perf_counter() >= deadline:
                return frames
            time.sleep(0.0005)

    def close(self) -> None:
        import asyncio

        async def stop():
            if getattr(self, "_connection", None) is not None:
                await self._connection.stream_frames_stop()
                self._connection.disconnect()

        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(2.0)
            except Exception as exc:  # the server went away first: nothing left to stop
                log.info("QTM connection closed: %s", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2.0)
