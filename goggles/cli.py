"""The ``goggles`` command: argparse subcommands, parsed in ``main()``; heavy imports stay inside them."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from goggles.errors import GogglesError

log = logging.getLogger("goggles")


def _floats(count: int, what: str):
    """argparse type: ``count`` comma-separated finite numbers."""

    def parse(text: str) -> tuple[float, ...]:
        import math

        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            values = ()
        if len(values) != count or not all(math.isfinite(v) for v in values):
            raise argparse.ArgumentTypeError(f"{what} must be {count} comma-separated finite numbers, got {text!r}")
        return values

    return parse


def _add_camera_args(parser: argparse.ArgumentParser, width: int, height: int) -> None:
    parser.add_argument("--scene", type=Path, default=None, help="scene TOML or mesh file (default: the built-in arena)")
    parser.add_argument("--width", type=int, default=width, help="image width, pixels (default %(default)s)")
    parser.add_argument("--height", type=int, default=height, help="image height, pixels (default %(default)s)")
    parser.add_argument("--vfov", type=float, default=60.0, help="vertical field of view, degrees (default %(default)s)")
    parser.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N (default: Warp's default)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per render (default: all cores)")


def _camera(args):
    from goggles.render import CameraModel

    extra = {"min_depth": args.min_depth, "max_depth": args.max_depth, "distortion": args.distortion}
    if args.intrinsics is not None:
        fx, fy, cx, cy = args.intrinsics
        return CameraModel(args.width, args.height, fx, fy, cx, cy, **extra)
    return CameraModel.from_fov(args.width, args.height, args.vfov, **extra)


def cmd_render(args) -> int:
    import numpy as np

    from goggles.frames import camera_pose_from_body, parse_pose
    from goggles.paths import default_scene
    from goggles.render import DeviceScene, Renderer, Shading, stereo_right_offset
    from goggles.render.files import write_camera
    from goggles.scene import load_static_scene

    camera = _camera(args)
    scene = load_static_scene(args.scene or default_scene())
    if args.pose is not None:
        T_WB = parse_pose(args.pose)
    else:
        T_WB = scene.view if scene.view is not None else np.eye(4)
    T_WC = [camera_pose_from_body(T_WB)]
    partner = [-1]
    if args.baseline is not None:
        T_WC.append(T_WC[0] @ stereo_right_offset(args.baseline))
        partner = [1, -1]
    renderer = Renderer(
        DeviceScene(scene, args.device), [camera] * len(T_WC), shadow_partner=partner,
        threads=args.threads, shading=Shading[args.shading.upper()],
    )
    renderer.render(np.stack(T_WC))
    images = renderer.images()
    renderer.close()
    for i, prefix in enumerate(["", "right_"][: len(T_WC)]):
        write_camera(args.out, images, i, prefix)
        depth = images.depth[i]
        valid = np.isfinite(depth)
        near_far = f"{depth[valid].min():.2f}..{depth[valid].max():.2f} m" if valid.any() else "none"
        print(
            f"{prefix or 'left_'}camera: {args.width}x{args.height}, {valid.mean() * 100:.1f}% valid depth "
            f"({near_far}), {np.isnan(depth).mean() * 100:.1f}% stereo shadow -> {args.out}/{prefix}*"
        )
    return 0


def cmd_bench_render(args) -> int:
    from goggles.bench import bench_render
    from goggles.paths import default_scene

    result = bench_render(
        args.scene or default_scene(), width=args.width, height=args.height, vfov_deg=args.vfov,
        views=args.views, threads=args.threads, device=args.device, seconds=args.seconds,
    )
    print(
        f"scene: {result.triangles} triangles, {result.views} views of {result.width}x{result.height}, "
        f"device {result.device}, {result.threads} threads"
    )
    print(f"goggles (Warp, full render): {result.rays_per_s / 1e6:.2f} Mrays/s")
    print(f"Embree (closest hit only):   {result.embree_rays_per_s / 1e6:.2f} Mrays/s")
    print(f"rays_per_s={result.rays_per_s:.0f} embree_rays_per_s={result.embree_rays_per_s:.0f} ratio={result.ratio:.3f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="goggles",
        description="Vehicle-in-the-loop mixed-reality renderer for aerial robots.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and Warp messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = commands.add_parser(
        "render",
        help="render one frame (mono or stereo) and write its images to a folder",
        description="Render depth, range, intensity, segmentation and normals from one pose. "
        "Files: depth.npy, range.npy (float32 metres, REP 118 invalid values), intensity.png, "
        "segmentation.npy, normals.npy (world frame), face.npy, depth.png (preview); with --baseline "
        "the same files prefixed right_ for the right camera.",
    )
    _add_camera_args(render, 640, 480)
    render.add_argument(
        "--pose", default=None,
        help="body pose x,y,z,qw,qx,qy,qz in the world (FLU: identity looks along +x, z up); "
        "default: the scene's view, else identity; write --pose=-1,... when x is negative",
    )
    render.add_argument("--intrinsics", type=_floats(4, "--intrinsics"), default=None,
                        help="fx,fy,cx,cy in pixels (overrides --vfov)")
    render.add_argument("--distortion", type=_floats(5, "--distortion"), default=(0.0,) * 5,
                        help="OpenCV k1,k2,p1,p2,k3 (default none)")
    render.add_argument("--min-depth", type=float, default=0.0, help="closest valid depth, m (default %(default)s)")
    render.add_argument("--max-depth", type=float, default=1000.0, help="farthest depth traced, m (default %(default)s)")
    render.add_argument("--baseline", type=float, default=None,
                        help="stereo baseline, m: adds a right camera at -B along body y")
    render.add_argument("--shading", choices=["sun", "unlit"], default="sun", help="intensity lighting")
    render.add_argument("--out", type=Path, required=True, help="folder to write the images to")
    render.set_defaults(run=cmd_render)

    bench = commands.add_parser("bench", help="benchmarks against a peer measured in the same run")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    bench_render = benches.add_parser(
        "render",
        help="primary rays per second of goggles vs Embree on the same scene, rays and threads",
        description="Render the same views with goggles and trace the same rays with Embree (embreex) on "
        "the same number of threads; the last line is 'rays_per_s=<goggles> embree_rays_per_s=<embree> "
        "ratio=<goggles/embree>'.",
    )
    _add_camera_args(bench_render, 640, 480)
    bench_render.add_argument("--views", type=int, default=8, help="views around the scene's viewpoint")
    bench_render.add_argument("--seconds", type=float, default=2.0, help="minimum timing per side, s")
    bench_render.set_defaults(run=cmd_bench_render)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    import warp as wp

    wp.config.log_level = wp.LOG_INFO if args.verbose else wp.LOG_ERROR
    try:
        return args.run(args)
    except GogglesError as exc:
        print(f"goggles: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
