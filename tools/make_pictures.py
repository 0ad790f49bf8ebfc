"""Make the pictures of the README and docs from what goggles renders (run from the repository root):

    python tools/make_pictures.py [--out docs/img] [--only demo]

``demo``: the demo run (assets/run-demo.toml) a few seconds into its flight: the left and right colour
images and the left depth as its D435 model measures it, and the preview page's third-person view of
the quad. Deterministic on one machine: the flight is the engine's, in sim time.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _label(picture: np.ndarray, text: str) -> np.ndarray:
    """``picture`` (BGR) with ``text`` in its top-left corner."""
    out = np.ascontiguousarray(picture)
    (width, height), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
    out[4 : 12 + height, 4 : 12 + width] //= 3  # a dark box under the words
    cv2.putText(out, text, (8, 8 + height), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
    return out


def demo(out: Path, seconds: float = 7.0) -> Path:
    """The demo's stereo colour, its depth and the third-person view, as one 2 x 2 picture."""
    from goggles.engine import Engine
    from goggles.paths import default_run, default_scene
    from goggles.preview.server import FrameSource
    from goggles.render.files import depth_preview
    from goggles.rig.runfile import load_run_config
    from goggles.scene import load_static_scene

    config = load_run_config(default_run())
    config = dataclasses.replace(config, zmq=None, lcm_url=None, scale=1000.0)
    engine = Engine(config, device="cpu")
    try:
        engine.run(duration=seconds)
        group = engine.rig.groups[0]
        poses = np.stack([engine.camera_pose(c) for c in group.cameras])
        images, _, _ = group.render(poses, key=engine.utime())
        T_WB = engine.rig.vehicles["quad0"].pose()
    finally:
        engine.close()
    behind = T_WB[:3, 3] - 1.8 * T_WB[:3, 0] + [0.0, 0.0, 0.8]  # over the quad's shoulder, as a chase camera
    scene = load_static_scene(default_scene())
    source = FrameSource(None, "quad0", "stereo", scene=scene, viewpoint=behind, third_size=(320, 240))
    third = source.third_person(T_WB).rgb[0]
    left, right = images["rgb"][0][:, :, ::-1], images["rgb"][1][:, :, ::-1]
    top = np.hstack([_label(left, "left colour"), _label(right, "right colour")])
    bottom = np.hstack(
        [_label(depth_preview(images["depth"][0]), "left depth (D435 model)"), _label(third[:, :, ::-1], "preview")]
    )
    path = out / "demo.png"
    cv2.imwrite(str(path), np.vstack([top, bottom]))
    return path


PICTURES = {"demo": demo}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--only", choices=sorted(PICTURES), action="append", default=None)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or sorted(PICTURES):
        print(f"{name}: {PICTURES[name](args.out)}")


if __name__ == "__main__":
    main()
