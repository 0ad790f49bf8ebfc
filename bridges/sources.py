"""Mocap sources: each yields ``MocapFrame``s in its system's own frame and units.

* ``NatNetSource``: OptiTrack Motive over NatNet with the ``natnet`` client: rigid bodies and skeletons.
* ``MotionCaptureSource``: rigid bodies from optitrack, vicon, qualisys, vrpn or mock through the
  ``motioncapture`` package, in a child process: its ``connect`` blocks forever without a server
  and holds the GIL, so it must run where it can be abandoned after a timeout.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import time

import numpy as np

from bridges.mocap import MocapFrame
from goggles.errors import ConfigError

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
