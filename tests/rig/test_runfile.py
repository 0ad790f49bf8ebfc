"""Run files and camera calibration files: every error names the file and the key."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from goggles.engine import Engine
from goggles.errors import ConfigError
from goggles.rig.runfile import parse_run_config
from tests.support import run_config


def test_run_file_errors_name_the_key(tmp_path):
    from goggles.errors import ConfigError
    from goggles.rig.runfile import load_run_config

    bad = tmp_path / "bad.toml"
    bad.write_text('[[vehicle]]\nname = "q"\nimu_rate = 200.0\n')
    with pytest.raises(
        ConfigError, match=r"bad.toml: \[\[vehicle\]\] #1: 'imu_rate' must be a rate in Hz that divides"
    ):
        load_run_config(bad)
    for value in ("0", "65", "2.5", "true"):
        bad.write_text(f'[[vehicle]]\nname = "q"\nimu_batch = {value}\n')
        with pytest.raises(
            ConfigError, match=r"bad.toml: \[\[vehicle\]\] #1: 'imu_batch' must be an integer from 1 to 64"
        ):
            load_run_config(bad)
    for value in ("0", "2.5", '"car"'):
        bad.write_text(f'[[vehicle]]\nname = "q"\nsegmentation = {value}\n')
        with pytest.raises(ConfigError, match=r"bad.toml: \[\[vehicle\]\] #1: 'segmentation' must be an integer"):
            load_run_config(bad)
    bad.write_text('[clock]\nphysics_rate = 1000.0\n[[vehicle]]\nname = "q"\n')
    with pytest.raises(
        ConfigError, match=r"'imu_rate' is not given, and its default 240 Hz does not divide the physics"
    ):
        load_run_config(bad)
    bad.write_text('[clock]\nphysics_rate = 1000.0\n[[vehicle]]\nname = "q"\nimu_rate = 500.0\n')
    with pytest.raises(ConfigError, match=r"'state_rate' is not given, and its default 60 Hz does not divide"):
        load_run_config(bad)
    for key, value, said in (
        ("command_timeout", "-1", "'command_timeout' must be a finite number >= 0"),
        ("command_timeout", '"soon"', "'command_timeout' must be a finite number >= 0"),
        ("fc_rate", "40.0", "'fc_rate' must be at least 50 Hz"),
    ):
        controller = 'controller = "betaflight"\n' if key == "fc_rate" else ""
        bad.write_text(f'[[vehicle]]\nname = "q"\n{controller}{key} = {value}\n')
        with pytest.raises(ConfigError, match=r"bad.toml: \[\[vehicle\]\] #1: " + said):
            load_run_config(bad)
    bad.write_text('[[vehicle]]\nname = "q"\n[[camera]]\nvehicle = "x"\nname = "c"\n')
    with pytest.raises(ConfigError, match="'vehicle' must be one of the vehicles"):
        load_run_config(bad)
    bad.write_text('[clock]\nscael = 1.0\n[[vehicle]]\nname = "q"\n')
    with pytest.raises(ConfigError, match=r"\[clock\]: unknown key 'scael'"):
        load_run_config(bad)
    with pytest.raises(ConfigError, match="run file not found"):
        load_run_config(tmp_path / "missing.toml")
    bad.write_text('[zmq]\nenabled = false\n[lcm]\nenabled = false\n[[vehicle]]\nname = "q"\npreset = "gone.toml"\n')
    with pytest.raises(ConfigError, match=r"bad.toml: \[\[vehicle\]\] 'q': 'preset': airframe file .*gone.toml not"):
        Engine(load_run_config(bad), device="cpu")  # simulated: its airframe must be here


@pytest.mark.slow
def test_a_rate_made_in_python_that_does_not_divide_the_physics_rate_is_refused():
    """A RunConfig made in code skips the file's checks: a camera or a state rate that does not divide
    the physics rate would have run at a rounded rate, silently; the engine refuses it, by name."""

    from goggles.engine import Engine

    config = dataclasses.replace(run_config(), zmq=None)
    camera = dataclasses.replace(config.cameras[0], rate=70.0)  # 960 / 70 = 13.7 steps
    with pytest.raises(ConfigError, match=r"camera quad0/stereo: rate 70 Hz does not divide the physics rate 960"):
        Engine(dataclasses.replace(config, cameras=[camera]), device="cpu")
    vehicle = dataclasses.replace(config.vehicles[0], state_rate=50.0)
    with pytest.raises(ConfigError, match=r"quad0/state: rate 50 Hz does not divide the physics rate 960"):
        Engine(dataclasses.replace(config, vehicles=[vehicle]), device="cpu")


def test_camera_calibration_yaml(tmp_path):
    from goggles.render.calibration import load_camera_yaml

    path = tmp_path / "cam.yaml"
    path.write_text(
        "image_width: 640\nimage_height: 480\ncamera_name: front\n"
        "camera_matrix: {rows: 3, cols: 3, data: [500.0, 0, 319.5, 0, 501.0, 239.5, 0, 0, 1]}\n"
        "distortion_model: plumb_bob\ndistortion_coefficients: {rows: 1, cols: 5, data: [-0.1, 0.01, 0, 0, 0]}\n"
    )
    model = load_camera_yaml(path, min_depth=0.1, max_depth=20.0)
    assert (model.width, model.fx, model.fy, model.cy, model.distortion[0]) == (640, 500.0, 501.0, 239.5, -0.1)


def test_a_calibration_opencv_wrote_is_read_as_opencv_wrote_it(tmp_path):
    """OpenCV's own YAML (cv::FileStorage: a %YAML header, !!opencv-matrix tags) was refused as
    "not valid YAML"; older OpenCV writes the header as %YAML:1.0, which PyYAML refuses too."""
    import cv2

    from goggles.render.calibration import load_camera_yaml

    K = np.array([[500.0, 0.0, 319.5], [0.0, 501.0, 239.5], [0.0, 0.0, 1.0]])
    distortion = np.array([[0.1, -0.05, 0.001, 0.002, 0.01]])
    path = tmp_path / "opencv.yaml"
    storage = cv2.FileStorage(str(path), cv2.FILE_STORAGE_WRITE)
    for key, value in (("image_width", 640), ("image_height", 480), ("camera_matrix", K)):
        storage.write(key, value)
    storage.write("distortion_coefficients", distortion)
    storage.release()
    for text in (path.read_text(), re.sub(r"\A%YAML[ :]1\.\d", "%YAML:1.0", path.read_text())):
        path.write_text(text)
        model = load_camera_yaml(path)
        assert (model.width, model.height) == (640, 480) and model.distortion == tuple(distortion[0])
        assert (model.fx, model.fy, model.cx, model.cy) == (500.0, 501.0, 319.5, 239.5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("image_width: 640", "image_width: 640.5"), "image_width must be a whole number of pixels"),
        (("image_width: 640", "image_width: true"), "image_width must be a whole number of pixels"),
        (("data: [500.0, 0,", "data: [500.0, 2.0,"), "no skew"),
        (("0, 0, 1]}", "0, 0, 2]}"), "no skew"),
        (("data: [500.0, 0, 319.5, 0, 501.0", "data: [-500.0, 0, 319.5, 0, 501.0"), "focal lengths"),
        (
            ("data: [500.0, 0, 319.5, 0, 501.0", "data: [1e39, 0, 319.5, 0, 501.0"),
            "camera_matrix.data must be 9 finite",
        ),
        (("[-0.1, 0.01, 0, 0, 0]", "[-0.1, 0.01, 0, 0, 0, 0.2, 0, 0]"), "8 coefficients is not supported"),
        (("plumb_bob", "equidistant"), "'equidistant' with 5 coefficients is not supported"),
        (("image_width: 640\n", "- a list\n"), "not valid YAML"),
    ],
)
def test_a_calibration_a_camera_model_cannot_hold_is_refused_by_file_and_key(tmp_path, change, message):
    from goggles.render.calibration import load_camera_yaml

    text = (
        "image_width: 640\nimage_height: 480\ncamera_name: front\n"
        "camera_matrix: {rows: 3, cols: 3, data: [500.0, 0, 319.5, 0, 501.0, 239.5, 0, 0, 1]}\n"
        "distortion_model: plumb_bob\ndistortion_coefficients: {rows: 1, cols: 5, data: [-0.1, 0.01, 0, 0, 0]}\n"
    )
    assert change[0] in text
    path = tmp_path / "cam.yaml"
    path.write_text(text.replace(*change))
    with pytest.raises(ConfigError, match=message) as error:
        load_camera_yaml(path)
    assert str(error.value).startswith(f"{path}: ")
    path.write_text(text.replace("plumb_bob", "rational_polynomial").replace("0, 0, 0]}", "0, 0, 0, 0, 0, 0]}"))
    assert load_camera_yaml(path).distortion == (-0.1, 0.01, 0.0, 0.0, 0.0)  # k4..k6 of 0: plumb_bob's lens
    path.write_text(text.replace("[-0.1, 0.01, 0, 0, 0]", "[]"))
    assert load_camera_yaml(path).distortion == (0.0,) * 5  # an ideal camera's empty coefficients


def test_shipped_calibration_is_flightgoggles_camera():
    from pathlib import Path

    from goggles.render import CameraModel
    from goggles.render.calibration import load_camera_yaml

    model = load_camera_yaml(Path(__file__).resolve().parents[2] / "calib/flightgoggles_1024x768.yaml")
    expected = CameraModel.from_fov(1024, 768, 70.0)
    assert (model.width, model.height) == (1024, 768)
    assert model.fx == pytest.approx(expected.fx, abs=1e-3) and model.cx == expected.cx and model.cy == expected.cy


def test_run_file_camera_from_calibration(tmp_path):
    from pathlib import Path

    calib = Path(__file__).resolve().parents[2] / "calib/flightgoggles_1024x768.yaml"
    config = parse_run_config(
        {
            "vehicle": [{"name": "q"}],
            "camera": [{"vehicle": "q", "name": "fg", "calibration": str(calib), "rate": 60.0}],
        },
        tmp_path / "run.toml",
    )
    assert config.cameras[0].model.width == 1024 and config.cameras[0].rate == 60.0


def test_a_run_files_looks_are_read_relative_to_it_and_bad_ones_name_the_file_and_key(tmp_path):
    from goggles.paths import assets_dir
    from goggles.rig.runfile import load_run_config

    path = tmp_path / "run.toml"
    base = '[[vehicle]]\nname = "q"\n'
    path.write_text(
        base + f'[looks]\nexposure = {{ uniform = [0.5, 2.0] }}\ntextures = "{assets_dir() / "textures"}"\n'
    )
    config = load_run_config(path)
    assert config.looks is not None and len(config.looks.textures) == 4 and config.look == 0
    for text, said in (
        ("[looks]\nsheen = { uniform = [0.5, 2.0] }\n", r"\[looks\] unknown key 'sheen'"),
        ('[looks]\ntextures = "nowhere"\n', r"\[looks\] textures: .*nowhere is not a folder"),
        ("[looks]\nsun_intensity = { uniform = [-1.0, 2.0] }\n", r"\[looks\] sun_intensity: uniform low -1"),
    ):
        path.write_text(base + text)
        with pytest.raises(ConfigError, match=re.escape(str(path)) + ": " + said):
            load_run_config(path)
