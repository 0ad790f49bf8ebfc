"""Wide lenses and event cameras in run files, calibration files as Kalibr and ROS write them, and a
T265-like stereo fisheye pair whose rectified disparity (OpenCV's fisheye rectification and SGBM)
is f·B/Z."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from goggles.errors import ConfigError
from goggles.frames import R_BODY_OPTICAL, camera_pose_from_body, transform
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.render.calibration import load_calibration, write_calibration
from goggles.rig.runfile import parse_run_config
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of
from tests.support import REPO

T265 = REPO / "calib" / "t265-camchain.yaml"


def camera_config(tmp_path, **camera):
    data = {"vehicle": [{"name": "q"}], "camera": [{"vehicle": "q", "name": "c", **camera}]}
    return parse_run_config(data, tmp_path / "run.toml").cameras[0]


def test_a_run_file_camera_takes_any_lens(tmp_path):
    fisheye = camera_config(tmp_path, width=64, height=48, lens="fisheye", fov_deg=200.0)
    assert fisheye.model.lens == "fisheye" and fisheye.model.fov_deg == 200.0
    assert fisheye.model.fx == pytest.approx(24.0 / np.radians(100.0))  # the 200-degree circle fills the height
    ds = camera_config(
        tmp_path, width=64, height=48, lens="double-sphere", intrinsics=[22, 22, 31.5, 23.5], distortion=[-0.2, 0.6]
    )
    assert (ds.model.lens, ds.model.distortion, ds.model.fx) == ("double-sphere", (-0.2, 0.6), 22.0)
    assert ds.model.radial and not camera_config(tmp_path).model.radial


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"lens": "kb8"}, r"'lens' must be one of"),
        ({"lens": "fisheye", "distortion": [0.1, 0.2]}, r"'distortion' must be a list of 4 finite numbers"),
        ({"lens": "fisheye", "vfov_deg": 90.0}, r"'vfov_deg' must be left out for a fisheye"),
        ({"lens": "eucm"}, r"'intrinsics' must be \[fx, fy, cx, cy\]"),
        ({"lens": "eucm", "intrinsics": [20, 20, 16, 12], "distortion": [1.5, 1.0]}, r"eucm lens needs 0 <= alpha"),
        ({"lens": "fisheye", "depth_model": "d435"}, r"'depth_model' must be 'ideal' or left out"),
        ({"fov_deg": 400.0, "lens": "fisheye"}, r"'fov_deg' must be a field of view in \(0, 360\]"),
        ({"calibration": str(T265), "lens": "fisheye"}, r"give 'calibration' or 'lens', not both"),
        ({"calibration": str(T265), "baseline": 0.1}, r"'baseline' must be left out: .* is a stereo pair"),
        ({"calibration": str(T265), "calibration_camera": "cam2"}, r"no camera 'cam2' in this camchain"),
        ({"calibration_camera": "cam0"}, r"'calibration_camera' must be given with a calibration"),
        ({"outputs": ["events", "rgb"]}, r"'outputs' must be \[\"events\"\] alone"),
        ({"outputs": ["events"], "contrast_threshold": 0.0}, r"contrast_positive = 0.0"),
        ({"outputs": ["events"], "rate": 5000.0}, r"'rate' must be at most the physics rate"),
        ({"outputs": ["depth"], "refractory_s": 0.001}, r"'refractory_s' must be left out: it is an event camera"),
        # Lenses that would see nothing: refused here, where the camera is read, not as NaN images.
        ({"intrinsics": [1e30, 1e30, 16, 12]}, r"#1: its pixels span .* rad: every one sees the same direction"),
        ({"intrinsics": [1e-30, 1e-30, 16, 12]}, r"#1: its pixels span .* rad: every one sees the same direction"),
        ({"intrinsics": [20, 20, 1e9, 12]}, r"#1: no pixel of its image has a ray"),
        ({"baseline": 1e30}, r"#1: stereo baseline 1e\+30 m: a distance in \(0, 100\] m"),
        ({"intrinsics": [20, 20, 16, 12], "distortion": [-5, 0, 0, 0, 0]}, r"#1: distortion .* cannot be inverted"),
    ],
)
def test_a_camera_a_lens_cannot_be_is_refused_by_file_and_key(tmp_path, keys, message):
    with pytest.raises(ConfigError, match=message) as error:
        camera_config(tmp_path, width=32, height=24, **keys) if "calibration" not in keys else camera_config(
            tmp_path, **keys
        )
    assert str(error.value).startswith(str(tmp_path / "run.toml")) or str(error.value).startswith(str(T265))


def test_a_kalibr_camchain_flies_as_a_stereo_pair_mounted_where_its_imu_says(tmp_path):
    c = camera_config(tmp_path, calibration=str(T265), fov_deg=163.0, outputs=["rgb"])
    assert c.eyes == ("c_left", "c_right") and not c.rectified
    assert (c.model.lens, c.model.fx, c.right.fx, c.model.fov_deg) == ("fisheye", 285.72, 285.44, 163.0)
    assert c.baseline == pytest.approx(0.064, abs=1e-3)
    # The camchain's T_cam_imu puts cam0 0.1 m ahead of the body (the IMU), 0.032 m to its left, facing forward.
    np.testing.assert_allclose(c.T_BC[:3, :3], R_BODY_OPTICAL, atol=1e-9)
    np.testing.assert_allclose(c.T_BC[:3, 3], [0.1, 0.032, 0.0], atol=1e-9)
    # The right eye: 64 mm along the left's optical x (body -y), where T_cn_cnm1 puts it.
    assert c.T_BR[:3, 3] == pytest.approx([0.1001, 0.032 - 0.064, -0.0002], abs=1e-3)
    mono = camera_config(tmp_path, calibration=str(T265), calibration_camera="cam1", position=[0.0, 0.0, 0.0])
    assert mono.eyes == ("c",) and mono.model.cx == 424.61
    np.testing.assert_allclose(mono.T_BC[:3, 3], 0.0)  # position given: the run file's mount wins


def camchain(tmp_path, **cam0):
    import yaml

    data = {"cam0": {"resolution": [64, 48], **cam0}}
    path = tmp_path / "camchain.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("model", "intrinsics", "distortion_model", "coefficients", "lens", "expected"),
    [
        (
            "pinhole",
            [40, 41, 31.5, 23.5],
            "radtan",
            [-0.1, 0.02, 0.001, -0.002],
            "pinhole",
            (-0.1, 0.02, 0.001, -0.002, 0.0),
        ),
        (
            "pinhole",
            [40, 41, 31.5, 23.5],
            "equidistant",
            [0.01, -0.02, 0.003, -0.001],
            "fisheye",
            (0.01, -0.02, 0.003, -0.001),
        ),
        (
            "omni",
            [0.9, 40, 41, 31.5, 23.5],
            "radtan",
            [-0.2, 0.04, 0.001, 0.0],
            "unified",
            (0.9, -0.2, 0.04, 0.001, 0.0),
        ),
        ("ds", [-0.2, 0.6, 20, 21, 31.5, 23.5], "none", [], "double-sphere", (-0.2, 0.6)),
        ("eucm", [0.6, 1.1, 20, 21, 31.5, 23.5], "none", [], "eucm", (0.6, 1.1)),
    ],
)
def test_kalibr_models_read_as_kalibr_writes_them(
    tmp_path, model, intrinsics, distortion_model, coefficients, lens, expected
):
    """Kalibr's intrinsics vectors: pinhole [fu fv pu pv], omni [xi fu fv pu pv], ds [xi alpha fu fv pu pv],
    eucm [alpha beta fu fv pu pv] (Kalibr's wiki, "Supported models")."""
    path = camchain(
        tmp_path,
        camera_model=model,
        intrinsics=intrinsics,
        distortion_model=distortion_model,
        distortion_coeffs=coefficients,
    )
    camera = load_calibration(path).model
    assert camera.lens == lens and camera.distortion == pytest.approx(expected)
    assert (camera.fx, camera.fy, camera.cx, camera.cy) == tuple(float(v) for v in intrinsics[-4:])


@pytest.mark.parametrize(
    ("cam0", "message"),
    [
        (
            {"camera_model": "pinhole", "intrinsics": [1, 2, 3], "distortion_model": "none"},
            r"cam0.intrinsics must be 4",
        ),
        ({"camera_model": "kb4", "intrinsics": [1, 2, 3, 4]}, r"cam0.camera_model 'kb4' is not supported"),
        (
            {"camera_model": "ds", "intrinsics": [0, 0.5, 1, 2, 3, 4], "distortion_model": "radtan"},
            r"not supported with",
        ),
        (
            {
                "camera_model": "pinhole",
                "intrinsics": [1, 2, 3, 4],
                "distortion_model": "fov",
                "distortion_coeffs": [0.9],
            },
            "'fov'",
        ),
        (
            {"camera_model": "pinhole", "intrinsics": [40, 40, 3, 4], "T_cam_imu": [[1, 0], [0, 1]]},
            r"T_cam_imu must be a 4x4",
        ),
    ],
)
def test_a_camchain_goggles_cannot_fly_is_refused_by_camera_and_key(tmp_path, cam0, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_calibration(camchain(tmp_path, **cam0))
    assert str(error.value).startswith(str(tmp_path / "camchain.yaml"))


@pytest.mark.parametrize(
    "camera",
    [
        CameraModel.from_fov(64, 48, 70.0, distortion=(-0.1, 0.01, 0.001, 0.0, 0.0)),
        CameraModel.fisheye(64, 48, 190.0, distortion=(0.01, -0.002, 0.0, 0.0)),
        CameraModel(64, 48, 40, 40, 31.5, 23.5, (0.8, -0.1, 0.01, 0.0, 0.0), lens="unified"),
        CameraModel(64, 48, 20, 20, 31.5, 23.5, (-0.2, 0.6), lens="double-sphere"),
        CameraModel(64, 48, 20, 20, 31.5, 23.5, (0.6, 1.1), lens="eucm"),
    ],
)
def test_every_lens_writes_a_ros_calibration_that_reads_back(tmp_path, camera):
    import yaml

    path = write_calibration(tmp_path, camera, "cam")
    written = yaml.safe_load(path.read_text())
    names = {"pinhole": "plumb_bob", "fisheye": "equidistant", "unified": "unified"}
    names |= {"double-sphere": "double_sphere", "eucm": "extended_unified"}
    assert written["distortion_model"] == names[camera.lens]
    back = load_calibration(path).model
    assert (back.lens, back.distortion, back.fx, back.cy) == (camera.lens, camera.distortion, camera.fx, camera.cy)


def test_the_t265_pairs_rectified_disparity_is_f_b_over_z(device):
    """A textured wall 1.5 m ahead of a T265-like pair (calib/t265-camchain.yaml): OpenCV rectifies the
    two rendered fisheye images (cv2.fisheye.stereoRectify from the camchain's intrinsics and
    extrinsics) and matches them (StereoSGBM); the disparity at the centre is f·B/Z of the rectified
    pair, within 2 %."""
    calibration = load_calibration(T265)
    left, right, T_LR = calibration.model, calibration.right, calibration.T_LR
    distance = 1.5
    texture = np.random.default_rng(0).integers(0, 256, (256, 256), dtype=np.uint8)
    texture = cv2.resize(texture, (2048, 2048), interpolation=cv2.INTER_NEAREST)
    texture = np.repeat(texture[..., None], 3, axis=2)
    uv = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    wall = quad([[distance, 8, -8], [distance, -8, -8], [distance, -8, 8], [distance, 8, 8]], uv, texture)
    T_WL = camera_pose_from_body(transform([0.0, 0.0, 0.0], [1, 0, 0, 0]))
    settings = RenderSettings(outputs={"rgb"}, shading=Shading.UNLIT, backend="auto" if device == "cpu" else "warp")
    renderer = Renderer(DeviceScene(scene_of((wall, 1)), device), [left, right], settings)
    renderer.render(np.stack([T_WL, T_WL @ T_LR]))
    grey = [cv2.cvtColor(image, cv2.COLOR_RGB2GRAY) for image in renderer.images().rgb]
    renderer.close()
    T_RL = np.linalg.inv(T_LR)
    size = (left.width, left.height)
    K0, D0, K1, D1 = left.K, np.array(left.distortion), right.K, np.array(right.distortion)
    R1, R2, P1, P2, _ = cv2.fisheye.stereoRectify(
        K0, D0, K1, D1, size, T_RL[:3, :3], T_RL[:3, 3], flags=cv2.CALIB_ZERO_DISPARITY, balance=0.0, fov_scale=1.0
    )
    for P in (P1, P2):  # the rectified view's centre at the lenses' own focal length (disparities of ~12 px)
        scale = left.fx / P[0, 0]
        P[0, 0] *= scale
        P[1, 1] *= scale
        P[0, 3] *= scale
        P[0, 2], P[1, 2] = (left.width - 1) / 2.0, (left.height - 1) / 2.0
    rectified = []
    for K, D, R, P, image in ((K0, D0, R1, P1, grey[0]), (K1, D1, R2, P2, grey[1])):
        map_x, map_y = cv2.fisheye.initUndistortRectifyMap(K, D, R, P, size, cv2.CV_32FC1)
        rectified.append(cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR))
    f, baseline = P1[0, 0], -P2[0, 3] / P2[0, 0]
    expected = f * baseline / distance
    sgbm = cv2.StereoSGBM_create(minDisparity=0, numDisparities=64, blockSize=7, P1=8 * 49, P2=32 * 49)
    disparity = sgbm.compute(rectified[0], rectified[1]).astype(np.float32) / 16.0
    cx, cy = int(P1[0, 2]), int(P1[1, 2])
    centre = disparity[cy - 60 : cy + 60, cx - 60 : cx + 60]
    measured = np.median(centre[centre > 0])
    assert baseline == pytest.approx(0.064, abs=1e-3) and expected > 5.0
    assert measured == pytest.approx(expected, rel=0.02)


HOSTILE_CALIBRATIONS = {
    # nested aliases (a "billion laughs"): 9^3 strings here, gigabytes a few levels on
    "bomb.yaml": ('a: &a ["x","x","x"]\nb: &b [*a,*a,*a]\nc: [*b,*b,*b]\n', r"line 2: a YAML alias"),
    "deep.yaml": ("[" * 10000 + "]" * 10000, "nested too deeply"),
    "list.yaml": (
        "cam0:\n  camera_model: [pinhole]\n  intrinsics: [100, 100, 32, 24]\n  resolution: [64, 48]\n",
        r"cam0.camera_model must be a name, got \['pinhole'\]",
    ),
    "map.yaml": (
        "image_width: 64\nimage_height: 48\n"
        "camera_matrix: {rows: 3, cols: 3, data: [100, 0, 32, 0, 100, 24, 0, 0, 1]}\n"
        "distortion_model: {a: 1}\n",
        r"distortion_model must be a name \(plumb_bob, equidistant, ...\), got \{'a': 1\}",
    ),
    "huge.yaml": ("image_width: 64\n#" + "x" * (2 << 20) + "\n", "bytes: not a camera calibration"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_CALIBRATIONS))
def test_hostile_calibration_files_are_one_line_errors_naming_the_file(tmp_path, name):
    """Aliases, deep nesting, names that are lists or tables, megabytes: each refused in one line that
    names the file (they were a 5.8 GB alias expansion, RecursionError and TypeError tracebacks), and no
    error repeats a value whole."""
    text, said = HOSTILE_CALIBRATIONS[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=said) as caught:
        load_calibration(path)
    assert str(caught.value).startswith(str(path)) and len(str(caught.value)) < 400
