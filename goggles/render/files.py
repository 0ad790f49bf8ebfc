"""Write one camera's rendered images to a folder: float arrays as .npy, pictures as .png, and its
calibration as the camera YAML ROS's camera_calibration writes (what stereo and SLAM tools load)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
