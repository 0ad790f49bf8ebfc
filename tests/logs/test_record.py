"""Recording and replay: bit-identical re-renders, real lcm-logger logs, killed recordings, no blocking."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import goggles_lcm
from goggles.engine import Engine
from goggles.logs.record import Recorder, read_log, read_metadata
from goggles.logs.replay import replay_file, replay_folder
from goggles.transport.schema import decode_any
from tests.support import (
    PAD_CONTACTS,
    PAD_DESCENT,
    REPO,
    RUN_FILE,
    arena_run_file,
    free_port,
    goggles_result,
    images,
    record_run,
    run_config,
)


@pytest.mark.slow
def test_record_replay_record_gives_identical_image_bytes(tmp_path, device):
    original = record_run(tmp_path, device=device)
    assert "run_file" in read_metadata(original)
    channels = {channel for _, channel, _ in read_log(original)}
    assert {"clock", "quad0/imu", "quad0/state", "quad0/stereo_left/depth", "quad0/stereo_right/rgb"} <= channels
    replayed = tmp_path / "replayed.mcap"
    result = replay_file(original, record=replayed, device=device)
    assert result.poses == 61  # 1 s of 60 Hz state
    first, second = images(original), images(replayed)
    assert len(first) == 4 * 31 and set(first) == set(second)  # 4 images per frame, 31 frames in 1 s
    assert all(first[key] == second[key] for key in first)


EVERY_MODEL = """
[[camera]]
vehicle = "quad0"
name = "shaky"
width = 48
height = 32
rate = 30.0
outputs = ["depth", "rgb", "beacons"]
depth_model = "d455"
noise_model = "small-pixel"
readout_s = 0.01
exposure_s = 0.003
blur_subframes = 2
max_depth = 20.0
[[range_sensor]]
vehicle = "quad0"
name = "tof"
preset = "vl53l5cx"
rate = 60.0
[[range_sensor]]
vehicle = "quad0"
name = "altimeter"
rate = 60.0
[[lidar]]
vehicle = "quad0"
name = "spin"
preset = "vlp16"
[[lidar]]
vehicle = "quad0"
name = "rosette"
preset = "mid360"
"""


def payloads(path) -> dict:
    """Every image, beacon list, range reading and scan of a recording, by (channel, sim time)."""
    out = {}
    for _, channel, data in read_log(path):
        if channel.rsplit("/", 1)[-1] in (
            "depth",
            "rgb",
            "range",
            "segmentation",
            "beacons",
            "ranges",
            "lidar",
            "events",
        ):
            message = decode_any(data)
            message.header.wall_utime = message.header.seq = 0  # when it was made, and its number
            out[(channel, message.header.utime)] = message.encode()
    return out


@pytest.mark.slow
def test_record_replay_with_every_sensor_model_on_gives_identical_payloads(tmp_path):
    """Every random draw is a function of the seed, the sensor and the sim time: stereo depth, camera
    noise, a rolling shutter with motion blur, ToF and altimeter noise, LiDAR noise and a rosette's
    pattern, IMU noise in the flight, and a warm-up render the replay does not make."""
    from goggles.rig.runfile import load_run_config

    run_file = tmp_path / "run.toml"
    course = REPO / "assets" / "course.toml"
    text = RUN_FILE.replace("[run]", f'[run]\nscene = "{REPO / "assets/arena.toml"}"\ncourse = "{course}"')
    models = 'depth_model = "d435"\nnoise_model = "global-shutter"'
    text = text.replace('outputs = ["depth", "rgb"]', f'outputs = ["depth", "rgb"]\n{models}')
    run_file.write_text(text + EVERY_MODEL)
    original = tmp_path / "flight.mcap"
    recorder = Recorder(original, metadata={"run_file": run_file.read_text(), "run_file_path": str(run_file)})
    engine = Engine(load_run_config(run_file), device="cpu", recorder=recorder)
    engine.run(duration=0.5)
    engine.close()
    recorder.close()
    replayed = tmp_path / "replayed.mcap"
    replay_file(original, record=replayed, device="cpu")
    first, second = payloads(original), payloads(replayed)
    kinds = {channel.rsplit("/", 1)[-1] for channel, _ in first}
    assert kinds == {"depth", "rgb", "beacons", "ranges", "lidar"}
    assert set(first) == set(second)
    differing = sorted(key for key in first if first[key] != second[key])
    assert not differing, f"{len(differing)} of {len(first)} payloads differ, first {differing[:3]}"


WIDE = """
[[camera]]
vehicle = "quad0"
name = "fisheye"
width = 48
height = 40
lens = "fisheye"
fov_deg = 190.0
rate = 30.0
outputs = ["depth", "rgb"]
noise_model = "global-shutter"
[[camera]]
vehicle = "quad0"
name = "dvs"
width = 48
height = 36
position = [0.1, 0.0, 0.05]
outputs = ["events"]
threshold_sigma = 0.03
refractory_s = 0.0005
noise_rate_hz = 2.0
rate = 480.0
min_rate = 30.0
"""


@pytest.mark.slow
def test_record_replay_of_a_fisheye_and_an_event_camera_gives_identical_payloads(tmp_path):
    """The event camera's renders follow its motion; a replay renders at the same instants from the
    same poses (the state recorded at every physics step), so its events are the run's, byte for
    byte; its packets tile sim time ([start, end) each, the next starting where one ends)."""
    from goggles.rig.runfile import load_run_config
    from goggles.transport.schema import EVENT_DTYPE

    run_file = tmp_path / "run.toml"
    text = RUN_FILE.replace("[run]", f'[run]\nscene = "{REPO / "assets/arena.toml"}"')
    run_file.write_text(text.replace("floor_z = 0.1", "floor_z = 0.1\nstate_rate = 960.0") + WIDE)
    original = tmp_path / "flight.mcap"
    recorder = Recorder(original, metadata={"run_file": run_file.read_text(), "run_file_path": str(run_file)})
    engine = Engine(load_run_config(run_file), device="cpu", recorder=recorder)
    engine.run(duration=0.4)
    engine.close()
    recorder.close()
    replayed = tmp_path / "replayed.mcap"
    replay_file(original, record=replayed, device="cpu")
    first, second = payloads(original), payloads(replayed)
    assert {channel for channel, _ in first} >= {"quad0/dvs/events", "quad0/fisheye/depth", "quad0/fisheye/rgb"}
    assert set(first) == set(second)
    differing = sorted(key for key in first if first[key] != second[key])
    assert not differing, f"{len(differing)} of {len(first)} payloads differ, first {differing[:3]}"
    packets = [decode_any(d) for _, c, d in read_log(original) if c == "quad0/dvs/events"]
    assert len(packets) > 12  # faster than min_rate once it flies
    assert all(a.end_utime == b.header.utime for a, b in zip(packets, packets[1:]))
    fired = 0
    for packet in packets:
        events = np.frombuffer(packet.data, EVENT_DTYPE)
        fired += len(events)
        assert np.all(np.diff(events["t"]) >= 0) and np.all(
            events["t"] < (packet.end_utime - packet.header.utime) * 1000
        )
        assert packet.width == 48 and np.all(events["x"] < 48) and np.all(np.isin(events["polarity"], (-1, 1)))
    assert fired > 100


@pytest.mark.slow
def test_replay_with_other_sensors_and_scene(tmp_path):
    original = record_run(tmp_path)
    sensors = tmp_path / "other.toml"
    sensors.write_text(
        RUN_FILE.replace('outputs = ["depth", "rgb"]', 'outputs = ["segmentation"]')
        .replace("width = 64", "width = 32")
        .replace("baseline = 0.32\n", "")
    )
    mesh = tmp_path / "floor.stl"
    import trimesh

    trimesh.creation.box(extents=[100, 100, 0.1]).export(mesh)
    out = tmp_path / "other.mcap"
    replay_file(original, sensors=sensors, scene=mesh, record=out)
    segmentation = [decode_any(d) for _, c, d in read_log(out) if c == "quad0/stereo/segmentation"]
    assert len(segmentation) == 31 and segmentation[0].width == 32


@pytest.mark.slow
def test_real_lcm_logger_log_replays(tmp_path, device):
    if shutil.which("lcm-logger") is None:
        pytest.skip("lcm-logger is not on PATH (the lcm package installs it with its Python module)")
    port = free_port()
    url = f"udpm://239.255.76.67:{port}?ttl=0&recv_buf_size=8388608"
    log_file = tmp_path / "flight.lcmlog"
    logger = subprocess.Popen(
        ["lcm-logger", f"--lcm-url={url}", "-f", str(log_file)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    time.sleep(0.5)
    config = dataclasses.replace(run_config(route=True, scale=20.0, lcm_port=port), zmq=None)
    engine = Engine(config, device=device)
    engine.run(duration=1.0)
    engine.close()
    time.sleep(0.5)
    logger.send_signal(signal.SIGINT)
    logger.wait(10)
    sensors = tmp_path / "run.toml"
    sensors.write_text(
        RUN_FILE.replace("width = 64\nheight = 48", "width = 48\nheight = 32")
        .replace('outputs = ["depth", "rgb"]', 'outputs = ["depth", "rgb"]\nmax_depth = 60.0')
        .replace("[run]", f'[run]\nscene = "{REPO / "assets/arena.toml"}"')
    )
    out = tmp_path / "replayed.mcap"
    result = replay_file(log_file, sensors=sensors, record=out)
    assert result.poses > 50
    # lcm-logger stamps the wall clock: the log spans about the run's 1 s of sim time at scale 20
    # plus the logger's lead and lag, not 1.8e9 s since 1970 (as the summary line said).
    assert 0.0 < result.log_seconds < 30.0
    logged, replayed = images(log_file), images(out)
    common = set(logged) & set(replayed)
    assert len(common) > 20  # udp may have lost a few of the logged images
    assert all(logged[key] == replayed[key] for key in common)  # the same renders from the logged poses


def _killed_recording(tmp_path, *options) -> Path:
    """A run recorded until SIGKILL, once 3 MB are on disk: what a killed run leaves."""
    run_file = tmp_path / "run.toml"
    run_file.write_text(
        RUN_FILE.replace("[run]", f'[run]\nscene = "{REPO / "assets/arena.toml"}"').replace(
            "width = 64\nheight = 48", "width = 320\nheight = 240"
        )
    )
    path = tmp_path / "killed.mcap"
    process = subprocess.Popen(
        [sys.executable, "-m", "goggles.cli", "run", str(run_file), "--record", str(path), *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline and (not path.exists() or path.stat().st_size < 3e6):
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return path


@pytest.mark.slow
def test_a_killed_recording_is_readable(tmp_path):
    path = _killed_recording(tmp_path)
    messages = list(read_log(path))
    assert len(messages) > 20
    assert all(decode_any(data) is not None for _, _, data in messages)
    assert read_metadata(path)["run_file"]


@pytest.mark.slow
def test_a_killed_ros2_recording_is_repaired_for_ros2_tools(tmp_path):
    """A ``--record-profile ros2`` recording killed by SIGKILL: rosbags cannot open it ("File end magic
    is invalid"); ``goggles recording repair`` copies what can be read into a file rosbags opens, with
    every message goggles itself reads from the killed one, and the run file's metadata."""
    rosbags = pytest.importorskip("rosbags.highlevel")
    path = _killed_recording(tmp_path, "--record-profile", "ros2")
    with pytest.raises(Exception, match="magic"):
        with rosbags.AnyReader([path]):
            pass
    readable = len(list(read_log(path)))
    done = goggles_result("recording", "repair", path)
    assert done.returncode == 0, done.stderr
    repaired = tmp_path / "killed.repaired.mcap"
    assert f"copied to {repaired} (the original was cut off where it was killed)" in done.stdout
    with rosbags.AnyReader([repaired]) as reader:
        topics = {c.topic for c in reader.connections}
        count = sum(1 for _ in reader.messages())
    assert {"/goggles/quad0/stereo/left/image_depth", "/goggles/quad0/imu", "/tf_static"} <= topics and count > 20
    assert len(list(read_log(repaired))) == readable
    assert read_metadata(repaired)["run_file"] == read_metadata(path)["run_file"]
    again = goggles_result("recording", "repair", path)
    assert again.returncode == 2 and "exists; give another file, or --overwrite" in again.stderr


def test_the_recorder_never_blocks(tmp_path, monkeypatch):
    release = threading.Event()
    original = Recorder._write

    def stuck(self, *args):
        release.wait()
        original(self, *args)

    monkeypatch.setattr(Recorder, "_write", stuck)
    recorder = Recorder(tmp_path / "slow.mcap", queue_size=10)
    start = time.perf_counter()
    for i in range(1000):
        recorder.write("x", b"\0" * 100, i)
    assert time.perf_counter() - start < 0.5
    assert recorder.dropped >= 980
    release.set()
    recorder.close()
    assert recorder.written + recorder.dropped == 1000


@pytest.mark.parametrize("suffix", [".mcap", ".lcmlog"])
def test_the_recorder_keeps_what_was_written_when_the_caller_reuses_its_buffer(tmp_path, suffix):
    """A read-only frame (the engine's) is queued without a copy; a writable buffer the caller fills
    again at once is copied, so each message is recorded as it was when written."""
    from goggles.transport.buses import framed

    image = goggles_lcm.image_t()
    image.data = b"\1" * 1000
    image.data_size = len(image.data)
    frame_buffer, view = framed("cam/depth", image.encode())
    reused = bytearray(image.encode())
    path = tmp_path / f"kept{suffix}"
    recorder = Recorder(path)
    recorder.write("cam/depth", view, 1_000)
    for i in range(5):
        reused[-1000:] = bytes([i]) * 1000
        recorder.write("cam/rgb", reused, 2_000 + i)
    recorder.close()
    messages = list(read_log(path))
    assert messages[0][2] == image.encode()
    assert [decode_any(data).data[:3] for _, _, data in messages[1:]] == [bytes([i]) * 3 for i in range(5)]


@pytest.mark.slow
def test_batch_replay_of_a_folder(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a.mcap", "b.mcap"):
        record_run(tmp_path, name, duration=0.5).rename(logs / name)
    (logs / "c.mcap").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))  # not a recording: reported, the rest go on
    lines = []
    results = replay_folder(logs, record_folder=tmp_path / "out", jobs=2, report=lines.append)
    assert [r.log.name for r in results] == ["a.mcap", "b.mcap", "c.mcap"]
    assert lines[-1].startswith("replayed 3 of 3 logs (1 failed)")
    for r in results:
        if r.log.name == "c.mcap":
            assert r.error is not None and "not an MCAP recording" in r.error
            continue
        assert r.error is None
        assert images(logs / r.log.name) == images(tmp_path / "out" / f"{r.log.stem}.replay.mcap")


@pytest.mark.slow
def test_a_folder_replay_takes_lcm_loggers_own_names_and_never_reads_what_it_writes(tmp_path, caplog):
    """lcm-logger names its logs lcmlog-<date>.00, .01, ...: a folder replay passed them over (one given
    alone was refused by its name), and both would have gone to one lcmlog-<date>.replay.mcap. A folder
    replayed into itself read an earlier replay as a log while rewriting it ("not an MCAP recording")."""
    from goggles.errors import ConfigError

    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("lcmlog-2026-11-24.00", "lcmlog-2026-11-24.01"):
        record_run(tmp_path, f"{name}.lcmlog", duration=0.3).rename(logs / name)
    record_run(tmp_path, "a.mcap", duration=0.3).rename(logs / "a.mcap")
    (logs / "notes.txt").write_text("flown at noon")  # not a log: left alone
    sensors = tmp_path / "run.toml"  # the recordings' run file (an LCM log carries none)
    first = replay_folder(logs, record_folder=logs, jobs=2, sensors=sensors)
    assert [(r.log.name, r.error) for r in first] == [
        ("a.mcap", None),
        ("lcmlog-2026-11-24.00", None),
        ("lcmlog-2026-11-24.01", None),
    ]
    for log, replay in (("a.mcap", "a.replay.mcap"), ("lcmlog-2026-11-24.01", "lcmlog-2026-11-24.01.replay.mcap")):
        assert images(logs / log) == images(logs / replay) and images(logs / log)
    with pytest.raises(ConfigError, match=r"--record .*: 3 replay\(s\) there already \(a.replay.mcap, "):
        replay_folder(logs, record_folder=logs, sensors=sensors)  # a second run, without --overwrite
    again = replay_folder(logs, record_folder=logs, jobs=2, sensors=sensors, overwrite=True)
    assert [(r.log.name, r.error) for r in again] == [(r.log.name, None) for r in first]
    assert "a.replay.mcap: not replayed, this replay writes it (from a.mcap)" in caplog.text
    assert len(list(logs.iterdir())) == 7  # three logs, their three replays, the notes


@pytest.mark.slow
def test_a_replay_counts_the_poses_its_bodies_took(tmp_path):
    """A live flight recorded with the bridge on both buses holds every pose twice, and a replay said
    "756 poses" for 378. With a run file whose vehicle is not in the log, every pose was ignored yet
    counted: no error, and frames rendered from the vehicle's start pose."""
    from goggles.errors import ConfigError
    from goggles.frames import quat_from_axis_angle

    log = tmp_path / "live.mcap"
    run_file = RUN_FILE.replace('mode = "sim"', 'mode = "live"').replace(
        "[run]", f'[run]\nscene = "{REPO / "assets/arena.toml"}"'
    )
    recorder = Recorder(log, metadata={"run_file": run_file})
    for k in range(30):  # 1 s at 30 Hz: quad0 on ZeroMQ, then LCM's copy; another body the rig lacks
        message = goggles_lcm.pose_t()
        message.header.utime = 5_000_000 + k * 33_333
        message.name, message.valid = "quad0", True
        message.position, message.orientation = [0.1 * k, 0.0, 1.5], list(quat_from_axis_angle([0, 0, 1], 0.0))
        t_ns = message.header.utime * 1000
        recorder.write("pose/quad0", message.encode(), t_ns)
        recorder.write("pose/quad0", message.encode(), t_ns + 200_000)
        message.name = "RaceQuad"
        recorder.write("pose/RaceQuad", message.encode(), t_ns + 300_000)
    recorder.close()
    assert replay_file(log).poses == 30
    other = tmp_path / "other.toml"
    other.write_text(run_file.replace('"quad0"', '"drone"'))
    with pytest.raises(ConfigError, match=r"no poses of this run's vehicles \['drone'\]"):
        replay_file(log, sensors=other)


def test_a_replayed_flight_says_where_it_touches_the_scene_it_is_replayed_into(tmp_path):
    """A live flight logged onto the arena's landing pad and away, replayed: each contact of its poses
    with the virtual pad is told once, stamped with the pose's time (the live test's poses)."""

    log, out = tmp_path / "live.mcap", tmp_path / "replayed.mcap"
    run_file = RUN_FILE.replace('mode = "sim"', 'mode = "live"').replace(
        "[run]", f'[run]\nscene = "{REPO / "assets/arena.toml"}"'
    )
    recorder = Recorder(log, metadata={"run_file": run_file})
    stamps = [5_000_000 + 33_333 * k for k in range(len(PAD_DESCENT))]
    for utime, z in zip(stamps, PAD_DESCENT):
        message = goggles_lcm.pose_t()
        message.header.utime = utime
        message.name, message.valid = "quad0", True
        message.position, message.orientation = [0.0, 0.0, z], [1.0, 0.0, 0.0, 0.0]
        recorder.write("pose/quad0", message.encode(), utime * 1000)
    recorder.close()
    assert replay_file(log, record=out).poses == len(PAD_DESCENT)
    told = [decode_any(data) for _, channel, data in read_log(out) if channel == "quad0/collision"]
    assert [m.header.utime for m in told] == [stamps[k] for k in PAD_CONTACTS]
    assert all(m.other == "world" and m.normal[2] == pytest.approx(1.0, abs=1e-6) for m in told)


def test_bad_logs(tmp_path):
    from goggles.errors import ConfigError

    with pytest.raises(ConfigError, match="not found"):
        list(read_log(tmp_path / "none.mcap"))
    (tmp_path / "junk.mcap").write_bytes(b"not mcap at all" * 10)
    with pytest.raises(ConfigError, match="not an MCAP recording"):
        list(read_log(tmp_path / "junk.mcap"))
    with pytest.raises(ConfigError, match="a log is a .mcap file"):
        Recorder(tmp_path / "x.txt")
    (tmp_path / "flight_0.db3").write_bytes(b"SQLite format 3\0")
    with pytest.raises(ConfigError, match="a ROS 2 bag in SQLite: ros2 bag convert makes an MCAP one"):
        list(read_log(tmp_path / "flight_0.db3"))
    np.testing.assert_equal(len(list(read_log(record_run(tmp_path, duration=0.1)))) > 0, True)


def test_a_recording_whose_run_file_is_corrupt_names_it(tmp_path):
    from goggles.errors import ConfigError
    from goggles.logs.replay import replay_config

    path = tmp_path / "corrupt.mcap"
    Recorder(path, metadata={"run_file": "[run\nmode = ", "run_file_path": "run.toml"}).close()
    with pytest.raises(ConfigError, match="recorded run file: not valid TOML"):
        replay_config(path, None, None)


@pytest.mark.slow
def test_unwritable_recording_paths_are_refused_before_the_run(tmp_path):
    run_file = arena_run_file(tmp_path)
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "folder.mcap").mkdir()
    for target in (tmp_path / "folder.mcap", tmp_path / "a_file" / "inside.mcap", "/proc/goggles.mcap"):
        result = goggles_result("run", run_file, "--duration", "0.1", "--record", target)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "goggles: error:" in lines[0] and "Traceback" not in result.stderr, lines


@pytest.mark.slow
def test_a_second_run_does_not_record_over_the_first_flight(tmp_path):
    """A flight recorded live cannot be flown again: the same --record path twice is refused, and
    the first recording stays as it was; --overwrite replaces it."""
    run_file = arena_run_file(tmp_path)
    flight = tmp_path / "flight.mcap"
    assert goggles_result("run", run_file, "--duration", "0.1", "--record", flight).returncode == 0
    first = flight.read_bytes()
    again = goggles_result("run", run_file, "--duration", "0.1", "--record", flight)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert again.stderr.strip().splitlines() == [
        f"goggles: error: --record {flight}: the file exists; give another path, or --overwrite to replace it"
    ]
    assert flight.read_bytes() == first
    assert goggles_result("run", run_file, "--duration", "0.2", "--record", flight, "--overwrite").returncode == 0
    assert flight.read_bytes() != first and len(list(read_log(flight))) > 0


@pytest.mark.slow
def test_a_recording_made_elsewhere_names_what_is_not_here_and_the_way_round_it(tmp_path):
    """Its run file's scene or calibration on another machine's path: one line that says which, and
    which option replaces it (the scene was "arena.toml: scene file not found", with no way out)."""
    original = record_run(tmp_path, duration=0.2)
    metadata = read_metadata(original)
    arena = str(REPO / "assets/arena.toml")

    def moved(name: str, run_file: str) -> Path:
        path = tmp_path / name
        recorder = Recorder(path, metadata={**metadata, "run_file": run_file})
        for t_ns, channel, data in read_log(original):
            recorder.write(channel, data, t_ns)
        recorder.close()
        return path

    elsewhere = moved("elsewhere.mcap", metadata["run_file"].replace(arena, "/elsewhere/arena.toml"))
    result = goggles_result("replay", elsewhere)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"goggles: error: {elsewhere}: the scene its run file names, /elsewhere/arena.toml, is not here "
        "(recorded on another machine, or moved?): give it with --scene"
    ]
    assert goggles_result("replay", elsewhere, "--scene", arena).returncode == 0
    calibration = 'calibration = "/elsewhere/cam.yaml"\n'
    calibrated = moved("calibrated.mcap", metadata["run_file"].replace("width = 64\nheight = 48\n", calibration))
    result = goggles_result("replay", calibrated)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "/elsewhere/cam.yaml: camera calibration file not found" in result.stderr
    assert f"(in the run file {calibrated} recorded; give one that loads with --sensors)" in result.stderr


@pytest.mark.slow
def test_a_replay_recorded_onto_its_own_log_is_refused_and_the_log_kept(tmp_path):
    """`goggles replay flight.mcap --record flight.mcap` truncated the flight before reading it; a
    replay recorded to another existing file is refused unless --overwrite, as a run's recording is."""
    flight = record_run(tmp_path, duration=0.2)
    link = tmp_path / "link.mcap"
    link.symlink_to(flight)
    kept = flight.read_bytes()
    for target in (flight, link):
        result = goggles_result("replay", flight, "--record", target)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"goggles: error: {target}: is the log being replayed; record the replay to another file"
        ]
    assert flight.read_bytes() == kept
    other = tmp_path / "other.mcap"  # another flight: a replay is not recorded over it either
    other.write_bytes(kept)
    result = goggles_result("replay", flight, "--record", other)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"goggles: error: --record {other}: the file exists; give another path, or --overwrite to replace it"
    ]
    assert other.read_bytes() == kept
    assert goggles_result("replay", flight, "--record", other, "--overwrite").returncode == 0
    assert other.read_bytes() != kept and len(list(read_log(other))) > 0


@pytest.mark.slow
def test_a_full_disk_stops_the_recording_not_the_run(tmp_path):
    """/dev/full accepts the file and fails every write with ENOSPC, as a full disk does."""
    run_file = arena_run_file(tmp_path)
    full = tmp_path / "full.mcap"
    full.symlink_to("/dev/full")
    start = time.monotonic()
    result = goggles_result("run", run_file, "--duration", "2", "--record", full)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("recording to") >= 1 and "No space left on device" in result.stderr
    assert time.monotonic() - start < 90
    stopped = goggles_result("run", run_file, "--duration", "1000", "--record", full, "--on-record-error", "stop")
    assert stopped.returncode == 0 and "stopping" in stopped.stderr, stopped.stderr


def test_close_returns_when_the_writer_is_stuck(tmp_path, monkeypatch):
    monkeypatch.setattr(Recorder, "_write", lambda self, *args: time.sleep(3600))
    recorder = Recorder(tmp_path / "stuck.mcap", queue_size=4)
    for i in range(10):
        recorder.write("x", b"\0", i)
    start = time.monotonic()
    recorder.close(timeout=1.0)
    assert time.monotonic() - start < 3.0
    assert recorder.error is not None


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_damaged_chunks_are_named_and_skipped(tmp_path, caplog, compression):
    path = tmp_path / "flight.mcap"
    recorder = Recorder(path, compression=compression)
    payload = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()  # ~4 chunks
    for i in range(16):
        recorder.write(f"ch{i % 2}", payload[: 100_000 + i], i * 1_000_000)
    recorder.close()
    intact = list(read_log(path))
    assert len(intact) == 16
    raw = bytearray(path.read_bytes())
    inside = len(raw) // 4  # inside the first chunk's data, whatever the compression: its CRC no longer matches
    raw[inside : inside + 64] = bytes(64)
    path.write_bytes(bytes(raw))
    with caplog.at_level("WARNING"):
        damaged = list(read_log(path))
    assert 0 < len(damaged) < 16
    assert set(damaged) <= set(intact)
    assert "damaged" in caplog.text


def test_a_chunk_that_would_inflate_past_the_bound_is_skipped_before_it_is_inflated(tmp_path, caplog):
    """A 4.4 MB lz4 chunk that inflates to 1 GiB cost 2 GB of memory on replay: a chunk declaring more
    than MAX_MESSAGE_BYTES is skipped (named) before anything is inflated, and the chunks after it read."""
    import tracemalloc

    import lz4.frame
    from mcap.writer import CompressionType, Writer

    path = tmp_path / "bomb.mcap"
    with open(path, "wb") as f:
        writer = Writer(f, chunk_size=1 << 20, compression=CompressionType.LZ4)
        writer.start()
        schema = writer.register_schema("goggles_lcm.x", "lcm", b"")
        channel = writer.register_channel("bomb", "lcm", schema)
        writer.add_message(channel, 1, b"before", 1)
        writer.finish()
    # A chunk of one message of 1 GiB of zeros, compressed a MiB at a time (4 MB of lz4): the bomb goes
    # in by hand, after the file's own chunk.
    import struct

    from mcap.data_stream import RecordBuilder
    from mcap.records import Chunk

    size = 1 << 30  # the whole message record, as the chunk declares it
    head = struct.pack("<BQHIQQ", 0x05, size - 9, channel, 0, 2, 2)  # opcode, length, channel, seq, times
    compressor, zeros, left = lz4.frame.LZ4FrameCompressor(), bytes(1 << 20), size - len(head)
    parts = [compressor.begin(), compressor.compress(head)]
    while left:
        parts.append(compressor.compress(zeros[: min(left, len(zeros))]))
        left -= min(left, len(zeros))
    parts.append(compressor.flush())
    outer = RecordBuilder()
    Chunk(
        message_start_time=2,
        message_end_time=2,
        uncompressed_size=size,
        uncompressed_crc=0,
        compression="lz4",
        data=b"".join(parts),
    ).write(outer)
    bomb = outer.end()
    assert len(bomb) < 10e6
    raw = path.read_bytes()
    first_chunk_end = raw.index(b"before") + len(b"before")
    # After the magic and header: the file's own first chunk stays; the bomb goes right after it.
    data_end = raw.index(bytes([0x0F]), first_chunk_end)  # the data-end record opens the summary
    path.write_bytes(raw[:data_end] + bomb + raw[data_end:])
    tracemalloc.start()
    with caplog.at_level("WARNING"):
        read = list(read_log(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [(t, c, bytes(d)) for t, c, d in read] == [(1, "bomb", b"before")]
    assert "declares 1.0 GiB, over the 256 MiB a chunk may hold; skipped" in caplog.text
    assert peak < 100e6, f"{peak / 1e6:.0f} MB to skip it"


def test_the_recorder_does_not_write_a_message_no_reader_would_take(tmp_path, caplog):
    from goggles.logs.record import MAX_MESSAGE_BYTES

    recorder = Recorder(tmp_path / "big.mcap")
    recorder.write("huge", memoryview(bytearray(MAX_MESSAGE_BYTES + 1)).toreadonly(), 1)
    recorder.write("fine", b"x" * 1000, 2)
    recorder.close()
    assert [c for _, c, _ in read_log(tmp_path / "big.mcap")] == ["fine"] and recorder.dropped == 1
    assert "a message over 256 MiB" in caplog.text


@pytest.mark.parametrize(
    "damage",
    ["header zeroed", "data cut short", "junk between events", "length too long", "sync word flipped"],
)
def test_a_damaged_lcm_event_is_skipped_and_the_events_after_it_are_read(tmp_path, caplog, damage):
    """lcm's own reader ends at the first damaged event: everything after it was lost. The damaged
    event is dropped, every other event reads back as lcm-logger wrote it. (An event whose end is
    not followed by a sync word cannot be checked, so the one before a damaged header goes too.)"""
    pytest.importorskip("lcm")
    path = tmp_path / "flight.lcmlog"
    recorder = Recorder(path)
    payloads = [bytes([i]) * (1000 + i) for i in range(12)]
    for i, payload in enumerate(payloads):
        recorder.write(f"quad0/ch{i}", payload, (i + 1) * 1_000_000)
    recorder.close()
    raw = bytearray(path.read_bytes())
    starts = [i for i in range(len(raw)) if raw[i : i + 4] == b"\xed\xa1\xda\x01"]
    assert len(starts) == 12
    fifth, sixth = starts[5], starts[6]
    lost = {5}
    if damage == "header zeroed":
        raw[fifth : fifth + 28] = bytes(28)
        lost = {4, 5}
    elif damage == "data cut short":
        del raw[sixth - 100 : sixth]
    elif damage == "junk between events":
        raw[sixth:sixth] = b"\x00\xed\xa1 not an event " * 10
    elif damage == "length too long":
        raw[fifth + 24 : fifth + 28] = (len(payloads[5]) + 7).to_bytes(4, "big")
    else:
        raw[fifth] ^= 0xFF
        lost = {4, 5}
    path.write_bytes(bytes(raw))
    with caplog.at_level("WARNING"):
        read = list(read_log(path))
    assert [data for _, _, data in read] == [p for i, p in enumerate(payloads) if i not in lost]
    assert [t for t, _, _ in read] == [(i + 1) * 1_000_000 for i in range(12) if i not in lost]
    assert [c for _, c, _ in read] == [f"quad0/ch{i}" for i in range(12) if i not in lost]
    assert "damaged span(s) of bytes skipped" in caplog.text and str(path) in caplog.text


@pytest.mark.parametrize("suffix", [".mcap", ".lcmlog"])
def test_a_cut_off_recording_reads_to_the_cut_and_says_so(tmp_path, caplog, suffix):
    """A recording whose writer was killed: what was written before the cut reads back as written,
    and a warning says the rest was cut off (lcm's reader would end silently)."""
    path = tmp_path / f"flight{suffix}"
    recorder = Recorder(path, compression="none") if suffix == ".mcap" else Recorder(path)
    payloads = [bytes([i]) * 50_000 for i in range(40)]
    for i, payload in enumerate(payloads):
        recorder.write("quad0/depth", payload, (i + 1) * 1_000_000)
    recorder.close()
    with caplog.at_level("WARNING"):
        assert [data for _, _, data in read_log(path)] == payloads
    assert "cut-off" not in caplog.text
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.6) + 7])  # inside a message
    with caplog.at_level("WARNING"):
        cut = [data for _, _, data in read_log(path)]
    assert 10 < len(cut) < 40 and cut == payloads[: len(cut)]
    assert "cut-off" in caplog.text


@pytest.mark.slow
def test_files_that_are_not_recordings_are_called_that(tmp_path):
    from goggles.errors import ConfigError

    for name, content in (
        ("empty.mcap", b""),
        ("picture.mcap", b"\x89PNG\r\n\x1a\n" + bytes(100)),
        ("run.mcap", b'[run]\nmode = "sim"\n'),
    ):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ConfigError, match="not an MCAP recording"):
            list(read_log(tmp_path / name))
        with pytest.raises(ConfigError, match="not an MCAP recording"):
            read_metadata(tmp_path / name)
    (tmp_path / "noise.lcmlog").write_bytes(np.random.default_rng(1).bytes(4096))
    with pytest.raises(ConfigError, match="not an LCM event log"):
        list(read_log(tmp_path / "noise.lcmlog"))
    result = goggles_result("replay", tmp_path / "noise.lcmlog", "--sensors", arena_run_file(tmp_path))
    assert result.returncode == 2 and "not an LCM event log" in result.stderr and "Traceback" not in result.stderr


def _rewrite(original: Path, path: Path, change) -> Path:
    """A copy of a recording whose poses ``change(stamp_us)`` returns (new stamp µs, log-time shift ns) for."""
    recorder = Recorder(path, metadata=read_metadata(original), queue_size=100_000)
    for t_ns, channel, data in read_log(original):
        if channel.endswith("/state"):
            message = decode_any(data)
            message.header.utime, shift_ns = change(message.header.utime)
            data, t_ns = message.encode(), t_ns + shift_ns
        recorder.write(channel, data, t_ns)
    recorder.close()
    assert recorder.dropped == 0
    return path


@pytest.mark.slow
def test_one_corrupt_far_future_stamp_is_dropped_not_rendered(tmp_path):
    original = record_run(tmp_path)
    spiked = _rewrite(original, tmp_path / "spiked.mcap", lambda u: (u + 10**10 if u == 250_000 else u, 0))
    replayed = tmp_path / "replayed.mcap"
    start = time.perf_counter()
    result = replay_file(spiked, record=replayed)
    assert time.perf_counter() - start < 60  # 10,000 s of frames would take hours
    assert result.poses == 60 and result.dropped == 1
    first, second = images(original), images(replayed)
    assert set(first) == set(second)
    differ = {utime for (_, utime) in first if first[_, utime] != second[_, utime]}
    assert differ <= {250_000}  # only the frame at the dropped pose's instant lacks its pose


@pytest.mark.slow
def test_a_long_pause_in_the_poses_is_skipped(tmp_path, caplog):
    original = record_run(tmp_path)
    pause_us = 1000 * 10**6  # a whole number of frames and physics steps

    def pause(length_us):
        return lambda u: (u + length_us, length_us * 1000) if u >= 500_000 else (u, 0)

    paused = _rewrite(original, tmp_path / "paused.mcap", pause(pause_us))
    replayed = tmp_path / "replayed.mcap"
    result = replay_file(paused, record=replayed)
    assert result.poses == 61 and result.dropped == 0
    assert "pause for 1000.02 s" in caplog.text  # from the last frame before it
    first, second = images(original), images(replayed)
    shifted = {(channel, u + pause_us if u >= 500_000 else u): data for (channel, u), data in first.items()}
    assert set(shifted) == set(second)  # no frame rendered in the pause
    assert all(shifted[key] == second[key] for key in shifted)
    short = _rewrite(original, tmp_path / "short.mcap", pause(2 * 10**6))
    for max_gap_s, frames in ((60.0, 31 + 60), (1.0, 31)):  # a pause within the bound is rendered
        replay_file(short, record=tmp_path / f"{max_gap_s}.mcap", max_gap_s=max_gap_s)
        assert len(images(tmp_path / f"{max_gap_s}.mcap")) == 4 * frames


@pytest.mark.slow
def test_a_maximum_gap_below_the_poses_period_warns_in_four_lines_not_one_per_pose(tmp_path, caplog):
    """Every pose is then a pause: the first three are told, the rest counted in one line at the end."""
    original = record_run(tmp_path)
    caplog.set_level(logging.WARNING, logger="goggles.logs.replay")
    replay_file(original, max_gap_s=1e-6)
    told = [r.getMessage() for r in caplog.records if r.name == "goggles.logs.replay"]
    assert len(told) == 4 and all("pause for 0.0166667 s" in line for line in told[:3])
    assert told[2].endswith("(further ones are counted)")
    assert re.fullmatch(r"(\d+) pauses skipped in all \(1\.0 s of sim time\): .*--max-gap.*", told[3])
    assert int(told[3].split()[0]) >= 55


@pytest.mark.slow
def test_a_clock_restarted_under_one_logger_replays_on(tmp_path, caplog):
    """Two flights in one log, the second's stamps from 0 again (goggles run twice under lcm-logger):
    the second replays on from the first's last instant instead of waiting for its stamps to pass it."""
    original = record_run(tmp_path)
    twice = tmp_path / "twice.mcap"
    recorder = Recorder(twice, metadata=read_metadata(original), queue_size=100_000)
    for shift_ns in (0, 2 * 10**9):
        for t_ns, channel, data in read_log(original):
            recorder.write(channel, data, t_ns + shift_ns)
    recorder.close()
    replayed = tmp_path / "replayed.mcap"
    result = replay_file(twice, record=replayed, max_gap_s=0.5)  # a 1 s flight: a jump of 0.5 s is one
    assert result.poses == 2 * 61 and result.dropped == 0
    assert "clock went back 1 s" in caplog.text
    first, second = images(original), images(replayed)
    again = {(channel, u + 10**6): data for (channel, u), data in first.items()}  # from the first's last instant
    expected = {**{key: data for key, data in first.items() if key[1] < 10**6}, **again}
    assert set(second) == set(expected)
    assert all(second[key] == expected[key] for key in expected)


@pytest.mark.slow
def test_a_corrupt_first_stamp_does_not_offset_the_flight(tmp_path):
    original = record_run(tmp_path)
    spiked = _rewrite(original, tmp_path / "spiked.mcap", lambda u: (u + 10**10 if u == 0 else u, 0))
    replayed = tmp_path / "replayed.mcap"
    result = replay_file(spiked, record=replayed)
    assert result.poses == 60 and result.dropped == 1
    first, second = images(original), images(replayed)
    assert set(second) == {key for key in first if key[1] > 0}  # the replay starts at the second pose
    assert all(second[key] == first[key] for key in second)


@pytest.mark.slow
def test_a_recorded_state_that_is_no_pose_is_dropped_and_the_replay_goes_on(tmp_path):
    """A damaged state in a log (a NaN position, a zero quaternion) is one dropped message, never the end of
    the replay (it ended the whole replay with a bare quaternion error)."""
    original = record_run(tmp_path)
    damaged = tmp_path / "damaged.mcap"
    recorder = Recorder(damaged, metadata=read_metadata(original), queue_size=100_000)
    for t_ns, channel, data in read_log(original):
        if channel.endswith("/state"):
            message = decode_any(data)
            if message.header.utime == 250_000:
                message.position = [float("nan"), 0.0, 0.0]
            if message.header.utime == 500_000:
                message.orientation = [0.0, 0.0, 0.0, 0.0]
            data = message.encode()
        recorder.write(channel, data, t_ns)
    recorder.close()
    result = replay_file(damaged)
    assert result.error is None
    assert result.poses == 59 and result.dropped == 2


def test_a_replays_recording_carries_the_flights_truth_and_inputs_at_their_instants(tmp_path):
    """A re-rendered flight is a whole flight: its recording holds the recorded state, IMU samples and
    collisions, byte for byte at their log times (a dataset made from it has its inputs, and it replays
    again); each IMU sample is logged at its own instant, not at its batch's delivery."""
    original = record_run(tmp_path, device="cpu")
    replayed = tmp_path / "replayed.mcap"
    replay_file(original, record=replayed, device="cpu")
    carried = ("quad0/state", "quad0/imu", "quad0/collision")

    def truth(path):
        return sorted((t, channel, bytes(data)) for t, channel, data in read_log(path) if channel in carried)

    recorded = truth(original)
    assert {channel for _, channel, _ in recorded} >= {"quad0/state", "quad0/imu"}
    assert truth(replayed) == recorded
    for t, channel, data in recorded:
        if channel == "quad0/imu":
            assert t == decode_any(data).header.utime * 1000
    again = tmp_path / "again.mcap"
    replay_file(replayed, record=again, device="cpu")  # a replay's recording replays
    assert images(again) == images(replayed)


def test_a_replays_render_threads_are_its_own_and_leave_the_process_as_it_was(tmp_path, monkeypatch):
    """``replay_file(threads=1)`` set $GOGGLES_RENDER_THREADS for the rest of the process (the first
    call's count stuck for every later renderer); now the count goes to the replay's renderers."""
    from goggles.engine import Engine
    from goggles.logs.replay import replay_config

    monkeypatch.delenv("GOGGLES_RENDER_THREADS", raising=False)
    original = record_run(tmp_path, device="cpu", duration=0.2)
    replay_file(original, device="cpu", threads=1)
    assert "GOGGLES_RENDER_THREADS" not in os.environ
    with Engine(replay_config(original, None, None), device="cpu", threads=1) as engine:
        assert {group.renderer.threads for group in engine.rig.groups} == {1}
    with Engine(replay_config(original, None, None), device="cpu") as engine:
        assert {group.renderer.threads for group in engine.rig.groups} == {min(os.cpu_count(), 32)}
