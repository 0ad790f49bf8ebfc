"""The command-line contract, run as a user runs it: a real process, real files."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import REPO
from tests.support import free_port, goggles, goggles_result, group_gone, kill_group, run_config


@pytest.mark.slow
def test_render_writes_the_contract_files(tmp_path):
    goggles("render", "--width", "64", "--height", "48", "--baseline", "0.32", "--out", str(tmp_path))
    for prefix in ("", "right_"):
        depth = np.load(tmp_path / f"{prefix}depth.npy")
        assert depth.shape == (48, 64) and depth.dtype == np.float32
        with Image.open(tmp_path / f"{prefix}intensity.png") as picture:
            assert picture.size == (64, 48)
    for name in ("range", "segmentation", "normals"):
        assert np.load(tmp_path / f"{name}.npy").shape[:2] == (48, 64)
    assert np.load(tmp_path / "normals.npy").shape == (48, 64, 3)
    assert np.load(tmp_path / "range.npy").dtype == np.float32
    depth = np.load(tmp_path / "depth.npy")
    assert np.isfinite(depth).mean() > 0.3 and np.isposinf(depth).any()  # ground and sky


@pytest.mark.slow
def test_render_writes_each_cameras_calibration_as_ros_camera_yaml(tmp_path):
    """camera.yaml and right_camera.yaml as ROS's camera_calibration writes them: they read back as the
    cameras rendered, and the right camera's projection matrix (Tx = -fx B) maps points where
    OpenCV's projection through the right camera's pose does."""
    import cv2
    import yaml

    from goggles.render.calibration import load_camera_yaml

    args = ["render", "--width", "64", "--height", "48", "--intrinsics", "50,51,31.5,23", "--baseline", "0.32"]
    goggles(*args, "--out", str(tmp_path))
    for name in ("camera.yaml", "right_camera.yaml"):
        model = load_camera_yaml(tmp_path / name)
        assert (model.width, model.height, model.fx, model.fy, model.cx, model.cy) == (64, 48, 50, 51, 31.5, 23)
    left, right = (yaml.safe_load((tmp_path / n).read_text()) for n in ("camera.yaml", "right_camera.yaml"))
    assert left["projection_matrix"]["data"][3] == 0.0 and right["camera_name"] == "right"
    P = np.array(right["projection_matrix"]["data"]).reshape(3, 4)
    points = np.random.default_rng(0).uniform([-2.0, -2.0, 1.0], [2.0, 2.0, 9.0], (20, 3))  # left optical frame
    projected = (P @ np.c_[points, np.ones(len(points))].T).T
    K = np.array(left["camera_matrix"]["data"]).reshape(3, 3)
    expected, _ = cv2.projectPoints(points, np.zeros(3), np.array([-0.32, 0.0, 0.0]), K, None)
    np.testing.assert_allclose(projected[:, :2] / projected[:, 2:], expected[:, 0], atol=1e-9)


@pytest.mark.slow
def test_render_pose_and_scene_mesh_path(tmp_path):
    import trimesh

    trimesh.creation.box(extents=[1, 10, 10]).export(tmp_path / "wall.stl")
    goggles(
        "render",
        "--scene",
        str(tmp_path / "wall.stl"),
        "--pose=-4,0,0,1,0,0,0",
        "--width",
        "8",
        "--height",
        "6",
        "--vfov",
        "20",
        "--out",
        str(tmp_path / "out"),
    )
    np.testing.assert_allclose(np.load(tmp_path / "out" / "depth.npy"), 3.5, rtol=1e-5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pose", "0,0,nan,1,0,0,0"], "seven finite numbers"),
        (["--scene", "/nonexistent/scene.toml"], "scene file not found"),
        (["--vfov", "190"], "field of view"),
        (["--baseline", "-1"], "baseline"),
    ],
)
@pytest.mark.slow
def test_render_bad_input_is_a_clear_error(tmp_path, args, message):
    result = goggles("render", *args, "--width", "8", "--height", "6", "--out", str(tmp_path), check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_bench_render_reports_every_backend_and_bare_embree():
    pytest.importorskip("embreex")
    result = goggles(
        "bench",
        "render",
        "--width",
        "32",
        "--height",
        "24",
        "--views",
        "2",
        "--seconds",
        "0.05",
        "--device",
        "cpu",
        "--event-seconds",
        "0.05",
    )
    out = result.stdout.splitlines()
    events = next(line for line in out if line.startswith("event camera (346x260"))
    figures = dict(item.split("=") for item in events.split(": ", 1)[1].split())
    assert all(float(figures[k]) > 0 for k in ("renders_per_sim_s", "events_per_sim_s", "events_per_wall_s"))
    lines = [dict(item.split("=") for item in line.split()) for line in out if "=" in line and line != events]
    assert float(lines[-1]["embree_rays_per_s"]) > 1e4
    renders = {(f["backend"], f["outputs"]): f for f in lines[:-1]}
    kinds = ("all", "depth", "all+shadows", "all+noise", "all+shadows+noise", "all+blur4", "all+gates")
    kinds += ("all+fisheye", "lidar-os1-64")
    assert set(renders) == {(b, o) for b in ("warp", "bvh", "wide", "embree") for o in kinds}
    for fields in renders.values():
        # Every render traced rays and reports its rate over Embree's on the same rays and threads. How
        # fast is for the benchmark to judge, not a test (a loaded machine read 0.019 and 5.2x once): the
        # figures are there, finite and positive.
        assert all(math.isfinite(float(fields[k])) and float(fields[k]) > 0 for k in ("rays_per_s", "ratio"))

        # A realistic render's (and a LiDAR scan's) cost over the ideal one: blur draws 4 sub-frames.
        assert ("cost_vs_ideal" in fields) == (
            fields["outputs"].startswith("all+") or fields["outputs"] == "lidar-os1-64"
        )
    for fields in renders.values():
        assert "cost_vs_ideal" not in fields or float(fields["cost_vs_ideal"]) > 0
    terrain = goggles(
        "bench",
        "render",
        "--terrain",
        "2000",
        "--backend",
        "embree",
        "--width",
        "32",
        "--height",
        "24",
        "--seconds",
        "0.05",
        "--device",
        "cpu",
    )
    assert "scene: 2048 triangles" in terrain.stdout and "backend=warp" not in terrain.stdout


@pytest.mark.slow
def test_bench_render_without_embree_still_reports_goggles_backends(monkeypatch, capsys):
    """A machine without embreex (the GPU machine this was first run on) gets every goggles figure,
    says that the peer is missing, and ratios of nan, instead of an error after a minute of renders."""
    import goggles.render.embree
    from goggles.cli import main

    monkeypatch.setattr(goggles.render.embree, "embree_available", lambda: False)
    argv = ["bench", "render", "--width", "32", "--height", "24", "--views", "2", "--seconds", "0.02"]
    argv += ["--event-seconds", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = [dict(item.split("=") for item in line.split()) for line in out.splitlines() if "=" in line]
    assert lines[-1] == {"embree_rays_per_s": "nan"} and "embreex is not installed" in out
    assert {f["backend"] for f in lines[:-1]} == {"warp", "bvh", "wide"}
    assert all(float(f["rays_per_s"]) > 1e4 and f["ratio"] == "nan" for f in lines[:-1])


def test_fly_writes_the_trajectory_csv(tmp_path):
    out = tmp_path / "traj.csv"
    goggles(
        "fly",
        "--preset",
        "fg-quad",
        "--duration",
        "3",
        "--controller",
        "position",
        "--setpoint",
        "1,0,2",
        "--seed",
        "4",
        "--decimate",
        "8",
        "--out",
        str(out),
    )
    header = out.read_text().splitlines()[0].split(",")
    for column in [
        "t",
        "px",
        "py",
        "pz",
        "vx",
        "vy",
        "vz",
        "qw",
        "qx",
        "qy",
        "qz",
        "wx",
        "wy",
        "wz",
        "acc_x",
        "acc_y",
        "acc_z",
        "gyro_x",
        "gyro_y",
        "gyro_z",
        "rotor_0",
        "rotor_3",
    ]:
        assert column in header
    table = np.loadtxt(out, delimiter=",", skiprows=1)
    assert table.shape == (3 * 960 // 8 + 1, 24)
    np.testing.assert_allclose(table[0, 1:4], 0.0)  # starts at rest on the origin
    np.testing.assert_allclose(table[1:, 0][:3], [8 / 960, 16 / 960, 24 / 960])
    final = dict(zip(header, table[-1]))
    assert abs(final["px"] - 1.0) < 0.1 and abs(final["pz"] - 2.0) < 0.1


@pytest.mark.slow
def test_fly_hexarotor_euler_ground_effect_start(tmp_path):
    out = tmp_path / "hexa.csv"
    goggles(
        "fly",
        "--preset",
        "hexa-550",
        "--duration",
        "1",
        "--integrator",
        "euler",
        "--ground-effect",
        "conyers",
        "--start",
        "0,0,3",
        "--controller",
        "rotors",
        "--no-disturbances",
        "--no-imu-noise",
        "--out",
        str(out),
    )
    header = out.read_text().splitlines()[0].split(",")
    assert [c for c in header if c.startswith("rotor_")] == [f"rotor_{i}" for i in range(6)]
    table = np.loadtxt(out, delimiter=",", skiprows=1)
    assert table[0, 3] == 3.0 and abs(table[-1, 3] - 3.0) < 0.2  # hover speed holds it near 3 m


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--controller", "position", "--setpoint", "1,2"], "--setpoint '1,2' for --controller position"),
        (["--controller", "rates", "--setpoint", "10,0,nan,0"], "--setpoint"),
        (["--preset", "no-such"], "not found"),
        (["--imu-rate", "333"], "IMU rate"),
    ],
)
@pytest.mark.slow
def test_fly_bad_input_is_a_clear_error(tmp_path, args, message):
    result = goggles("fly", "--duration", "0.1", *args, "--out", str(tmp_path / "x.csv"), check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_bench_dynamics_last_lines():
    result = goggles("bench", "dynamics", "--batch", "16", "--seconds", "0.05")
    lines = result.stdout.strip().splitlines()
    last = dict(item.split("=") for item in lines[-1].split())
    assert last["vehicles"] == "1" and lines[-2].startswith("vehicles=16 ")
    # One vehicle of physics is far faster than real time on any machine goggles runs on.
    assert float(last["realtime_factor"]) > 20.0


@pytest.mark.slow
def test_bench_envs_last_line():
    """Each figure of the last line; the batch and the single environment both stepped (their ratio
    is a figure of the machine, so only its presence is checked), with their progress shown."""
    pytest.importorskip("gymnasium")
    result = goggles(
        "bench", "envs", "--envs", "3", "--width", "16", "--height", "12", "--steps", "10", "--device", "cpu"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    last = dict(item.split("=") for item in result.stdout.strip().splitlines()[-1].split())
    assert set(last) == {
        "envs",
        "steps_per_s",
        "frames_per_s",
        "device",
        "vs_single",
        "memory_per_env_kb",
        "memory_growth_kb",
        "recorded",
    }
    assert last["envs"] == "3" and last["device"] == "cpu" and last["recorded"] == "off"
    assert float(last["steps_per_s"]) > 0 and float(last["vs_single"]) > 0
    # Each environment owns at least its depth observation and the renderer's depth and status.
    assert float(last["memory_per_env_kb"]) >= 16 * 12 * (4 + 4 + 1) / 1024
    assert "3 env(s): step 0/10" in result.stderr and "1 env(s): step 0/20" in result.stderr


@pytest.mark.slow
def test_bench_latency_last_line():
    result = goggles("bench", "latency", "--seconds", "2", "--width", "32", "--height", "24")
    last = dict(item.split("=") for item in result.stdout.strip().splitlines()[-1].split())
    assert last["transport"] == "zmq" and (last["width"], last["height"]) == ("32", "24")
    assert 0 < float(last["p50_ms"]) <= float(last["p99_ms"])


@pytest.mark.slow
def test_bench_latency_breakdown_says_where_a_frame_goes(tmp_path):
    """A run file's camera frame, stage by stage: the splats' pass shows apart from the meshes', the
    stages' wall times fit in the frame's, and CPU over wall is at most the render's threads."""
    run_file = tmp_path / "run.toml"
    assets = Path(__file__).resolve().parents[2] / "assets"
    demo = (assets / "run-demo.toml").read_text()
    run_file.write_text(
        demo.replace('file = "splats/', f'file = "{assets}/splats/')
        .replace('scene = "arena.toml"', f'scene = "{assets}/arena.toml"')
        .replace("width = 320", "width = 64")
        .replace("height = 240", "height = 48")
    )
    result = goggles("bench", "latency", "--breakdown", str(run_file), "--seconds", "1")
    lines = result.stdout.splitlines()
    table = {line[:46].strip(): line[46:].split() for line in lines if line.startswith("  ")}
    assert {"meshes (rays, primary hits, shading)", "splats", "noise models", "publishing", "frame"} <= set(table)
    assert "primary hits (Embree)" in table and "shading and shadows" in table
    last = dict(item.split("=") for item in lines[-1].split())
    frame = float(last["frame_ms"])
    walls = [float(v[0]) for k, v in table.items() if len(v) == 2 and not k.startswith(("primary", "shading", "rays"))]
    assert 0 < sum(walls) <= frame * 1.01 and int(last["frames"]) >= 30
    assert "the sun's shadow rays" in result.stdout


def _children(pid: int) -> list[int]:
    from pathlib import Path

    children = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while being read
            continue
        if int(fields[1]) == pid:
            children.append(int(status.parent.name))
    return children


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process table in /proc")
def test_a_latency_bench_killed_outright_leaves_no_engine_behind():
    """The latency bench runs its engine as a child process; a bench killed with SIGKILL must not
    leave that engine running, holding the bench's ports and a core. (The engine ends at its next
    status line, whose pipe to the bench is broken.)"""
    import os

    bench = subprocess.Popen(
        [sys.executable, "-m", "goggles.cli", "bench", "latency", "--seconds", "600"]
        + ["--width", "16", "--height", "12"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (engines := _children(bench.pid)) and time.monotonic() < deadline and bench.poll() is None:
            time.sleep(0.05)
        assert engines, "the bench started no engine"
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait(10)
        assert group_gone(bench.pid), "the engine outlived its latency bench"
    finally:
        kill_group(bench.pid)


@pytest.mark.slow
def test_a_mono_render_over_a_stereo_one_leaves_no_right_eye_behind(tmp_path):
    """A folder holds one render: the right eye's files of an earlier stereo render are removed (and
    said), files that are not goggles' own are kept."""
    small = ["render", "--width", "32", "--height", "24", "--out", str(tmp_path)]
    goggles(*small, "--baseline", "0.32", "--outputs", "images,tof")
    (tmp_path / "notes.txt").write_text("mine")
    assert (tmp_path / "right_depth.npy").is_file() and (tmp_path / "tof.json").is_file()
    mono = goggles(*small)
    assert not list(tmp_path.glob("right_*")) and not (tmp_path / "tof.json").exists()
    assert (tmp_path / "depth.npy").is_file() and (tmp_path / "notes.txt").read_text() == "mine"
    assert "removed 9 file(s) an earlier render left" in mono.stdout


def test_the_start_line_says_which_buses_are_on():
    import dataclasses

    from goggles.cli.run import start_line
    from goggles.transport.ros2 import Ros2Settings

    config = run_config()
    assert start_line(config, 1).endswith("LCM off, ROS 2 off")
    ros2 = dataclasses.replace(config, ros2=Ros2Settings(namespace="/lab", domain_id=7))
    assert start_line(ros2, 1).endswith("ROS 2 /lab on DDS domain 7 (this machine only)")


@pytest.mark.slow
def test_the_demo_run_stops_cleanly_on_ctrl_c(tmp_path):
    """The demo run file (on free ports: a user's own engine may hold the default ones) stops on a
    Ctrl-C with exit code 0 and its last status line. The wait for its first line ends when the
    process does, not at a deadline."""
    import signal

    process = subprocess.Popen(
        [sys.executable, "-m", "goggles.cli", "run", str(_demo_run_file(tmp_path)), "--no-lcm"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in process.stderr:  # ends when the process ends
            lines.append(line)
            if line.startswith("t="):  # the first status line: it is running
                break
        assert any(line.startswith("t=") for line in lines), "".join(lines)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert stdout.strip() == ""  # every status line goes to one stream, stderr
    assert stderr.strip().splitlines()[-1].startswith("t=")


def test_run_with_no_arguments_runs_the_demo_run_file():
    """``goggles run`` alone runs assets/run-demo.toml (tested above on free ports)."""
    from goggles.paths import default_run

    assert default_run().resolve() == (REPO / "assets" / "run-demo.toml").resolve()


def _demo_run_file(tmp_path):
    """The demo run file on free ports, its scene by absolute path."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    text = (repo / "assets/run-demo.toml").read_text().replace('"arena.toml"', repr(str(repo / "assets/arena.toml")))
    text = text.replace('"splats/', f'"{repo / "assets"}/splats/')
    for port in ("5555", "5556", "5557"):
        text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}")
    (tmp_path / "run.toml").write_text(text)
    return tmp_path / "run.toml"


def _swallow_a_ctrl_c_while_the_engine_starts(monkeypatch, number=None):
    """A real SIGINT (or ``number``) while the engine is built, swallowed as trimesh's optional imports
    do (they catch BaseException): before goggles remembered it, such a Ctrl-C was lost."""
    import os
    import signal

    from goggles.engine import Engine

    original = Engine.__init__

    def interrupted_while_starting(self, *args, **kwargs):
        try:
            os.kill(os.getpid(), number or signal.SIGINT)
            time.sleep(5.0)  # the handler raises into this frame
        except BaseException:  # what trimesh's optional imports do
            pass
        original(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "__init__", interrupted_while_starting)


@pytest.mark.slow
def test_a_ctrl_c_swallowed_while_the_run_starts_still_stops_it(tmp_path, monkeypatch, capsys):
    """``goggles run`` stops before its first sim second (it flew on until a second Ctrl-C)."""
    import signal

    from goggles.cli import main

    run_file = _demo_run_file(tmp_path)
    _swallow_a_ctrl_c_while_the_engine_starts(monkeypatch)
    before = signal.getsignal(signal.SIGINT)
    assert main(["run", str(run_file), "--no-lcm", "--duration", "30"]) == 0
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("t=    0.00 s")
    assert signal.getsignal(signal.SIGINT) is before  # main leaves the process's handlers as it found them


@pytest.mark.slow
@pytest.mark.parametrize("number, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_ctrl_c_swallowed_while_a_replay_starts_stops_it_at_its_first_progress_line(
    tmp_path, monkeypatch, capsys, number, exit_code
):
    """``goggles replay`` (and ``goggles dataset``) raise it at the first progress line, a second in;
    a SIGTERM so swallowed as well, with its own exit code."""
    from goggles.cli import main

    run_file = _demo_run_file(tmp_path)
    assert main(["run", str(run_file), "--no-lcm", "--duration", "4", "--record", str(tmp_path / "flight.mcap")]) == 0
    capsys.readouterr()
    _swallow_a_ctrl_c_while_the_engine_starts(monkeypatch, number)
    assert main(["replay", str(tmp_path / "flight.mcap"), "--speed", "1"]) == exit_code  # 4 s of log, 4 progress lines
    captured = capsys.readouterr()
    assert "replayed" not in captured.err and "poses" not in captured.out  # stopped at the first, unfinished


@pytest.mark.slow
def test_render_beacons_and_tof_outputs(tmp_path):
    import json

    import cv2

    from goggles.frames import camera_pose_from_body, transform
    from goggles.paths import default_course
    from goggles.render import CameraModel
    from goggles.scene.gates import load_course

    goggles(
        "render",
        "--pose=-2,0.3,1.8,1,0,0,0",
        "--width",
        "160",
        "--height",
        "120",
        "--baseline",
        "0.32",
        "--outputs",
        "images,beacons,tof",
        "--out",
        str(tmp_path),
    )
    rows = json.loads((tmp_path / "beacons.json").read_text())
    assert rows and set(rows[0]) == {"id", "u", "v", "range", "camera"}
    gate1 = {r["id"]: r for r in rows if r["id"].startswith("gate1/") and r["camera"] == "left"}
    assert sorted(gate1) == ["gate1/0", "gate1/1", "gate1/2", "gate1/3"]
    course = load_course(default_course())
    gate = course.gates[0]
    points = gate.beacon_positions_G() @ gate.T_WG[:3, :3].T + gate.T_WG[:3, 3]
    T_CW = np.linalg.inv(camera_pose_from_body(transform([-2.0, 0.3, 1.8], [1, 0, 0, 0])))
    camera = CameraModel.from_fov(160, 120, 60.0)
    pixels, _ = cv2.projectPoints(points, cv2.Rodrigues(T_CW[:3, :3])[0], T_CW[:3, 3], camera.K, np.zeros(5))
    for k, (u, v) in enumerate(pixels.reshape(-1, 2)):
        assert abs(gate1[f"gate1/{k}"]["u"] - u) < 0.01 and abs(gate1[f"gate1/{k}"]["v"] - v) < 0.01
    tof = json.loads((tmp_path / "tof.json").read_text())
    assert tof["sensor"] == "flightgoggles-altimeter" and tof["max_range"] == 20.0
    assert 1.5 < tof["ranges"][0] < 2.1  # 1.8 m above the terrain near the pad


@pytest.mark.slow
def test_bench_dataset_last_lines():
    pytest.importorskip("ray")
    result = goggles("bench", "dataset", "--jobs", "2", "--width", "32", "--height", "24", "--flight", "0.3")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [dict(item.split("=") for item in line.split()) for line in result.stdout.splitlines() if "=" in line]
    assert [line["workers"] for line in lines] == ["1", "2"]
    assert all(float(line["frames_per_s"]) > 0 for line in lines) and float(lines[0]["speedup"]) == 1.0
    short = goggles("bench", "dataset", "--jobs", "1", "--width", "32", "--flight", "1e-6", check=False)
    assert short.returncode == 2 and "Traceback" not in short.stderr  # was a ZeroDivisionError
    assert short.stderr.splitlines()[-1].startswith("goggles: error: a flight of 1e-06 s rendered no frames: ")


@pytest.mark.slow
def test_render_sensor_presets(tmp_path):
    import numpy as np

    args = ["render", "--width", "64", "--height", "48", "--baseline", "0.05"]
    goggles(*args, "--out", str(tmp_path / "ideal"))
    goggles(*args, "--sensor-preset", "realistic", "--out", str(tmp_path / "real"))
    goggles(*args, "--sensor-preset", "realistic", "--depth-model", "ideal", "--out", str(tmp_path / "exact"))
    ideal, real = np.load(tmp_path / "ideal/depth.npy"), np.load(tmp_path / "real/depth.npy")
    both = np.isfinite(ideal) & np.isfinite(real)
    assert both.mean() > 0.3 and np.abs(ideal[both] - real[both]).max() > 0.01  # D435 noise on the depth
    assert np.array_equal(np.load(tmp_path / "exact/depth.npy"), ideal, equal_nan=True)  # an explicit flag wins


def test_echo_says_once_when_nothing_comes(monkeypatch, capsys):
    """An echo of a channel nobody publishes (or of an engine that is not running) printed nothing, for
    ever; after a few seconds of silence it says so once, on stderr, and keeps listening."""
    from goggles.cli import common, main

    monkeypatch.setattr(common.SilenceHint, "AFTER_S", 0.1)
    assert main(["echo", "quad9/imu", "--endpoint", "tcp://127.0.0.1:1", "--duration", "1.0"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("nothing yet on 'quad9/imu' at tcp://127.0.0.1:1") == 1, err


def test_echo_of_an_input_channel_listens_where_the_bridge_sends_it(monkeypatch, capsys):
    """``goggles echo pose/quad0`` (the README's check of the mocap bridge) printed nothing: the engine
    reads poses and never publishes them on ZeroMQ. An input channel is heard on LCM's default group
    (patched here to a group of the test's own), where the bridge sends it too, and the echo says so."""
    import threading

    from goggles.cli import main
    from goggles.client import describe
    from goggles.transport import endpoints
    from goggles.transport.buses import open_lcm
    from goggles.transport.messages import pose_message

    url = f"udpm://239.255.76.67:{free_port()}?ttl=0"
    monkeypatch.setattr(endpoints, "DEFAULT_LCM_URL", url)
    sender, done = open_lcm(url), threading.Event()
    pose = pose_message(123, 0, "quad0", (1.0, 2.0, 3.0), (1.0, 0.0, 0.0, 0.0))

    def send():
        while not done.wait(0.05):
            sender.publish("pose/quad0", pose.encode())

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        assert main(["echo", "pose/quad0", "--count", "1", "--duration", "30"]) == 0
    finally:
        done.set()
        thread.join()
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[0] == f"pose/quad0: {describe(pose)}"
    assert "pose/quad0 is an input of the engine" in err and url in err


def test_echo_names_enums(capsys):
    from goggles.client import describe
    from goggles.transport.messages import edit_result_message, scene_edit_message

    edit = scene_edit_message(5, 0, "remove", "crate1", "", (0, 0, 0), (1, 0, 0, 0))
    assert "action=REMOVE(2)" in describe(edit)
    assert "action=REMOVE(2) actor=crate1 applied=False reason=no actor" in describe(
        edit_result_message(5, 0, edit, "no actor 'crate1' to remove")
    )


def test_a_preview_with_no_engine_says_so_once(monkeypatch, capsys):
    """The page of a preview whose engine is not running (or whose camera publishes no rgb) stayed
    black, and the terminal said nothing until it stopped ('sent 0 frames')."""
    from goggles.cli import common, main

    monkeypatch.setattr(common.SilenceHint, "AFTER_S", 0.1)
    argv = ["preview", "--endpoint", "tcp://127.0.0.1:1", "--port", str(free_port()), "--no-third-person"]
    assert main([*argv, "--duration", "1.5"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "sent 0 frames"
    assert err.count("no quad0/stereo images yet from tcp://127.0.0.1:1 after 0.1 s") == 1, err


@pytest.mark.parametrize(
    ("argv", "told"),
    [
        (["--mode", "lockstep", "--scale", "2"], ["--scale is not used: lockstep mode advances on step requests"]),
        (["--mode", "live", "--scale", "auto"], ["--scale is not used: live mode runs on the wall clock"]),
        (["--scale", "2"], []),  # sim: the scale is the clock's
        (
            ["--overwrite", "--record-profile", "ros2", "--on-record-error", "stop"],
            [
                f"{option} is not used without --record"
                for option in ("--overwrite", "--record-profile", "--on-record-error")
            ],
        ),
        (["--record", "x.lcmlog", "--record-compression", "zstd"], ["--record-compression is not used: an LCM"]),
        (["--record", "x.mcap", "--record-compression", "zstd", "--on-record-error", "stop", "--overwrite"], []),
    ],
)
def test_goggles_run_says_which_options_it_does_not_use(argv, told):
    """An option the run ignores was ignored without a word: a user who asked for a clock scale in
    lockstep, or for recording options without --record, believed they were in force."""
    from goggles.cli import build_parser
    from goggles.cli.run import run_config, unused_options

    args = build_parser().parse_args(["run", *argv])
    lines = unused_options(args, run_config(args))
    assert len(lines) == len(told) and all(line.startswith(start) for line, start in zip(lines, told)), lines


def test_a_foxglove_host_without_foxglove_is_told_and_serves_nothing(capsys):
    from goggles.cli import build_parser
    from goggles.cli.common import foxglove_sinks

    assert foxglove_sinks(build_parser().parse_args(["run", "--foxglove-host", "0.0.0.0"])) == []
    assert capsys.readouterr().err == "goggles: --foxglove-host is not used without --foxglove\n"


def test_preview_says_what_no_third_person_leaves_unused():
    result = goggles(
        "preview", "--no-third-person", "--viewpoint", "1,2,3", "--preset", "fg-quad", "--duration", "0.1",
        "--port", str(free_port()), "--endpoint", f"tcp://127.0.0.1:{free_port()}",
    )  # fmt: skip
    told = [line for line in result.stderr.splitlines() if "is not used" in line]
    assert told == [
        f"goggles: {option} is not used: --no-third-person draws no third-person view"
        for option in ("--viewpoint", "--preset")
    ]


def test_splat_from_mesh_info_and_a_bad_splat_in_one_line(tmp_path):
    out = tmp_path / "pillar.ply"
    made = goggles("splat", "from-mesh", REPO / "assets/arena/pillar.ply", out, "--gaussians", "500")
    assert "500 Gaussians over" in made.stdout and out.is_file()
    info = goggles("splat", "info", out)
    assert "500 Gaussians (opacity >= 1/255), SH degree 0" in info.stdout
    again = goggles_result("splat", "from-mesh", REPO / "assets/arena/pillar.ply", out)
    assert again.returncode == 2 and "exists; use --overwrite" in again.stderr and "Traceback" not in again.stderr
    huge = tmp_path / "huge.ply"  # a billion: refused before any memory is spent (it was a 7.7 GB MemoryError)
    big = goggles_result("splat", "from-mesh", REPO / "assets/arena/pillar.ply", huge, "--gaussians", "1000000000000")
    assert big.returncode == 2 and "GiB is available: ask for fewer" in big.stderr and "Traceback" not in big.stderr
    assert not huge.exists()
    bad = tmp_path / "bad.splat"
    bad.write_bytes(b"\0" * 31)
    for result in (goggles_result("splat", "info", bad), goggles_result("render", "--scene", bad, "--out", tmp_path)):
        errors = [line for line in result.stderr.splitlines() if "error" in line]
        assert result.returncode == 2 and len(errors) == 1 and "32-byte records" in errors[0], result.stderr


@pytest.mark.slow
def test_bench_splats_reports_each_capture_and_size():
    result = goggles("bench", "splats", "--size", "32x24", "--views", "1", "--seconds", "0.05", "--device", "cpu")
    lines = [line for line in result.stdout.splitlines() if line.startswith("splats=")]
    last = dict(item.split("=") for item in lines[-1].split())
    assert last["splats"] == "houseplant" and last["width"] == "32" and float(last["frames_per_s"]) > 0
    assert int(last["gaussians"]) == 113_449 and float(last["bytes_per_gaussian"]) > 100


@pytest.mark.slow
def test_bench_peers_renders_beside_newton_and_mujoco_warp_and_says_when_one_is_missing(monkeypatch, capsys):
    """The same mesh and cameras in goggles' backends and both peers (their depths agree with goggles'
    within 1 cm); a peer not installed is one line saying so."""
    from goggles.cli import main

    pytest.importorskip("newton")
    pytest.importorskip("mujoco_warp")
    argv = ["bench", "peers", "--worlds", "4", "--size", "16x16", "--seconds", "0.05", "--device", "cpu"]
    assert main(argv) == 0
    lines = [
        dict(i.split("=", 1) for i in line.split())
        for line in capsys.readouterr().out.splitlines()
        if "frames_per_s=" in line
    ]
    renderers = {line["renderer"]: line for line in lines}
    assert {"goggles-warp", "goggles-bvh", "goggles-wide", "newton", "mujoco-warp"} <= set(renderers)
    for name in ("newton", "mujoco-warp", "goggles-bvh", "goggles-wide"):
        assert float(renderers[name]["agree"]) >= 0.999 and float(renderers[name]["frames_per_s"]) > 0
    monkeypatch.setitem(sys.modules, "newton", None)  # as if not installed
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "renderer=newton worlds=4 skipped: not installed" in out and "renderer=mujoco-warp worlds=4 width=16" in out


@pytest.mark.slow
def test_bench_bvh_counts_the_steps_of_both_layouts_on_the_same_rays(capsys):
    """The wide tree visits fewer nodes per ray than the binary one it was collapsed from (eight boxes a
    node: about a third on the arena), tests about as many triangles (the same leaves), and both find
    the same closest faces."""
    from goggles.cli import main

    assert main(["bench", "bvh", "--width", "64", "--height", "48", "--views", "2", "--seconds", "0.05"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {f["layout"]: f for f in (dict(i.split("=") for i in line.split()) for line in out if "layout=" in line)}
    binary, wide = rows["binary"], rows["wide"]
    assert float(wide["nodes_per_ray"]) < 0.5 * float(binary["nodes_per_ray"])
    assert float(wide["triangles_per_ray"]) < 1.5 * float(binary["triangles_per_ray"])
    assert float(wide["ratio"]) > 0 and float(wide["rays_per_s"]) > 0 and float(binary["rays_per_s"]) > 0
    assert out[-1].startswith("same_faces=") and float(out[-1].split("=")[1]) >= 0.999


def test_the_readmes_splat_command_shows_the_houseplant_upright(tmp_path):
    """The front page's capture command, as written: the image is the plant (its pixels, not sky and
    a placeholder triangle), upright: its leaves above its white pot."""
    import re
    import shlex

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    line = next(x for x in re.findall(r"^goggles render --scene .*$", readme, re.M) if "splat" in x)
    words = shlex.split(line.split("#")[0])
    words[words.index("--out") + 1] = str(tmp_path)
    goggles(*words[1:])
    capture = np.load(tmp_path / "segmentation.npy") > 0
    assert 0.05 < capture.mean() < 0.6
    rgb = np.asarray(Image.open(tmp_path / "intensity.png").convert("RGB")).astype(int)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    rows = np.mgrid[: capture.shape[0], : capture.shape[1]][0]
    leaves = capture & (g > r + 15) & (g > b + 5)
    pot = capture & (r > 200) & (g > 200) & (b > 200)
    assert leaves.sum() > 1000 and pot.sum() > 1000
    assert rows[leaves].mean() < rows[pot].mean() - 50


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used (/proc), s."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_render_of_a_million_gaussians_at_one_point_stops_within_a_second_of_a_signal(tmp_path, number):
    """Every ray of a 64x48 render crosses a million Gaussians (minutes of work for the ray tracer, which
    a distorted lens takes: the rasteriser, for undistorted pinholes, composites this in seconds): a
    Ctrl-C or SIGTERM sent once the render is under way (the command has used 8 s of CPU; loading takes
    about 3) ends the command within a second, with its exit code, not after the kernel."""
    from goggles.scene.splats import SplatCloud, write_splat_ply

    n = 1_000_000
    point = SplatCloud(
        np.zeros((n, 3), np.float32),
        np.full((n, 3), 0.01, np.float32),
        np.tile([1.0, 0.0, 0.0, 0.0], (n, 1)).astype(np.float32),
        np.full(n, 0.02, np.float32),
        np.zeros((n, 1, 3), np.float32),
        np.ones(n, np.int32),
        np.zeros(n, np.int32),
        np.eye(3, dtype=np.float32)[None],
    )
    write_splat_ply(point, tmp_path / "point.ply")
    args = ["render", "--scene", tmp_path / "point.ply", "--width", "64", "--height", "48", "--out", tmp_path / "out"]
    args += ["--distortion", "0.01,0,0,0,0"]
    process = subprocess.Popen(
        [sys.executable, "-m", "goggles.cli", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        while _cpu_seconds(process.pid) < 8.0:
            assert process.poll() is None, process.stderr.read().decode()
            time.sleep(0.1)
        sent = time.monotonic()
        process.send_signal(number)
        code = process.wait(30)
        assert time.monotonic() - sent < 1.0
        assert code == (130 if number == signal.SIGINT else 143)
        assert "Traceback" not in process.stderr.read().decode()
    finally:
        process.kill()
        process.wait()
