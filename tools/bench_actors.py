"""What moving actors cost the embree backend, against the alternative embreex would allow.

Renders a 320x240 stereo depth pair at the default view with no actors, a 100k-triangle person-sized
actor 2 m ahead, 30 crates in view (per-tile lists), and 30 crates behind the camera (culled: listing them),
and times rebuilding an Embree scene of the person per frame (embreex has no instances and no
geometry updates, so a deforming actor in Embree would need that). Prints one line per case.

    python tools/bench_actors.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import trimesh
import warp as wp

from goggles.frames import camera_pose_from_body, transform
from goggles.paths import default_scene
from goggles.render import CameraModel, RenderSettings, Shading, stereo_right_offset
from goggles.rig import parts
from goggles.scene import ActorShape, box_shape, load_static_scene, part_from_trimesh
from goggles.world import DeviceScene


def main() -> None:
    from embreex import rtcore_scene
    from embreex.mesh_construction import TriangleMesh

    wp.config.quiet = True
    body = trimesh.creation.capsule(height=1.2, radius=0.3, count=[224, 224])
    person = ActorShape("person", [part_from_trimesh(body, "body")], 9)
    crate = box_shape("crate", [0.5, 0.5, 0.5], segmentation=7)
    world = DeviceScene(load_static_scene(default_scene()), "cpu", shapes=[person, crate], max_actors=64)
    camera = CameraModel.from_fov(320, 240, 60.0, max_depth=50.0)
    left = camera_pose_from_body(transform([-4.0, 0.0, 1.5], [1, 0, 0, 0]))
    poses = np.stack([left, left @ stereo_right_offset(0.32)])
    renderer = parts.renderer(
        world,
        [camera, camera],
        RenderSettings(backend="embree", outputs={"depth"}, shading=Shading.NONE),
        shadow_partner=[1, -1],
    )

    def render_ms() -> float:
        renderer.render(poses)
        times = []
        for _ in range(40):
            start = time.perf_counter()
            renderer.render(poses)
            times.append(time.perf_counter() - start)
        return float(np.median(times) * 1e3)

    rng = np.random.default_rng(0)
    spots = np.c_[rng.uniform(-2, 8, 30), rng.uniform(-4, 4, 30), rng.uniform(0.3, 2.5, 30)]
    in_view = [transform(p, [1, 0, 0, 0]) for p in spots]
    behind = [transform([-20.0 - i, 0.0, 1.0], [1, 0, 0, 0]) for i in range(30)]
    cases = [
        ("no actors", [], np.zeros((0, 4, 4))),
        (f"a {len(body.faces)}-triangle person 2 m ahead", [0], [transform([-2.0, 0.0, 1.0], [1, 0, 0, 0])]),
        ("30 crates in view", [1] * 30, in_view),
        ("30 crates behind the camera", [1] * 30, behind),
    ]
    base = None
    for label, shapes, T_WA in cases:
        world.set_actors(shapes, T_WA)
        ms = render_ms()
        base = ms if base is None else base
        print(f"{label}: render p50 {ms:.2f} ms (+{ms - base:.2f} ms)")
    renderer.close()

    vertices, faces = body.vertices.astype(np.float32), body.faces.astype(np.int32)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        scene = rtcore_scene.EmbreeScene()
        TriangleMesh(scene, vertices, faces)
        scene.run(np.zeros((1, 3), np.float32), np.float32([[0.0, 0.0, 1.0]]))  # Embree builds on first query
        times.append(time.perf_counter() - start)
    print(f"an Embree scene of the person, rebuilt per frame: {np.median(times) * 1e3:.2f} ms before tracing it")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help, before any work
    main()
