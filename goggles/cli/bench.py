"""goggles bench render|dynamics|latency: benchmarks against a peer measured in the same run."""

from __future__ import annotations

from goggles.cli.common import add_camera_args


def add_parser(commands) -> None:
    bench = commands.add_parser("bench", help="benchmarks against a peer measured in the same run")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    bench_render = benches.add_parser(
        "render",
        help="primary rays per second of goggles vs Embree on the same scene, rays and threads",
        description="Render the same views with goggles and trace the same rays with Embree (embreex) on "
        "the same number of threads; the last line is 'rays_per_s=<goggles> embree_rays_per_s=<embree> "
        "ratio=<goggles/embree>'.",
    )
    add_camera_args(bench_render, 640, 480)
    bench_render.add_argument("--views", type=int, default=8, help="views around the scene's viewpoint")
    bench_render.add_argument("--seconds", type=float, default=2.0, help="minimum timing per side, s")
    bench_render.set_defaults(run=cmd_bench_render)

    bench_dynamics = benches.add_parser(
        "dynamics",
        help="physics steps per second: one vehicle on one core, and a batch",
        description="Time the simulator (the preset's integrator at 960 Hz, controller, noise, IMU) over at "
        "least --seconds of wall time each. The last line is "
        "'vehicles=1 steps_per_s=<n> realtime_factor=<n/960>'; the line before it gives the same for the batch.",
    )
    bench_dynamics.add_argument("--preset", default="fg-quad", help="airframe preset (default %(default)s)")
    bench_dynamics.add_argument("--batch", type=int, default=1024, help="vehicles in the batch run")
    bench_dynamics.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    bench_dynamics.add_argument("--seconds", type=float, default=1.0, help="minimum timing per run, s")
    bench_dynamics.set_defaults(run=cmd_bench_dynamics)
    bench_latency = benches.add_parser(
        "latency",
        help="pose sent -> stereo depth received, over ZeroMQ on loopback",
        description="Start 'goggles run' in live mode in its own process with a stereo depth camera, send poses "
        "over ZeroMQ at the camera rate, and time each pose until both depth images rendered from it arrive. "
        "The last line is 'p50_ms=<x> p99_ms=<y> width=<W> height=<H>'.",
    )
    bench_latency.add_argument("--width", type=int, default=320)
    bench_latency.add_argument("--height", type=int, default=240)
    bench_latency.add_argument("--rate", type=float, default=30.0, help="camera and pose rate, Hz")
    bench_latency.add_argument("--seconds", type=float, default=10.0, help="how long to send poses")
    bench_latency.add_argument("--device", default=None, help="Warp device of the engine")
    bench_latency.set_defaults(run=cmd_bench_latency)


def cmd_bench_render(args) -> int:
    from goggles.bench import bench_render
    from goggles.paths import default_scene

    result = bench_render(
        args.scene or default_scene(),
        width=args.width,
        height=args.height,
        vfov_deg=args.vfov,
        views=args.views,
        threads=args.threads,
        device=args.device,
        seconds=args.seconds,
    )
    print(
        f"scene: {result.triangles} triangles, {result.views} views of {result.width}x{result.height}, "
        f"device {result.device}, {result.threads} threads"
    )
    print(f"goggles (Warp, full render): {result.rays_per_s / 1e6:.2f} Mrays/s")
    print(f"Embree (closest hit only):   {result.embree_rays_per_s / 1e6:.2f} Mrays/s")
    print(
        f"rays_per_s={result.rays_per_s:.0f} embree_rays_per_s={result.embree_rays_per_s:.0f} ratio={result.ratio:.3f}"
    )
    return 0


def cmd_bench_dynamics(args) -> int:
    from goggles.bench import bench_dynamics

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
    from goggles.bench import bench_latency

    result = bench_latency(
        width=args.width, height=args.height, rate=args.rate, seconds=args.seconds, device=args.device
    )
    print(
        f"live mode, stereo depth {result.width}x{result.height} at {args.rate:g} Hz over ZeroMQ on loopback: "
        f"{result.frames} of {result.sent} poses came back as both images (FlightGoggles: ~23 ms)"
    )
    print(f"p50_ms={result.p50_ms:.2f} p99_ms={result.p99_ms:.2f} width={result.width} height={result.height}")
    return 0
