"""goggles bridge mocap: motion capture to pose/<body> and skeleton/<name> messages."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from goggles.cli.common import floats, freeze_start_up_heap, port, say_unused, seconds_to_wait, stop_on_signals
from goggles.transport.endpoints import DEFAULT_LCM_URL, ZmqEndpoints

_POSE = floats(7, "a mock body's pose")


#: Longest mock body name: libmotioncapture's mock fails on longer ones (an error, or a crash).
MOCK_NAME_MAX = 120


def mock_bodies(text: str) -> str:
    """argparse type: 'name(x,y,z,qw,qx,qy,qz);...', checked here: the mock system ignores what it
    cannot parse (a body that never appears)."""
    bodies = [b.strip() for b in text.split(";") if b.strip()]
    if not bodies:
        raise argparse.ArgumentTypeError(f"give at least one body name(x,y,z,qw,qx,qy,qz); got {text!r}")
    names = set()
    for body in bodies:
        match = re.fullmatch(r"([^\s(),;]+)\((.*)\)", body)
        pose = _POSE(match.group(2)) if match else ()
        if not match or not any(pose[3:]):
            raise argparse.ArgumentTypeError(
                f"each body is name(x,y,z,qw,qx,qy,qz): finite numbers, a non-zero quaternion; got {body[:200]!r}"
            )
        name = match.group(1)
        if len(name) > MOCK_NAME_MAX:
            raise argparse.ArgumentTypeError(f"mock body names are at most {MOCK_NAME_MAX} characters: {name[:40]}...")
        if name in names:
            raise argparse.ArgumentTypeError(f"mock body {name!r} is given twice")
        names.add(name)
    return ";".join(bodies)  # the mock keeps spaces in names


def add_parser(commands) -> None:
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
    mocap.add_argument("--qtm-port", type=port, default=22223, help="Qualisys QTM real-time port (qtm backend)")
    mocap.add_argument("--multicast", action="store_true", help="NatNet: listen to Motive's multicast stream")
    mocap.add_argument(
        "--mock-bodies",
        type=mock_bodies,
        default=None,
        help="mock system: static bodies 'name(x,y,z,qw,qx,qy,qz);...' (metres, z up) at 100 Hz",
    )
    mocap.add_argument("--command-port", type=port, default=1510)
    mocap.add_argument("--data-port", type=port, default=1511)
    mocap.add_argument("--calibration", type=Path, default=None, help="room calibration TOML (calib/room-example.toml)")
    mocap.add_argument("--zmq", default=ZmqEndpoints.inputs, help="the engine's ZeroMQ input endpoint")
    mocap.add_argument("--no-zmq", action="store_true")
    mocap.add_argument("--lcm-url", default=DEFAULT_LCM_URL)
    mocap.add_argument("--no-lcm", action="store_true")
    mocap.add_argument("--timeout", type=seconds_to_wait, default=5.0, help="s to wait for the mocap server")
    mocap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    mocap.set_defaults(warp=False)  # no kernels: start without loading Warp
    mocap.set_defaults(run=cmd_bridge_mocap)


def cmd_bridge_mocap(args) -> int:

    from bridges.mocap import MocapBridge, Publisher, RoomCalibration, load_room_calibration, run_bridge, status_line
    from bridges.sources import open_source

    if args.system != "mock":
        say_unused({"--mock-bodies": args.mock_bodies}, f": --system {args.system} streams its own bodies")
    calibration = (
        load_room_calibration(args.calibration, args.system)
        if args.calibration
        else RoomCalibration.for_system(args.system)
    )
    source = open_source(
        args.system,
        args.backend,
        host=args.host,
        local=args.local,
        command_port=args.command_port,
        data_port=args.data_port,
        qtm_port=args.qtm_port,
        multicast=args.multicast,
        mock_bodies=args.mock_bodies or "",
        timeout=args.timeout,
    )
    publisher = Publisher(None if args.no_zmq else args.zmq, None if args.no_lcm else args.lcm_url)
    bridge = MocapBridge(calibration, publisher)
    stop = stop_on_signals()
    freeze_start_up_heap()
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
