"""Every bad input a person may type gets one line naming the flag or file, exit code 2, and never a
traceback. Run in-process through ``goggles.cli.main`` (an escaping exception fails the test), and a
few through a real process to check what the terminal shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from goggles.cli import main
from tests.support import goggles_result

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    (tmp / "a_file").write_text("x")
    (tmp / "junk.mcap").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    (tmp / "empty.mcap").write_bytes(b"")
    (tmp / "noise.lcmlog").write_bytes(np.random.default_rng(0).bytes(512))
    (tmp / "bad.toml").write_text("[scene\nname = ")
    (tmp / "binary.toml").write_bytes(bytes(range(256)))
    (tmp / "deep.toml").write_text("a = " + "[" * 500 + "]" * 500 + "\n")
    (tmp / "deepish.toml").write_text("[run]\nseed = " + "[" * 40 + "1" + "]" * 40 + "\n")
    (tmp / "named.toml").write_text('[[asset]]\nname = 5\nfile = "a.ply"\nunits = "m"\nup = "+z"\n')
    (tmp / "spec.toml").write_text(f'[dataset]\noutput = "{tmp / "renders"}"\n[jobs]\nlogs = ["junk.mcap"]\n')
    out = str(tmp / "out")
    arena = repr(str(REPO / "assets/arena.toml"))
    run_file = (REPO / "assets/run-demo.toml").read_text().replace('"arena.toml"', arena)
    run_file = run_file.replace('"splats/', f'"{REPO / "assets"}/splats/')

    def variant(name: str, old: str, new: str) -> str:
        assert old in run_file
        (tmp / name).write_text(run_file.replace(old, new))
        return str(tmp / name)

    return [
        (["run", variant("preset.toml", '"fg-quad"', '"fg-qaud"')], "'preset' must be one of ['fg-quad'"),
        (["run", variant("custom.toml", '"fg-quad"', '"my-quad.toml"')], "airframe file " + str(tmp / "my-quad.toml")),
        (["run", variant("width.toml", "width = 320", "width = 0")], "'width' must be an integer from 1"),
        (["run", variant("vfov.toml", "vfov_deg = 60.0", "vfov_deg = 180.0")], "vfov.toml: [[camera]] #1: 'vfov_deg'"),
        (["run", variant("rate.toml", "rate = 30.0", "rate = 1e12")], "'rate' must be a rate in Hz that divides"),
        (
            ["run", variant("extrapolate.toml", 'mode = "sim"', 'mode = "sim"\nextrapolate = -1.0')],
            "[run]: 'extrapolate' must be a finite number >= 0 (s)",
        ),
        (["run", variant("depth.toml", "max_depth = 50.0", "max_depth = 0.1")], "'max_depth' must be greater than"),
        (
            ["run", variant("floor.toml", "floor_z = 0.1", "floor_z = 5.0"), "--duration", "0.1", "--no-lcm"],
            "floor.toml: [[vehicle]] 'quad0': 'start' z 0.1 m is below its 'floor_z' 5 m",
        ),
        (
            ["run", variant("shutter.toml", "# exposure_s = 0.004", "exposure_s = 0.05"), "--duration", "0.1"],
            "'exposure_s' must be at most the frame period, 1 / rate = 0.0333333 s, got 0.05",
        ),
        (
            ["run", variant("readout.toml", "# readout_s = 0.02", "readout_s = 1e30"), "--duration", "0.1", "--no-lcm"],
            "'readout_s' must be at most",
        ),
        (["render", "--pose=1e39,0,1.5,1,0,0,0", "--out", out], "pose '1e39,0,1.5,1,0,0,0' must be seven finite"),
        (["render", "--baseline=1e39", "--out", out], "--baseline: must be a positive number no larger than 3.4e38"),
        (["fly", "--duration", "1", "--imu-rate", "1e30", "--out", str(tmp / "i.csv")], "IMU rate 1e+30 Hz must"),
        (["fly", "--duration", "1", "--rate", "5", "--out", out], "--rate 5: the physics rate must be from 10 Hz"),
        (
            ["run", "--scale", "1e-30"],
            "argument --scale: must be 'auto' or a number of sim seconds per wall second >= 1e-06",
        ),
        (
            ["run", variant("slow.toml", 'scale = "auto"', "scale = 1e-30")],
            "[clock]: 'scale' must be 'auto' or a number",
        ),
        (
            ["replay", "x.mcap", "--speed", "1e-30"],
            "argument --scale/--speed: must be a number of sim seconds per wall",
        ),
        (["edit", "spawn", "c1", "crate", "--at", "1,1,1", "--timeout", "1e30"], "--timeout: must be at most 1e+06 s"),
        (["bridge", "mocap", "--system", "mock", "--no-lcm", "--zmq", "0"], "cannot connect to '0'"),
        (["fly", "--duration", "1", "--imu-rate", "1e-30", "--out", str(tmp / "j.csv")], "IMU rate 1e-30 Hz must"),
        (["run", variant("imu.toml", "imu_rate = 240.0 ", "imu_rate = 1e-30 ")], "'imu_rate' must be a rate in Hz"),
        (["run", variant("physics.toml", "physics_rate = 960.0", "physics_rate = 1e9")], "'physics_rate' must be a"),
        (
            ["render", "--intrinsics", "1e39,1,1,1", "--out", out],
            "finite numbers no larger than 3.4e38 (float32's range)",
        ),
        (["fly", "--duration", "1", "--setpoint", "1e39,0,1", "--out", out], "--setpoint '1e39,0,1' for --controller"),
        (
            ["edit", "spawn", "c1", "crate", "--at", "1e39,0,1"],
            "--at must be 3 to 4 comma-separated finite numbers no larger than 3.4e38",
        ),
        (["run", variant("far.toml", "start = [0.0,", "start = [1e39,")], "(beyond float32's range"),
        (["render", "--out", str(tmp / "a_file" / "sub")], "a_file/sub: Not a directory"),
        (["keys", str(tmp / "a_file" / "sub")], "a_file/sub"),
        (["fly", "--duration", "1", "--out", str(tmp / "a_file" / "x.csv")], "cannot write the trajectory"),
        (["render", "--device", "cuda:7", "--out", out], "--device"),
        (["render", "--device", "gpu", "--out", out], "not a Warp device"),
        (["replay", "nope.mcap"], "nope.mcap"),
        (["replay", str(tmp / "junk.mcap")], "not an MCAP recording"),
        (["replay", str(tmp / "empty.mcap")], "not an MCAP recording"),
        (["replay", str(tmp / "noise.lcmlog"), "--sensors", str(REPO / "assets/run-demo.toml")], "not an LCM"),
        (["render", "--out", str(tmp / "a_file")], "--out"),
        (["echo", "--endpoint", "tcp://nowhere", "quad0/imu"], "tcp://nowhere"),
        (["race", "--perturb", "-1"], "--perturb"),
        (["render", "--width", "100000", "--height", "100000", "--out", out], "1 to 16384"),
        (["render", "--width", "-5", "--out", out], "argument --width: must be at least 1, got -5"),
        (["run", "--duration", "-1"], "--duration"),
        (["run", "--duration", "inf"], "--duration inf: must be a number of seconds > 0"),
        (["dataset", str(tmp / "spec.toml"), "--ray", "abc"], "Ray address 'abc': give 'local', 'auto', HOST:PORT"),
        (["dataset", str(tmp / "spec.toml"), "--ray", f"127.0.0.1:{_closed_port()}"], "nothing answers at 127.0.0.1:"),
        (["fly", "--duration", "-1", "--out", str(tmp / "x.csv")], "--duration"),
        (["render", "--pose", "1,2,3", "--out", out], "pose"),
        (["render", "--pose=0,0,1,0,0,0,0", "--out", out], "quaternion"),
        (["render", "--scene", str(tmp / "bad.toml"), "--out", out], "bad.toml"),
        (["run", str(tmp / "deep.toml")], "deep.toml: not valid TOML for goggles: arrays or tables nested too deep"),
        (["run", str(tmp / "deepish.toml")], "deepish.toml: 'run.seed' nests arrays or tables deeper than 16"),
        (["render", "--scene", str(tmp / "deep.toml"), "--out", out], "deep.toml: not valid TOML for goggles"),
        (["dataset", str(tmp / "deep.toml")], "deep.toml: not valid TOML for goggles"),
        (["race", "--course", str(tmp / "deep.toml")], "deep.toml: not valid TOML for goggles"),
        (["render", "--scene", str(tmp / "binary.toml"), "--out", out], "binary.toml"),
        (["render", "--scene", str(tmp / "missing.glb"), "--out", out], "missing.glb"),
        (["render", "--scene", str(tmp / "named.toml"), "--out", out], "#1 (a.ply): 'name' must be a non-empty string"),
        (["render", "--outputs", ",", "--out", out], "names nothing to render"),
        (
            ["bridge", "mocap", "--system", "mock", "--mock-bodies", "quad0(1,2,3,1,0,0,0);RaceQuad"],
            "argument --mock-bodies: each body is name(x,y,z,qw,qx,qy,qz)",
        ),
        (  # the second one won, silently
            ["bridge", "mocap", "--system", "mock", "--mock-bodies", "a(0,0,1,1,0,0,0);a(1,0,1,1,0,0,0)"],
            "argument --mock-bodies: mock body 'a' is given twice",
        ),
        (["bridge", "mocap", "--system", "mock", "--mock-bodies", ";"], "give at least one body"),
        (  # libmotioncapture's mock raised on it, or crashed its process ("no mock frames ... within 5 s")
            ["bridge", "mocap", "--system", "mock", "--mock-bodies", "q" * 300 + "(0,0,1,1,0,0,0)"],
            "argument --mock-bodies: mock body names are at most 120 characters",
        ),
        (["render", "--outt", "x", "--out", out], "unrecognized arguments: --outt"),
        (["run", str(tmp / "a_file")], "a_file"),
        (["run", "--record", str(tmp / "a_file" / "x.mcap"), "--duration", "0.1"], "a_file"),
        (["run", "--record", str(tmp), "--duration", "0.1"], "is a folder; a log is a .mcap"),
        (["run", "--record", str(tmp / "x.txt"), "--duration", "0.1"], ".mcap"),
        (["fly", "--preset", "no-such-quad", "--duration", "1", "--out", str(tmp / "x.csv")], "no-such-quad"),
        (["bench", "render", "--width", "0"], "argument --width: must be at least 1"),
        (["bench", "latency", "--height", "0"], "argument --height: must be at least 1, got 0"),
        (["bench", "render", "--views", "0"], "argument --views: must be at least 1"),
        (["bench", "dynamics", "--seconds", "-1"], "argument --seconds: must be a positive number"),
        (["fly", "--duration", "1", "--out", str(tmp / "x.csv"), "--rate", "0"], "argument --rate: must be a positive"),
        (["preview", "--port", "99999"], "argument --port: must be a port number, 1 to 65535, got 99999"),
        (["render", "--out", out, "--threads", "-2"], "argument --threads: must be at least 1"),
        (["replay", "x.mcap", "--scale", "nan"], "argument --scale/--speed: must be a number of sim seconds per wall"),
        (["replay", "x.mcap", "--max-gap", "0"], "argument --max-gap: must be a positive number"),
        (["replay", str(tmp), "--foxglove"], "--foxglove shows one log at a time"),
        (["replay", "x.mcap", "--foxglove", "99999"], "argument --foxglove: must be a port number"),
        (
            ["run", "--scale", "0"],
            "argument --scale: must be 'auto' or a number of sim seconds per wall second >= 1e-06, got '0'",
        ),
        (["run", "--ros2", "my-lab"], "--ros2 my-lab: 'my-lab' cannot be part of a ROS 2 topic name"),
        (
            ["run", variant("ros2.toml", 'name = "stereo"', 'name = "stereo-1"'), "--ros2"],
            "ros2.toml: 'stereo-1' cannot be part of a ROS 2 topic name",
        ),
        (
            ["fly", "--duration", "1", "--out", str(tmp / "x.csv"), "--seed", "-1"],
            "argument --seed: must be at least 0",
        ),
        (["race", "--seed", str(2**32)], "argument --seed: must be a seed, 0 to 4294967295"),
        (["echo", "--lcm-url", "bogus://x", "--duration", "0.1"], "cannot open LCM at 'bogus://x'"),
        (
            ["edit", "spawn", "box1", "crate", "--at", "1,1,1", "--lcm-url", "bogus://x"],
            "cannot open LCM at 'bogus://x'",
        ),
    ]


@pytest.mark.slow
def test_every_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys):
    failures = []
    for argv, expected in _bad_inputs(tmp_path):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own errors: the subcommand's usage, then one error line
            code = exc.code
        except Exception as exc:  # a traceback a person would have seen
            failures.append(f"goggles {' '.join(argv)}: raised {type(exc).__name__}: {exc}")
            continue
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if ": error:" in line]
        if code != 2 or len(errors) != 1 or expected not in errors[0]:
            failures.append(f"goggles {' '.join(argv)}: rc {code}, stderr {err[-400:]!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("value", ["abc", "-3", "1e3", "²"])
def test_a_bad_render_threads_variable_is_one_line(value, monkeypatch, capsys):
    """``$GOGGLES_RENDER_THREADS`` ended in a traceback (``int()``), or was taken as 1 thread when
    negative."""
    monkeypatch.setenv("GOGGLES_RENDER_THREADS", value)
    assert main(["run", "--duration", "0.05", "--no-lcm", "--device", "cpu"]) == 2  # CPU threads: read on the CPU
    errors = [line for line in capsys.readouterr().err.splitlines() if ": error:" in line]
    assert errors == [
        f"goggles: error: GOGGLES_RENDER_THREADS={value!r}: give a whole number of render threads (0: one per core)"
    ]


def test_files_saved_by_windows_editors_load(tmp_path, capsys):
    """A UTF-8 byte-order mark (Notepad, Excel), CRLF line ends, and ", " between CSV columns: a run
    file was "not valid TOML: Invalid statement (at line 1, column 1)", and a flight log's header had
    no "t" (it was "\\ufefft")."""
    from goggles.rig.runfile import load_run_config

    demo = (REPO / "assets" / "run-demo.toml").read_text(encoding="utf-8")
    text = demo.replace('scene = "arena.toml"', f'scene = "{REPO / "assets" / "arena.toml"}"')
    text = text.replace('"splats/', f'"{REPO / "assets"}/splats/')
    run_file = tmp_path / "run.toml"
    run_file.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    assert load_run_config(run_file).cameras[0].model.width == 320
    log = tmp_path / "flight.csv"
    log.write_bytes(b"\xef\xbb\xbft, px, py, pz\r\n0.0, 0.0, 0.0, 1.0\r\n1.0, 0.5, 0.0, 1.0\r\n")
    assert main(["race", "--log", str(log)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "gates=0 time_s=0.000 score=0.000 end=incomplete"


@pytest.mark.slow
def test_a_terminal_sees_one_line_and_no_cuda_warning(tmp_path):
    """In a real process: no traceback, no Warp CUDA-driver warning on a machine without a GPU."""
    for argv in (["render", "--device", "gpu", "--out", str(tmp_path)], ["render", "--out", str(tmp_path / "o")]):
        result = subprocess.run([sys.executable, "-m", "goggles.cli", *argv], capture_output=True, text=True)
        assert "Traceback" not in result.stderr
        assert "Warp CUDA warning" not in result.stderr + result.stdout
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("url", "reason"),
    [("bogus://x", 'LCM provider "bogus" not found'), ("udpm://239.255.76.67:99999", 'Bad multicast port "99999"')],
)
def test_an_lcm_url_lcm_refuses_is_one_line_with_lcm_s_reason(url, reason):
    """LCM's C library prints its reason on the process's stderr and raises without it: the reason
    belongs in the one error line, and nothing else on the terminal."""
    result = subprocess.run(
        [sys.executable, "-m", "goggles.cli", "echo", "--lcm-url", url, "--duration", "0.1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"goggles: error: cannot open LCM at {url!r}: {reason} (a provider URL such as "
        "'udpm://239.255.76.67:7667?ttl=0&recv_buf_size=8388608')"
    ]


@pytest.mark.slow
def test_negative_pose_without_equals_and_non_unit_quaternion(tmp_path, caplog):
    assert (
        main(["render", "--pose", "-4,0,1.5,1,0,0,0", "--width", "32", "--height", "24", "--out", str(tmp_path / "a")])
        == 0
    )
    with caplog.at_level("WARNING"):
        assert (
            main(
                [
                    "render",
                    "--pose",
                    "-4,0,1.5,2,0,0,0",
                    "--width",
                    "32",
                    "--height",
                    "24",
                    "--out",
                    str(tmp_path / "b"),
                ]
            )
            == 0
        )
    assert "normalised" in caplog.text
    np.testing.assert_array_equal(np.load(tmp_path / "a/depth.npy"), np.load(tmp_path / "b/depth.npy"))


def test_a_bare_mesh_is_seen_from_outside(tmp_path):
    import trimesh

    box = trimesh.creation.box(extents=[4.0, 3.0, 2.0])
    box.apply_translation([10.0, 5.0, 1.0])
    box.export(tmp_path / "box.obj")
    assert (
        main(
            [
                "render",
                "--scene",
                str(tmp_path / "box.obj"),
                "--width",
                "64",
                "--height",
                "48",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    depth = np.load(tmp_path / "o/depth.npy")
    hit = np.isfinite(depth) & (depth > 0)
    assert 0.05 < hit.mean() < 0.95  # the whole box in view, from outside: some box, some sky
    assert hit[depth.shape[0] // 2, depth.shape[1] // 2]  # looking at its centre


def test_keys_are_private(tmp_path):
    assert main(["keys", str(tmp_path / "keys")]) == 0
    for name in ("server.key_secret", "client.key_secret"):
        assert (tmp_path / "keys" / name).stat().st_mode & 0o777 == 0o600


def test_a_mesh_placed_twice_is_read_once(tmp_path, monkeypatch):
    import trimesh

    import goggles.scene.batch as batch
    from goggles.scene import load_static_scene

    trimesh.creation.box().export(tmp_path / "crate.ply")
    (tmp_path / "scene.toml").write_text(
        '[scene]\nname = "crates"\n'
        + "".join(
            f'[[asset]]\nname = "c{i}"\nfile = "crate.ply"\nunits = "m"\nup = "+z"\nposition = [{3 * i}.0, 0.0, 0.0]\n'
            for i in range(3)
        )
    )
    reads = []
    original = batch.load_asset
    monkeypatch.setattr(batch, "load_asset", lambda *a, **k: reads.append(a) or original(*a, **k))
    scene = load_static_scene(tmp_path / "scene.toml")
    assert len(reads) == 1 and scene.num_faces == 3 * 12


def test_a_missing_optional_package_says_how_to_install_it():
    from goggles.errors import ConfigError, require

    require("numpy", "mocap", "anything")  # installed: nothing to say
    with pytest.raises(ConfigError, match=r"pip install 'goggles\[mocap\]'"):
        require("no_such_package_for_goggles", "mocap", "the NatNet (OptiTrack) source")


def test_commands_without_kernels_do_not_load_warp(tmp_path):
    """``goggles keys`` and ``goggles echo`` start without Warp (and without its start-up cost)."""
    code = (
        "import sys; from goggles.cli import main; "
        f"main(['keys', {str(tmp_path / 'k')!r}]); "
        "main(['echo', '--duration', '0.2', 'quad0/imu']); "
        "sys.exit(1 if 'warp' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_foxglove_port_in_use_is_a_one_line_error():
    pytest.importorskip("foxglove")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "goggles.cli",
                "run",
                "--no-lcm",
                "--duration",
                "0.1",
                "--foxglove",
                str(taken.getsockname()[1]),
            ],
            capture_output=True,
            text=True,
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "cannot serve Foxglove on 127.0.0.1:" in result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_preview_port_in_use_is_one_line_and_no_page_is_announced():
    """The page's address is printed once the port is bound, never before an error saying it is not."""
    pytest.importorskip("websockets")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = subprocess.run(
            [sys.executable, "-m", "goggles.cli", "preview", "--port", port, "--duration", "0.1"],
            capture_output=True,
            text=True,
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    progress = re.compile(r"goggles: (importing|compiling|building) ")  # a slow step says what it does
    lines = [line for line in result.stderr.strip().splitlines() if not progress.match(line)]
    assert len(lines) == 1 and lines[0].startswith(f"goggles: error: cannot serve the preview on 127.0.0.1:{port}: ")


@pytest.mark.slow
def test_ten_thousand_vehicles_at_one_start_are_one_warning_within_seconds(caplog):
    """The start check compared every pair in Python (23.7 s at 3,000 vehicles) and wrote a warning per
    pair (1.31 M lines): one vectorised pass, one line with the count. A bound, not a timing test: the
    check's own work is counted, in comparisons made at once rather than pairs visited one by one."""
    import logging
    import tracemalloc

    from goggles.rig.runfile import check_simulated_starts, parse_run_config

    data = {"vehicle": [{"name": f"q{i}", "start": [0.0, 0.0, 0.1, 0.0]} for i in range(10_000)], "camera": []}
    config = parse_run_config(data)
    tracemalloc.start()
    with caplog.at_level(logging.WARNING):
        check_simulated_starts(config)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    lines = [r for r in caplog.records if "inside each other" in r.message]
    assert len(lines) == 1 and "49,995,000 pair(s)" in lines[0].getMessage()
    assert peak < 300e6, f"{peak / 1e6:.0f} MB"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("bench", "bvh", "--terrain", "1000000000000"), "--terrain 1000000000000 needs about"),
        (("bench", "render", "--terrain", "1000000000000"), "--terrain 1000000000000 needs about"),
        (("bench", "peers", "--worlds", "100000000"), "--worlds 100000000 needs about"),
    ],
)
def test_benchmark_sizes_that_cannot_fit_are_one_line_before_any_memory_is_spent(args, said):
    """They ended in MemoryError tracebacks after minutes of allocating."""
    result = goggles_result(*args, timeout=120)
    errors = [line for line in result.stderr.splitlines() if ": error:" in line]
    assert result.returncode == 2 and len(errors) == 1 and said in errors[0] and "is available" in errors[0]
    assert "Traceback" not in result.stderr
