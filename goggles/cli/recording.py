"""goggles recording: work on recordings as files (repair one a killed run left)."""

from __future__ import annotations

from pathlib import Path

from goggles.errors import ConfigError


def add_parser(commands) -> None:
    recording = commands.add_parser(
        "recording",
        help="work on recordings as files: repair one a killed run left, compare two runs",
        description="Recordings as files. 'repair' copies what can be read of an MCAP recording cut off before it "
        "was closed (SIGKILL, a power cut, a full disk) into a new file with its summary: goggles replay reads "
        "a cut-off recording as it is, but ros2 bag, rosbags and Foxglove's seek need the summary. 'compare' "
        "says whether two recordings are the same flight: every channel's messages, at the same sim times, the "
        "same bytes but for the wall clock's fields (header.wall_utime, the clock channel's achieved scale).",
    )
    actions = recording.add_subparsers(dest="action", required=True, metavar="ACTION")
    repair = actions.add_parser("repair", help="copy a cut-off recording into one ROS 2 tools open")
    repair.add_argument("recording", type=Path, help="the .mcap file a killed run left")
    repair.add_argument("--out", type=Path, default=None, help="the repaired copy (default: <name>.repaired.mcap)")
    repair.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    repair.set_defaults(warp=False)  # no kernels: start without loading Warp
    repair.set_defaults(run=cmd_repair)
    compare = actions.add_parser(
        "compare",
        help="whether two recordings are the same flight (exit 0) or where they first differ (exit 1)",
        description="Compare two recordings (MCAP or LCM logs) channel by channel: the same messages at the same "
        "sim times with the same bytes, leaving out only what the wall clock measured (each header's wall_utime, "
        "the clock channel's achieved scale and rates). Two runs of one run file, seed and inputs are the same "
        "flight in lockstep and in sim mode with firmware in the loop (docs/betaflight.md).",
    )
    compare.add_argument("first", type=Path, help="a recording (.mcap or an LCM log)")
    compare.add_argument("second", type=Path, help="the recording to compare it with")
    compare.set_defaults(warp=False)
    compare.set_defaults(run=cmd_compare)


def cmd_repair(args) -> int:
    from goggles.logs.repair import repair_recording, repaired_name

    out = args.out or repaired_name(args.recording)
    if out.exists() and not args.overwrite:
        raise ConfigError(f"--out {out}: exists; give another file, or --overwrite to replace it")
    result = repair_recording(args.recording, out)
    how = "cut off where it was killed" if result.cut_off else "complete"
    skipped = f", {result.skipped_chunks} damaged chunk(s) skipped" if result.skipped_chunks else ""
    print(f"goggles recording: {result.messages} messages copied to {result.path} (the original was {how}{skipped})")
    return 0


def cmd_compare(args) -> int:
    from goggles.logs.compare import compare_recordings

    result = compare_recordings(args.first, args.second)
    total = sum(n for n, _ in result.counts.values())
    if result.same:
        channels = f"{len(result.counts)} channel" + ("s" if len(result.counts) != 1 else "")
        print(f"goggles recording: the same flight: {total} messages on {channels} (wall-clock fields aside)")
        return 0
    print(f"goggles recording: they differ: {result.difference}")
    return 1
