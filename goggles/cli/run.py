"""goggles run: the engine on a run file (sim, lockstep or live), with recording and Foxglove."""

from __future__ import annotations

import sys
from pathlib import Path

from goggles.cli.common import (
    NOT_GIVEN,
    add_backend_arg,
    add_foxglove_args,
    add_overwrite_arg,
    add_recorded_arg,
    auto_or_scale,
    foxglove_sinks,
    freeze_start_up_heap,
    refuse_existing,
    stop_on_signals,
    unused,
)
from goggles.errors import ConfigError


def add_parser(commands) -> None:
    run = commands.add_parser(
        "run",
        help="run the engine: sources -> world -> renderer -> sensors -> ZeroMQ and LCM (and ROS 2)",
        description="Run the engine from a run file (default: assets/run-demo.toml, the Mars arena with a "
        "simulated fg-quad flying a loop, stereo depth and colour and IMU on both buses). Prints a status line each "
        "second; Ctrl-C stops it cleanly. Channels: clock, <vehicle>/state, <vehicle>/imu, "
        "<vehicle>/<camera>/<output>, <vehicle>/<sensor>/ranges, <vehicle>/<lidar>/lidar, <vehicle>/collision, "
        "<vehicle>/status (holding, crashed, trouble), <vehicle>/wind (with [wind]), "
        "<vehicle>/fc (a firmware's status); "
        "inputs <vehicle>/command, pose/<vehicle> (or a [[prop]]'s tracked body), skeleton/<name> and scene/edit "
        "(the run file's [[prop]]s: goggles edit). With --ros2 the same go out as ROS 2 topics (see the README's "
        "ROS 2 section).",
    )
    run.add_argument("config", nargs="?", type=Path, default=None, help="run file (TOML)")
    run.add_argument(
        "--mode",
        choices=["sim", "lockstep", "live"],
        default=None,
        help="sim: built-in vehicles, paced clock; lockstep: advance on client step requests; "
        "live: vehicle poses from the bus (pose/<vehicle>)",
    )
    run.add_argument(
        "--scale",
        type=auto_or_scale,
        default=NOT_GIVEN,
        help="'auto' or sim seconds per wall second (overrides the run file)",
    )
    run.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds (sim time; wall in live)"
    )
    run.add_argument("--lcm-url", default=None, help="LCM URL (e.g. memq:// or udpm://...?ttl=0)")
    run.add_argument("--no-lcm", action="store_true", help="publish on ZeroMQ only")
    run.add_argument(
        "--ros2",
        nargs="?",
        const="/goggles",
        default=None,
        metavar="NAMESPACE",
        help="also speak ROS 2 over DDS (Cyclone DDS), topics under NAMESPACE (default /goggles); "
        "see the README's ROS 2 section",
    )
    run.add_argument(
        "--ros2-domain",
        type=int,
        default=None,
        metavar="ID",
        help="DDS domain (default: the run file's, else $ROS_DOMAIN_ID, else 0)",
    )
    run.add_argument(
        "--ros2-expose",
        action="store_true",
        help="speak ROS 2 beyond this machine (Cyclone DDS's own configuration: CYCLONEDDS_URI, or every "
        "interface); without it, loopback only",
    )
    run.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    run.add_argument(
        "--physics-device",
        default=None,
        help="Warp device of the simulated vehicles, with its own copy of the scene and gates to collide with "
        "(e.g. cpu beside --device cuda; people are then not obstacles); default: --device's, sharing its world",
    )
    add_backend_arg(run)
    add_recorded_arg(run)
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
        help="folder from 'goggles keys' (server.key_secret, and clients/ with the accepted client keys): "
        "CURVE on every ZeroMQ socket, exposed or not",
    )
    add_foxglove_args(run)
    run.add_argument(
        "--record",
        type=Path,
        default=None,
        help="record every input and output channel to FILE.mcap (MCAP) or FILE.lcmlog (lcm-logger)",
    )
    add_overwrite_arg(run, "--record")
    run.add_argument(
        "--record-compression",
        choices=["lz4", "zstd", "none"],
        default=None,
        help="MCAP chunk compression (default lz4: 0.42x the size at no measurable frame-rate cost; "
        "zstd: 0.33x, 10-25%% slower on two cores)",
    )
    run.add_argument(
        "--record-profile",
        choices=["goggles", "ros2"],
        default=None,
        help="goggles: the LCM messages as published (default); ros2: the ROS 2 topics (ros2msg schemas, CDR), "
        "which ros2 bag, Foxglove and rosbags open, and goggles replay reads back (MCAP only)",
    )
    run.add_argument(
        "--on-record-error",
        choices=["continue", "stop"],
        default=None,
        help="when writing the recording fails (a full disk): keep flying without it, or stop the run "
        "(default continue); either way what was written stays readable",
    )
    run.set_defaults(run=cmd_run)


def run_config(args):
    """The run file's configuration with the command line's changes (mode, scale, exposure, keys, ROS 2, LCM)."""
    import dataclasses

    from goggles.clock import ClockMode
    from goggles.paths import default_run
    from goggles.rig.runfile import check_channels, check_ros2_name, load_run_config

    config = load_run_config(args.config or default_run())
    changes = {}
    if args.mode is not None:
        changes["mode"] = {"sim": ClockMode.SIM, "lockstep": ClockMode.LOCKSTEP, "live": ClockMode.LIVE}[args.mode]
    if args.scale is not NOT_GIVEN:
        changes["scale"] = args.scale
    if args.expose is not None:
        if args.keys is None:
            raise ConfigError("--expose needs --keys DIR (make them with: goggles keys DIR)")
        from goggles.transport.buses import ZmqEndpoints

        changes["zmq"] = (config.zmq or ZmqEndpoints()).exposed(args.expose)
    if args.keys is not None:  # CURVE on the run file's endpoints too, when they stay on this machine
        from goggles.transport.buses import CurveServer

        changes["curve"] = CurveServer(args.keys / "server.key_secret", args.keys / "clients")
    if args.ros2 is not None or args.ros2_domain is not None or args.ros2_expose:
        from goggles.transport.ros2 import Ros2Settings

        settings = config.ros2 or Ros2Settings()
        if args.ros2 is not None:
            for token in filter(None, args.ros2.split("/")):
                check_ros2_name(token, f"--ros2 {args.ros2}", "give another namespace")
            settings = dataclasses.replace(settings, namespace=args.ros2)
        if args.ros2_expose:
            settings = dataclasses.replace(settings, expose=True)
        if args.ros2_domain is not None:
            if not 0 <= args.ros2_domain <= 232:
                raise ConfigError(f"--ros2-domain {args.ros2_domain}: a DDS domain is 0 to 232")
            settings = dataclasses.replace(settings, domain_id=args.ros2_domain)
        changes["ros2"] = settings
    if args.no_lcm:
        changes["lcm_url"] = None
    elif args.lcm_url is not None:
        changes["lcm_url"] = args.lcm_url
    config = dataclasses.replace(config, **changes)
    check_channels(config.source, config)  # again: --ros2 and --lcm-url may have turned a transport on
    return config


def unused_options(args, config) -> list[str]:
    """A line for each option given that this run ignores, with why (whoever asked for it should know)."""
    from goggles.clock import ClockMode

    lines = []
    if config.mode != ClockMode.SIM:
        how = "advances on step requests" if config.mode == ClockMode.LOCKSTEP else "runs on the wall clock"
        given = None if args.scale is NOT_GIVEN else "given"
        lines += unused({"--scale": given}, f": {config.mode.name.lower()} mode {how}")
    if args.record is None:
        recording = {"--overwrite": args.overwrite, "--record-compression": args.record_compression}
        recording |= {"--record-profile": args.record_profile, "--on-record-error": args.on_record_error}
        lines += unused(recording, " without --record")
    elif args.record.suffix == ".lcmlog":
        lines += unused({"--record-compression": args.record_compression}, ": an LCM event log is not compressed")
    return lines


def start_line(config, vehicles: int) -> str:
    """What the run is and where it speaks: every bus, on or off."""
    channels = sorted({f"{c.vehicle}/{c.name}" for c in config.cameras})
    ros2 = "off"
    if config.ros2 is not None:
        ros2 = f"{config.ros2.namespace} on DDS domain {config.ros2.domain_id}"
        ros2 += "" if config.ros2.expose else " (this machine only)"
    return (
        f"{config.mode.name.lower()} mode, {vehicles} vehicle(s), cameras {channels}; "
        f"ZeroMQ {'off' if config.zmq is None else config.zmq.publish}, LCM {config.lcm_url or 'off'}, ROS 2 {ros2}"
    )


def cmd_run(args) -> int:
    import threading

    from goggles.engine import Engine
    from goggles.paths import default_run

    config = run_config(args)
    for line in unused_options(args, config):
        print(f"goggles: {line}", file=sys.stderr)
    recorder = None
    stop = threading.Event()
    if args.record is not None:
        from goggles.logs.record import Recorder

        refuse_existing(args.record, args.overwrite)

        def record_failed(reason: str) -> None:
            print(f"goggles: {reason}" + ("; stopping" if args.on_record_error == "stop" else ""), file=sys.stderr)
            if args.on_record_error == "stop":
                stop.set()

        ros2_topics = None
        if args.record_profile == "ros2":
            from goggles.errors import require
            from goggles.transport.ros2 import Ros2Settings
            from goggles.transport.ros2.topics import Ros2Topics

            require("rosbags", "ros2", "ROS 2 recordings")
            ros2_topics = Ros2Topics(config.ros2 or Ros2Settings(), config.cameras, config.range_sensors, config.lidars)
        run_path = args.config or default_run()
        recorder = Recorder(
            args.record,
            metadata={
                "run_file": Path(run_path).read_text(encoding="utf-8-sig"),
                "run_file_path": str(Path(run_path).resolve()),
            },
            compression=args.record_compression or "lz4",
            on_error=record_failed,
            ros2=ros2_topics,
        )
    sinks = foxglove_sinks(args)
    engine = Engine(
        config,
        device=args.device,
        physics_device=args.physics_device,
        backend=args.backend,
        recorded=args.recorded,
        status=lambda line: print(line, file=sys.stderr, flush=True),
        recorder=recorder,
        sinks=sinks,
    )
    stop_on_signals(stop)
    freeze_start_up_heap()
    print(f"goggles: {start_line(config, len(engine.vehicles))}; Ctrl-C stops", file=sys.stderr, flush=True)
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
