"""goggles echo: decoded messages of a channel, from ZeroMQ or LCM."""

from __future__ import annotations

import sys
import time

from goggles.cli.common import SilenceHint, at_least
from goggles.transport.endpoints import ZmqEndpoints


def is_input_channel(channel: str) -> bool:
    """A channel the engine reads (and never publishes): poses, skeletons, scene edits, commands."""
    return channel.startswith(("pose/", "skeleton/")) or channel == "scene/edit" or channel.endswith("/command")


def add_parser(commands) -> None:
    echo = commands.add_parser(
        "echo",
        help="print the decoded messages of a channel (like lcm-spy or ros2 topic echo)",
        description="Subscribe to CHANNEL (a prefix: 'quad0/' prints every quad0 channel) on the engine's "
        "ZeroMQ output (default) or on LCM (--lcm-url) and print each message decoded, one line each. The "
        "engine's inputs (pose/, skeleton/, scene/edit, <vehicle>/command) never come out of its ZeroMQ "
        "output: for those it listens on LCM's default group, where goggles bridge sends them too.",
    )
    echo.add_argument("channel", nargs="?", default="", help="channel or channel prefix (default: all)")
    echo.add_argument("--endpoint", default=ZmqEndpoints.publish, help="engine's ZeroMQ output endpoint")
    echo.add_argument("--lcm-url", default=None, help="listen on LCM at this URL instead of ZeroMQ")
    echo.add_argument("--count", type=at_least(1), default=None, help="stop after this many messages")
    echo.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    echo.set_defaults(warp=False)  # no kernels: start without loading Warp
    echo.set_defaults(run=cmd_echo)


def cmd_echo(args) -> int:
    from goggles.client import describe
    from goggles.transport.schema import MalformedMessage, decode_any

    deadline = None if args.duration is None else time.monotonic() + args.duration
    printed = 0
    if args.lcm_url is None and is_input_channel(args.channel):
        from goggles.transport.endpoints import DEFAULT_LCM_URL

        args.lcm_url = DEFAULT_LCM_URL
        print(
            f"goggles echo: {args.channel} is an input of the engine, which publishes only its outputs on ZeroMQ: "
            f"listening on LCM at {args.lcm_url} (where goggles bridge sends it too; --lcm-url for another)",
            file=sys.stderr,
            flush=True,
        )
    if args.lcm_url is None:
        from goggles.client import Client

        silence = _echo_silence(args.channel, args.endpoint)
        with Client(ZmqEndpoints(publish=args.endpoint)) as client:
            client.subscribe(args.channel)
            while (deadline is None or time.monotonic() < deadline) and (args.count is None or printed < args.count):
                received = client.receive(timeout=0.2)
                if received is not None:
                    print(f"{received[0]}: {describe(received[1])}", flush=True)
                    printed += 1
                silence.check(printed)
        return 0
    import re

    from goggles.transport.buses import open_lcm

    bus = open_lcm(args.lcm_url)
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
    silence = _echo_silence(args.channel, args.lcm_url)
    while (deadline is None or time.monotonic() < deadline) and (args.count is None or printed < args.count):
        bus.handle_timeout(200)
        silence.check(printed)
    return 0


def _echo_silence(channel: str, where: str) -> SilenceHint:
    what = f"on {channel!r}" if channel else "on any channel"
    return SilenceHint(
        f"goggles echo: nothing yet {what} at {where} after {SilenceHint.AFTER_S:g} s: is goggles run running there, "
        "and is the name right? (goggles echo with no channel prints every one)"
    )
