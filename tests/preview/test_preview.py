"""The preview page in a real headless Chromium (Debian's): it connects, frames arrive, it shows them."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

import numpy as np
import pytest

from goggles.client import Client
from goggles.paths import default_scene
from goggles.preview.server import FrameSource, PreviewServer
from goggles.scene import load_static_scene
from tests.support import Running, endpoints, free_port, rss_mb, run_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class DevTools:
    """A minimal Chrome DevTools Protocol client over the page target's WebSocket."""

    def __init__(self, port: int):
        from websockets.sync.client import connect

        deadline = time.monotonic() + 30
        while True:
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2))
                page = next(t for t in targets if t["type"] == "page")
                break
            except (OSError, StopIteration):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.socket = connect(page["webSocketDebuggerUrl"], max_size=2**26).__enter__()
        self.next_id = 0

    def close(self) -> None:
        self.socket.__exit__(None, None, None)

    def call(self, method: str, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.socket.recv(timeout=30))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(reply["error"])
                return reply["result"]

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_preview_page_in_headless_chromium(tmp_path, device):
    config = run_config(
        scale=2.0,
        cameras=[
            {
                "vehicle": "quad0",
                "name": "stereo",
                "width": 96,
                "height": 72,
                "vfov_deg": 60.0,
                "baseline": 0.32,
                "rate": 30.0,
                "outputs": ["rgb"],
            }
        ],
    )
    engine = Running(config, device=device)
    client = Client(endpoints(config))
    source = FrameSource(client, "quad0", "stereo", scene=load_static_scene(default_scene()), device=device)
    port = free_port()
    server = PreviewServer(source, port=port)
    stop = threading.Event()
    serving = threading.Thread(target=server.run, args=(stop,), daemon=True)
    serving.start()
    debug_port = free_port()
    browser = subprocess.Popen(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tempfile.mkdtemp()}",
            f"--remote-debugging-port={debug_port}",
            "--window-size=1000,500",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        page = DevTools(debug_port)
        page.call("Page.enable")
        page.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
        deadline = time.monotonic() + 60
        frames = 0
        while time.monotonic() < deadline and frames < 10:
            time.sleep(0.3)
            frames = int(
                page.evaluate("document.getElementById('frames') ? +document.getElementById('frames').textContent : 0")
                or 0
            )
        assert frames >= 10, "the page received no stereo frames"
        assert page.evaluate("document.getElementById('status').textContent") == "connected"

        def settled(expression: str, expected):
            """The expression's value once it is ``expected`` (an image swapped for the next frame reads
            width 0 until that frame is decoded), or its last value at the deadline."""
            value = page.evaluate(expression)
            while value != expected and time.monotonic() < deadline:
                time.sleep(0.05)
                value = page.evaluate(expression)
            return value

        assert settled("document.getElementById('stereo').naturalWidth", 2 * 96) == 2 * 96  # left | right
        assert settled("document.getElementById('third').naturalWidth", 320) == 320
        shot = page.call("Page.captureScreenshot", format="png")["data"]
        (tmp_path / "preview.png").write_bytes(base64.b64decode(shot))
        import cv2

        image = cv2.imdecode(np.frombuffer(base64.b64decode(shot), np.uint8), cv2.IMREAD_COLOR)
        assert image.std() > 10  # not blank: the arena and the page, not one flat colour
        stereo_box = page.evaluate("JSON.stringify(document.getElementById('stereo').getBoundingClientRect())")
        box = json.loads(stereo_box)
        region = image[int(box["top"]) + 5 : int(box["bottom"]) - 5, int(box["left"]) + 5 : int(box["right"]) - 5]
        assert region.size and region.std() > 5  # the stereo image itself has content
        page.close()
    finally:
        browser.terminate()
        browser.wait(10)
        stop.set()
        serving.join(10)
        engine.stop.set()
        engine.finish()
        client.close()
    assert server.frames_sent > 10


class _BigFrames:
    """A frame source of 200 KB frames at 25 Hz (the server only calls next_frames)."""

    def next_frames(self, timeout: float = 0.5):
        time.sleep(0.04)
        return [(1, bytes(200_000))]


def _serving(source, **kwargs):
    """A preview server in a thread, once it listens: (server, stop, thread)."""
    import socket

    port = free_port()
    server = PreviewServer(source, port=port, **kwargs)
    stop, listening = threading.Event(), threading.Event()
    thread = threading.Thread(target=server.run, args=(stop, listening.set), daemon=True)
    thread.start()
    assert listening.wait(30)
    with socket.create_connection(("127.0.0.1", port)):
        pass
    return server, stop, thread


def _retained_mb() -> float:
    """This process's RSS once glibc handed its freed heap back: what is kept (the frames offered and
    dropped meanwhile were counted too, more of them the busier the machine: 67 MB once in CI)."""
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mb()


def _silent_page(port: int):
    """A page's stream opened over a raw socket that then never reads: (socket, HTTP status)."""
    import socket

    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    key = base64.b64encode(b"0123456789abcdef").decode()
    s.sendall(
        (
            f"GET /stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:  # the response's head, a byte at a time: no frame is read
        byte = s.recv(1)
        if not byte:
            break
        head += byte
    return s, int(head.split(b" ", 2)[1]) if head else 0


@pytest.mark.slow
def test_pages_that_never_read_cost_a_few_frames_each_and_their_number_is_bounded():
    """1,000 pages that never read cost +603 MB and stayed connected: now at most MAX_PAGES are
    served (the others refused with 503), each holds a few frames, and after STALLED_S without
    taking one a page is dropped."""
    from goggles.preview import server as preview

    server, stop, thread = _serving(_BigFrames())
    port = server.port
    try:
        before = _retained_mb()
        pages = [_silent_page(port) for _ in range(3 * preview.MAX_PAGES)]
        statuses = [status for _, status in pages]
        assert statuses.count(101) == preview.MAX_PAGES and statuses.count(503) == 2 * preview.MAX_PAGES
        time.sleep(3.0)  # 75 frames (15 MB) offered to each page
        grown = _retained_mb() - before
        print(f"{len(pages)} pages that never read: RSS +{grown:.0f} MB over 3 s")
        assert server.frames_sent > 50
        assert grown < 40, f"RSS grew {grown:.0f} MB"
        assert len(server._clients) == preview.MAX_PAGES and server.busy == 2 * preview.MAX_PAGES
    finally:
        stop.set()
        thread.join(5)
        for s, _ in pages:
            s.close()


@pytest.mark.slow
def test_a_page_that_takes_nothing_is_dropped_and_its_place_freed(monkeypatch):
    from goggles.preview import server as preview

    monkeypatch.setattr(preview, "STALLED_S", 0.5)
    server, stop, thread = _serving(_BigFrames())
    try:
        silent, status = _silent_page(server.port)
        assert status == 101
        deadline = time.monotonic() + 30
        while server.dropped == 0:  # its buffer fills, then STALLED_S pass
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not server._clients
        _, again = _silent_page(server.port)
        assert again == 101
    finally:
        stop.set()
        thread.join(5)
        silent.close()


@pytest.mark.slow
def test_what_pages_send_is_read_and_anything_large_closes_them():
    """Pages that sent 20 x 1 MB and never read cost ~17 MB each, kept after they closed: the page
    sends nothing, so a message over MAX_INCOMING_BYTES closes it (1009) before it is buffered. The
    server runs in its own process, so the megabytes this test's pages send are not counted."""
    import sys

    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from goggles.preview import server as preview

    port = free_port()
    serving = subprocess.Popen(
        [sys.executable, "-c", _SERVE_SMALL_FRAMES, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert serving.stdout.readline().strip() == "listening"

        def retained_mb() -> float:
            """The server's RSS once it handed freed heap back (glibc keeps freed megabytes
            otherwise): what stays is what is kept."""
            os.kill(serving.pid, signal.SIGUSR1)
            assert serving.stdout.readline().strip() == "trimmed"
            return rss_mb(serving.pid)

        before = retained_mb()
        for _ in range(20):
            with connect(f"ws://127.0.0.1:{port}/stream", open_timeout=5, max_size=None) as page:
                page.send(b"small talk")  # read and dropped: the page stays
                assert page.recv(timeout=5).endswith(b"a frame")
                with pytest.raises(ConnectionClosed) as closed:
                    for _ in range(20):
                        page.send(bytes(2**20))
                    page.recv(timeout=5)
                assert closed.value.rcvd.code == 1009
        grown = retained_mb() - before
        assert grown < 20, f"the server's RSS grew {grown:.0f} MB"
        assert preview.MAX_INCOMING_BYTES <= 4096
    finally:
        serving.kill()
        serving.wait(10)


_SERVE_SMALL_FRAMES = """
import ctypes, signal, sys, time
from goggles.preview.server import PreviewServer

class SmallFrames:
    def next_frames(self, timeout=0.5):
        time.sleep(0.02)
        return [(0, b"\\xff\\xd8 a frame")]

def trimmed(*_):
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print("trimmed", flush=True)

signal.signal(signal.SIGUSR1, trimmed)
PreviewServer(SmallFrames(), port=int(sys.argv[1])).run(listening=lambda: print("listening", flush=True))
"""


class _SmallFrames:
    """A frame source of one small frame every 20 ms."""

    def next_frames(self, timeout: float = 0.5):
        time.sleep(0.02)
        return [(0, b"\xff\xd8 a frame")]


def test_a_token_keeps_the_stream_to_pages_opened_with_it():
    """With a token (what ``goggles preview`` sets when it serves beyond this machine) the page and
    its script still load, and the stream goes only to a request carrying the token, as the page
    passes its own query on."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    port = free_port()
    server = PreviewServer(_SmallFrames(), port=port, token="s3cret-Token_1")
    stop = threading.Event()
    thread = threading.Thread(target=server.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/?token=s3cret-Token_1", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert b"<html" in page.lower()
        script = urllib.request.urlopen(f"http://127.0.0.1:{port}/app.js", timeout=2).read()
        assert b"/stream${location.search}" in script  # the page hands its token to the stream
        for query in ("", "?token=wrong", "?token=s3cret-Token_", "?other=s3cret-Token_1"):
            with pytest.raises(InvalidStatus) as refused:
                connect(f"ws://127.0.0.1:{port}/stream{query}", open_timeout=5)
            assert refused.value.response.status_code == 403
        assert server.refused == 4
        with connect(f"ws://127.0.0.1:{port}/stream?token=s3cret-Token_1", open_timeout=5) as websocket:
            assert websocket.recv(timeout=5).endswith(b"a frame")
    finally:
        stop.set()
        thread.join(5)


def test_only_the_pages_files_are_served_and_odd_paths_are_plain_404s(caplog):
    """A path the filesystem refuses (a name too long) was a 500 and a traceback in the server's log;
    paths outside the page's folder were refused already. Raw paths, as a hostile client sends them."""
    import http.client

    port = free_port()
    server = PreviewServer(_SmallFrames(), port=port)
    stop = threading.Event()
    thread = threading.Thread(target=server.run, args=(stop,), daemon=True)
    thread.start()

    def status(path: str) -> int:
        deadline = time.monotonic() + 10
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", path)
                return connection.getresponse().status
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.05)

    try:
        assert [status(p) for p in ("/", "/index.html", "/app.js", "/app.js?v=2")] == [200] * 4
        odd = ["/" + "a" * 5000, "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "//etc/passwd", "/static/app.js"]
        assert [status(p) for p in odd] == [404] * len(odd)
        assert status("/") == 200  # still serving
    finally:
        stop.set()
        thread.join(5)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


@pytest.mark.slow
def test_the_preview_command_makes_a_token_when_it_serves_beyond_this_machine():
    """On all addresses the printed URL carries a fresh random token; on loopback it carries none."""
    import re
    import sys

    def printed_url(host: str) -> str:
        command = [sys.executable, "-m", "goggles.cli", "preview", "--host", host, "--port", str(free_port())]
        command += ["--endpoint", f"tcp://127.0.0.1:{free_port()}", "--no-third-person", "--duration", "1"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return re.search(r"goggles preview: (\S+)", done.stderr).group(1)

    exposed, again = printed_url("0.0.0.0"), printed_url("0.0.0.0")
    token = re.fullmatch(r"http://0\.0\.0\.0:\d+/\?token=([\w-]+)", exposed).group(1)
    assert len(token) >= 20 and token not in again  # unguessable, new each time
    assert "token" not in printed_url("127.0.0.1")


@pytest.mark.slow
def test_the_third_person_view_draws_the_vehicle_as_its_airframe(device):
    # The vehicle's model stands where the vehicle is: its pixels gather around that point projected by
    # OpenCV through the third-person camera, and a bigger airframe covers more of them.
    import cv2

    from goggles.preview.server import look_at
    from goggles.render import CameraModel
    from goggles.scene.vehicle_model import VEHICLE_CLASS

    scene = load_static_scene(default_scene())
    T_WB = np.asarray(scene.view)
    eye = T_WB[:3, 3] + [-1.5, -0.75, 0.9]
    areas = {}
    for preset in ("fg-quad", "hexa-550"):
        source = FrameSource(None, "quad0", "stereo", scene=scene, viewpoint=eye, device=device, airframe=preset)
        vehicle = source.third_person(T_WB).segmentation[0] == VEHICLE_CLASS
        areas[preset] = int(vehicle.sum())
        assert areas[preset] > 50, f"{preset}: the vehicle must be in view"
        T_CW = np.linalg.inv(look_at(eye, T_WB[:3, 3]))
        camera = CameraModel.from_fov(320, 240, 60.0)
        rvec, _ = cv2.Rodrigues(T_CW[:3, :3])
        projected, _ = cv2.projectPoints(T_WB[:3, 3][None], rvec, T_CW[:3, 3], camera.K, None)
        u, v = projected[0, 0]
        ys, xs = np.nonzero(vehicle)
        assert abs(xs.mean() - u) < 4 and abs(ys.mean() - v) < 4
    assert areas["hexa-550"] > 1.5 * areas["fg-quad"]


#: A stereo rgb camera 0.3 m ahead, 0.16 m left and 0.1 m up, pitched 30 degrees down: a mount far
#: from the body's origin and axes, so a body drawn at the camera is plainly wrong.
PITCHED_CAMERA = {
    "vehicle": "quad0",
    "name": "stereo",
    "width": 32,
    "height": 24,
    "baseline": 0.32,
    "position": [0.3, 0.16, 0.1],
    "rpy_deg": [0.0, 30.0, 0.0],
    "outputs": ["rgb"],
}


@pytest.mark.slow
def test_the_preview_places_the_vehicle_through_its_camera_mount():
    """A camera 0.3 m ahead, 0.16 m left and 0.1 m up, pitched 30 degrees down: the preview learns the
    mount from a state of an image's instant, and from then on puts the body where the state says it
    was when each image was taken (not at the camera, not tilted with it)."""
    from goggles.frames import transform

    config = run_config(scale=2.0, cameras=[PITCHED_CAMERA])
    client = Client(endpoints(config))
    running = Running(config, duration=None)
    try:
        source = FrameSource(client, "quad0", "stereo")
        before = client.latest(source.channels[0], timeout=10.0)
        T_WC = transform(before.position, before.orientation)
        at_camera = source.body_pose(T_WC, before)
        learnt_at_once = source.T_CB is not None  # a state of that very instant had already arrived
        for _ in range(200):
            image = client.latest(source.channels[0], timeout=2.0)
            source.body_pose(transform(image.position, image.orientation), image)
            if source.T_CB is not None:
                break
        assert source.T_CB is not None, "no state shared an image's instant"
        np.testing.assert_allclose(source.T_CB, np.linalg.inv(config.cameras[0].T_BC), atol=1e-5)
        if not learnt_at_once:  # the fallback before that: the body at the camera
            np.testing.assert_allclose(at_camera[:3, 3], before.position)
        matched = 0
        for _ in range(200):  # later images: the body pose is the state of their instant
            image = client.latest(source.channels[0], timeout=2.0)
            state = client.latest(source.state_channel, timeout=2.0)
            if state.header.utime != image.pose_utime:
                continue
            body = transform(image.position, image.orientation) @ source.T_CB
            np.testing.assert_allclose(body, transform(state.position, state.orientation), atol=1e-5)
            matched += 1
            if matched == 3:
                break
        assert matched == 3
    finally:
        running.stop.set()
        running.finish()
        client.close()


@pytest.mark.slow
def test_in_live_mode_the_run_files_mount_places_the_vehicle_where_its_pose_said():
    """Live mode publishes no state to learn the mount from: ``goggles preview --run`` takes it from the
    run file. Poses sent on the bus (turning and tilting) come back as the body pose of the images
    rendered from them."""
    from goggles.frames import quat_from_euler, transform
    from goggles.preview.server import previewed_camera

    config = run_config(mode="live", cameras=[PITCHED_CAMERA])
    running = Running(config, duration=None)
    client = Client(endpoints(config))
    try:
        source = FrameSource(client, "quad0", "stereo", mount=previewed_camera(config, "quad0", "stereo").T_BC)
        client.subscribe(source.channels[0])
        sent, matched, k = {}, 0, 0
        deadline = time.monotonic() + 60.0  # the engine starts while poses are sent (the first may be lost)
        while matched < 5 and time.monotonic() < deadline:
            q = quat_from_euler(0.2, -0.1, 0.1 * k)
            position = [-4.0 + 0.05 * (k % 100), 0.2, 1.5]
            sent[client.send_pose("quad0", position, q)] = transform(position, q)
            k += 1
            for _, image in iter(lambda: client.receive(timeout=0.02), None):
                if image.pose_utime in sent:
                    T_WC = transform(image.position, image.orientation)
                    np.testing.assert_allclose(source.body_pose(T_WC, image), sent[image.pose_utime], atol=1e-5)
                    matched += 1
        assert matched >= 5, "no image came from the poses sent"
    finally:
        running.stop.set()
        running.finish()
        client.close()


def test_the_preview_names_what_the_run_file_lacks(tmp_path):
    from goggles.errors import ConfigError
    from goggles.preview.server import previewed_camera
    from goggles.rig.runfile import parse_run_config

    mono = {"vehicle": "quad0", "name": "front", "width": 32, "height": 24, "outputs": ["rgb"]}
    depth = {"vehicle": "quad0", "name": "stereo", "width": 32, "height": 24, "baseline": 0.3, "outputs": ["depth"]}
    config = parse_run_config({"vehicle": [{"name": "quad0"}], "camera": [mono, depth]}, tmp_path / "run.toml")
    for vehicle, camera, says in [
        ("quad1", "stereo", "no vehicle 'quad1' (vehicles: quad0)"),
        ("quad0", "down", "vehicle 'quad0' has no camera 'down' (cameras: front, stereo)"),
        ("quad0", "front", "camera 'front' of 'quad0' must be a stereo camera publishing rgb"),
        ("quad0", "stereo", "camera 'stereo' of 'quad0' must be a stereo camera publishing rgb"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'run.toml'}: {says}")):
            previewed_camera(config, vehicle, camera)
