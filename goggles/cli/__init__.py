"""The ``goggles`` command: one module per subcommand, each with its ``add_parser`` and its run
function; heavy imports stay inside them, so ``goggles keys`` or ``goggles echo`` never load Warp's
kernels."""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import threading

from goggles.cli import (
    bench,
    bridge,
    dataset,
    echo,
    edit,
    fly,
    keys,
    preview,
    race,
    recording,
    render,
    replay,
    run,
    splat,
)
from goggles.cli.common import (
    Terminated,
    check_device,
    join_negative_values,
    quiet_warp_init,
    remember_interrupts,
    tag_leaf_parsers,
    telling_slow_steps,
)
from goggles.errors import GogglesError
from goggles.runtime.host_memory import keep_large_allocations

__all__ = ["build_parser", "check_device", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="goggles",
        description="Vehicle-in-the-loop mixed-reality renderer for aerial robots.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and Warp messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (render, bench, run, preview, keys, replay, recording, dataset, echo, edit, race, bridge, fly, splat):
        module.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one goggles command; its exit code. The signal handlers a command installs are undone after
    it (in the main thread), so that a process calling ``main`` again starts as it did."""
    if threading.current_thread() is not threading.main_thread():
        return _command(argv)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    remember_interrupts()
    try:
        return _command(argv)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)


def _command(argv: list[str] | None) -> int:
    parser = build_parser()
    tag_leaf_parsers(parser)
    args, extra = parser.parse_known_args(join_negative_values(sys.argv[1:] if argv is None else list(argv)))
    if extra:
        args.parser_.error(f"unrecognized arguments: {' '.join(extra)} (see {args.parser_.prog} --help)")
    if getattr(args, "duration", None) is not None and not 0 < args.duration < math.inf:
        args.parser_.error(
            f"--duration {args.duration}: must be a number of seconds > 0 (leave it out to run until stopped)"
        )
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    keep_large_allocations()  # frames of megabytes, made anew each frame: warm heap pages, not fresh maps
    try:
        if getattr(args, "warp", True):
            import warp as wp

            wp.config.log_level = wp.LOG_INFO if args.verbose else wp.LOG_ERROR
            if args.verbose:
                wp.init()
            else:
                quiet_warp_init()
            check_device(getattr(args, "device", None))
            check_device(getattr(args, "physics_device", None), "--physics-device")
        with telling_slow_steps():
            return args.run(args)
    except GogglesError as exc:
        print(f"goggles: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or folder the system refused: the person can act on its name and reason
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"goggles: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:  # a size no check foresaw: one line, not a traceback
        print(
            f"goggles: error: {args.parser_.prog}: this machine's memory ran out; ask for less (fewer worlds, "
            "triangles, Gaussians, a smaller image)",
            file=sys.stderr,
        )
        return 2
    except Terminated:
        return 143
    except KeyboardInterrupt:
        return 130
