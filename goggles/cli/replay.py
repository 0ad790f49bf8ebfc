"""goggles replay: render a recorded flight again, with other sensors or another scene."""

from __future__ import annotations

import sys
from pathlib import Path

from goggles.cli.common import (
    add_foxglove_args,
    add_overwrite_arg,
    at_least,
    foxglove_sinks,
    positive,
    refuse_existing,
    report,
    say_unused,
    scale,
)
from goggles.errors import ConfigError


def add_parser(commands) -> None:
    replay = commands.add_parser(
        "replay",
        help="render a recorded flight again (other sensors or scene), or every log in a folder",
        description="Re-render a recording's flight from its poses (<vehicle>/state of a simulated flight, "
        "pose/<vehicle> of a live one, skeleton/<name> of people) with the recording's own run file or --sensors, "
        "in the recording's scene or --scene. Same device, log and run file: the same image bytes. A folder is "
        "replayed by one process per core, with a progress line each second; Ctrl-C stops every one at once.",
    )
    replay.add_argument("log", type=Path, help="a .mcap or .lcmlog file, or a folder of them")
    replay.add_argument("--sensors", type=Path, default=None, help="run file whose vehicles and sensors to use")
    replay.add_argument("--scene", type=Path, default=None, help="scene to render in instead")
    replay.add_argument(
        "--record", type=Path, default=None, help="record the new outputs here (a folder when replaying a folder)"
    )
    pace = replay.add_mutually_exclusive_group()
    pace.add_argument(
        "--scale",
        "--speed",
        dest="scale",
        type=scale,
        default=None,
        help="sim seconds per wall second: play at this multiple of the recorded pace (--speed: the same)",
    )
    pace.add_argument("--as-fast-as-possible", action="store_true", help="no pacing (the default)")
    replay.add_argument(
        "--max-gap",
        type=positive,
        default=None,
        metavar="SECONDS",
        help="skip a pause in the poses longer than this instead of rendering it, and replay on from where it was "
        "when their clock goes back this far; a single pose stamped this far from its neighbours is a corrupt "
        "stamp, dropped and counted (default: 60)",
    )
    add_overwrite_arg(replay, "--record", " or the replays in a --record folder")
    add_foxglove_args(replay)
    replay.add_argument("--jobs", type=at_least(1), default=None, help="processes for a folder (default: all cores)")
    replay.add_argument("--device", default=None, help="Warp device")
    replay.set_defaults(run=cmd_replay)


def cmd_replay(args) -> int:
    from goggles.logs.replay import MAX_GAP_S, check_record_path, replay_file, replay_folder

    speed = None if args.as_fast_as_possible else args.scale
    max_gap_s = MAX_GAP_S if args.max_gap is None else args.max_gap
    if args.log.is_dir():
        if args.foxglove is not None:
            raise ConfigError(f"{args.log} is a folder: --foxglove shows one log at a time, give a file")
        foxglove_sinks(args)  # none: it says so if --foxglove-host was given alone
        results = replay_folder(
            args.log,
            record_folder=args.record,
            jobs=args.jobs,
            overwrite=args.overwrite,
            sensors=args.sensors,
            scene=args.scene,
            speed=speed,
            device=args.device,
            max_gap_s=max_gap_s,
            report=report,
        )
    else:
        check_record_path(args.log, args.record)  # the more telling refusal first
        say_unused({"--jobs": args.jobs}, ": one log is replayed in this process")
        refuse_existing(args.record, args.overwrite)
        sinks = foxglove_sinks(args)
        try:
            results = [
                replay_file(
                    args.log,
                    sensors=args.sensors,
                    scene=args.scene,
                    record=args.record,
                    speed=speed,
                    device=args.device,
                    max_gap_s=max_gap_s,
                    progress=lambda t: report(f"replayed {t:.1f} s of the log"),
                    sinks=sinks,
                )
            ]
        finally:
            for sink in sinks:
                sink.close()
    for r in results:
        if r.error is not None:
            print(f"goggles: error: {r.error}", file=sys.stderr)
            continue
        print(
            f"{r.log}: {r.poses} poses, {r.frames} messages recorded, {r.log_seconds:.2f} s of log in "
            f"{r.seconds:.2f} s ({r.log_seconds / max(r.seconds, 1e-9):.2f}x real time)"
            + (f", {r.dropped} recorded messages dropped (see the warnings)" if r.dropped else "")
        )
    if any(r.error is not None for r in results):
        return 2
    return 0
