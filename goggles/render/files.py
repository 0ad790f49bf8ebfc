"""Write one camera's rendered images to a folder: float arrays as .npy, pictures as .png, and its
calibration as the camera YAML ROS's camera_calibration writes (what stereo and SLAM tools load)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from goggles.render.camera import CameraModel
from goggles.render.renderer import Images


def depth_preview(depth: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 BGR false-colour picture of a depth image, by inverse depth (as a disparity
    image looks): near warm, far cool, invalid black."""
    import cv2

    valid = np.isfinite(depth) & (depth > 0)
    picture = np.zeros((*depth.shape, 3), np.uint8)
    if valid.any():
        inverse = np.zeros(depth.shape)
        inverse[valid] = 1.0 / depth[valid]
        low, high = np.percentile(inverse[valid], [1, 99])
        scaled = np.clip((inverse - low) / max(high - low, 1e-9), 0.0, 1.0)
        coloured = cv2.applyColorMap((255 * scaled).astype(np.uint8), cv2.COLORMAP_TURBO)
        picture[valid] = coloured[valid]
    return picture


#: Every file ``goggles render`` writes: each camera's (left, then ``right_``), and the sensors' lists.
RENDER_FILES = tuple(
    f"{prefix}{name}"
    for prefix in ("", "right_")
    for name in (
        *(f"{array}.npy" for array in ("depth", "range", "segmentation", "normals", "face")),
        "intensity.png",
        "depth.png",
        "camera.yaml",
    )
) + ("beacons.json", "tof.json")


def remove_earlier_render(folder: Path, written) -> list[Path]:
    """Remove the files an earlier render left in ``folder`` that this one (``written``) did not write
    anew (a stereo pair's ``right_*`` under a mono render): a folder holds one render. Only
    ``RENDER_FILES`` are touched. Returns what was removed."""
    kept = {Path(p).name for p in written}
    removed = [folder / name for name in RENDER_FILES if name not in kept and (folder / name).is_file()]
    for path in removed:
        path.unlink()
    return removed


def write_camera(folder: Path, images: Images, camera: int, prefix: str = "") -> list[Path]:
    """Write camera ``camera`` of ``images`` as ``<prefix>depth.npy``, ``range.npy``, ``intensity.png``,
    ``segmentation.npy``, ``normals.npy``, ``face.npy`` and a ``depth.png`` preview. Returns the paths."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "depth": images.depth[camera].astype(np.float32),
        "range": images.range[camera].astype(np.float32),
        "segmentation": images.segmentation[camera],
        "normals": images.normal_W[camera].astype(np.float32),
        "face": images.face[camera],
    }
    written = []
    for name, array in arrays.items():
        path = folder / f"{prefix}{name}.npy"
        np.save(path, array)
        written.append(path)
    for name, picture in {
        "intensity": images.rgb[camera][:, :, ::-1],
        "depth": depth_preview(images.depth[camera]),
    }.items():
        path = folder / f"{prefix}{name}.png"
        if not cv2.imwrite(str(path), picture):
            raise OSError(f"cannot write {path}")
        written.append(path)
    return written


def write_calibration(folder: Path, camera: CameraModel, name: str, prefix: str = "", baseline: float = 0.0) -> Path:
    """Write ``<prefix>camera.yaml``: the ROS camera_info YAML of ``camera`` (``goggles.rig.runfile.
    load_camera_yaml`` reads it back). ``baseline`` (m) makes it a stereo pair's right camera: its
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
