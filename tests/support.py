"""What many tests share: free ports, run configurations of their own, an engine in a thread, the
test run file and its recordings, the command line in a process, memory and process-group checks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from goggles.engine import Engine
from goggles.logs.record import Recorder, read_log
from goggles.rig.runfile import parse_run_config
from goggles.transport.buses import ZmqEndpoints
from goggles.transport.schema import decode_any

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now, never one handed out before in this process: the kernel may give a port
    just closed again, and two endpoints of one run file on one port fail to bind (seen in CI)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def run_config(mode="sim", scale=20.0, lcm_port=None, cameras=None, route=True, **vehicle):
    ports = [free_port() for _ in range(3)]
    data = {
        "run": {"mode": mode, "seed": 3},
        "clock": {"scale": scale},
        "lcm": {
            "enabled": lcm_port is not None,
            "url": f"udpm://239.255.76.67:{lcm_port or 7667}?ttl=0&recv_buf_size=8388608",
        },
        "zmq": {
            "publish": f"tcp://127.0.0.1:{ports[0]}",
            "inputs": f"tcp://127.0.0.1:{ports[1]}",
            "control": f"tcp://127.0.0.1:{ports[2]}",
        },
        "vehicle": [
            {
                "name": "quad0",
                "start": [0, 0, 0, 0],
                "imu_rate": 240.0,
                "state_rate": 60.0,
                "route": [[0, 0, 1.5], [3, 0, 2]] if route else [],
                **vehicle,
            }
        ],
        "camera": cameras
        if cameras is not None
        else [
            {
                "vehicle": "quad0",
                "name": "stereo",
                "width": 48,
                "height": 32,
                "vfov_deg": 60.0,
                "baseline": 0.32,
                "rate": 30.0,
                "outputs": ["depth", "rgb"],
                "max_depth": 60.0,
            }
        ],
    }
    return parse_run_config(data)


def endpoints(config) -> ZmqEndpoints:
    return config.zmq


class Running:
    """An engine running in a thread of this process."""

    def __init__(self, config, duration=None, device="cpu"):
        self.engine = Engine(config, device=device)
        self.stop = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(duration,), daemon=True)
        self.thread.start()

    def _run(self, duration):
        try:
            self.engine.run(duration=duration, stop=self.stop)
        except Exception as exc:  # surfaced by the test
            self.error = exc

    def finish(self, timeout=60.0):
        self.thread.join(timeout)
        self.stop.set()
        self.thread.join(10)
        self.engine.close()
        if self.error:
            raise self.error


#: A drone posed onto the arena's landing pad (its top 0.1 m up) and away: the heights of its centre,
#: and where each contact begins (its 0.18 m sphere reaches the top below 0.28 m); the last, one pose.
PAD_DESCENT = [1.5, 0.2, 0.15, 1.0, 0.25, 0.24, 1.0, 0.27, 1.0]


PAD_CONTACTS = [1, 4, 7]


REPO = Path(__file__).resolve().parents[1]


RUN_FILE = """
[run]
mode = "sim"
seed = 2
[clock]
scale = 50.0
[lcm]
enabled = false
[zmq]
enabled = false
[[vehicle]]
name = "quad0"
start = [0.0, 0.0, 0.1, 0.0]
floor_z = 0.1
route = [[0.0, 0.0, 1.5], [3.0, 0.0, 2.0]]
[[camera]]
vehicle = "quad0"
name = "stereo"
width = 64
height = 48
baseline = 0.32
rate = 30.0
outputs = ["depth", "rgb"]
"""


def images(path) -> dict:
    out = {}
    for _, channel, data in read_log(path):
        if "/stereo_" in channel:
            message = decode_any(data)
            out[(channel, message.header.utime)] = message.data
    return out


def record_run(tmp_path, name="flight.mcap", duration=1.0, device=None) -> Path:
    """A second of the test run file flown and recorded on ``device`` (None: Warp's default, as a replay's is:
    CUDA where there is a GPU, so a replay without a device re-renders on the device that recorded)."""
    from goggles.rig.runfile import load_run_config

    run_file = tmp_path / "run.toml"
    run_file.write_text(RUN_FILE.replace("[run]", f'[run]\nscene = "{REPO / "assets/arena.toml"}"'))
    path = tmp_path / name
    recorder = Recorder(path, metadata={"run_file": run_file.read_text(), "run_file_path": str(run_file)})
    engine = Engine(load_run_config(run_file), device=device, recorder=recorder)
    engine.run(duration=duration)
    engine.close()
    recorder.close()
    assert recorder.dropped == 0
    return path


def goggles_result(*args, timeout=120):
    """``goggles ARGS`` in a process of its own, its CompletedProcess whatever its exit code."""
    return goggles(*args, check=False, timeout=timeout)


def arena_run_file(tmp_path) -> Path:
    run_file = tmp_path / "run.toml"
    run_file.write_text(RUN_FILE.replace("[run]", f'[run]\nscene = "{REPO / "assets/arena.toml"}"'))
    return run_file


def goggles(*args, check=True, timeout=300):
    """``goggles ARGS`` in a process of its own, its CompletedProcess (``check``: an AssertionError with
    its stderr where it failed)."""
    result = subprocess.run(
        [sys.executable, "-m", "goggles.cli", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"goggles {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def rss_mb(pid: int | str = "self") -> float:
    """A process's resident memory in MB (this one's by default)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Kept:
    """A sink keeping every message the engine writes, in order."""

    def __init__(self):
        self.messages: list[tuple[str, bytes]] = []

    def write(self, channel: str, data: bytes, log_time_ns: int) -> None:
        self.messages.append((channel, bytes(data)))


def group_gone(group: int, seconds: float = 60.0) -> bool:
    """Whether every process of ``group`` has ended, waiting up to ``seconds`` for it."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def kill_group(group: int) -> None:
    """SIGKILL whatever of ``group`` is left (a test's clean-up)."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass
