"""The preview server: a web page with the vehicle's stereo pair, a third-person view and WebXR.

It reads the engine's newest stereo colour images over ZeroMQ (conflating subscriptions: it always
shows the latest frame), puts left and right side by side, renders a third-person view of the
vehicle (its airframe's model at the vehicle's pose, seen from a chosen viewpoint in the same
scene), and sends both as JPEG over a WebSocket to every open page. Binds 127.0.0.1 unless told
otherwise; with a ``token`` the stream goes only to pages opened with ``?token=<token>`` (the page
passes it on), as ``goggles preview`` sets whenever it serves beyond this machine. Bounded against
hostile pages: at most ``MAX_PAGES`` open, nothing bigger than ``MAX_INCOMING_BYTES`` taken from one, a
few frames queued per page, and a page that takes nothing for ``STALLED_S`` dropped. Each message: kind (uint8: 0
stereo, 1 third person), send time (float64 ms since the epoch, for the page's latency figure),
JPEG bytes.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import struct
import threading
import time
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np

from goggles.errors import ConfigError, require
from goggles.frames import R_BODY_OPTICAL, look_at, transform
from goggles.transport.endpoints import PREVIEW_PORT

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
PAGES = {f"/{path.name}": path for path in STATIC.iterdir() if path.suffix in CONTENT_TYPES}
PAGES["/"] = STATIC / "index.html"
"""What the server serves, by request path: the page's own files and nothing else (no path is ever
built from a request, so none can reach outside them or fail on a name the system refuses)."""
KIND_STEREO, KIND_THIRD = 0, 1


def previewed_camera(config, vehicle: str, camera: str):
    """The run file's ``CameraConfig`` of ``vehicle``'s stereo ``camera`` publishing rgb (what the
    preview shows), or a ConfigError naming the file and what it holds."""
    where = config.source or "the run file"
    names = [v.name for v in config.vehicles]
    if vehicle not in names:
        raise ConfigError(f"{where}: no vehicle {vehicle!r} (vehicles: {', '.join(names)}); choose one with --vehicle")
    cameras = [c for c in config.cameras if c.vehicle == vehicle]
    found = next((c for c in cameras if c.name == camera), None)
    if found is None:
        known = ", ".join(c.name for c in cameras) or "none"
        raise ConfigError(f"{where}: vehicle {vehicle!r} has no camera {camera!r} (cameras: {known}); use --camera")
    if found.baseline is None or "rgb" not in found.outputs:
        raise ConfigError(f"{where}: camera {camera!r} of {vehicle!r} must be a stereo camera publishing rgb")
    return found


class FrameSource:
    """Pulls the newest stereo pair from the engine and makes the JPEGs (in a thread).

    ``airframe`` (a preset name or TOML path) is how the third-person view draws the vehicle: its
    rotor layout's model (``goggles.scene.vehicle_model``). Its pose is the image's camera pose times
    the camera's mount: ``mount`` (the left camera's optical frame in the body, ``CameraConfig.T_BC``)
    when the run file is known, else learnt from a ``<vehicle>/state`` of the same instant as an image
    (the engine publishes both at that step). Until then, and in live mode (no state) without a
    ``mount``, the body is taken to sit at the camera, looking where it looks.
    """

    def __init__(
        self,
        client,
        vehicle: str,
        camera: str,
        *,
        scene=None,
        viewpoint=None,
        device=None,
        quality: int = 80,
        third_size=(320, 240),
        airframe: str = "fg-quad",
        mount: np.ndarray | None = None,
    ):
        self.client = client
        self.channels = (f"{vehicle}/{camera}_left/rgb", f"{vehicle}/{camera}_right/rgb")
        self.state_channel = f"{vehicle}/state"
        self.T_CB: np.ndarray | None = None if mount is None else np.linalg.inv(np.asarray(mount, np.float64))
        """The body in the left camera's optical frame: from ``mount``, or once a state and an image
        shared an instant."""
        self.quality = quality
        self.viewpoint = None if viewpoint is None else np.asarray(viewpoint, dtype=np.float64)
        self._third = None
        if scene is not None:
            from goggles.dynamics.airframe import load_airframe
            from goggles.render import CameraModel, RenderSettings
            from goggles.rig import parts
            from goggles.scene.vehicle_model import vehicle_shape
            from goggles.world import DeviceScene

            shape = vehicle_shape(load_airframe(airframe))
            world = DeviceScene(scene, device, shapes=[shape], max_actors=1)
            self._world = world
            self._third = parts.renderer(
                world, [CameraModel.from_fov(*third_size, 60.0)], RenderSettings(outputs={"rgb", "segmentation"})
            )

    def next_frames(self, timeout: float = 0.5) -> list[tuple[int, bytes]]:
        """The newest stereo pair (and third-person view) as JPEG messages, or [] if none came."""
        import cv2

        from goggles.client import image_array

        left = self.client.latest(self.channels[0], timeout=timeout)
        if left is None:
            return []
        right = self.client.latest(self.channels[1], timeout=timeout)
        pair = np.hstack([image_array(left), image_array(right) if right is not None else image_array(left)])
        messages = [(KIND_STEREO, self._jpeg(cv2, pair))]
        if self._third is not None:
            T_WC = transform(left.position, left.orientation)
            messages.append((KIND_THIRD, self._jpeg(cv2, self.third_person(self.body_pose(T_WC, left)).rgb[0])))
        return messages

    def body_pose(self, T_WC: np.ndarray, image) -> np.ndarray:
        """The vehicle's pose when ``image`` (rendered from ``T_WC``) was taken: through the mount
        once known (a state of the image's instant teaches it), else the body at the camera."""
        state = self.client.latest(self.state_channel, timeout=0.0)
        if state is not None and state.header.utime == image.pose_utime:
            self.T_CB = np.linalg.inv(T_WC) @ transform(state.position, state.orientation)
        if self.T_CB is not None:
            return T_WC @ self.T_CB
        body = T_WC.copy()
        body[:3, :3] = T_WC[:3, :3] @ R_BODY_OPTICAL.T
        return body

    def third_person(self, T_WB: np.ndarray):
        """The third-person view (``Images``: rgb and segmentation) of the vehicle at ``T_WB``, from
        the viewpoint or from behind and above it."""
        self._world.set_actors([0], [T_WB])
        eye = self.viewpoint if self.viewpoint is not None else T_WB[:3, 3] + [-4.0, -2.0, 2.5]
        self._third.render(look_at(eye, T_WB[:3, 3])[None])
        return self._third.images()

    def _jpeg(self, cv2, rgb: np.ndarray) -> bytes:
        ok, data = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if not ok:
            raise RuntimeError("JPEG encoding failed")
        return data.tobytes()


#: Bytes that may wait in one page's send buffer before frames for it are skipped (a few frames).
MAX_BUFFERED_BYTES = 512 * 1024
#: Pages that may watch at once; more are refused (503), so open connections cannot exhaust memory.
MAX_PAGES = 16
#: The largest message a page may send: the page sends nothing, so anything bigger closes it (1009).
MAX_INCOMING_BYTES = 4096
#: A page that takes no frame for this long (its send buffer stays full) is dropped: it frees its place
#: and its buffers; a page that reads again is welcome back.
STALLED_S = 10.0


def _buffered(connection) -> int:
    transport = getattr(connection, "transport", None)
    return transport.get_write_buffer_size() if transport is not None else 0


class PreviewServer:
    """Serves the page and the frame stream; ``run`` blocks until ``stop`` is set."""

    def __init__(
        self, source: FrameSource, *, host: str = "127.0.0.1", port: int = PREVIEW_PORT, token: str | None = None
    ):
        self.source, self.host, self.port, self.token = source, host, port, token
        self.frames_sent = 0
        self.refused = 0
        """Stream requests without the token."""
        self.busy = 0
        """Stream requests refused because ``MAX_PAGES`` pages were open."""
        self.dropped = 0
        """Pages dropped for taking no frame for ``STALLED_S``."""
        self._clients: set = set()
        self._full_since: dict = {}
        """When each page's send buffer last became full (pages that keep up are not in it)."""

    async def _request(self, connection, request):
        url = urlsplit(request.path)
        if url.path in ("/stream", "/stream/"):
            given = parse_qs(url.query).get("token", [""])[0]
            if self.token is not None and not hmac.compare_digest(given.encode(), self.token.encode()):
                self.refused += 1
                return connection.respond(HTTPStatus.FORBIDDEN, "open the page at the URL goggles preview printed\n")
            if len(self._clients) >= MAX_PAGES:
                self.busy += 1
                return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, f"{MAX_PAGES} pages are open already\n")
            return None  # upgrade to the WebSocket
        path = PAGES.get(url.path)
        if path is None:
            return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
        response = connection.respond(HTTPStatus.OK, path.read_text(encoding="utf-8"))
        response.headers["Content-Type"] = CONTENT_TYPES.get(path.suffix, "application/octet-stream")
        return response

    async def _stream(self, websocket) -> None:
        if len(self._clients) >= MAX_PAGES:  # handshakes that passed the check together
            self.busy += 1
            await websocket.close(1013, f"{MAX_PAGES} pages are open already")
            return
        self._clients.add(websocket)
        try:
            async for _ in websocket:  # the page sends nothing: whatever comes is read and dropped
                pass
        except Exception:  # a message over MAX_INCOMING_BYTES, a broken connection: the page is gone
            pass
        finally:
            self._clients.discard(websocket)
            self._full_since.pop(websocket, None)

    def _ready(self, now: float) -> list:
        """The pages to send a frame to: those whose buffer has room. A page whose buffer has stayed
        full for ``STALLED_S`` is dropped (its connection aborted, its buffers freed)."""
        ready = []
        for client in list(self._clients):
            if _buffered(client) <= MAX_BUFFERED_BYTES:
                self._full_since.pop(client, None)
                ready.append(client)
            elif now - self._full_since.setdefault(client, now) > STALLED_S:
                self.dropped += 1
                self._clients.discard(client)
                self._full_since.pop(client, None)
                client.transport.abort()
        return ready

    async def _serve(self, stop: threading.Event, listening, polled) -> None:
        require("websockets", "viewing", "the preview page")
        from websockets.asyncio.server import broadcast, serve

        loop = asyncio.get_running_loop()
        async with serve(
            self._stream,
            self.host,
            self.port,
            process_request=self._request,
            max_size=MAX_INCOMING_BYTES,
            max_queue=4,
        ):
            if listening is not None:
                listening()
            while not stop.is_set():
                messages = await loop.run_in_executor(None, self.source.next_frames, 0.2)
                sent = struct.pack("<d", time.time() * 1000.0)
                for kind, jpeg in messages:
                    # A page that has not taken the previous frames skips this one: at most a few
                    # frames ever wait per client, however long it stops reading.
                    broadcast(self._ready(time.monotonic()), bytes([kind]) + sent + jpeg)
                    self.frames_sent += 1
                if polled is not None:
                    polled()

    def run(self, stop: threading.Event | None = None, listening=None, polled=None) -> None:
        """Serve until ``stop``; ``listening()`` is called once the port is bound (to announce the page),
        ``polled()`` after each wait for frames (at least every second)."""
        try:
            asyncio.run(self._serve(stop or threading.Event(), listening, polled))
        except OSError as exc:
            raise ConfigError(f"cannot serve the preview on {self.host}:{self.port}: {exc}") from exc
