"""The tools/ examples run as separate processes against a real engine process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port

REPO = Path(__file__).resolve().parents[1]


def _fly(run_file: Path, engine_args: list[str], tool: str, tool_args: list[str], ports, *, timeout: float):
    """Run `tool` in lockstep against an engine process on `run_file` (ZeroMQ on `ports`); it must succeed."""
    engine = subprocess.Popen(
        [sys.executable, "-m", "goggles.cli", "run", str(run_file), *engine_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    endpoints = [f"tcp://127.0.0.1:{port}" for port in ports]
    try:
        pilot = subprocess.run(
            [sys.executable, str(REPO / tool), "--lockstep", *tool_args]
            + ["--publish", endpoints[0], "--inputs", endpoints[1], "--control", endpoints[2]],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        engine.terminate()
        engine.wait(30)
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr + engine.stderr.read()[-2000:]
    return pilot


@pytest.mark.slow
def test_fly_waypoints_client_flies_the_quad_over_the_bus(tmp_path):
    ports = [free_port() for _ in range(3)]
    run_file = tmp_path / "run.toml"
    run_file.write_text(
        f"""
[run]
mode = "lockstep"
[lcm]
enabled = false
[zmq]
publish = "tcp://127.0.0.1:{ports[0]}"
inputs = "tcp://127.0.0.1:{ports[1]}"
control = "tcp://127.0.0.1:{ports[2]}"
[[vehicle]]
name = "quad0"
start = [0.0, 0.0, 0.0, 0.0]
[[camera]]
vehicle = "quad0"
name = "stereo"
width = 64
height = 48
baseline = 0.32
rate = 30.0
outputs = ["depth"]
"""
    )
    pilot = _fly(
        run_file,
        [],
        "tools/fly_waypoints.py",
        ["--timeout", "60", "--waypoints", "0,0,1.5;3,0,2;3,2,2;0,0,1"],
        ports,
        timeout=300,
    )
    assert "all 4 waypoints reached" in pilot.stdout
    assert pilot.stdout.count("reached waypoint") == 4


@pytest.mark.slow
def test_race_beacons_pilot_flies_the_default_course_and_goggles_race_scores_it(tmp_path):
    """The IMU + IR-beacon pilot against an engine process on the racing run file (lockstep)."""
    ports = [free_port() for _ in range(3)]
    text = (REPO / "assets/run-race.toml").read_text()
    text = text.replace('scene = "arena.toml"', f'scene = "{REPO / "assets/arena.toml"}"')
    text = text.replace('course = "course.toml"', f'course = "{REPO / "assets/course.toml"}"')
    text = text.replace(
        "[zmq]\nenabled = true",
        f'[zmq]\npublish = "tcp://127.0.0.1:{ports[0]}"\n'
        f'inputs = "tcp://127.0.0.1:{ports[1]}"\ncontrol = "tcp://127.0.0.1:{ports[2]}"',
    )
    run_file = tmp_path / "race.toml"
    run_file.write_text(text)
    log = tmp_path / "flight.csv"
    _fly(run_file, ["--mode", "lockstep", "--no-lcm"], "tools/race_beacons.py", ["--log", str(log)], ports, timeout=600)
    scored = subprocess.run(
        [sys.executable, "-m", "goggles.cli", "race", "--log", str(log)], capture_output=True, text=True, timeout=120
    )
    last = scored.stdout.strip().splitlines()[-1]
    assert last.startswith("gates=6 ") and last.endswith(" end=done"), scored.stdout + scored.stderr
    assert float(last.split()[2].split("=")[1]) > 35.0  # score = 60 - time: well under 25 s


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("fly_waypoints.py", ["--tolerance", "nan"], "argument --tolerance: must be a positive number"),
        ("fly_waypoints.py", ["--max-speed", "-1"], "argument --max-speed: must be a positive number"),
        ("fly_waypoints.py", ["--publish", "bogus"], "cannot connect to 'bogus'"),
        ("race_beacons.py", ["--camera-position", "abc"], "--camera-position must be 3 comma-separated"),
        ("race_beacons.py", ["--course", "/nowhere/course.toml"], "/nowhere/course.toml: course file not found"),
        ("train_hover.py", ["--lr", "nan"], "argument --lr: must be a positive number"),
        # Output paths are checked before the work, not after minutes of it (a traceback, the work lost).
        ("train_hover.py", ["--plot", "curve.toml"], "--plot curve.toml: an image file, one of .avif"),
        ("train_hover.py", ["--save", "/"], "--save /: is a folder; give a file"),
        ("train_hover.py", ["--save", "/proc/nowhere/policy.pt"], "--save /proc/nowhere/policy.pt: cannot make"),
        ("train_hover.py", ["--video", "hover.gif"], "--video hover.gif: a video file, one of .mp4, .avi"),
        ("race_beacons.py", ["--log", "/proc/nowhere/flight.csv", "--publish", "bogus"], "cannot make its folder"),
        ("bench_actors.py", ["--bogus"], "unrecognized arguments: --bogus"),  # it ran the benchmark
        ("bench_frames.py", ["--pairs", "0"], "argument --pairs: must be at least 1"),  # IndexError at the end
        ("bench_frames.py", ["--height", "20000"], "camera size 640x20000 must be whole numbers of pixels"),
    ],
)
@pytest.mark.slow
def test_the_tools_refuse_a_bad_argument_in_one_line(tool, args, says):
    """NaN tolerances and speeds were taken (a pilot that never arrives), a bad endpoint or course file
    was a traceback."""
    result = subprocess.run([sys.executable, str(REPO / "tools" / tool), *args], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert says in result.stderr.strip().splitlines()[-1]
