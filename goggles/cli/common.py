"""What every subcommand shares: argument types, camera arguments, device checks, Warp start-up."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import re
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from goggles.checks import FLOAT32_MAX, MAX_SEED, beyond_float32, warp_device
from goggles.errors import ConfigError
from goggles.transport.endpoints import FOXGLOVE_PORT

log = logging.getLogger("goggles")


def floats(count: int, what: str):
    """argparse type: ``count`` comma-separated finite numbers (in float32's range: poses, setpoints
    and intrinsics are used in float32, where a larger one is infinite)."""

    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            values = ()
        if len(values) != count or not all(abs(v) <= FLOAT32_MAX for v in values):  # NaN fails too
            raise argparse.ArgumentTypeError(
                f"{what} must be {count} comma-separated finite numbers{_float32_hint(text)}, got {text!r}"
            )
        return values

    return parse


def floats_between(low: int, high: int, what: str):
    """argparse type: ``low`` to ``high`` comma-separated finite numbers."""

    def parse(text: str) -> tuple[float, ...]:
        for count in range(high, low - 1, -1):
            try:
                return floats(count, what)(text)
            except argparse.ArgumentTypeError:
                continue
        raise argparse.ArgumentTypeError(
            f"{what} must be {low} to {high} comma-separated finite numbers{_float32_hint(text)}, got {text!r}"
        )

    return parse


def _float32_hint(text: str) -> str:
    """What to add where a value is finite but beyond float32's range (1e39: a person sees no fault)."""
    try:
        huge = any(beyond_float32(v) for v in map(float, text.split(",")))
    except ValueError:
        huge = False
    return " no larger than 3.4e38 (float32's range)" if huge else ""


def positive(text: str) -> float:
    """argparse type: a positive finite number."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= FLOAT32_MAX:  # beyond it, infinite in float32, where goggles computes
        raise argparse.ArgumentTypeError(f"must be a positive number{_float32_hint(text)}, got {text!r}")
    return value


def scale(text: str) -> float:
    """argparse type: sim seconds per wall second (``clock.parse_scale``, without 'auto')."""
    return _scale(text, auto=False)


def auto_or_scale(text: str) -> float | None:
    """argparse type: 'auto' (None) or a ``scale`` (``clock.parse_scale``)."""
    return _scale(text, auto=True)


def _scale(text: str, auto: bool) -> float | None:
    from goggles.clock import parse_scale

    try:
        return parse_scale(text, "it", auto=auto)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("it ")) from None


#: What an option the command line was not given holds (its argparse default), where None means something.
NOT_GIVEN = object()


#: Longest wait a command-line timeout may ask for, s: longer ones overflow the system's timers.
MAX_WAIT_S = 1e6


def seconds_to_wait(text: str) -> float:
    """argparse type: a timeout, positive and at most ``MAX_WAIT_S``."""
    value = positive(text)
    if value > MAX_WAIT_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_WAIT_S:g} s, got {text!r}")
    return value


def at_least(low: int):
    """argparse type: an integer no smaller than ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def seed(text: str) -> int:
    """argparse type: a seed, 0 to ``checks.MAX_SEED``."""
    value = at_least(0)(text)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be a seed, 0 to {MAX_SEED}, got {value}")
    return value


def port(text: str) -> int:
    """argparse type: a TCP or UDP port number."""
    value = at_least(1)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number, 1 to 65535, got {value}")
    return value


def add_camera_args(parser: argparse.ArgumentParser, width: int, height: int) -> None:
    parser.add_argument(
        "--scene", type=Path, default=None, help="scene TOML or mesh file (default: the built-in arena)"
    )
    parser.add_argument("--width", type=at_least(1), default=width, help="image width, pixels (default %(default)s)")
    parser.add_argument("--height", type=at_least(1), default=height, help="image height, pixels (default %(default)s)")
    parser.add_argument(
        "--vfov", type=positive, default=60.0, help="vertical field of view, degrees (default %(default)s)"
    )
    parser.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N (default: Warp's default)")
    parser.add_argument("--threads", type=at_least(1), default=None, help="CPU threads per render (default: all cores)")


def add_backend_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=["auto", "warp", "bvh", "wide", "embree"],
        default="auto",
        help="primary-ray tracer: warp (Warp's BVH, CPU or CUDA), bvh (goggles' own BVH in the same kernel, CPU "
        "or CUDA), wide (goggles' BVH in 8-wide compressed nodes, made for GPUs), embree (Intel Embree, CPU, "
        "2-3x faster there), auto (default: embree on the CPU when embreex is installed, else warp; bvh on CUDA)",
    )


def add_recorded_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--recorded",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="replay recordings of the physics steps and of each camera group's frame (CUDA graphs; the same "
        "bytes either way); default: on CUDA only. On the CPU the frames are recorded with --backend warp or bvh only",
    )


def add_foxglove_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--foxglove",
        type=port,
        nargs="?",
        const=FOXGLOVE_PORT,
        default=None,
        metavar="PORT",
        help=f"serve the outputs and the world to Foxglove on ws://127.0.0.1:PORT (default {FOXGLOVE_PORT})",
    )
    parser.add_argument(
        "--foxglove-host",
        default=None,
        help="address of the Foxglove server (default 127.0.0.1; 0.0.0.0 exposes it)",
    )


def unused(options: dict[str, object], why: str) -> list[str]:
    """A line for each of ``options`` (flag: its parsed value) that was given, saying that this run does
    not use it, and ``why`` (": the reason", or " without --other"): an option ignored in silence
    leaves whoever gave it believing it in force."""
    return [f"{flag} is not used{why}" for flag, value in options.items() if value is not None and value is not False]


def say_unused(options: dict[str, object], why: str) -> None:
    """``unused``'s lines, on stderr."""
    for line in unused(options, why):
        print(f"goggles: {line}", file=sys.stderr)


def foxglove_sinks(args) -> list:
    """The Foxglove server that ``--foxglove`` asks for (printing where to connect), or none."""
    if args.foxglove is None:
        say_unused({"--foxglove-host": args.foxglove_host}, " without --foxglove")
        return []
    from goggles.preview.foxglove_sink import FoxgloveSink

    host = args.foxglove_host or "127.0.0.1"
    sink = FoxgloveSink(host=host, port=args.foxglove)
    print(f"Foxglove: ws://{host}:{sink.port}", file=sys.stderr, flush=True)
    return [sink]


def camera_model(args):
    from goggles.render import CameraModel

    extra = {"min_depth": args.min_depth, "max_depth": args.max_depth, "distortion": args.distortion}
    if args.intrinsics is not None:
        from goggles.render.camera import blindness

        fx, fy, cx, cy = args.intrinsics
        model = CameraModel(args.width, args.height, fx, fy, cx, cy, **extra)
        blind = blindness(model)
        if blind is not None:
            raise ConfigError(f"--intrinsics {fx:g},{fy:g},{cx:g},{cy:g}: {blind}")
        return model
    return CameraModel.from_fov(args.width, args.height, args.vfov, **extra)


#: A value that looks like a flag to argparse but is a list of numbers starting with a negative one.
_NEGATIVE_LIST = re.compile(r"^-[\d.][\d.eE+-]*(,[-+\d.eE]+)+$")


#: Options whose values may be a negative axis (``--up -y``).
_AXIS_OPTIONS = ("--up",)


def join_negative_values(argv: list[str]) -> list[str]:
    """``--pose -4,0,1.5,...`` as ``--pose=-4,0,1.5,...`` and ``--up -y`` as ``--up=-y``: argparse would
    take the value for a flag."""
    out: list[str] = []
    for token in argv:
        axis = out and out[-1] in _AXIS_OPTIONS and token in ("-x", "-y", "-z")
        if axis or (out and out[-1].startswith("--") and "=" not in out[-1] and _NEGATIVE_LIST.match(token)):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def tag_leaf_parsers(parser: argparse.ArgumentParser) -> None:
    """Let every subcommand's parser report errors in its own usage (``args.parser_``)."""
    parser.set_defaults(parser_=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                tag_leaf_parsers(child)


def quiet_warp_init() -> None:
    """Initialise Warp without its CUDA-driver warning on machines without a GPU (``-v`` shows it)."""
    import warp as wp

    from goggles.runtime.c_stderr import captured_c_stderr

    with captured_c_stderr():
        wp.init()


def add_overwrite_arg(parser: argparse.ArgumentParser, what: str, also: str = "") -> None:
    """``--overwrite``: without it, an existing file at ``what`` is refused (``refuse_existing``)."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace an existing {what} file{also} (without it, a file there is refused: a flight is not lost)",
    )


def refuse_existing(path: Path | None, overwrite: bool, option: str = "--record") -> None:
    """Refuse to write over a non-empty file unless told to: it may be a flight no one can fly again.

    Raises:
        ConfigError: naming the option and the path.
    """
    if path is not None and path.is_file() and path.stat().st_size > 0 and not overwrite:
        raise ConfigError(f"{option} {path}: the file exists; give another path, or --overwrite to replace it")


def check_device(name: str | None, option: str = "--device") -> None:
    """Refuse a Warp device this machine does not have, naming the ones it has (``checks.warp_device``).

    Raises:
        ConfigError: unknown name, or CUDA asked for where there is none.
    """
    if name is not None:
        warp_device(name, option)


def freeze_start_up_heap() -> None:
    """Exempt everything a server built at start from the cyclic garbage collector (``gc.freeze``):
    those objects live all run, and a full collection that scans them stalls the loop (the engine's:
    115-135 ms per full collection on the development CPU, every few minutes of flight; ~0 ms frozen)."""
    gc.collect()
    gc.freeze()


_interruption: type[KeyboardInterrupt] | None = None
"""What a Ctrl-C (KeyboardInterrupt) or SIGTERM (``Terminated``) since the start of ``main`` raised,
remembered so that a library swallowing it while a command starts (trimesh's optional imports catch
BaseException) cannot make a long run miss it; None: none came."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler, a container stopping): handled as a Ctrl-C is, so that a
    command cleans up (closes its recordings, stops its worker processes) instead of dying where it
    stands; ``main`` exits 143 for it."""


def leave(code: int) -> int:
    """The command's exit code; interrupted (130, 143) with a worker still inside a kernel, which
    nothing can stop, the process ends here: the command has cleaned up (recordings closed, buses
    shut), and waiting the kernel out would keep a Ctrl-C waiting for minutes. For the processes'
    entry points only (never a caller in a process that goes on)."""
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if code in (130, 143) and busy:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def remember_interrupts() -> None:
    """From now on a Ctrl-C (SIGINT) or SIGTERM is remembered and raises KeyboardInterrupt (or
    ``Terminated``); a signal that is ignored (SIGINT in a background job) stays ignored."""
    global _interruption
    _interruption = None
    if threading.current_thread() is not threading.main_thread():
        return

    def raising(exception: type[KeyboardInterrupt]):
        def on_signal(signum, frame):
            global _interruption
            _interruption = exception
            raise exception

        return on_signal

    for number, exception in ((signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)):
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, raising(exception))


def report(line: str) -> None:
    """Print a progress line on stderr; a long command's once-a-second call, so it is also where a
    Ctrl-C swallowed while the command started is raised at last."""
    if _interruption is not None:
        raise _interruption
    print(line, file=sys.stderr, flush=True)


def stop_on_signals(stop=None):
    """``stop`` (a new ``threading.Event`` if None), set from now on by Ctrl-C (SIGINT) or SIGTERM, so
    that long-running commands stop cleanly; set at once if a Ctrl-C came while the command started."""
    stop = stop if stop is not None else threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if _interruption is not None:
        stop.set()
    return stop


#: How long a step (``goggles.runtime.progress``) goes on before a person is told what they wait for, and how
#: often again while it lasts, seconds.
SLOW_STEP_S = 2.0
SLOW_STEP_AGAIN_S = 5.0


@contextmanager
def telling_slow_steps(after_s: float = SLOW_STEP_S, again_s: float = SLOW_STEP_AGAIN_S):
    """While the enclosed command runs, a line on stderr for each step that has lasted ``after_s``
    (a first run compiling Warp's kernels, a large scene's import), and again every ``again_s``."""
    from goggles.runtime.progress import current

    done = threading.Event()

    def watch() -> None:
        told: tuple[str, float, float] | None = None  # the step told last: text, start, when told
        while not done.wait(0.25):
            step = current()
            now = time.monotonic()
            if step is None or now - step[1] < after_s:
                continue
            if told is None or told[:2] != step or now - told[2] >= again_s:
                told = (*step, now)
                print(f"goggles: {step[0]} ... {now - step[1]:.0f} s", file=sys.stderr, flush=True)

    watcher = threading.Thread(target=watch, name="slow-steps", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


class SilenceHint:
    """Says ``hint`` once, on stderr, when nothing has come for a few seconds: a channel nobody publishes
    and a goggles that is not running look alike from a listener, and a silent terminal explains neither."""

    AFTER_S = 3.0

    def __init__(self, hint: str):
        self.hint, self.since, self.told = hint, time.monotonic(), False

    def check(self, received: int) -> None:
        """``received``: how many have come so far (the hint is for none)."""
        if not self.told and received == 0 and time.monotonic() - self.since > self.AFTER_S:
            self.told = True
            print(self.hint, file=sys.stderr, flush=True)
