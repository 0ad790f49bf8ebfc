"""The ``goggles`` command: argparse subcommands, parsed in ``main()``; heavy imports stay inside them."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from goggles.errors import ConfigError, GogglesError

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


def _floats_between(low: int, high: int, what: str):
    """argparse type: ``low`` to ``high`` comma-separated finite numbers."""

    def parse(text: str) -> tuple[float, ...]:
        for count in range(high, low - 1, -1):
            try:
                return _floats(count, what)(text)
            except argparse.ArgumentTypeError:
                continue
        raise argparse.ArgumentTypeError(f"{what} must be {low} to {high} comma-separated finite numbers, got {text!r}")

    return parse


def _add_camera_args(parser: argparse.ArgumentParser, width: int, height: int) -> None:
    parser.add_argument(
        "--scene", type=Path, default=None, help="scene TOML or mesh file (default: the built-in arena)"
    )
    parser.add_argument("--width", type=int, default=width, help="image width, pixels (default %(default)s)")
    parser.add_argument("--height", type=int, default=height, help="image height, pixels (default %(default)s)")
    parser.add_argument(
        "--vfov", type=float, default=60.0, help="vertical field of view, degrees (default %(default)s)"
    )
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

    from goggles.frames import camera_pose_from_body, overview_pose, parse_pose
    from goggles.paths import default_course, default_scene
    from goggles.render import Renderer, Shading, stereo_right_offset
    from goggles.render.files import write_camera
    from goggles.scene import load_static_scene
    from goggles.scene.gates import load_course
    from goggles.world import build_world

    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out}: is a file; give a folder for the images")
    outputs = {o for o in args.outputs.split(",") if o}
    unknown = sorted(outputs - {"images", "beacons", "tof"})
    if unknown:
        raise ConfigError(f"--outputs {args.outputs!r}: unknown {unknown}; use images, beacons, tof")
    camera = _camera(args)
    scene = load_static_scene(args.scene or default_scene())
    course_path = args.course or (default_course() if args.scene is None else None)
    course = load_course(course_path) if course_path is not None else None
    built = build_world(scene, course=course, device=args.device)
    world, T_WA = built.scene, built.gate_poses
    if args.pose is not None:
        T_WB = parse_pose(args.pose)
    elif scene.view is not None:
        T_WB = scene.view
    else:  # a bare mesh: look at all of it from outside
        T_WB = overview_pose(scene.vertices.min(axis=0), scene.vertices.max(axis=0), args.vfov)
    T_WC = [camera_pose_from_body(T_WB)]
    partner = [-1]
    if args.baseline is not None:
        T_WC.append(T_WC[0] @ stereo_right_offset(args.baseline))
        partner = [1, -1]
    names = ["left", "right"][: len(T_WC)]
    if "images" in outputs:
        renderer = Renderer(
            world,
            [camera] * len(T_WC),
            shadow_partner=partner,
            threads=args.threads,
            shading=Shading[args.shading.upper()],
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
                f"{names[i]} camera: {args.width}x{args.height}, {valid.mean() * 100:.1f}% valid depth "
                f"({near_far}), {np.isnan(depth).mean() * 100:.1f}% stereo-invalid -> {args.out}/{prefix}*"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    if "beacons" in outputs:
        import json

        from goggles.sensors.beacons import BeaconSensor

        beacons = built.beacons
        detections = BeaconSensor(world, beacons, [camera] * len(T_WC)).detect(np.stack(T_WC), T_WA)
        rows = [{"id": d.id, "u": d.u, "v": d.v, "range": d.range, "camera": names[d.camera]} for d in detections]
        (args.out / "beacons.json").write_text(json.dumps(rows, indent=1))
        print(
            f"beacons: {len(rows)} detections of {len(beacons)} beacons by {len(T_WC)} camera(s) "
            f"-> {args.out}/beacons.json"
        )
    if "tof" in outputs:
        import json

        from goggles.sensors.ranges import FLIGHTGOGGLES_ALTIMETER, RangeSensor, downward_pose

        model = FLIGHTGOGGLES_ALTIMETER
        reading = RangeSensor(world, model, noise=False).measure(downward_pose(T_WB))[0]
        ranges = [float(r) if np.isfinite(r) else ("+inf" if r > 0 else "-inf") for r in reading.ravel()]
        (args.out / "tof.json").write_text(
            json.dumps(
                {"sensor": model.name, "min_range": model.min_range, "max_range": model.max_range, "ranges": ranges},
                indent=1,
            )
        )
        print(f"tof: downward {model.name} reads {ranges} m -> {args.out}/tof.json")
    return 0


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


_CONTROLLERS = {
    "position": "POSITION",
    "velocity": "VELOCITY",
    "attitude": "ATTITUDE",
    "rates": "RATES",
    "rotors": "ROTOR_SPEEDS",
    "thrusts": "ROTOR_THRUSTS",
}


def _setpoint(args, airframe) -> list[float]:
    """The command values for --controller from --setpoint (or a hover default), validated."""
    import math

    n = airframe.num_rotors
    hover_thrust = airframe.mass * 9.81
    defaults = {
        "position": "0,0,1,0",
        "velocity": "0,0,0,0",
        "attitude": f"{hover_thrust},1,0,0,0",
        "rates": f"{hover_thrust},0,0,0",
        "rotors": f"{airframe.hover_speed}",
        "thrusts": f"{hover_thrust / n}",
    }
    forms = {
        "position": "x,y,z[,yaw] (m, rad)",
        "velocity": "vx,vy,vz[,yaw] (m/s, rad)",
        "attitude": "thrust,qw,qx,qy,qz (N)",
        "rates": "thrust,p,q,r (N, rad/s)",
        "rotors": f"one speed or {n} speeds (rad/s)",
        "thrusts": f"one thrust or {n} thrusts (N)",
    }
    text = args.setpoint or defaults[args.controller]
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if args.controller in ("position", "velocity") and len(values) == 3:
        values.append(0.0)
    if args.controller in ("rotors", "thrusts") and len(values) == 1:
        values = values * n
    sizes = {"position": 4, "velocity": 4, "attitude": 5, "rates": 4, "rotors": n, "thrusts": n}
    if len(values) != sizes[args.controller] or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"--setpoint {text!r} for --controller {args.controller} must be {forms[args.controller]}")
    return values


def cmd_fly(args) -> int:
    import numpy as np

    from goggles.dynamics import ControlMode, GroundEffect, Integrator, MultirotorSim, load_airframe
    from goggles.frames import quat_from_euler

    if not (args.duration > 0 and args.decimate >= 1):
        raise ConfigError("--duration must be > 0 s and --decimate >= 1")
    airframe = load_airframe(args.preset)
    setpoint = _setpoint(args, airframe)
    start = [0.0, 0.0, 0.0, 0.0] if args.start is None else list(args.start) + [0.0] * (4 - len(args.start))
    sim = MultirotorSim(
        airframe,
        1,
        device=args.device,
        dt=1.0 / args.rate,
        integrator=None if args.integrator is None else Integrator[args.integrator.upper()],
        ground_effect=GroundEffect[args.ground_effect.upper().replace("-", "_")],
        imu_rate=args.imu_rate,
        disturbances=not args.no_disturbances,
        imu_noise=not args.no_imu_noise,
        seed=args.seed,
    )
    airborne = start[2] > 0.0  # above the floor: start hovering, rotors at hover speed
    sim.reset(
        position=start[:3],
        attitude=quat_from_euler(0.0, 0.0, start[3]),
        rotor_speed=airframe.hover_speed if airborne else 0.0,
    )
    sim.set_command(ControlMode[_CONTROLLERS[args.controller]], setpoint)
    rows_total = int(round(args.duration * args.rate / args.decimate))
    n = airframe.num_rotors
    table = np.zeros((rows_total + 1, 20 + n))

    def record(row: int) -> None:
        s = sim.states()
        table[row] = np.concatenate(
            [
                [s.time],
                s.position[0],
                s.velocity[0],
                s.attitude[0],
                s.rates[0],
                s.imu_accel[0],
                s.imu_gyro[0],
                s.rotor_speed[0],
            ]
        )

    record(0)
    for row in range(1, rows_total + 1):
        sim.step(args.decimate)
        record(row)
        if row % max(1, rows_total // 10) == 0:
            log.info("flown %.1f / %.1f s", sim.time, args.duration)
    sim.close()
    header = [
        "t",
        "px",
        "py",
        "pz",
        "vx",
        "vy",
        "vz",
        "qw",
        "qx",
        "qy",
        "qz",
        "wx",
        "wy",
        "wz",
        "acc_x",
        "acc_y",
        "acc_z",
        "gyro_x",
        "gyro_y",
        "gyro_z",
    ] + [f"rotor_{i}" for i in range(n)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(args.out, table, delimiter=",", header=",".join(header), comments="", fmt="%.9g")
    final = table[-1]
    print(
        f"{airframe.name}: {args.duration:g} s, {args.controller} control, {sim.integrator.name.lower()} at "
        f"{args.rate:g} Hz; "
        f"final position {final[1]:.3f},{final[2]:.3f},{final[3]:.3f} m, speed {np.linalg.norm(final[4:7]):.3f} m/s "
        f"-> {args.out} ({len(table)} rows)"
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


def cmd_run(args) -> int:
    import dataclasses
    import signal
    import threading

    from goggles.clock import ClockMode
    from goggles.config import load_run_config
    from goggles.engine import Engine
    from goggles.paths import default_run

    config = load_run_config(args.config or default_run())
    changes = {}
    if args.mode is not None:
        changes["mode"] = {"sim": ClockMode.SIM, "lockstep": ClockMode.LOCKSTEP, "live": ClockMode.LIVE}[args.mode]
    if args.scale is not None:
        changes["scale"] = None if args.scale == "auto" else _positive_float(args.scale, "--scale")
    if args.expose is not None:
        if args.keys is None:
            raise ConfigError("--expose needs --keys DIR (make them with: goggles keys DIR)")
        from goggles.transport.buses import CurveServer, ZmqEndpoints

        endpoints = config.zmq or ZmqEndpoints()
        changes["zmq"] = ZmqEndpoints(
            *(e.replace("127.0.0.1", args.expose) for e in (endpoints.publish, endpoints.inputs, endpoints.control))
        )
        changes["curve"] = CurveServer(args.keys / "server.key_secret", args.keys / "clients")
    if args.no_lcm:
        changes["lcm_url"] = None
    elif args.lcm_url is not None:
        changes["lcm_url"] = args.lcm_url
    config = dataclasses.replace(config, **changes)
    recorder = None
    stop = threading.Event()
    if args.record is not None:
        from goggles.record import Recorder

        def record_failed(reason: str) -> None:
            print(f"goggles: {reason}" + ("; stopping" if args.on_record_error == "stop" else ""), file=sys.stderr)
            if args.on_record_error == "stop":
                stop.set()

        run_path = args.config or default_run()
        recorder = Recorder(
            args.record,
            metadata={"run_file": Path(run_path).read_text(), "run_file_path": str(Path(run_path).resolve())},
            compression=args.record_compression,
            on_error=record_failed,
        )
    sinks = []
    if args.foxglove is not None:
        from goggles.preview.foxglove_sink import FoxgloveSink

        sinks.append(FoxgloveSink(host=args.foxglove_host, port=args.foxglove))
    engine = Engine(
        config,
        device=args.device,
        status=lambda line: print(line, file=sys.stderr, flush=True),
        recorder=recorder,
        sinks=sinks,
    )
    for sink in sinks:
        sink.set_scene(engine.scene_boxes)
        print(f"Foxglove: ws://{args.foxglove_host}:{sink.port}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    channels = sorted({f"{c.vehicle}/{c.name}" for c in config.cameras})
    print(
        f"goggles: {config.mode.name.lower()} mode, {len(engine.vehicles)} vehicle(s), cameras {channels}; "
        f"ZeroMQ {'off' if config.zmq is None else config.zmq.publish}, LCM {config.lcm_url or 'off'}; "
        "Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    try:
        engine.run(duration=args.duration, stop=stop)
    finally:
        engine.close()
        for sink in sinks:
            sink.close()
        if recorder is not None:
            recorder.close()
            print(
                f"recorded {recorder.written} messages to {recorder.path} ({recorder.dropped} dropped)"
                + (f"; {recorder.error}" if recorder.error else ""),
                file=sys.stderr,
            )
    print(engine.status_line(), file=sys.stderr)
    return 0


def cmd_keys(args) -> int:
    import shutil

    import zmq.auth

    folder = args.folder
    (folder / "clients").mkdir(parents=True, exist_ok=True)
    for name in ("server", "client"):
        if (folder / f"{name}.key_secret").exists() and not args.force:
            raise ConfigError(f"{folder / (name + '.key_secret')} exists; use --force to replace the keys")
        zmq.auth.create_certificates(folder, name)
        (folder / f"{name}.key_secret").chmod(0o600)  # a secret key is for its owner's eyes only
    shutil.copy(folder / "client.key", folder / "clients" / "client.key")
    print(
        f"server: {folder}/server.key_secret (keep on the engine's machine)\n"
        f"client: {folder}/client.key_secret + {folder}/server.key (give to the client; Client(keys=DIR))\n"
        f"accepted clients: {folder}/clients/*.key (add more client public keys there)"
    )
    return 0


def cmd_preview(args) -> int:
    import signal
    import threading

    from goggles.client import Client
    from goggles.paths import default_scene
    from goggles.preview.server import FrameSource, PreviewServer
    from goggles.scene import load_static_scene
    from goggles.transport.buses import ZmqEndpoints

    client = Client(ZmqEndpoints(publish=args.endpoint), keys=args.keys)
    scene = None if args.no_third_person else load_static_scene(args.scene or default_scene())
    source = FrameSource(client, args.vehicle, args.camera, scene=scene, viewpoint=args.viewpoint, device=args.device)
    server = PreviewServer(source, host=args.host, port=args.port)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.duration is not None:
        threading.Timer(args.duration, stop.set).start()
    print(
        f"goggles preview: http://{args.host}:{args.port}/ (frames from {args.endpoint}, "
        f"{args.vehicle}/{args.camera}); Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.run(stop)
    finally:
        client.close()
    print(f"sent {server.frames_sent} frames")
    return 0


def cmd_replay(args) -> int:
    from goggles.replay import replay_file, replay_folder

    speed = None if args.as_fast_as_possible or args.speed is None else args.speed
    if args.log.is_dir():
        results = replay_folder(
            args.log,
            record_folder=args.record,
            jobs=args.jobs,
            sensors=args.sensors,
            scene=args.scene,
            speed=speed,
            device=args.device,
        )
    else:
        results = [
            replay_file(
                args.log,
                sensors=args.sensors,
                scene=args.scene,
                record=args.record,
                speed=speed,
                device=args.device,
                progress=lambda t: print(f"replayed {t:.1f} s of the log", file=sys.stderr, flush=True),
            )
        ]
    for r in results:
        print(
            f"{r.log}: {r.poses} poses, {r.frames} messages recorded, {r.log_seconds:.2f} s of log in "
            f"{r.seconds:.2f} s ({r.log_seconds / max(r.seconds, 1e-9):.2f}x real time)"
        )
    return 0


def describe(message) -> str:
    """One line per message for ``goggles echo``: every field, images summarised."""
    import numpy as np

    import goggles_lcm
    from goggles.client import image_array

    if isinstance(message, goggles_lcm.image_t):
        pixels = image_array(message)
        finite = pixels[np.isfinite(pixels)] if pixels.dtype.kind == "f" else pixels
        span = f"{finite.min():.3g}..{finite.max():.3g}" if finite.size else "none"
        return (
            f"image_t utime={message.header.utime} seq={message.header.seq} camera={message.camera} "
            f"{message.width}x{message.height} encoding={message.encoding} values {span} "
            f"pose_utime={message.pose_utime} position={np.round(message.position, 3).tolist()}"
        )
    fields = []
    for name in message.__slots__:
        value = getattr(message, name)
        if isinstance(value, goggles_lcm.header_t):
            fields.append(f"utime={value.utime} seq={value.seq}")
        elif isinstance(value, float):
            fields.append(f"{name}={value:.6g}")
        elif isinstance(value, (list, tuple)):
            fields.append(
                f"{name}={np.round(np.asarray(value, dtype=float), 4).tolist()}"
                if value and not isinstance(value[0], str)
                else f"{name}={list(value)}"
            )
        else:
            fields.append(f"{name}={value}")
    return f"{type(message).__name__} " + " ".join(fields)


def cmd_echo(args) -> int:
    import time

    from goggles.transport.schema import MalformedMessage, decode_any

    deadline = None if args.duration is None else time.monotonic() + args.duration
    printed = 0
    if args.lcm_url is None:
        from goggles.client import Client
        from goggles.transport.buses import ZmqEndpoints

        with Client(ZmqEndpoints(publish=args.endpoint)) as client:
            client.subscribe(args.channel)
            while (deadline is None or time.monotonic() < deadline) and (args.count is None or printed < args.count):
                received = client.receive(timeout=0.2)
                if received is not None:
                    print(f"{received[0]}: {describe(received[1])}", flush=True)
                    printed += 1
        return 0
    import re

    import lcm

    bus = lcm.LCM(args.lcm_url)
    pattern = re.escape(args.channel) + ".*"

    def on_message(channel: str, data: bytes) -> None:
        nonlocal printed
        if channel == "LCM_SELF_TEST":  # LCM's own start-up message
            return
        try:
            print(f"{channel}: {describe(decode_any(data))}", flush=True)
        except MalformedMessage as exc:
            print(f"{channel}: undecodable ({exc})", flush=True)
        printed += 1

    bus.subscribe(pattern, on_message)
    while (deadline is None or time.monotonic() < deadline) and (args.count is None or printed < args.count):
        bus.handle_timeout(200)
    return 0


def _positive_float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ConfigError(f"{what} must be 'auto' or a positive number, got {text!r}")
    return value


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


def cmd_race(args) -> int:
    import numpy as np

    from goggles.paths import default_course
    from goggles.race import fly_course, score_flight
    from goggles.scene.gates import load_course

    course = load_course(args.course or default_course())
    if args.perturb is not None:
        if args.perturb < 0:
            raise ConfigError(f"--perturb {args.perturb}: the seed must be >= 0")
        course = course.perturbed(args.perturb)
    if args.log is not None:
        table, header = _read_log(args.log)
        crashed = table[:, header.index("crashed")] if "crashed" in header else None
        positions = table[:, [header.index(k) for k in ("px", "py", "pz")]]
        result = score_flight(course, table[:, header.index("t")], positions, crashed)
    else:
        result, log_rows = fly_course(course, scene_path=args.scene, device=args.device, seed=args.seed)
        if args.out is not None:
            np.savetxt(args.out, log_rows, delimiter=",", header="t,px,py,pz,crashed", comments="", fmt="%.6f")
    print(
        f"course {course.name}: {len(course.gates)} gates; "
        + ", ".join(f"{g.name} at {t:.2f} s" for g, t in zip(course.gates, result.gate_times))
    )
    print(result.line())
    return 0


def _read_log(path: Path):
    """A flight log as (table, header): CSV with a header row naming at least t, px, py, pz."""
    import numpy as np

    try:
        header = path.read_text().splitlines()[0].split(",")
        table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    except (OSError, ValueError, IndexError) as exc:
        raise ConfigError(f"{path}: cannot be read as a CSV flight log: {exc}") from exc
    missing = [k for k in ("t", "px", "py", "pz") if k not in header]
    if missing or table.shape[1] != len(header) or len(table) == 0:
        raise ConfigError(f"{path}: a flight log needs a header with t, px, py, pz (missing {missing}) and rows")
    return table, header


def cmd_bridge_mocap(args) -> int:
    import signal
    import threading

    from bridges.mocap import MocapBridge, Publisher, RoomCalibration, load_room_calibration, run_bridge, status_line
    from bridges.sources import MotionCaptureSource, NatNetSource, QtmSource

    calibration = (
        load_room_calibration(args.calibration, args.system)
        if args.calibration
        else RoomCalibration.for_system(args.system)
    )
    backend = args.backend or {"optitrack": "natnet", "qualisys": "qtm"}.get(args.system, "motioncapture")
    allowed = {"optitrack": {"natnet", "motioncapture"}, "qualisys": {"qtm", "motioncapture"}}
    if backend not in allowed.get(args.system, {"motioncapture"}):
        raise ConfigError(f"--backend {backend} does not serve --system {args.system}")
    if backend == "qtm":
        source = QtmSource(args.host, port=args.qtm_port, timeout=args.timeout)
    elif args.system == "optitrack" and backend == "natnet":
        source = NatNetSource(
            args.host,
            args.local,
            command_port=args.command_port,
            data_port=args.data_port,
            multicast=args.multicast,
            timeout=args.timeout,
        )
    else:
        options = {"port_command": str(args.command_port)} if args.system == "optitrack" else {}
        if args.mock_bodies:
            options.update(rigid_bodies=args.mock_bodies, frequency="100")
        source = MotionCaptureSource(args.system, args.host, timeout=args.timeout, options=options)
    publisher = Publisher(None if args.no_zmq else args.zmq, None if args.no_lcm else args.lcm_url)
    bridge = MocapBridge(calibration, publisher)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(
        f"goggles bridge: {args.system} at {args.host} -> ZeroMQ {'off' if args.no_zmq else args.zmq}, "
        f"LCM {'off' if args.no_lcm else args.lcm_url}; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    try:
        run_bridge(
            source,
            bridge,
            duration=args.duration,
            stop=stop,
            status=lambda line: print(line, file=sys.stderr, flush=True),
        )
    finally:
        source.close()
        publisher.close()
    print(status_line(source, bridge), file=sys.stderr)
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
        "--pose",
        default=None,
        help="body pose x,y,z,qw,qx,qy,qz in the world (FLU: identity looks along +x, z up); "
        "default: the scene's view, else a view of the whole scene from outside it",
    )
    render.add_argument(
        "--intrinsics", type=_floats(4, "--intrinsics"), default=None, help="fx,fy,cx,cy in pixels (overrides --vfov)"
    )
    render.add_argument(
        "--distortion", type=_floats(5, "--distortion"), default=(0.0,) * 5, help="OpenCV k1,k2,p1,p2,k3 (default none)"
    )
    render.add_argument("--min-depth", type=float, default=0.0, help="closest valid depth, m (default %(default)s)")
    render.add_argument(
        "--max-depth", type=float, default=1000.0, help="farthest depth traced, m (default %(default)s)"
    )
    render.add_argument(
        "--baseline", type=float, default=None, help="stereo baseline, m: adds a right camera at -B along body y"
    )
    render.add_argument("--shading", choices=["sun", "unlit"], default="sun", help="intensity lighting")
    render.add_argument(
        "--outputs",
        default="images",
        help="comma-separated: images (the .npy/.png files), beacons (beacons.json: id, u, v, range, "
        "camera of every IR beacon seen), tof (tof.json: the downward altimeter, REP 117 '+inf'/'-inf' "
        "as strings); default images",
    )
    render.add_argument(
        "--course",
        type=Path,
        default=None,
        help="racing course whose gates and beacons join the scene (default: assets/course.toml "
        "with the default scene, none with --scene)",
    )
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

    bench_dynamics = benches.add_parser(
        "dynamics",
        help="physics steps per second: one vehicle on one core, and a batch",
        description="Time the simulator (RK4 at 960 Hz, controller, noise, IMU) over at least --seconds "
        "of wall time each. The last line is 'vehicles=1 steps_per_s=<n> realtime_factor=<n/960>'; the line "
        "before it gives the same for the batch.",
    )
    bench_dynamics.add_argument("--preset", default="fg-quad", help="airframe preset (default %(default)s)")
    bench_dynamics.add_argument("--batch", type=int, default=1024, help="vehicles in the batch run")
    bench_dynamics.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    bench_dynamics.add_argument("--seconds", type=float, default=1.0, help="minimum timing per run, s")
    bench_dynamics.set_defaults(run=cmd_bench_dynamics)

    run = commands.add_parser(
        "run",
        help="run the engine: sources -> world -> renderer -> sensors -> ZeroMQ and LCM",
        description="Run the engine from a run file (default: assets/run-demo.toml, the Mars arena with a "
        "simulated fg-quad flying a loop, stereo depth and IMU on both buses). Prints a status line each second; "
        "Ctrl-C stops it cleanly. Channels: clock, <vehicle>/state, <vehicle>/imu, <vehicle>/<camera>/<output>; "
        "inputs <vehicle>/command and pose/<vehicle>.",
    )
    run.add_argument("config", nargs="?", type=Path, default=None, help="run file (TOML)")
    run.add_argument(
        "--mode",
        choices=["sim", "lockstep", "live"],
        default=None,
        help="sim: built-in vehicles, paced clock; lockstep: advance on client step requests; "
        "live: vehicle poses from the bus (pose/<vehicle>)",
    )
    run.add_argument("--scale", default=None, help="'auto' or sim seconds per wall second (overrides the run file)")
    run.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds (sim time; wall in live)"
    )
    run.add_argument("--lcm-url", default=None, help="LCM URL (e.g. memq:// or udpm://...?ttl=0)")
    run.add_argument("--no-lcm", action="store_true", help="publish on ZeroMQ only")
    run.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    run.add_argument(
        "--expose",
        default=None,
        metavar="ADDRESS",
        help="bind ZeroMQ to ADDRESS (e.g. 0.0.0.0) instead of 127.0.0.1; needs --keys (CURVE)",
    )
    run.add_argument(
        "--keys",
        type=Path,
        default=None,
        help="folder from 'goggles keys': server.key_secret, and clients/ with the accepted client keys",
    )
    run.add_argument(
        "--foxglove",
        type=int,
        nargs="?",
        const=8765,
        default=None,
        metavar="PORT",
        help="serve the outputs to Foxglove on ws://127.0.0.1:PORT (default 8765)",
    )
    run.add_argument("--foxglove-host", default="127.0.0.1", help="address of the Foxglove server (0.0.0.0 exposes it)")
    run.add_argument(
        "--record",
        type=Path,
        default=None,
        help="record every input and output channel to FILE.mcap (MCAP) or FILE.lcmlog (lcm-logger)",
    )
    run.add_argument(
        "--record-compression",
        choices=["lz4", "zstd", "none"],
        default="lz4",
        help="MCAP chunk compression (default %(default)s: 0.42x the size at no measurable frame-rate cost; "
        "zstd: 0.33x, 10-25%% slower on two cores)",
    )
    run.add_argument(
        "--on-record-error",
        choices=["continue", "stop"],
        default="continue",
        help="when writing the recording fails (a full disk): keep flying without it, or stop the run "
        "(default %(default)s); either way what was written stays readable",
    )
    run.set_defaults(run=cmd_run)

    preview = commands.add_parser(
        "preview",
        help="serve a web page with the vehicle's stereo pair, a third-person view, and WebXR for headsets",
        description="Serve http://HOST:PORT/ : the newest stereo colour frames of VEHICLE/CAMERA from a running "
        "engine, side by side, with a third-person view; on a headset browser, 'Enter VR' shows each eye its "
        "image (WebXR). Binds 127.0.0.1 unless --host says otherwise.",
    )
    preview.add_argument("--endpoint", default="tcp://127.0.0.1:5555", help="the engine's ZeroMQ output")
    preview.add_argument("--keys", type=Path, default=None, help="CURVE client keys for an exposed engine")
    preview.add_argument("--vehicle", default="quad0")
    preview.add_argument("--camera", default="stereo", help="a stereo camera publishing rgb")
    preview.add_argument("--host", default="127.0.0.1", help="address to serve on (0.0.0.0 exposes the page)")
    preview.add_argument("--port", type=int, default=8080)
    preview.add_argument("--scene", type=Path, default=None, help="scene of the third-person view (default arena)")
    preview.add_argument(
        "--viewpoint",
        type=_floats(3, "--viewpoint"),
        default=None,
        help="x,y,z of the third-person camera (default: behind and above the vehicle)",
    )
    preview.add_argument("--no-third-person", action="store_true", help="only the stereo pair")
    preview.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    preview.add_argument("--device", default=None, help="Warp device of the third-person renderer")
    preview.set_defaults(run=cmd_preview)

    keys = commands.add_parser(
        "keys",
        help="make ZeroMQ CURVE key pairs for exposing an engine beyond localhost",
        description="Writes server.key/.key_secret, client.key/.key_secret and clients/client.key into FOLDER. "
        "Run the engine with --expose 0.0.0.0 --keys FOLDER; clients connect with Client(keys=FOLDER) "
        "(client.key_secret and server.key). Clients without an accepted key get nothing and cannot send.",
    )
    keys.add_argument("folder", type=Path)
    keys.add_argument("--force", action="store_true", help="replace existing keys")
    keys.set_defaults(run=cmd_keys)

    replay = commands.add_parser(
        "replay",
        help="render a recorded flight again (other sensors or scene), or every log in a folder",
        description="Re-render a recording's flight from its poses (<vehicle>/state of a simulated flight, "
        "pose/<vehicle> of a live one, skeleton/<name> of people) with the recording's own run file or --sensors, "
        "in the recording's scene or --scene. Same device, log and run file: the same image bytes. A folder is "
        "replayed by one process per core.",
    )
    replay.add_argument("log", type=Path, help="a .mcap or .lcmlog file, or a folder of them")
    replay.add_argument("--sensors", type=Path, default=None, help="run file whose vehicles and sensors to use")
    replay.add_argument("--scene", type=Path, default=None, help="scene to render in instead")
    replay.add_argument(
        "--record", type=Path, default=None, help="record the new outputs here (a folder when replaying a folder)"
    )
    pace = replay.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=None, help="play at this multiple of the recorded pace")
    pace.add_argument("--as-fast-as-possible", action="store_true", help="no pacing (the default)")
    replay.add_argument("--jobs", type=int, default=None, help="processes for a folder (default: all cores)")
    replay.add_argument("--device", default=None, help="Warp device")
    replay.set_defaults(run=cmd_replay)

    echo = commands.add_parser(
        "echo",
        help="print the decoded messages of a channel (like lcm-spy or ros2 topic echo)",
        description="Subscribe to CHANNEL (a prefix: 'quad0/' prints every quad0 channel) on the engine's "
        "ZeroMQ output (default) or on LCM (--lcm-url) and print each message decoded, one line each.",
    )
    echo.add_argument("channel", nargs="?", default="", help="channel or channel prefix (default: all)")
    echo.add_argument("--endpoint", default="tcp://127.0.0.1:5555", help="engine's ZeroMQ output endpoint")
    echo.add_argument("--lcm-url", default=None, help="listen on LCM at this URL instead of ZeroMQ")
    echo.add_argument("--count", type=int, default=None, help="stop after this many messages")
    echo.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    echo.set_defaults(run=cmd_echo)

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

    race = commands.add_parser(
        "race",
        help="fly a racing course in the simulator, or score a recorded flight",
        description="Without --log: fly the course with the built-in pilot (position control through the gates, "
        "gates are obstacles). With --log: score a recorded flight (CSV with t, px, py, pz and optionally crashed, "
        "e.g. from 'goggles fly' or 'goggles race --out'). AlphaPilot rule: a gate counts when the vehicle is inside "
        "its corners' box inflated by 0.1 m and within 0.3 m of its plane, in order; score = 10 N - T; a crash or "
        "timeout scores 0. The last line is 'gates=<n> time_s=<t> score=<s> end=<reason>'.",
    )
    race.add_argument("--course", type=Path, default=None, help="course TOML (default: assets/course.toml)")
    race.add_argument("--log", type=Path, default=None, help="score this recorded flight instead of flying")
    race.add_argument(
        "--perturb",
        type=int,
        default=None,
        metavar="SEED",
        help="shift every gate randomly within its perturbation bounds (seeded)",
    )
    race.add_argument("--scene", type=Path, default=None, help="scene to fly in (default: the built-in arena)")
    race.add_argument("--seed", type=int, default=0, help="seed of the simulator's noise")
    race.add_argument("--out", type=Path, default=None, help="write the flown log as CSV")
    race.add_argument("--device", default=None, help="Warp device")
    race.set_defaults(run=cmd_race)

    bridge = commands.add_parser("bridge", help="bridges from outside systems into goggles messages")
    bridges = bridge.add_subparsers(dest="bridge", required=True, metavar="BRIDGE")
    mocap = bridges.add_parser(
        "mocap",
        help="motion capture -> pose/<body> and skeleton/<name> on ZeroMQ and LCM",
        description="Connect to a motion-capture system and publish its rigid bodies (and OptiTrack skeletons) "
        "in goggles' world frame: up axis, units, a room transform and per-body offsets from --calibration. "
        "A body silent for three frame periods is published once with valid=false. The last line gives "
        "frames, bodies and the packet-to-publish latency.",
    )
    mocap.add_argument("--system", choices=["optitrack", "vicon", "qualisys", "vrpn", "mock"], required=True)
    mocap.add_argument("--host", default="127.0.0.1", help="the mocap server's address")
    mocap.add_argument("--local", default="127.0.0.1", help="this machine's address on the mocap network (NatNet)")
    mocap.add_argument(
        "--backend",
        choices=["natnet", "qtm", "motioncapture"],
        default=None,
        help="optitrack: natnet (default: bodies and skeletons) or motioncapture (bodies); qualisys: qtm "
        "(default: 6D bodies and skeletons) or motioncapture; vicon, vrpn, mock: motioncapture",
    )
    mocap.add_argument("--qtm-port", type=int, default=22223, help="Qualisys QTM real-time port (qtm backend)")
    mocap.add_argument("--multicast", action="store_true", help="NatNet: listen to Motive's multicast stream")
    mocap.add_argument(
        "--mock-bodies",
        default="",
        help="mock system: static bodies 'name(x,y,z,qw,qx,qy,qz);...' (metres, z up) at 100 Hz",
    )
    mocap.add_argument("--command-port", type=int, default=1510)
    mocap.add_argument("--data-port", type=int, default=1511)
    mocap.add_argument("--calibration", type=Path, default=None, help="room calibration TOML (calib/room-example.toml)")
    mocap.add_argument("--zmq", default="tcp://127.0.0.1:5556", help="the engine's ZeroMQ input endpoint")
    mocap.add_argument("--no-zmq", action="store_true")
    mocap.add_argument("--lcm-url", default="udpm://239.255.76.67:7667?ttl=0")
    mocap.add_argument("--no-lcm", action="store_true")
    mocap.add_argument("--timeout", type=float, default=5.0, help="s to wait for the mocap server")
    mocap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    mocap.set_defaults(run=cmd_bridge_mocap)

    fly = commands.add_parser(
        "fly",
        help="fly the built-in multirotor simulator and write its trajectory as CSV",
        description="Simulate one vehicle from rest under a controller and write one CSV row per physics step "
        "(or per --decimate steps): t, position, velocity, quaternion (w, x, y, z), body rates, IMU specific force "
        "and angular rate, and one rotor_<i> speed column per rotor. World ENU, body FLU, SI units.",
    )
    fly.add_argument("--preset", default="fg-quad", help="airframe preset name or TOML path (default %(default)s)")
    fly.add_argument("--duration", type=float, required=True, help="simulated seconds")
    fly.add_argument(
        "--controller",
        choices=sorted(_CONTROLLERS),
        default="position",
        help="what --setpoint commands (default %(default)s)",
    )
    fly.add_argument(
        "--setpoint",
        default=None,
        help="position x,y,z[,yaw]; velocity vx,vy,vz[,yaw]; attitude thrust,qw,qx,qy,qz; rates "
        "thrust,p,q,r; rotors/thrusts one value or one per rotor (default: hover in place, 1 m up "
        "for position); write --setpoint=-1,... when the first value is negative",
    )
    fly.add_argument(
        "--start",
        type=_floats_between(3, 4, "--start"),
        default=None,
        help="start x,y,z[,yaw] at rest, m and rad; above z = 0 the rotors start at hover speed "
        "(default: on the ground at the origin, rotors stopped)",
    )
    fly.add_argument("--seed", type=int, default=0, help="seed of the disturbance and IMU noise")
    fly.add_argument(
        "--integrator",
        choices=["euler", "rk4"],
        default=None,
        help="default: the preset's (fg-quad: euler, as FlightGoggles)",
    )
    fly.add_argument("--rate", type=float, default=960.0, help="physics rate, Hz (default %(default)s)")
    fly.add_argument("--imu-rate", type=float, default=None, help="IMU rate, Hz, dividing --rate (default: --rate)")
    fly.add_argument("--ground-effect", choices=["none", "cheeseman-bennett", "conyers"], default="none")
    fly.add_argument("--no-disturbances", action="store_true", help="turn the stochastic force and moment off")
    fly.add_argument("--no-imu-noise", action="store_true", help="turn IMU white noise and bias walk off")
    fly.add_argument("--decimate", type=int, default=1, help="write every Nth physics step")
    fly.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    fly.add_argument("--out", type=Path, required=True, help="CSV file to write")
    fly.set_defaults(run=cmd_fly)
    return parser


#: A value that looks like a flag to argparse but is a list of numbers starting with a negative one.
_NEGATIVE_LIST = re.compile(r"^-[\d.][\d.eE+-]*(,[-+\d.eE]+)+$")


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--pose -4,0,1.5,...`` as ``--pose=-4,0,1.5,...``: argparse would take the value for a flag."""
    out: list[str] = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _NEGATIVE_LIST.match(token):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def _tag_leaf_parsers(parser: argparse.ArgumentParser) -> None:
    """Let every subcommand's parser report errors in its own usage (``args.parser_``)."""
    parser.set_defaults(parser_=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _tag_leaf_parsers(child)


def _quiet_warp_init() -> None:
    """Initialise Warp without its CUDA-driver warning on machines without a GPU (``-v`` shows it)."""
    import os

    import warp as wp

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            wp.init()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def check_device(name: str | None) -> None:
    """Refuse a Warp device this machine does not have, naming the ones it has.

    Raises:
        ConfigError: unknown name, or CUDA asked for where there is none.
    """
    if name is None:
        return
    import warp as wp

    available = [str(d) for d in wp.get_devices()]
    if name in available or name == "cuda" and wp.is_cuda_available():
        return
    if name.startswith("cuda") and not wp.is_cuda_available():
        raise ConfigError(f"--device {name}: no CUDA device is available on this machine; devices: {available}")
    raise ConfigError(
        f"--device {name!r} is not a Warp device here; devices: {available} (or 'cuda' for the first GPU)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _tag_leaf_parsers(parser)
    args, extra = parser.parse_known_args(_join_negative_values(sys.argv[1:] if argv is None else list(argv)))
    if extra:
        args.parser_.error(f"unrecognized arguments: {' '.join(extra)} (see {args.parser_.prog} --help)")
    if getattr(args, "duration", None) is not None and not args.duration > 0:
        args.parser_.error(f"--duration {args.duration}: must be > 0 seconds")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    import warp as wp

    wp.config.log_level = wp.LOG_INFO if args.verbose else wp.LOG_ERROR
    try:
        if args.verbose:
            wp.init()
        else:
            _quiet_warp_init()
        check_device(getattr(args, "device", None))
        return args.run(args)
    except GogglesError as exc:
        print(f"goggles: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
