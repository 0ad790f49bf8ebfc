"""Camera calibration files, read and written: ROS ``camera_info`` YAML (camera_calibration's
``ost.yaml``) and OpenCV's ``cv::FileStorage`` YAML, in and out of a ``CameraModel``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from goggles.checks import finite_vector, is_whole
from goggles.errors import ConfigError
from goggles.render.camera import MAX_IMAGE_SIDE, CameraModel


def load_camera_yaml(path: Path, **limits) -> CameraModel:
    """A CameraModel from a camera calibration YAML: ROS's ``camera_info`` files (camera_calibration's
    ``ost.yaml``) or OpenCV's own (``cv::FileStorage``: a ``%YAML:1.0`` header, ``!!opencv-matrix``
    matrices): image_width, image_height, camera_matrix, and distortion_coefficients (plumb_bob k1,
    k2, p1, p2[, k3]; rational_polynomial's eight where k4..k6 are 0, the same lens).

    Raises:
        ConfigError: naming the file and the missing or bad key.
    """
    import yaml

    class CalibrationLoader(yaml.SafeLoader):
        """PyYAML's safe loader, reading OpenCV's matrices as the mappings they are."""

    CalibrationLoader.add_constructor(
        "tag:yaml.org,2002:opencv-matrix", lambda loader, node: loader.construct_mapping(node, deep=True)
    )
    if not path.is_file():
        raise ConfigError(f"{path}: camera calibration file not found")
    text = path.read_bytes().decode(errors="replace")
    text = re.sub(r"\A%YAML:(1\.\d+)", r"%YAML \1", text)  # OpenCV's directive, which PyYAML refuses
    try:
        data = yaml.load(text, Loader=CalibrationLoader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a camera calibration (image_width, image_height, camera_matrix, ...)")

    def matrix(key: str, sizes: tuple[int, ...], default=None) -> np.ndarray:
        table = data.get(key, default)
        values = table.get("data") if isinstance(table, dict) else None
        array = finite_vector(values, len(values)) if isinstance(values, list) and values else None
        if array is None or array.size not in sizes:
            wanted = " or ".join(str(n) for n in sizes)
            raise ConfigError(f"{path}: {key}.data must be {wanted} finite numbers, got {values!r}")
        return array

    for key in ("image_width", "image_height"):
        if not is_whole(data.get(key), 1, MAX_IMAGE_SIDE):  # as a run file's width and height
            raise ConfigError(
                f"{path}: {key} must be a whole number of pixels from 1 to {MAX_IMAGE_SIDE}, got {data.get(key)!r}"
            )
    K = matrix("camera_matrix", (9,)).reshape(3, 3)
    if K[0, 1] != 0.0 or np.any(K[2] != (0.0, 0.0, 1.0)) or K[1, 0] != 0.0:
        raise ConfigError(f"{path}: camera_matrix must be [fx, 0, cx, 0, fy, cy, 0, 0, 1] (no skew), got {K.ravel()}")
    model_name = data.get("distortion_model", "plumb_bob")
    empty = isinstance(data.get("distortion_coefficients"), dict) and data["distortion_coefficients"].get("data") == []
    distortion = np.zeros(5) if empty else matrix("distortion_coefficients", (4, 5, 8), {"data": [0.0] * 5})
    if model_name == "rational_polynomial" and distortion.size == 8 and not np.any(distortion[5:]):
        distortion = distortion[:5]  # k4..k6 of 0: the plumb_bob lens
    if model_name not in ("plumb_bob", "rational_polynomial") or distortion.size not in (4, 5):
        raise ConfigError(
            f"{path}: distortion_model {model_name!r} with {distortion.size} coefficients is not "
            "supported; use plumb_bob with k1, k2, p1, p2[, k3]"
        )
    distortion = np.concatenate([distortion, np.zeros(5 - distortion.size)])
    fx, fy, cx, cy = (float(v) for v in (K[0, 0], K[1, 1], K[0, 2], K[1, 2]))
    try:
        return CameraModel(data["image_width"], data["image_height"], fx, fy, cx, cy, tuple(distortion), **limits)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def write_calibration(folder: Path, camera: CameraModel, name: str, prefix: str = "", baseline: float = 0.0) -> Path:
    """Write ``<prefix>camera.yaml``: the ROS camera_info YAML of ``camera`` (``goggles.rig.runfile.
    ``load_camera_yaml`` reads it back). ``baseline`` (m) makes it a stereo pair's right camera: its
    projection matrix carries Tx = -fx * baseline, as ROS's stereo convention has it."""
    import yaml

    fx, fy, cx, cy = (float(v) for v in (camera.fx, camera.fy, camera.cx, camera.cy))
    calibration = {
        "image_width": camera.width,
        "image_height": camera.height,
        "camera_name": name,
        "camera_matrix": {"rows": 3, "cols": 3, "data": [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]},
        "distortion_model": "plumb_bob",
        "distortion_coefficients": {"rows": 1, "cols": 5, "data": [float(c) for c in camera.distortion]},
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
