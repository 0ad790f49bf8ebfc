"""Make the pictures of the README and docs from what goggles renders (run from the repository root):

    python tools/make_pictures.py [--out docs/img] [--only demo]

``demo``: the demo run (assets/run-demo.toml) a few seconds into its flight: the left and right colour
images and the left depth as its D435 model measures it, and the preview page's third-person view of
the quad. ``wide``: the same flight through assets/run-wide.toml's cameras: the T265-like fisheye's
left colour and depth (range along each ray), and the event camera's events of the last 20 ms (ON
white, OFF blue). ``splats``: the demo's captured houseplant (a Gaussian splat) close up in the arena,
its colour and depth among the meshes, and the PLAYBOT capture where ../shared holds it. ``looks``: one
view of the arena under eight looks drawn from assets/randomization-looks.toml. Deterministic on one
machine: the flight is the engine's, in sim time.
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
        poses = np.stack([engine.sensors.camera_pose(c) for c in group.cameras])
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


def wide(out: Path, seconds: float = 4.0, window_s: float = 0.02) -> Path:
    """The fisheye pair's left colour and depth and the event camera's last events, side by side."""
    from goggles.engine import Engine
    from goggles.paths import assets_dir
    from goggles.render.files import depth_preview
    from goggles.rig.runfile import load_run_config
    from goggles.transport.schema import EVENT_DTYPE, decode_any

    config = load_run_config(assets_dir() / "run-wide.toml")
    config = dataclasses.replace(config, zmq=None, lcm_url=None, scale=1000.0)

    class Events:
        """The events of the run's last ``window_s``."""

        packets: list = []

        def write(self, channel: str, data, log_time_ns: int) -> None:
            if channel.endswith("/events"):
                packet = decode_any(data)
                Events.packets = [p for p in Events.packets if p.end_utime > packet.end_utime - window_s * 1e6]
                Events.packets.append(packet)

    engine = Engine(config, device="cpu", sinks=[Events()])
    try:
        engine.run(duration=seconds)
        group = next(g for g in engine.rig.groups if g.events is None)
        poses = np.stack([engine.sensors.camera_pose(c) for c in group.cameras])
        images, _, _ = group.render(poses, key=engine.utime())
    finally:
        engine.close()
    height = 300
    colour = cv2.resize(images["rgb"][0][:, :, ::-1], None, fx=height / 800, fy=height / 800)
    depth = cv2.resize(depth_preview(images["depth"][0]), None, fx=height / 800, fy=height / 800)
    first = Events.packets[0]
    frame = np.full((first.height, first.width, 3), 60, np.uint8)
    for packet in Events.packets:
        events = np.frombuffer(packet.data, EVENT_DTYPE)
        on = events["polarity"] > 0
        frame[events["y"][on], events["x"][on]] = (255, 255, 255)
        frame[events["y"][~on], events["x"][~on]] = (255, 140, 40)  # BGR: blue
    scale = height / first.height
    frame = cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
    path = out / "wide.png"
    pictures = [
        _label(colour, "fisheye colour (163 deg)"),
        _label(depth, "fisheye depth (range)"),
        _label(frame, f"events, last {window_s * 1000:.0f} ms"),
    ]
    cv2.imwrite(str(path), np.hstack(pictures))
    return path


def splats(out: Path) -> Path:
    """The houseplant among the arena's meshes (colour and depth), and the robot capture alone."""
    from goggles.bench.measure import SPLAT_CAPTURES, splat_capture
    from goggles.frames import camera_pose_from_body, quat_from_euler, transform
    from goggles.paths import default_run, default_scene
    from goggles.render import CameraModel, RenderSettings
    from goggles.render.files import depth_preview
    from goggles.rig import parts
    from goggles.rig.runfile import load_run_config
    from goggles.scene import load_static_scene
    from goggles.scene.batch import batch_scene, place_splats
    from goggles.scene.scene_file import AssetSpec, SceneSpec
    from goggles.world import DeviceScene

    camera = CameraModel.from_fov(320, 240, 60.0)
    demo = load_run_config(default_run())  # the demo's houseplant in the arena
    arena = DeviceScene(place_splats(load_static_scene(default_scene()), demo.splats, demo.source), "cpu")
    T_WC = camera_pose_from_body(transform([7.3, 2.0, 1.1], quat_from_euler(0.0, 0.35, 0.2)))
    renderer = parts.renderer(arena, [camera], RenderSettings(outputs={"rgb", "depth"}))
    renderer.render(T_WC[None])
    images = renderer.images()
    renderer.close()
    pictures = [
        _label(images.rgb[0][:, :, ::-1], "captured houseplant in the arena"),
        _label(depth_preview(images.depth[0]), "its depth (opacity 0.5)"),
    ]
    _, files, up = SPLAT_CAPTURES[1]
    robot = splat_capture(files)
    if robot is not None:
        scene = batch_scene(
            SceneSpec("robot", robot, (), splats=(AssetSpec("robot", robot, "m", up, np.eye(4), 1.0, 1),))
        )
        world = DeviceScene(scene, "cpu")
        low, high = world.splats.bounds
        centre = (low + high) / 2.0
        eye = centre + np.array([-2.2, -0.6, 0.5])
        look = centre - eye
        yaw, pitch = np.arctan2(look[1], look[0]), -np.arctan2(look[2], np.hypot(look[0], look[1]))
        T_WC = camera_pose_from_body(transform(eye, quat_from_euler(0.0, pitch, yaw)))
        renderer = parts.renderer(world, [camera], RenderSettings(outputs={"rgb"}, background_rgb=(0.08, 0.08, 0.1)))
        renderer.render(T_WC[None])
        pictures.append(_label(renderer.images().rgb[0][:, :, ::-1], "PLAYBOT (SH degree 2)"))
        renderer.close()
    path = out / "splats.png"
    cv2.imwrite(str(path), np.hstack(pictures))
    return path


def looks(out: Path) -> Path:
    """One view of the arena (the mug, pillars, cones) under eight looks drawn from assets/randomization-looks.toml
    (seed 0, environments 0 to 7): one renderer, a look per camera, the scene uploaded once."""
    from goggles.frames import camera_pose_from_body, quat_from_euler, transform
    from goggles.paths import assets_dir, default_run, default_scene
    from goggles.render import CameraModel, RenderSettings
    from goggles.render.looks import LooksSpec, sun_angles
    from goggles.rig import parts
    from goggles.rig.runfile import load_run_config
    from goggles.scene import load_static_scene
    from goggles.scene.batch import place_splats
    from goggles.world import DeviceScene

    camera = CameraModel.from_fov(240, 180, 70.0)
    demo = load_run_config(default_run())
    arena = DeviceScene(place_splats(load_static_scene(default_scene()), demo.splats, demo.source), "cpu")
    T_WC = camera_pose_from_body(transform([5.6, 0.6, 1.6], quat_from_euler(0.0, 0.3, 0.35)))
    renderer = parts.renderer(arena, [camera] * 8, RenderSettings(outputs={"rgb"}, looks=True))
    spec = LooksSpec.load(assets_dir() / "randomization-looks.toml")
    drawn = [spec.draw(0, k, 0, renderer.look_materials, renderer.settings.sun_W) for k in range(8)]
    renderer.set_looks(drawn, spec.textures)
    renderer.render(np.repeat(T_WC[None], 8, axis=0))
    rgb = renderer.images().rgb
    renderer.close()
    tiles = []
    for k, look in enumerate(drawn):
        elevation, bearing = sun_angles(look.sun_W)
        tiles.append(_label(rgb[k][:, :, ::-1], f"env {k}: sun {elevation:.0f} deg, from {bearing:.0f}"))
    path = out / "looks.png"
    cv2.imwrite(str(path), np.vstack([np.hstack(tiles[:4]), np.hstack(tiles[4:])]))
    return path


PICTURES = {"demo": demo, "wide": wide, "splats": splats, "looks": looks}


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
