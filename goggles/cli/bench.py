"""goggles bench render|dynamics|latency|lidar|dataset|envs|splats|peers|firmware: benchmarks against a peer
measured in the same run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from goggles.cli.common import add_backend_arg, add_camera_args, add_recorded_arg, at_least, positive
from goggles.errors import ConfigError
from goggles.paths import default_run

#: ``bench render --backend``'s groups.
BENCH_BACKENDS = {"both": ("warp", "embree"), "all": ("warp", "bvh", "wide", "embree")}


def add_parser(commands) -> None:
    bench = commands.add_parser("bench", help="benchmarks against a peer measured in the same run")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    bench_render = benches.add_parser(
        "render",
        help="primary rays per second of goggles' backends vs bare Embree on the same scene, rays and threads",
        description="Render the same views with each backend (every output; depth only; with shadows; with camera "
        "noise; with both; with motion blur of 4 sub-frames; with a racing gate 4 m ahead of each view, the actors' "
        "path; and an OS1-64 LiDAR scan of the same world, 65,536 rays) and trace the same rays with bare Embree "
        "(closest hits only, embreex) on the same number of threads. "
        "One line per render: 'backend=<b> outputs=<kind> rays_per_s=<r> ratio=<r/embree>' (the realistic ones "
        "and the LiDAR also give cost_vs_ideal, their time over the ideal render's: the median of pairs timed back "
        "to back); the last line is 'embree_rays_per_s=<embree>' (nan where embreex is not installed).",
    )
    add_camera_args(bench_render, 640, 480)
    bench_render.add_argument(
        "--views", type=at_least(1), default=8, help="views around the viewpoint, one batch of cameras"
    )
    bench_render.add_argument("--seconds", type=positive, default=2.0, help="minimum timing per render, s")
    bench_render.add_argument(
        "--terrain",
        type=int,
        default=None,
        metavar="TRIANGLES",
        help="render a generated fractal terrain of about this many triangles instead of --scene",
    )
    bench_render.add_argument(
        "--bvh",
        choices=["sah", "median", "lbvh"],
        default=None,
        help="Warp's BVH builder for the static mesh (default: SAH on CUDA, Warp's default on the CPU)",
    )
    bench_render.add_argument(
        "--pixel-order",
        choices=["auto", "tiles", "rows"],
        default="auto",
        help="which pixels a GPU warp's threads trace together with the warp and bvh backends: 8x4 tiles or 32 "
        "of a row "
        "(default auto: tiles on CUDA, rows on the CPU; tiles on the CPU cost a thread per pixel)",
    )
    bench_render.add_argument(
        "--backend",
        choices=["warp", "bvh", "wide", "embree", "both", "all"],
        default="all",
        help="which goggles backends to time: one, both (warp and embree) or all (default; Embree is left out on CUDA)",
    )
    bench_render.add_argument(
        "--event-seconds",
        type=float,
        default=1.0,
        help="sim seconds of the demo flight an event camera flies (run-wide.toml's): its renders and events "
        "per second (0: skip)",
    )
    bench_render.set_defaults(run=cmd_bench_render)

    bench_dynamics = benches.add_parser(
        "dynamics",
        help="physics steps per second: one vehicle on one core, and a batch",
        description="Time the simulator (the preset's integrator at 960 Hz, controller, noise, IMU) over at "
        "least --seconds of wall time each. The last line is "
        "'vehicles=1 steps_per_s=<n> realtime_factor=<n/960>'; the line before it gives the same for the batch.",
    )
    bench_dynamics.add_argument("--preset", default="fg-quad", help="airframe preset (default %(default)s)")
    bench_dynamics.add_argument("--batch", type=at_least(1), default=1024, help="vehicles in the batch run")
    bench_dynamics.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    bench_dynamics.add_argument("--seconds", type=positive, default=1.0, help="minimum timing per run, s")
    bench_dynamics.set_defaults(run=cmd_bench_dynamics)
    bench_latency = benches.add_parser(
        "latency",
        help="pose sent -> stereo depth received, over ZeroMQ on loopback (or ROS 2 over DDS)",
        description="Start 'goggles run' in live mode in its own process with a stereo depth camera, send poses "
        "over ZeroMQ at the camera rate, and time each pose until both depth images rendered from it arrive "
        "(after one second of poses not timed: the engine's start-up). "
        "The last line is 'p50_ms=<x> p99_ms=<y> width=<W> height=<H>'.",
    )
    bench_latency.add_argument("--width", type=at_least(1), default=320)
    bench_latency.add_argument("--height", type=at_least(1), default=240)
    bench_latency.add_argument("--rate", type=positive, default=30.0, help="camera and pose rate, Hz")
    bench_latency.add_argument(
        "--seconds",
        type=positive,
        default=None,
        help="how long to send timed poses (default 10); with --breakdown, the sim seconds timed after the "
        "first (default 5; 29 for the demo's whole flight)",
    )
    bench_latency.add_argument("--device", default=None, help="Warp device of the engine")
    bench_latency.add_argument(
        "--transport",
        choices=["zmq", "ros2"],
        default="zmq",
        help="zmq: poses and images over ZeroMQ; ros2: PoseStamped in and Image out over DDS, measured next to "
        "ZeroMQ in the same run (the last line is the DDS figure)",
    )
    bench_latency.add_argument(
        "--breakdown",
        nargs="?",
        const="",
        metavar="RUN_FILE",
        default=None,
        help="instead: where a frame's time goes for a run file's cameras (default: the demo's), stage by "
        "stage, wall and CPU per frame (in this process, no buses, the run as fast as it goes for --seconds "
        "of sim time after one of warm-up)",
    )
    add_recorded_arg(bench_latency)
    add_backend_arg(bench_latency)
    bench_latency.set_defaults(run=cmd_bench_latency)
    bench_lidar = benches.add_parser(
        "lidar",
        help="LiDAR scans of the default scene: milliseconds of wall and CPU time per scan",
        description="Scan the default scene with a LiDAR preset from its viewpoint, the sensor turning during each "
        "scan (every point from its own pose, as the engine scans), on --threads CPU threads (default 1, as a "
        "LiDAR scans). The last line is 'model=<m> points=<n> threads=<t> ms_per_scan=<wall> "
        "cpu_ms_per_scan=<process CPU, all threads> embree_ms=<the peer: bare Embree finding the triangles the "
        "same rays hit, one thread, same run>'.",
    )
    bench_lidar.add_argument("--model", default="os1-64", help="preset: vlp16, os1-64, os1-128, os0-128, mid360")
    bench_lidar.add_argument("--scans", type=int, default=50)
    bench_lidar.add_argument("--device", default=None, help="Warp device")
    bench_lidar.add_argument(
        "--threads", type=int, default=1, help="CPU threads per scan (default 1, the LiDAR's own default)"
    )
    add_backend_arg(bench_lidar)
    bench_lidar.set_defaults(run=cmd_bench_lidar)
    bench_dataset = benches.add_parser(
        "dataset",
        help="dataset jobs on a local Ray cluster: frames/s with 1 and 2 workers",
        description="Record a flight of the default run, then render the same jobs (one per seed) on a local Ray "
        "cluster with 1 and with N workers, each warmed up first. The last line is "
        "'workers=<N> frames_per_s=<f> speedup=<f / f(1 worker)>'.",
    )
    bench_dataset.add_argument("--jobs", type=int, default=8, help="jobs per run (default %(default)s)")
    bench_dataset.add_argument("--workers", type=int, default=2, help="the most workers (default %(default)s)")
    bench_dataset.add_argument("--width", type=at_least(1), default=320)
    bench_dataset.add_argument("--height", type=at_least(1), default=240)
    bench_dataset.add_argument("--flight", type=positive, default=2.0, help="seconds of recorded flight per job")
    bench_dataset.set_defaults(run=cmd_bench_dataset)
    bench_envs = benches.add_parser(
        "envs",
        help="batched learning environments against one at a time",
        description="Step N hovering vehicles with a depth camera each (goggles.envs.DroneVectorEnv; depth and "
        "segmentation with --segmentation, colour with --rgb) in the default scene, and one environment alone, "
        "the two taking turns (so that the machine's load falls on both alike). "
        "The last line is 'envs=<N> "
        "steps_per_s=<environment steps/s> frames_per_s=<camera frames/s> device=<d> vs_single=<batched over "
        "single throughput> memory_per_env_kb=<k> memory_growth_kb=<k> recorded=<on|off>'.",
    )
    bench_envs.add_argument("--envs", type=int, default=64, help="environments in the batch")
    bench_envs.add_argument("--width", type=int, default=64)
    bench_envs.add_argument("--height", type=int, default=48)
    bench_envs.add_argument("--steps", type=int, default=200, help="batched steps timed")
    bench_envs.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    bench_envs.add_argument(
        "--segmentation", action="store_true", help="observe segmentation as well as depth (one render)"
    )
    bench_envs.add_argument("--rgb", action="store_true", help="observe colour as well (sunlit, with shadows)")
    bench_envs.add_argument(
        "--randomization",
        metavar="FILE",
        help="draw this randomisation per environment and episode (e.g. assets/randomization.toml: its looks "
        "need --rgb), and time the same batch without it, taking turns; adds 'vs_plain=<with over without>' "
        "to the last line",
    )
    add_backend_arg(bench_envs)
    bench_envs.add_argument(
        "--recorded",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="replay recordings of each step's device work (CUDA graphs on a GPU; default: on CUDA only; "
        "on the CPU the observation is recorded with --backend warp or bvh only)",
    )
    bench_envs.set_defaults(run=cmd_bench_envs)
    bench_peers = benches.add_parser(
        "peers",
        help="goggles beside NVIDIA Newton and MuJoCo Warp: the same mesh, the same cameras, frames/s",
        description="Render the default scene's mesh (or --scene's) as z-depth from the same camera poses, a camera "
        "per world, with goggles' backends, Newton's SensorCamera and MuJoCo Warp's renderer (where installed: "
        "pip install 'goggles[bench]'), one render thread each on the CPU, steady state (builds and compiles "
        "reported apart as build_s), each peer's depth checked against goggles' (agree: the fraction of pixels "
        "within 1 cm). A line per renderer and configuration: 'renderer=<r> worlds=<n> width=<w> height=<h> "
        "frames_per_s=<f> rays_per_s=<r> ratio=<goggles' best over this> agree=<a> build_s=<s>'.",
    )
    bench_peers.add_argument(
        "--worlds", default=None, help="comma-separated world counts (default 64,512 on the CPU; 4096,8192 on CUDA)"
    )
    bench_peers.add_argument("--size", default="64x64", help="WIDTHxHEIGHT of each camera (default 64x64)")
    bench_peers.add_argument("--scene", type=Path, default=None, help="scene file or mesh (default: the arena)")
    bench_peers.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    bench_peers.add_argument("--seconds", type=positive, default=2.0, help="minimum timing per renderer, s")
    bench_peers.set_defaults(run=cmd_bench_peers)
    bench_bvh = benches.add_parser(
        "bvh",
        help="goggles' binary BVH and its 8-wide compressed collapse on the same rays: steps per ray and rays/s",
        description="Trace the camera rays of --views views of the scene (or a --terrain) through goggles' binary "
        "BVH and through the same tree collapsed into 8-wide nodes with byte-quantized boxes (the wide backend). A "
        "counting build of each traversal gives the inner nodes visited and triangles tested per ray; a plain "
        "build, timed in back-to-back pairs, its rays per second (one launch: one thread on the CPU). A line per "
        "layout: 'layout=<l> nodes_per_ray=<n> triangles_per_ray=<t> megabytes=<m> build_s=<s> rays_per_s=<r>' "
        "(the wide one adds ratio=<its rays/s over the binary's>); the last line 'same_faces=<fraction>' compares "
        "their closest hits ray by ray.",
    )
    bench_bvh.add_argument("--scene", type=Path, default=None, help="scene TOML or mesh (default: the arena)")
    bench_bvh.add_argument("--terrain", type=int, default=None, metavar="TRIANGLES", help="a generated terrain instead")
    bench_bvh.add_argument("--width", type=at_least(1), default=320, help="image width, pixels (default %(default)s)")
    bench_bvh.add_argument("--height", type=at_least(1), default=240, help="image height, pixels (default %(default)s)")
    bench_bvh.add_argument("--vfov", type=positive, default=60.0, help="vertical field of view, degrees")
    bench_bvh.add_argument("--views", type=at_least(1), default=8, help="views around the viewpoint (default 8)")
    bench_bvh.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    bench_bvh.add_argument("--seconds", type=positive, default=2.0, help="minimum timing, s")
    bench_bvh.set_defaults(run=cmd_bench_bvh)
    bench_splats = benches.add_parser(
        "splats",
        help="Gaussian splat captures rendered alone: frames/s and memory per Gaussian",
        description="Render the houseplant (assets/splats) and the PLAYBOT robot (../shared/assets-real/splats, "
        "where it is) alone, from --views cameras around each, at 320x240 and 640x480 (or --size), steady state, "
        "composited as the renderer chooses here (the rasteriser on the CPU) and then traced ray by ray. A line per "
        "capture and size; the last is the houseplant at the first size: 'splats=<name> gaussians=<n> width=<w> "
        "height=<h> frames_per_s=<f> rays_frames_per_s=<r> ratio=<f/r> bytes_per_gaussian=<b> device=<d>'.",
    )
    bench_splats.add_argument(
        "--size", action="append", type=str, default=None, help="WIDTHxHEIGHT (repeatable; default 320x240 and 640x480)"
    )
    bench_splats.add_argument("--views", type=at_least(1), default=8, help="cameras rendered in one batch")
    bench_splats.add_argument("--seconds", type=positive, default=2.0, help="minimum timing per size, s")
    bench_splats.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    bench_splats.set_defaults(run=cmd_bench_splats)
    bench_firmware = benches.add_parser(
        "firmware",
        help="Betaflight's SITL hovering in lockstep, flight after flight: failsafes, worst errors, scale",
        description="Fly --flights hovers in a row, each with fresh firmwares (pip install -e '.[fc]'): goggles' "
        "pilot arms each quad and holds it at 1.5 m in angle mode for --seconds of sim time, no cameras. A line "
        "per flight, then 'flights=<n> failsafes=<f> worst_height_error_m=<h> worst_tilt_deg=<t> "
        "worst_drift_m=<d> scale_p50=<s> armed_after_s_p50=<a> tick_us_p50=<u>', the errors the worst over each "
        "flight's last 10 s (a third of shorter ones), the scale in sim seconds per wall second, the wall time from "
        "start to armed, and a lockstep FC tick's wall time. --load spins processes meanwhile (a loaded machine).",
    )
    bench_firmware.add_argument("--flights", type=at_least(1), default=20, help="flights in a row (default 20)")
    bench_firmware.add_argument("--seconds", type=positive, default=30.0, help="sim seconds a flight (default 30)")
    bench_firmware.add_argument("--vehicles", type=at_least(1), default=1, help="firmwares flying at once (default 1)")
    bench_firmware.add_argument("--load", type=at_least(0), default=0, help="busy processes meanwhile (default 0)")
    bench_firmware.add_argument("--cli", type=Path, default=None, help="a Betaflight CLI diff for every firmware")
    bench_firmware.set_defaults(run=cmd_bench_firmware)


def cmd_bench_peers(args) -> int:
    import warp as wp

    from goggles.bench.peers import bench_peers
    from goggles.paths import default_scene
    from goggles.scene import load_static_scene

    width, _, height = args.size.partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise ConfigError(f"--size {args.size!r}: give WIDTHxHEIGHT in pixels, e.g. 64x64")
    cuda = wp.get_device(args.device).is_cuda
    counts = args.worlds or ("4096,8192" if cuda else "64,512")
    try:
        worlds = [int(n) for n in counts.split(",")]
    except ValueError:
        worlds = []
    if not worlds or min(worlds) < 1:
        raise ConfigError(f"--worlds {counts!r}: give world counts, e.g. 64,512")
    from goggles.runtime.device_memory import check_fits

    # Each world's z-depth image in each renderer (goggles' backends and the peers), with their buffers:
    # 32 bytes a pixel bounds them.
    check_fits(
        wp.get_device(args.device), 32 * max(worlds) * int(width) * int(height), f"--worlds {max(worlds)}",
        "ask for fewer worlds",
    )  # fmt: skip
    scene = load_static_scene(args.scene or default_scene())
    print(f"scene: {scene.num_faces} triangles; z-depth of {args.size} per world, device {wp.get_device(args.device)}")
    for n in worlds:
        runs = bench_peers(
            scene, worlds=n, width=int(width), height=int(height), device=args.device, seconds=args.seconds
        )
        best = max(r.frames_per_s for r in runs if r.renderer.startswith("goggles") and r.frames_per_s)
        for r in runs:
            if r.frames_per_s is None:
                print(f"renderer={r.renderer} worlds={n} skipped: {r.why}")
                continue
            agree = "reference" if r.agree is None else f"{r.agree:.6f}"
            print(
                f"renderer={r.renderer} worlds={n} width={width} height={height} frames_per_s={r.frames_per_s:.1f} "
                f"rays_per_s={r.frames_per_s * int(width) * int(height):.0f} ratio={best / r.frames_per_s:.2f} "
                f"agree={agree} build_s={r.build_s:.2f}" + (f"  ({r.why})" if r.why else ""),
                flush=True,
            )
    return 0


def cmd_bench_splats(args) -> int:
    from goggles.bench.measure import SPLAT_CAPTURES, bench_splats, splat_capture

    sizes = []
    for text in args.size or ["320x240", "640x480"]:
        width, _, height = text.partition("x")
        if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
            raise ConfigError(f"--size {text!r}: give WIDTHxHEIGHT in pixels, e.g. 320x240")
        sizes.append((int(width), int(height)))
    lines = []
    for name, files, up in SPLAT_CAPTURES:
        path = splat_capture(files)
        if path is None:
            print(f"{name}: skipped: not found ({', '.join(files)}, relative to the checkout)")
            continue
        for width, height in sizes:
            r = bench_splats(
                path, up, width=width, height=height, views=args.views, device=args.device, seconds=args.seconds
            )
            line = (
                f"splats={name} gaussians={r.gaussians} width={r.width} height={r.height} "
                f"frames_per_s={r.frames_per_s:.1f} rays_frames_per_s={r.rays_frames_per_s:.1f} "
                f"ratio={r.frames_per_s / r.rays_frames_per_s:.2f} bytes_per_gaussian={r.bytes_per_gaussian:.0f} "
                f"device={r.device}"
            )
            lines.append((name, (width, height), line))
            print(line, flush=True)
    first = next((line for name, size, line in lines if name == "houseplant" and size == sizes[0]), None)
    if first is not None:
        print(first)
    return 0


def _bench_scene(args):
    """The scene a benchmark renders: a generated terrain of --terrain triangles, or --scene's."""
    from goggles.paths import default_scene
    from goggles.scene import load_static_scene

    if args.terrain is not None:
        from goggles.scene.terrain import terrain_scene

        if args.terrain < 2:
            raise ConfigError(f"--terrain {args.terrain}: give a number of triangles, at least 2")
        from goggles.runtime.device_memory import check_fits

        # The mesh and both BVH layouts: about 60 bytes a triangle each tree (1M: 57 and 50 MB), the
        # mesh's arrays and their device copies beside them; 500 a triangle bounds it.
        check_fits(None, 500 * args.terrain, f"--terrain {args.terrain}", "ask for fewer triangles")
        return terrain_scene(args.terrain)
    return load_static_scene(args.scene or default_scene())


def cmd_bench_bvh(args) -> int:
    from goggles.bench.bvh import bench_bvh

    scene = _bench_scene(args)
    result = bench_bvh(
        scene, width=args.width, height=args.height, views=args.views, vfov_deg=args.vfov, device=args.device,
        seconds=args.seconds,
    )  # fmt: skip
    print(
        f"scene: {scene.num_faces} triangles, {args.views} views of {args.width}x{args.height} ({result.rays} rays, "
        f"{result.hit:.0%} hit), device {result.device}, one launch each"
    )
    for figures in result.layouts:
        ratio = f" ratio={result.speedup:.2f}" if figures.layout == "wide" else ""
        print(
            f"layout={figures.layout} nodes_per_ray={figures.nodes_per_ray:.2f} "
            f"triangles_per_ray={figures.triangles_per_ray:.2f} megabytes={figures.megabytes:.1f} "
            f"build_s={figures.build_s:.2f} rays_per_s={figures.rays_per_s:.0f}{ratio}",
            flush=True,
        )
    print(f"same_faces={result.same_faces:.6f}")
    return 0


def cmd_bench_render(args) -> int:
    from goggles.bench.measure import bench_render

    scene = _bench_scene(args)
    result = bench_render(
        scene,
        width=args.width,
        height=args.height,
        vfov_deg=args.vfov,
        views=args.views,
        threads=args.threads,
        device=args.device,
        backends=BENCH_BACKENDS.get(args.backend, (args.backend,)),
        bvh=args.bvh,
        pixel_order=args.pixel_order,
        seconds=args.seconds,
    )
    print(
        f"scene: {result.triangles} triangles, {result.views} views of {result.width}x{result.height}, "
        f"device {result.device}, {result.threads} threads, warp/bvh pixel order {result.pixel_order}"
    )
    for (backend, outputs), rate in result.rays_per_s.items():
        cost = ""
        if (backend, outputs) in result.cost_vs_ideal:
            cost = f" cost_vs_ideal={result.cost_vs_ideal[backend, outputs]:.2f}"
        print(
            f"backend={backend} outputs={outputs} rays_per_s={rate:.0f} ratio={result.ratio(backend, outputs):.3f}"
            + cost
        )
    if result.embree_rays_per_s is None:
        print("no Embree peer: embreex is not installed (pip install embreex); ratios are nan")
    print(f"embree_rays_per_s={result.embree_rays_per_s or float('nan'):.0f}")
    if args.event_seconds > 0:
        from goggles.bench.measure import bench_events
        from goggles.paths import assets_dir

        events = bench_events(assets_dir() / "run-wide.toml", args.event_seconds, device=args.device)
        print(
            f"event camera ({events.width}x{events.height}, run-wide.toml's demo flight, "
            f"{events.sim_seconds:g} sim s): "
            f"renders_per_sim_s={events.renders_per_sim_s:.0f} events_per_sim_s={events.events_per_sim_s:.0f} "
            f"events_per_wall_s={events.events_per_wall_s:.0f}"
        )
    return 0


def cmd_bench_dynamics(args) -> int:
    from goggles.bench.measure import bench_dynamics

    batch = bench_dynamics(args.preset, vehicles=args.batch, device=args.device, seconds=args.seconds)
    single = bench_dynamics(args.preset, vehicles=1, device=args.device, seconds=args.seconds, threads=1)
    for result in (batch, single):
        print(
            f"{result.airframe} {result.integrator} on {result.device} ({result.threads} threads): {result.vehicles} "
            f"vehicles x {result.steps_per_s:.0f} steps/s = {result.vehicle_steps_per_s:.3g} vehicle-steps/s"
        )
    print(f"vehicles={batch.vehicles} steps_per_s={batch.steps_per_s:.0f} realtime_factor={batch.realtime_factor:.2f}")
    print(f"vehicles=1 steps_per_s={single.steps_per_s:.0f} realtime_factor={single.realtime_factor:.1f}")
    return 0


def cmd_bench_latency(args) -> int:
    from goggles.bench.measure import bench_latency

    if args.breakdown is not None:
        return _print_breakdown(Path(args.breakdown) if args.breakdown else default_run(), args)

    transports = ["zmq", "ros2"] if args.transport == "ros2" else ["zmq"]
    for transport in transports:
        result = bench_latency(
            width=args.width,
            height=args.height,
            rate=args.rate,
            seconds=args.seconds or 10.0,
            device=args.device,
            transport=transport,
            recorded=args.recorded,
            backend=args.backend,
        )
        how = "ZeroMQ on loopback" if transport == "zmq" else "ROS 2 over DDS (Cyclone) on this machine"
        print(
            f"live mode, stereo depth {result.width}x{result.height} at {args.rate:g} Hz over {how}: "
            f"{result.frames} of {result.sent} poses came back as both images (FlightGoggles: ~23 ms)"
        )
        if result.embree_ms is not None:
            print(f"bare Embree tracing the same stereo rays (no depth, no transport): {result.embree_ms:.2f} ms")
        print(f"load average before the run: {result.load_average:.2f} (on {os.cpu_count()} cores)")
        if result.engine_status:
            print(f"the engine's last status: {result.engine_status}")
        print(
            f"transport={transport} p50_ms={result.p50_ms:.2f} p99_ms={result.p99_ms:.2f} "
            f"width={result.width} height={result.height}"
        )
    return 0


def _print_breakdown(run_file: Path, args) -> int:
    from goggles.bench.measure import bench_breakdown

    r = bench_breakdown(run_file, seconds=args.seconds or 5.0, device=args.device)
    print(f"{run_file}: {r.frames} frames of {r.cameras} ({r.threads} render threads), per frame:")
    print(f"  {'stage':44s} {'wall ms':>8s} {'CPU ms':>8s}")
    for stage, wall in r.wall_ms.items():
        print(f"  {stage:44s} {wall:8.2f} {r.cpu_ms.get(stage, float('nan')):8.2f}")
        inside = {
            "meshes": ("rays", "primary hits (Embree)", "shading and shadows", "sun's shadow rays (Embree)"),
            "splats": ("splats: boxes fitted", "splats: projected", "splats: sorted", "splats: composited"),
        }
        for inner in inside.get(stage.split(" ")[0], ()):
            if inner in r.cpu_ms:
                print(f"    {inner:42s} {'':8s} {r.cpu_ms[inner]:8.2f}")
    rest = r.frame_ms - sum(r.wall_ms.values())
    print(f"  {'the rest (Python, scheduling)':44s} {rest:8.2f}")
    print(f"  {'frame':44s} {r.frame_ms:8.2f}")
    if r.shadows_cpu_ms is not None:
        print(f"  the sun's shadow rays: {r.shadows_cpu_ms:.2f} ms of CPU (shading with them less without)")
    print(f"frames={r.frames} frame_ms={r.frame_ms:.2f}")
    return 0


def cmd_bench_dataset(args) -> int:
    from goggles.bench.measure import bench_dataset
    from goggles.errors import require

    require("ray", "ray", "goggles bench dataset")
    if args.jobs < 1 or args.workers < 1:
        raise ConfigError("--jobs and --workers must be at least 1")
    counts = (1, args.workers) if args.workers > 1 else (1,)
    result = bench_dataset(jobs=args.jobs, workers=counts, width=args.width, height=args.height, flight_s=args.flight)
    print(
        f"{result.jobs} jobs of {args.flight:g} s of flight ({result.frames} frames of {args.width}x{args.height} "
        f"stereo depth + colour each run), local Ray cluster on {os.cpu_count()} cores"
    )
    for n, rate in result.frames_per_s.items():
        print(f"workers={n} frames_per_s={rate:.1f} speedup={result.speedup(n):.2f}")
    return 0


def cmd_bench_lidar(args) -> int:
    from goggles.bench.measure import bench_lidar
    from goggles.sensors.lidar import lidar_model

    lidar_model(args.model)  # a one-line error for an unknown preset
    if args.scans < 1:
        raise ConfigError("--scans must be at least 1")
    if args.threads < 1:
        raise ConfigError("--threads must be at least 1")
    result = bench_lidar(args.model, scans=args.scans, backend=args.backend, device=args.device, threads=args.threads)
    print(f"{result.model}: {result.points} points per scan, {result.backend} backend, {os.cpu_count()} cores")
    peer = "" if result.embree_ms is None else f" embree_ms={result.embree_ms:.2f}"
    print(
        f"model={result.model} points={result.points} threads={result.threads} ms_per_scan={result.wall_ms:.2f} "
        f"cpu_ms_per_scan={result.cpu_ms:.2f}{peer}"
    )
    return 0


def cmd_bench_envs(args) -> int:
    from goggles.bench.measure import bench_envs
    from goggles.errors import require

    require("torch", "learning", "goggles bench envs")
    require("gymnasium", "learning", "goggles bench envs")
    if args.envs < 1 or args.steps < 1 or args.width < 1 or args.height < 1:
        raise ConfigError("--envs, --steps, --width and --height must be at least 1")

    def progress(n: int, k: int, count: int) -> None:
        print(f"  {n} env(s): step {k}/{count}", file=sys.stderr, flush=True)

    outputs = ("depth",) + (("segmentation",) if args.segmentation else ()) + (("rgb",) if args.rgb else ())
    randomization = None
    if args.randomization is not None:
        from goggles.envs import Randomization

        randomization = Randomization.load(args.randomization)
    result = bench_envs(
        args.envs,
        width=args.width,
        height=args.height,
        steps=args.steps,
        device=args.device,
        outputs=outputs,
        backend=args.backend,
        recorded=args.recorded,
        randomization=randomization,
        progress=progress,
    )
    drawn = f", drawing {args.randomization}" if randomization is not None else ""
    print(
        f"{result.envs} hovering vehicles with {args.width}x{args.height} {'+'.join(outputs)} cameras on "
        f"{result.device}{drawn}: {result.steps_per_s:.0f} env steps/s batched, "
        f"{result.single_steps_per_s:.0f} one at a time"
        + (f", {result.looks_steps_per_s:.0f} without it" if result.looks_steps_per_s is not None else "")
    )
    plain = f" vs_plain={result.steps_per_s / result.looks_steps_per_s:.3f}" if result.looks_steps_per_s else ""
    print(
        f"envs={result.envs} steps_per_s={result.steps_per_s:.1f} frames_per_s={result.steps_per_s:.1f} "
        f"device={result.device} vs_single={result.vs_single:.2f} memory_per_env_kb={result.memory_per_env_kb:.1f} "
        f"memory_growth_kb={result.memory_growth_kb:.1f} recorded={'on' if result.recorded else 'off'}{plain}"
    )
    return 0


def cmd_bench_firmware(args) -> int:
    import statistics

    from goggles.bench.firmware import bench_firmware

    cli = ()
    if args.cli is not None:
        if not args.cli.is_file():
            raise ConfigError(f"--cli {args.cli}: no such file (a Betaflight CLI diff)")
        cli = tuple(args.cli.read_text(errors="replace").splitlines())
    print(
        f"{args.flights} flights of {args.vehicles} firmware(s), {args.seconds:g} s each, {args.load} busy "
        "process(es) beside them",
        flush=True,
    )

    def said(k, f) -> None:
        print(
            f"flight={k + 1} failsafes={f.failsafes} height_error_m={f.height_error_m:.3f} tilt_deg={f.tilt_deg:.2f} "
            f"drift_m={f.drift_m:.3f} scale={f.scale:.2f} start_s={f.start_s:.2f} armed_after_s={f.armed_after_s:.2f} "
            f"tick_us={f.tick_us:.0f}",
            flush=True,
        )

    flights = bench_firmware(args.flights, args.seconds, args.vehicles, args.load, cli, progress=said)
    print(
        f"flights={len(flights)} failsafes={sum(f.failsafes for f in flights)} "
        f"worst_height_error_m={max(f.height_error_m for f in flights):.3f} "
        f"worst_tilt_deg={max(f.tilt_deg for f in flights):.2f} worst_drift_m={max(f.drift_m for f in flights):.3f} "
        f"scale_p50={statistics.median(f.scale for f in flights):.2f} "
        f"armed_after_s_p50={statistics.median(f.armed_after_s for f in flights):.2f} "
        f"tick_us_p50={statistics.median(f.tick_us for f in flights):.0f}"
    )
    return 0
