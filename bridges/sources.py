"""Mocap sources: each yields ``MocapFrame``s in its system's own frame and units.

* ``NatNetSource``: OptiTrack Motive over NatNet with the ``natnet`` client: rigid bodies and skeletons.
* ``QtmSource``: Qualisys QTM with ``qtm-rt``: 6D bodies and skeletons.
* ``MotionCaptureSource``: rigid bodies from optitrack, vicon, qualisys, vrpn or mock through the
  ``motioncapture`` package, in a child process: its ``connect`` blocks forever without a server
  and holds the GIL, so it must run where it can be abandoned after a timeout.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import queue
import signal
import threading
import time

import numpy as np

from bridges.mocap import MocapFrame
from goggles.errors import ConfigError, require
from goggles.frames import matrix_to_quat

log = logging.getLogger(__name__)


class NatNetLink:
    """The client side of NatNet 3.x over UDP, with the ``natnet`` package's packet parsers.

    It owns its sockets (the ``natnet`` client would accept packets from anyone, send a keep-alive
    with every poll and never reconnect): packets from any address but the server's are dropped and
    counted; a unicast client sends a keep-alive once a second; a server silent for ``reconnect_after``
    seconds is greeted again every second until it answers (a restarted Motive), and its frame
    numbering starts afresh.
    """

    NAT_CONNECT, NAT_SERVERINFO, NAT_REQUEST_MODELDEF, NAT_MODELDEF = 0, 1, 4, 5
    NAT_FRAMEOFDATA, NAT_KEEPALIVE = 7, 10
    KEEPALIVE_PERIOD_S = 1.0

    def __init__(
        self,
        server: str,
        local: str,
        *,
        command_port: int,
        data_port: int,
        multicast: bool,
        multicast_group: str,
        reconnect_after: float = 1.0,
    ):
        import socket

        require("natnet", "mocap", "the NatNet (OptiTrack) source")
        try:
            self.server_ip = socket.gethostbyname(server)
        except OSError as exc:
            raise ConfigError(f"NatNet server {server!r}: {exc}") from exc
        self.server = (self.server_ip, command_port)
        self.multicast = multicast
        self.reconnect_after = reconnect_after
        self.version = None
        self.foreign = 0
        """Packets from other addresses than the server's, dropped."""
        self.reconnects = 0
        self.keepalives = 0
        self.on_frame = None
        self.on_descriptions = None
        self.on_server_info = None
        try:
            self.command = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.command.bind(("" if multicast else local, 0))
            self.data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.data.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if multicast:
                self.data.bind(("", data_port))
                self.data.setsockopt(
                    socket.IPPROTO_IP,
                    socket.IP_ADD_MEMBERSHIP,
                    socket.inet_aton(multicast_group) + socket.inet_aton(local),
                )
            else:
                self.data.bind((local, 0))
        except OSError as exc:
            raise ConfigError(f"cannot open NatNet sockets on {local}: {exc}") from exc
        self.command.setblocking(False)
        self.data.setblocking(False)
        now = time.monotonic()
        self._last_heard = self._last_keepalive = self._last_hello = now

    def send(self, message_id: int, text: str = "") -> None:
        payload = text.encode() + b"\0"
        try:
            self.command.sendto(
                message_id.to_bytes(2, "little") + len(payload).to_bytes(2, "little") + payload, self.server
            )
        except OSError as exc:  # the network went away: the reconnect loop will try again
            log.debug("NatNet send failed: %s", exc)

    def hello(self) -> None:
        self._last_hello = time.monotonic()
        self.send(self.NAT_CONNECT, "Ping")

    def connect(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.hello()
        while self.version is None:
            if time.monotonic() > deadline:
                raise TimeoutError
            self.poll()
            time.sleep(0.01)

    def poll(self) -> None:
        """Read every waiting packet, then keep the session alive (or revive it)."""
        from natnet.data_descriptions import DataDescriptions
        from natnet.data_frame import DataFrame
        from natnet.packet_buffer import PacketBuffer
        from natnet.server_info import ServerInfo

        for sock in (self.data, self.command):
            while True:
                try:
                    data, address = sock.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                if address[0] != self.server_ip:
                    self.foreign += 1
                    continue
                if len(data) < 4:
                    raise ValueError(f"a {len(data)}-byte packet")
                self._last_heard = time.monotonic()
                buffer = PacketBuffer(data)
                message_id, size = buffer.read_uint16(), buffer.read_uint16()
                if size != len(data) - 4:
                    raise ValueError(f"packet says {size} bytes, holds {len(data) - 4}")
                if message_id == self.NAT_SERVERINFO:
                    info = ServerInfo.read_from_buffer(buffer, self.version)
                    self.version = info.nat_net_protocol_version
                    if self.on_server_info:
                        self.on_server_info()
                elif self.version is None:
                    continue
                elif message_id == self.NAT_FRAMEOFDATA and self.on_frame:
                    self.on_frame(DataFrame.read_from_buffer(buffer, self.version))
                elif message_id == self.NAT_MODELDEF and self.on_descriptions:
                    self.on_descriptions(DataDescriptions.read_from_buffer(buffer, self.version))
        now = time.monotonic()
        if not self.multicast and now - self._last_keepalive >= self.KEEPALIVE_PERIOD_S:
            self._last_keepalive = now
            self.keepalives += 1
            self.send(self.NAT_KEEPALIVE)
        if now - self._last_heard > self.reconnect_after and now - self._last_hello >= 1.0:
            self.reconnects += 1
            self.hello()

    def close(self) -> None:
        self.command.close()
        self.data.close()


class NatNetSource:
    """NatNet 3.x client (unicast by default; ``multicast`` for Motive's default multicast stream).

    Frames are checked before they are published: only from the server, frame numbers never going
    back (a server that restarted is re-greeted and starts afresh), and rigid bodies and skeletons
    as the model definition describes them. Anything else is counted as malformed and dropped.

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
        self._link = NatNetLink(
            server,
            local,
            command_port=command_port,
            data_port=data_port,
            multicast=multicast,
            multicast_group=multicast_group,
        )
        self._frames: list = []
        self._names: dict[int, str] = {}
        self._skeletons: dict[int, tuple[str, list[str], list[int], list[int]]] = {}
        self._last_frame: int | None = None
        self._last_request = 0.0
        self.malformed = 0
        self._link.on_frame = self._on_frame
        self._link.on_descriptions = self._on_descriptions
        self._link.on_server_info = self._on_server_info
        try:
            self._link.connect(timeout)
        except TimeoutError as exc:
            self._link.close()
            raise ConfigError(
                f"no NatNet server answered at {server}:{command_port} within {timeout} s: is Motive "
                "streaming (Edit > Settings > Streaming), and are the address and ports right?"
            ) from exc

    @property
    def foreign(self) -> int:
        """Packets from other senders than the server, dropped."""
        return self._link.foreign

    @property
    def link(self) -> NatNetLink:
        return self._link

    def _on_server_info(self) -> None:
        """A (re)connection: the server's frame numbering and model may have started afresh."""
        self._last_frame = None
        self._link.send(NatNetLink.NAT_REQUEST_MODELDEF)

    def _ask_for_descriptions(self, now: float) -> None:
        if now - self._last_request > 0.5:
            self._last_request = now
            self._link.send(NatNetLink.NAT_REQUEST_MODELDEF)

    def _on_descriptions(self, descriptions) -> None:
        self._names = {body.id_num: body.name for body in descriptions.rigid_bodies}
        self._skeletons = {}
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

    def _reject(self, reason: str) -> None:
        self.malformed += 1
        if self.malformed <= 10:
            log.warning("dropped a NatNet frame (%d so far): %s", self.malformed, reason)

    def _on_frame(self, frame) -> None:
        received = time.perf_counter()
        number = frame.prefix.frame_number
        if self._last_frame is not None and number <= self._last_frame:
            self._reject(f"frame number {number} after {self._last_frame}")
            return
        described = set(self._names)
        ids = [body.id_num for body in frame.rigid_bodies]
        if len(set(ids)) != len(ids):
            self._reject(f"frame {number} repeats a rigid body id")
            return
        missing = described - set(ids)
        if missing:  # not the model's bodies: garbage, or the model changed (ask for it again)
            self._ask_for_descriptions(received)
            self._reject(f"frame {number} lacks rigid bodies {sorted(missing)[:5]} of the model definition")
            return
        for body in frame.rigid_bodies:
            values = (*body.pos, *body.rot)
            if not all(math.isfinite(v) for v in values) or abs(math.sqrt(sum(v * v for v in body.rot)) - 1) > 0.01:
                self._reject(f"frame {number}: rigid body {body.id_num} is not a rigid pose")
                return
        self._last_frame = number
        bodies = {}
        for body in frame.rigid_bodies:
            name = self._names.get(body.id_num)
            if name is None:  # a body added in Motive: ask for its description, publish nothing unnamed
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
            if set(by_id) != set(bone_ids):  # not the skeleton the model describes
                continue
            poses = [(np.array(by_id[i].pos), np.array([by_id[i].rot[3], *by_id[i].rot[:3]])) for i in bone_ids]
            skeletons[name] = (bones, parents, poses)
        self._frames.append(MocapFrame(received, bodies, skeletons, frame.suffix.timestamp))

    def frames(self, timeout: float = 0.01) -> list[MocapFrame]:
        """Frames received since the last call (waits up to ``timeout`` s for packets)."""
        deadline = time.perf_counter() + timeout
        while True:
            try:
                self._link.poll()
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
        self._link.close()


#: Seconds a motioncapture connection may deliver nameless rigid bodies before it is opened again.
UNNAMED_REOPEN_S = 1.0
#: Seconds without a frame after which a source connects again (a new motioncapture worker, a new
#: QTM connection).
RESTART_AFTER_S = 3.0
#: What the worker puts instead of a frame when it cannot connect, with the library's reason.
_FAILED = "failed"


class Silence:
    """When a source has been silent long enough to connect again: every ``RESTART_AFTER_S`` while
    no frame comes, told once per silence (an idle mocap system must not fill the log)."""

    def __init__(self, name: str):
        self.name, self.restarts, self._heard, self._told = name, 0, time.monotonic(), False

    def due(self, heard: bool) -> bool:
        now = time.monotonic()
        if heard:
            if self._told:
                log.warning("%s: frames again", self.name)
            self._heard, self._told = now, False
            return False
        if now - self._heard <= RESTART_AFTER_S:
            return False
        if not self._told:
            log.warning(
                "%s: no frames for %g s: connecting again (every %g s until frames come)",
                self.name,
                RESTART_AFTER_S,
                RESTART_AFTER_S,
            )
            self._told = True
        self._heard, self.restarts = now, self.restarts + 1
        return True


def _motioncapture_worker(system: str, options: dict, out: mp.Queue) -> None:
    """Child process: read frames forever and hand the named rigid bodies to the parent.

    libmotioncapture's optitrack backend asks for the model definitions (the bodies' names) once, at
    connect; if that UDP reply is lost, every later frame carries bodies named '' and it never asks
    again. Such a connection is opened again after ``UNNAMED_REOPEN_S``."""
    import gc

    import motioncapture  # checked by the parent before it starts this process

    from goggles.runtime.processes import die_with_parent

    die_with_parent()  # a bridge killed outright must not leave this process holding the mocap stream

    try:
        connection = motioncapture.connect(system, options)
    except Exception as exc:  # the library's reason reaches the parent's one-line error
        out.put((_FAILED, f"{type(exc).__name__}: {exc}"))
        return
    unnamed_since = None
    while True:
        connection.waitForNextFrame()
        items = connection.rigidBodies.items()
        bodies = {
            name: ([float(v) for v in b.position], [b.rotation.w, b.rotation.x, b.rotation.y, b.rotation.z])
            for name, b in items
            if name
        }
        if len(bodies) == len(items):
            unnamed_since = None
        elif unnamed_since is None:
            unnamed_since = time.monotonic()
        elif time.monotonic() - unnamed_since > UNNAMED_REOPEN_S:
            log.warning("%s rigid bodies have no names (model definitions lost): connecting again", system)
            del connection
            gc.collect()  # its sockets closed before the new connection binds the same ports
            try:
                connection = motioncapture.connect(system, options)
            except Exception as exc:  # the parent starts a new worker once this one is silent
                out.put((_FAILED, f"{type(exc).__name__}: {exc}"))
                return
            unnamed_since = None
        out.put((time.time(), bodies))


class MotionCaptureSource:
    """Rigid bodies through ``motioncapture`` (optitrack, vicon, qualisys, vrpn, mock).

    ``options`` are the backend's own settings, e.g. ``{"rigid_bodies": "quad0(0,0,1,1,0,0,0)",
    "frequency": "100"}`` for the mock (static bodies), ``{"port_command": "1510"}`` for optitrack.

    A worker process holds the connection (libmotioncapture blocks without releasing the GIL); one
    silent for ``RESTART_AFTER_S`` is started again, so a connection that failed or hangs does not
    end the bridge's poses.

    Raises:
        ConfigError: when no frame arrives within ``timeout`` s (no server, wrong address), or the
            first connection fails (with libmotioncapture's reason).
    """

    def __init__(self, system: str, host: str, *, timeout: float = 5.0, options: dict | None = None):
        require("motioncapture", "mocap", f"the {system} source (libmotioncapture)")
        self.system = system
        self._options = {"hostname": host, **(options or {})}  # e.g. port_command (optitrack); rigid_bodies (mock)
        self._start_worker()
        self._first = self._first_item(timeout)
        if self._first is None:
            ended = self._ended()  # before close() ends it
            self.close()
            if ended:
                raise ConfigError(f"libmotioncapture's {system} client {ended} before any frame from {host!r}")
            raise ConfigError(
                f"no {system} frames from {host!r} within {timeout} s: is the mocap system streaming, "
                "and is the address right?"
            )
        if self._first[0] == _FAILED:
            self.close()
            raise ConfigError(
                f"cannot connect to {system} at {host!r} ({self._first[1]}): is the mocap system streaming, "
                "and is the address right?"
            )
        self.malformed = 0
        self._silence = Silence(system)

    @property
    def restarts(self) -> int:
        """Workers started again after ``RESTART_AFTER_S`` without a frame."""
        return self._silence.restarts

    def _start_worker(self) -> None:
        context = mp.get_context("spawn")
        self._queue: mp.Queue = context.Queue(maxsize=1000)
        self._process = context.Process(
            target=_motioncapture_worker, args=(self.system, self._options, self._queue), daemon=True
        )
        self._process.start()

    def _first_item(self, timeout: float):
        """The worker's first message within ``timeout`` s; None sooner where the worker ended without one
        (libmotioncapture crashed: waiting on would only end in "no frames")."""
        deadline = time.monotonic() + timeout
        while True:
            ended = self._process.exitcode is not None
            try:  # once it ended, what it put before is still there to read
                return self._queue.get(timeout=0.5 if ended else min(0.2, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                if ended or time.monotonic() >= deadline:
                    return None

    def _ended(self) -> str:
        """How the worker process ended ("crashed with SIGSEGV", "exited with code 1"), or "" if it runs."""
        code = self._process.exitcode
        if code is None or code == 0:
            return "exited" if code == 0 else ""
        if code < 0:
            try:
                return f"crashed with {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def frames(self, timeout: float = 0.01) -> list[MocapFrame]:
        items = [self._first] if self._first is not None else []
        self._first = None
        try:
            items.append(self._queue.get(timeout=timeout) if not items else self._queue.get_nowait())
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        for item in items:
            if item[0] == _FAILED:
                log.warning("%s: connecting again failed (%s)", self.system, item[1])
        items = [item for item in items if item[0] != _FAILED]
        if self._silence.due(bool(items)):
            self._restart()
        received = time.perf_counter()
        return [
            MocapFrame(received, {name: (np.array(p), np.array(q), True) for name, (p, q) in bodies.items()})
            for _, bodies in items
        ]

    def _restart(self) -> None:
        """A worker silent for ``RESTART_AFTER_S``: its connection failed, or hangs (libmotioncapture
        waits for ever on a server that does not answer its connect), or the stream stopped. A new
        one connects afresh; a stopped stream costs only a reconnect every few seconds."""
        ended = self._ended()
        if ended:  # a crash is told as what it is, not only as a silence
            log.warning("%s: libmotioncapture's client %s: starting it again", self.system, ended)
        self.close()
        self._queue.close()
        self._queue.cancel_join_thread()  # a terminated writer may have left it mid-message
        self._start_worker()

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

        require("qtm_rt", "mocap", "the Qualisys source")

        self._host, self._port, self._timeout = host, port, timeout
        self._frames: list[MocapFrame] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.malformed = 0
        self._silence = Silence(f"QTM at {host}:{port}")
        self._reconnecting = None
        try:
            self._connection = asyncio.run_coroutine_threadsafe(self._connect(), self._loop).result(timeout + 1.0)
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

    @property
    def restarts(self) -> int:
        return self._silence.restarts

    async def _connect(self):
        """Connect, read the bodies' and skeletons' names, and stream; None where no server answers."""
        import qtm_rt

        connection = await qtm_rt.connect(self._host, port=self._port, timeout=self._timeout)
        if connection is None:
            return None
        xml = await connection.get_parameters(parameters=["6d", "skeleton"])
        self._parse_parameters(xml)
        await connection.stream_frames(components=["6d", "skeleton"], on_packet=self._on_packet)
        return connection

    async def _connect_again(self) -> None:
        if self._connection is not None:
            try:
                self._connection.disconnect()
            except Exception:  # already gone with the server
                pass
            self._connection = None
        try:
            self._connection = await self._connect()
        except Exception as exc:  # QTM closed again, or still starting: the next silence tries again
            log.warning("QTM at %s:%d: connecting again failed: %s", self._host, self._port, exc)

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
                break
            time.sleep(0.0005)
        busy = self._reconnecting is not None and not self._reconnecting.done()
        if self._silence.due(bool(frames)) and not busy:  # QTM closed or restarted: its connection is gone
            import asyncio

            self._reconnecting = asyncio.run_coroutine_threadsafe(self._connect_again(), self._loop)
        return frames

    def close(self) -> None:
        import asyncio

        async def stop():
            if getattr(self, "_connection", None) is not None:
                await self._connection.stream_frames_stop()
                self._connection.disconnect()

        if getattr(self, "_reconnecting", None) is not None:
            self._reconnecting.cancel()
        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(2.0)
            except Exception as exc:  # the server went away first: nothing left to stop
                log.info("QTM connection closed: %s", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2.0)


def open_source(
    system: str,
    backend: str | None = None,
    *,
    host: str = "127.0.0.1",
    local: str = "127.0.0.1",
    command_port: int = 1510,
    data_port: int = 1511,
    qtm_port: int = 22223,
    multicast: bool = False,
    mock_bodies: str = "",
    timeout: float = 5.0,
):
    """The source of ``system`` (optitrack, qualisys, vicon, vrpn, mock) through ``backend`` (natnet,
    qtm, motioncapture; None: the system's richest: natnet for OptiTrack, qtm for Qualisys).

    Raises:
        ConfigError: a backend that does not serve the system, or a server that does not answer.
    """
    backend = backend or {"optitrack": "natnet", "qualisys": "qtm"}.get(system, "motioncapture")
    allowed = {"optitrack": {"natnet", "motioncapture"}, "qualisys": {"qtm", "motioncapture"}}
    if backend not in allowed.get(system, {"motioncapture"}):
        raise ConfigError(f"--backend {backend} does not serve --system {system}")
    if backend == "qtm":
        return QtmSource(host, port=qtm_port, timeout=timeout)
    if backend == "natnet":
        return NatNetSource(
            host, local, command_port=command_port, data_port=data_port, multicast=multicast, timeout=timeout
        )
    options = {"port_command": str(command_port)} if system == "optitrack" else {}
    if mock_bodies:
        options.update(rigid_bodies=mock_bodies, frequency="100")
    return MotionCaptureSource(system, host, timeout=timeout, options=options)
