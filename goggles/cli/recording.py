"""goggles recording: work on recordings as files (repair one a killed run left)."""

from __future__ import annotations

from pathlib import Path

from goggles.errors import ConfigError


def add_parser(commands) -> None:
    recording = commands.add_parser(
        "recording",
        help="work on recordings as files: repair one a killed run left, so ROS 2 tools open it",
        description="Recordings as files. 'repair' copies what can be read of an MCAP recording cut off before it "
        "was closed (SIGKILL, a power cut, a full disk) into a new file with its summary: goggles replay reads "
        "a cut-off recording as it is, but ros2 bag, rosbags and Foxglove's seek need the summary.",
    )
    actions = recording.add_subparsers(dest="action", required=True, metavar="ACTION")
    repair = actions.add_parser("repair", help="copy a cut-off recording into one ROS 2 tools open")
    repair.add_argument("recording", type=Path, help="the .mcap file a killed run left")
    repair.add_argument("--out", type=Path, default=None, help="the repaired copy (default: <name>.repaired.mcap)")
    repair.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    repair.set_defaults(warp=False)  # no kernels: start without loading Warp
    repair.set_defaults(run=cmd_repair)


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
