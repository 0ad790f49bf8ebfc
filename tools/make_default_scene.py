"""Build the default scene in assets/: a flight arena on a real Mars terrain scan.

Copies the real scans it uses from ../shared/assets-real (with their licences and attributions) and
generates the arena's own props: a textured landing pad (OBJ+MTL+PNG), striped pillars and crates
(PLY with vertex colours), and a safety-net wall (STL). Run from the repository root:

    python tools/make_default_scene.py [--shared ../shared]

The output is committed; this script documents how it was made and re-makes it deterministically.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import cv2
import numpy as np
import trimesh

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"

#: Where the arena sits on the terrain: a plateau flat to 6 cm (std) over 30 m x 30 m, found by
#: casting a 2 m grid of vertical rays into the scan (ENU after +Y-up conversion, metres).
TERRAIN_ARENA_CENTRE = (92.0, -70.0, 54.22)

#: Segmentation classes of the default scene.
CLASSES = {"terrain": 1, "pad": 2, "pillar": 3, "crate": 4, "net": 5, "mug": 6}


def copy_real_scans(shared: Path) -> None:
    """Copy the Mars terrain and the YCB mug, with their licences and attributions."""
    for name, files in {
        "mars-dingo-gap-terrain": ["dingo_gap_leaves.glb", "ATTRIBUTION.md", "LICENSE"],
        "ycb-025-mug": [
            "textured.obj",
            "textured.mtl",
            "MI_025_mug_MI_025_mug_D.png",
            "ATTRIBUTION.md",
            "LICENSE",
            "YCB-LICENSE-NOTICE.txt",
        ],
    }.items():
        target = ASSETS / name
        target.mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copyfile(shared / "assets-real" / name / file, target / file)


def striped_pillar(radius: float, height: float, band: float) -> trimesh.Trimesh:
    """A cylinder from z = 0 to ``height`` in alternating orange and white bands (vertex colours)."""
    segments = []
    for i in range(int(round(height / band))):
        segment = trimesh.creation.cylinder(radius=radius, height=band, sections=32)
        segment.apply_translation([0.0, 0.0, band * (i + 0.5)])
        colour = [235, 110, 20, 255] if i % 2 == 0 else [240, 240, 240, 255]
        segment.visual.vertex_colors = np.tile(colour, (len(segment.vertices), 1))
        segments.append(segment)
    return trimesh.util.concatenate(segments)


def crate(size: float) -> trimesh.Trimesh:
    """A box from z = 0 to ``size`` with a shaded wooden colour per vertex."""
    box = trimesh.creation.box(extents=[size] * 3)
    box.apply_translation([0.0, 0.0, size / 2.0])
    rng = np.random.default_rng(7)
    base = np.array([150, 105, 60])
    colours = np.clip(base + rng.integers(-25, 25, (len(box.vertices), 1)), 0, 255)
    box.visual.vertex_colors = np.hstack([colours, np.full((len(colours), 1), 255)]).astype(np.uint8)
    return box


def landing_pad_texture(size: int = 512) -> np.ndarray:
    """A helipad: grey square, white ring and a white H (BGR for OpenCV)."""
    image = np.full((size, size, 3), 70, np.uint8)
    c = size // 2
    cv2.circle(image, (c, c), int(size * 0.42), (255, 255, 255), int(size * 0.04), lineType=cv2.LINE_AA)
    w, h = int(size * 0.07), int(size * 0.22)
    cv2.rectangle(image, (c - 3 * w, c - h), (c - 2 * w, c + h), (255, 255, 255), -1)
    cv2.rectangle(image, (c + 2 * w, c - h), (c + 3 * w, c + h), (255, 255, 255), -1)
    cv2.rectangle(image, (c - 2 * w, c - w // 2), (c + 2 * w, c + w // 2), (255, 255, 255), -1)
    image[:, :4] = image[:, -4:] = image[:4] = image[-4:] = (0, 200, 255)
    return image


def write_landing_pad(folder: Path, side: float, thickness: float) -> None:
    """An OBJ slab (top at z = 0) whose top face shows the helipad texture; sides use its border."""
    folder.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(folder / "pad.png"), landing_pad_texture())
    (folder / "pad.mtl").write_text("newmtl pad\nKd 1.0 1.0 1.0\nmap_Kd pad.png\n")
    s, t = side / 2.0, thickness
    v = [(-s, -s, 0), (s, -s, 0), (s, s, 0), (-s, s, 0), (-s, -s, -t), (s, -s, -t), (s, s, -t), (-s, s, -t)]
    lines = ["# goggles landing pad, metres, +Z up", "mtllib pad.mtl", "usemtl pad"]
    lines += [f"v {x:.4f} {y:.4f} {z:.4f}" for x, y, z in v]
    lines += ["vt 0 0", "vt 1 0", "vt 1 1", "vt 0 1", "vt 0.002 0.5"]
    lines += ["f 1/1 2/2 3/3", "f 1/1 3/3 4/4"]  # top, counter-clockwise seen from above
    for a, b in [(1, 2), (2, 3), (3, 4), (4, 1)]:  # sides, all sampling the border colour
        lines += [f"f {a}/5 {a + 4}/5 {b + 4}/5", f"f {a}/5 {b + 4}/5 {b}/5"]
    (folder / "pad.obj").write_text("\n".join(lines) + "\n")


def write_props() -> None:
    folder = ASSETS / "arena"
    write_landing_pad(folder, side=3.0, thickness=0.3)
    striped_pillar(radius=0.2, height=4.5, band=0.5).export(folder / "pillar.ply")
    crate(1.0).export(folder / "crate.ply")
    net = trimesh.creation.box(extents=[0.05, 12.0, 4.0])
    net.apply_translation([0.0, 0.0, 2.0])
    net.export(folder / "net.stl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared", help="the shared/ folder")
    args = parser.parse_args()
    copy_real_scans(args.shared)
    write_props()


if __name__ == "__main__":
    main()
