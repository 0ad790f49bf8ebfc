"""goggles edit: spawn, move or remove a prop in a running engine (a ``scene/edit`` message)."""

from __future__ import annotations

import math

from goggles.cli.common import floats, floats_between, seconds_to_wait


def add_parser(commands) -> None:
    edit = commands.add_parser(
        "edit",
        help="spawn, move or remove a prop in a running engine (scene/edit)",
        description="Send one scene edit to a running engine over ZeroMQ (default) or LCM (--lcm-url): spawn an "
        "actor of one of the run file's [[prop]] tables, move it, or remove it. Over ZeroMQ the command waits "
        "until the engine listens; an edit the engine cannot apply (an unknown prop or actor) is logged there.",
    )
    actions = edit.add_subparsers(dest="action", required=True, metavar="ACTION")
    spawn = actions.add_parser("spawn", help="place a new actor of a prop (or place one of that name anew)")
    spawn.add_argument("actor", help="the actor's name (unique, at most 64 characters)")
    spawn.add_argument("prop", help="the run file's [[prop]] it is an instance of")
    move = actions.add_parser("move", help="move a spawned actor")
    move.add_argument("actor")
    for parser in (spawn, move):
        parser.add_argument(
            "--at",
            type=floats_between(3, 4, "--at"),
            required=True,
            help="x,y,z[,yaw]: world position (m, ENU) and heading about +z (rad); write --at=-1,... when x is "
            "negative",
        )
        parser.add_argument(
            "--orientation",
            type=floats(4, "--orientation"),
            default=None,
            help="w,x,y,z: a full orientation instead of the yaw",
        )
    remove = actions.add_parser("remove", help="take a spawned actor out of the world")
    remove.add_argument("actor")
    for parser in (spawn, move, remove):
        parser.add_argument("--inputs", default="tcp://127.0.0.1:5556", help="the engine's ZeroMQ input endpoint")
        parser.add_argument("--lcm-url", default=None, help="send on LCM at this URL instead of ZeroMQ")
        parser.add_argument("--timeout", type=seconds_to_wait, default=5.0, help="how long to wait for the engine, s")
        parser.set_defaults(warp=False)  # no kernels: start without loading Warp
        parser.set_defaults(run=cmd_edit)


def cmd_edit(args) -> int:
    from goggles.errors import ConfigError
    from goggles.transport.schema import MAX_EDIT_NAME

    position, orientation = (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0)
    if args.action != "remove":
        position = args.at[:3]
        if args.orientation is not None:
            if len(args.at) == 4:
                raise ConfigError("give the yaw in --at or an --orientation, not both")
            if math.sqrt(sum(v * v for v in args.orientation)) < 1e-6:
                raise ConfigError("--orientation must not be a zero quaternion")
            orientation = args.orientation
        elif len(args.at) == 4:
            orientation = (math.cos(args.at[3] / 2.0), 0.0, 0.0, math.sin(args.at[3] / 2.0))
    prop = getattr(args, "prop", "")
    if not 0 < len(args.actor) <= MAX_EDIT_NAME or len(prop) > MAX_EDIT_NAME:
        raise ConfigError(f"actor and prop names must be 1 to {MAX_EDIT_NAME} characters")
    if args.lcm_url is not None:
        _send_lcm(args.lcm_url, args.action, args.actor, prop, position, orientation)
    else:
        _send_zmq(args.inputs, args.timeout, args.action, args.actor, prop, position, orientation)
    where = "" if args.action == "remove" else f" at {[round(v, 3) for v in position]}"
    print(f"goggles edit: {args.action} {args.actor}{f' ({prop})' if prop else ''}{where} sent")
    return 0


def _send_zmq(endpoint: str, timeout: float, action: str, actor: str, prop: str, position, orientation) -> None:
    from goggles.client import Client
    from goggles.errors import ConfigError
    from goggles.transport.buses import ZmqEndpoints

    client = Client(ZmqEndpoints(inputs=endpoint))
    try:
        client.wait_for_engine(timeout)
    except TimeoutError as exc:
        client.close()
        raise ConfigError(f"{exc}: is 'goggles run' running with those [zmq] inputs?") from None
    if action == "spawn":
        client.spawn(actor, prop, position, orientation)
    elif action == "move":
        client.move(actor, position, orientation)
    else:
        client.remove(actor)
    client.close(linger=timeout)


def _send_lcm(url: str, action: str, actor: str, prop: str, position, orientation) -> None:
    import time

    from goggles.errors import ConfigError
    from goggles.transport.buses import open_lcm
    from goggles.transport.messages import scene_edit_message

    message = scene_edit_message(time.time_ns() // 1000, 0, action, actor, prop, position, orientation)
    bus = open_lcm(url)
    try:
        bus.publish("scene/edit", message.encode())
    except (OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"LCM at {url!r}: {exc}") from None
