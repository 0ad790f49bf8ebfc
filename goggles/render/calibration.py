"""Camera calibration files, read and written: ROS ``camera_info`` YAML (camera_calibration's
``ost.yaml``), OpenCV's ``cv::FileStorage`` YAML, and Kalibr's camchain YAML (one camera, or a stereo
pair with ``T_cn_cnm1``, and each camera's mount ``T_cam_imu``), in and out of a ``CameraModel``.

ROS names three distortion models (``sensor_msgs/distortion_models.hpp``): ``plumb_bob`` and
``rational_polynomial`` (a pinhole) and ``equidistant`` (a Kannala-Brandt fisheye, k1..k4). For the
lenses ROS has no name for, goggles writes and reads ``unified``, ``double_sphere`` and
``extended_unified``, the coefficients in ``lenses.LENSES``' order (Kalibr's and Basalt's names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.checks import clipped, finite_vector, is_whole
from goggles.errors import ConfigError
from goggles.render.camera import MAX_IMAGE_SIDE, CameraModel
from goggles.render.lenses import LENSES

#: A lens's name in a ROS ``camera_info`` (its ``distortion_model``).
ROS_DISTORTION_MODELS = {
    "pinhole": "plumb_bob",
    "fisheye": "equidistant",
    "unified": "unified",
    "double-sphere": "double_sphere",
    "eucm": "extended_unified",
}
_LENS_OF_ROS = {**{name: lens for lens, name in ROS_DISTORTION_MODELS.items()}, "rational_polynomial": "pinhole"}

#: Kalibr's camera models: the lens, and its intrinsics vector's coefficients before fu fv pu pv.
_KALIBR_PROJECTIONS = {"pinhole": 0, "omni": 1, "ds": 2, "eucm": 2}
_KALIBR_DISTORTIONS = {"radtan": 4, "equidistant": 4, "equi": 4, "none": 0}


@dataclass(frozen=True)
class Calibration:
    """What a calibration file says about a camera, or a stereo pair."""

    model: CameraModel
    """The camera (a stereo pair's left: Kalibr's cam0)."""
    right: CameraModel | None = None
    """A stereo pair's right camera (Kalibr's cam1), None for one camera."""
    T_LR: np.ndarray | None = None
    """(4, 4) the right camera's optical frame in the left's (Kalibr's T_cn_cnm1, inverted)."""
    T_IC: np.ndarray | None = None
    """(4, 4) the (left) camera's optical frame in its IMU's frame (Kalibr's T_cam_imu, inverted), or None."""


def load_calibration(path: Path, camera: str | None = None, **limits) -> Calibration:
    """A camera, or a stereo pair, from a calibration YAML: a ROS ``camera_info`` or OpenCV file (one
    camera), or a Kalibr camchain (``cam0``, ``cam1``, ...: its first two cameras are a stereo pair,
    ``camera`` picks one of them alone). ``limits``: the cameras' min_depth and max_depth.

    Raises:
        ConfigError: naming the file and the missing or bad key.
    """
    data = _read_yaml(path)
    cams = sorted((k for k in data if re.fullmatch(r"cam\d+", str(k))), key=lambda k: int(k[3:]))
    if not cams:
        if camera is not None:
            raise ConfigError(
                f"{path}: calibration_camera {clipped(repr(camera))} is for a Kalibr camchain (cam0, cam1, ...)"
            )
        return Calibration(_ros_camera(path, data, limits))
    if camera is not None:
        if camera not in cams:
            raise ConfigError(f"{path}: no camera {clipped(repr(camera))} in this camchain (it has {', '.join(cams)})")
        model, T_CI = _kalibr_camera(path, camera, data[camera], limits)
        return Calibration(model, T_IC=_inverse(T_CI))
    left, T_LI = _kalibr_camera(path, cams[0], data[cams[0]], limits)
    if len(cams) == 1:
        return Calibration(left, T_IC=_inverse(T_LI))
    right, T_RI = _kalibr_camera(path, cams[1], data[cams[1]], limits)
    if (left.width, left.height) != (right.width, right.height):
        raise ConfigError(
            f"{path}: {cams[0]} and {cams[1]} differ in resolution ({left.width}x{left.height}, "
            f"{right.width}x{right.height}); a stereo pair renders at one size: pick one with calibration_camera"
        )
    T_RL = _transform(path, f"{cams[1]}.T_cn_cnm1", data[cams[1]].get("T_cn_cnm1"))
    if T_RL is None:
        if T_LI is None or T_RI is None:
            raise ConfigError(f"{path}: {cams[1]}.T_cn_cnm1 is missing: the pair's extrinsics (a 4x4 matrix)")
        T_RL = T_RI @ _inverse(T_LI)
    return Calibration(left, right, _inverse(T_RL), _inverse(T_LI))


def load_camera_yaml(path: Path, **limits) -> CameraModel:
    """The camera of a calibration file (``load_calibration``; a camchain's cam0)."""
    return load_calibration(path, **limits).model


#: A calibration file is a few kilobytes: larger is refused before it is parsed.
MAX_CALIBRATION_BYTES = 1 << 20


def _read_yaml(path: Path) -> dict:
    import yaml

    class CalibrationLoader(yaml.SafeLoader):
        """PyYAML's safe loader, reading OpenCV's matrices as the mappings they are, and refusing aliases
        (no calibration tool writes them; nested ones expand into gigabytes)."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"{path}: line {mark.line + 1}: a YAML alias; a calibration file is read without them"
                )
            return super().compose_node(parent, index)

    CalibrationLoader.add_constructor(
        "tag:yaml.org,2002:opencv-matrix", lambda loader, node: loader.construct_mapping(node, deep=True)
    )
    if not path.is_file():
        raise ConfigError(f"{path}: camera calibration file not found")
    if path.stat().st_size > MAX_CALIBRATION_BYTES:
        raise ConfigError(
            f"{path}: {path.stat().st_size} bytes: not a camera calibration (those are a few kilobytes; the limit is "
            f"{MAX_CALIBRATION_BYTES >> 20} MiB)"
        )
    text = path.read_bytes().decode(errors="replace")
    text = re.sub(r"\A%YAML:(1\.\d+)", r"%YAML \1", text)  # OpenCV's directive, which PyYAML refuses
    try:
        data = yaml.load(text, Loader=CalibrationLoader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {clipped(str(exc), 300)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a camera calibration") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: not a camera calibration (a ROS camera_info: image_width, camera_matrix, ...; "
            "or a Kalibr camchain: cam0, cam1, ...)"
        )
    return data


def _ros_camera(path: Path, data: dict, limits: dict) -> CameraModel:
    """A ROS camera_info / OpenCV YAML's camera."""

    def matrix(key: str, sizes: tuple[int, ...], default=None) -> np.ndarray:
        table = data.get(key, default)
        values = table.get("data") if isinstance(table, dict) else None
        array = finite_vector(values, len(values)) if isinstance(values, list) and values else None
        if array is None or array.size not in sizes:
            wanted = " or ".join(str(n) for n in sizes)
            raise ConfigError(f"{path}: {key}.data must be {wanted} finite numbers, got {clipped(repr(values))}")
        return array

    for key in ("image_width", "image_height"):
        if not is_whole(data.get(key), 1, MAX_IMAGE_SIDE):  # as a run file's width and height
            raise ConfigError(
                f"{path}: {key} must be a whole number of pixels from 1 to {MAX_IMAGE_SIDE}, "
                f"got {clipped(repr(data.get(key)))}"
            )
    K = matrix("camera_matrix", (9,)).reshape(3, 3)
    if K[0, 1] != 0.0 or np.any(K[2] != (0.0, 0.0, 1.0)) or K[1, 0] != 0.0:
        raise ConfigError(f"{path}: camera_matrix must be [fx, 0, cx, 0, fy, cy, 0, 0, 1] (no skew), got {K.ravel()}")
    model_name = data.get("distortion_model", "plumb_bob")
    if not isinstance(model_name, str):
        raise ConfigError(
            f"{path}: distortion_model must be a name (plumb_bob, equidistant, ...), got {clipped(repr(model_name))}"
        )
    lens = _LENS_OF_ROS.get(model_name)
    wanted = len(LENSES[lens]) if lens is not None else 0
    empty = isinstance(data.get("distortion_coefficients"), dict) and data["distortion_coefficients"].get("data") == []
    default = {"data": [0.0] * max(wanted, 1)}
    distortion = np.zeros(wanted) if empty else matrix("distortion_coefficients", (2, 4, 5, 8), default)
    if model_name == "rational_polynomial" and distortion.size == 8 and not np.any(distortion[5:]):
        distortion = distortion[:5]  # k4..k6 of 0: the plumb_bob lens
    if lens == "pinhole" and distortion.size == 4:
        distortion = np.concatenate([distortion, [0.0]])  # k1 k2 p1 p2, k3 = 0
    if lens is None or distortion.size != wanted:
        supported = ", ".join(f"{name} ({len(LENSES[lens_])})" for lens_, name in ROS_DISTORTION_MODELS.items())
        raise ConfigError(
            f"{path}: distortion_model {clipped(repr(model_name))} with {distortion.size} coefficients is not "
            f"supported; use one of {supported}"
        )
    fx, fy, cx, cy = (float(v) for v in (K[0, 0], K[1, 1], K[0, 2], K[1, 2]))
    try:
        return CameraModel(
            data["image_width"], data["image_height"], fx, fy, cx, cy, tuple(distortion), lens=lens, **limits
        )
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _kalibr_camera(path: Path, name: str, data, limits: dict) -> tuple[CameraModel, np.ndarray | None]:
    """One camera of a Kalibr camchain, and its T_cam_imu (None when the file has none)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: {name} must be a table (camera_model, intrinsics, distortion_model, ...)")
    projection = data.get("camera_model", "pinhole")
    distortion_model = data.get("distortion_model", "none")
    for key, value in (("camera_model", projection), ("distortion_model", distortion_model)):
        if not isinstance(value, str):
            raise ConfigError(f"{path}: {name}.{key} must be a name, got {clipped(repr(value))}")
    if projection not in _KALIBR_PROJECTIONS:
        raise ConfigError(
            f"{path}: {name}.camera_model {clipped(repr(projection))} is not supported; "
            f"use one of {', '.join(_KALIBR_PROJECTIONS)}"
        )
    supported = {"pinhole": ("radtan", "equidistant", "equi", "none"), "omni": ("radtan", "none")}
    if distortion_model not in supported.get(projection, ("none",)):
        allowed = ", ".join(supported.get(projection, ("none",)))
        raise ConfigError(
            f"{path}: {name}.distortion_model {clipped(repr(distortion_model))} is not supported with camera_model "
            f"{clipped(repr(projection))}; use {allowed}"
        )
    extra = _KALIBR_PROJECTIONS[projection]
    intrinsics = finite_vector(data.get("intrinsics"), 4 + extra)
    if intrinsics is None:
        raise ConfigError(f"{path}: {name}.intrinsics must be {4 + extra} finite numbers for a {projection} camera")
    count = _KALIBR_DISTORTIONS[distortion_model]
    coefficients = finite_vector(data.get("distortion_coeffs", []), count) if count else np.zeros(0)
    if coefficients is None:
        got = data.get("distortion_coeffs")
        raise ConfigError(f"{path}: {name}.distortion_coeffs must be {count} finite numbers, got {clipped(repr(got))}")
    resolution = data.get("resolution")
    if not (
        isinstance(resolution, list)
        and len(resolution) == 2
        and all(is_whole(v, 1, MAX_IMAGE_SIDE) for v in resolution)
    ):
        raise ConfigError(
            f"{path}: {name}.resolution must be [width, height] in pixels, got {clipped(repr(resolution))}"
        )
    fx, fy, cx, cy = (float(v) for v in intrinsics[extra:])
    if projection == "pinhole":
        lens = "fisheye" if distortion_model in ("equidistant", "equi") else "pinhole"
        k = tuple(coefficients) if lens == "fisheye" else (*coefficients, 0.0) if count else (0.0,) * 5
    elif projection == "omni":
        lens, k = "unified", (float(intrinsics[0]), *(coefficients if count else (0.0,) * 4))
    else:
        lens, k = ("double-sphere" if projection == "ds" else "eucm"), tuple(intrinsics[:2])
    try:
        model = CameraModel(int(resolution[0]), int(resolution[1]), fx, fy, cx, cy, k, lens=lens, **limits)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {name}: {exc}") from exc
    return model, _transform(path, f"{name}.T_cam_imu", data.get("T_cam_imu"))


def _transform(path: Path, key: str, value) -> np.ndarray | None:
    """A 4x4 rigid transform from a list of four rows, None when absent."""
    if value is None:
        return None
    rows = finite_vector(np.asarray(value, dtype=object).ravel().tolist(), 16) if isinstance(value, list) else None
    if rows is None:
        raise ConfigError(f"{path}: {key} must be a 4x4 matrix (four rows of four numbers)")
    T = rows.reshape(4, 4)
    R = T[:3, :3]
    if not (np.allclose(R.T @ R, np.eye(3), atol=1e-4) and np.linalg.det(R) > 0 and np.allclose(T[3], (0, 0, 0, 1))):
        raise ConfigError(f"{path}: {key} must be a rigid transform (a rotation, a translation, last row 0 0 0 1)")
    return T


def _inverse(T: np.ndarray | None) -> np.ndarray | None:
    if T is None:
        return None
    inverse = np.eye(4)
    inverse[:3, :3] = T[:3, :3].T
    inverse[:3, 3] = -T[:3, :3].T @ T[:3, 3]
    return inverse


def write_calibration(folder: Path, camera: CameraModel, name: str, prefix: str = "", baseline: float = 0.0) -> Path:
    """Write ``<prefix>camera.yaml``: the ROS camera_info YAML of ``camera`` (``load_calibration`` reads
    it back), its lens named as ``ROS_DISTORTION_MODELS`` says. ``baseline`` (m) makes it a stereo
    pair's right camera: its projection matrix carries Tx = -fx * baseline, as ROS's stereo convention
    has it."""
    import yaml

    fx, fy, cx, cy = (float(v) for v in (camera.fx, camera.fy, camera.cx, camera.cy))
    coefficients = [float(c) for c in camera.distortion]
    calibration = {
        "image_width": camera.width,
        "image_height": camera.height,
        "camera_name": name,
        "camera_matrix": {"rows": 3, "cols": 3, "data": [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]},
        "distortion_model": ROS_DISTORTION_MODELS[camera.lens],
        "distortion_coefficients": {"rows": 1, "cols": len(coefficients), "data": coefficients},
        "rectification_matrix": {"rows": 3, "cols": 3, "data": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]},
        "projection_matrix": {
            "rows": 3,
            "cols": 4,
            "data": [fx, 0.0, cx, -fx * baseline, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0],
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{prefix}camera.yaml"
    path.write_text(yaml.safe_dump(calibration, sort_keys=False, default_flow_style=None))
    return path
