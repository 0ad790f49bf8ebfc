"""goggles edit: spawn, move or remove a prop in a running engine (a ``scene/edit`` message)."""

from __future__ import annotations

import math

from goggles.cli.common import floats, floats_between, seconds_to_wait
from goggles.transport.endpoints import ZmqEndpoints


def add_parser(commands) -> None:
    edit = commands.add_parser(
        "edit",
        help="spawn, move or remove a prop in a running engine (scene/edit)",
        description="Send one scene edit to a running engine over ZeroMQ (default) or LCM (--lcm-url): spawn an "
        "actor of one of the run file's [[prop]] tables, move it, or remove it. Over ZeroMQ the command waits "
        "until the engine listens. It then waits for the engine's answer (scene/edited): exit code 0 where the "
        "edit applied, 1 with the engine's reason where it did not (an unknown prop or actor, no room), 0 with "
        "a note where no answer came (an engine that does not answer edits).",
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
        parser.add_argument("--inputs", default=ZmqEndpoints.inputs, help="the engine's ZeroMQ input endpoint")
        parser.add_argument(
            "--endpoint", default=ZmqEndpoints.publish, help="the engine's ZeroMQ output endpoint (its answer)"
        )
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
    edit = (args.action, args.actor, prop, position, orientation)
    if args.lcm_url is not None:
        answer = _send_lcm(args.lcm_url, args.timeout, *edit)
    else:
        answer = _send_zmq(args.inputs, args.endpoint, args.timeout, *edit)
    where = "" if args.action == "remove" else f" at {[round(v, 3) for v in position]}"
    what = f"{args.action} {args.actor}{f' ({prop})' if prop else ''}{where}"
    if answer is None:
        print(
            f"goggles edit: {what} sent; no answer from the engine in {args.timeout:g} s: whether it applied is unknown"
        )
        return 0
    if not answer.applied:
        print(f"goggles edit: {what} not applied: {answer.reason}")
        return 1
    print(f"goggles edit: {what} applied")
    return 0


def _answers(action: str, actor: str):
    """Whether a received ``scene/edited`` message answers this edit."""
    from goggles.transport.schema import EDIT_ACTIONS

    return lambda m: m.actor == actor and m.action == EDIT_ACTIONS[action]


def _send_zmq(inputs: str, outputs: str, timeout: float, action: str, actor: str, prop: str, position, orientation):
    """Send the edit, and the engine's answer to it (None if none came within ``timeout``)."""
    import time

    from goggles.client import Client
    from goggles.errors import ConfigError

    client = Client(ZmqEndpoints(publish=outputs, inputs=inputs))
    try:
        client.subscribe("scene/edited")
        client.wait_for_engine(timeout)
        listening = True
        try:
            client.wait_for_subscriptions(timeout)
        except TimeoutError:  # its answers cannot reach us: send anyway, and say so
            listening = False
    except TimeoutError as exc:
        client.close()
        raise ConfigError(f"{exc}: is 'goggles run' running with those [zmq] inputs?") from None
    if action == "spawn":
        client.spawn(actor, prop, position, orientation)
    elif action == "move":
        client.move(actor, position, orientation)
    else:
        client.remove(actor)
    deadline, answers = time.monotonic() + timeout, _answers(action, actor)
    try:
        while listening and time.monotonic() < deadline:
            received = client.receive(timeout=max(0.0, deadline - time.monotonic()))  # (channel, decoded)
            if received is not None and received[0] == "scene/edited" and answers(received[1]):
                return received[1]
        return None
    finally:
        client.close(linger=timeout)


def _send_lcm(url: str, timeout: float, action: str, actor: str, prop: str, position, orientation):
    """Send the edit on LCM, and the engine's answer there (None if none came within ``timeout``)."""
    import time

    from goggles.errors import ConfigError
    from goggles.transport.buses import open_lcm
    from goggles.transport.messages import scene_edit_message
    from goggles.transport.schema import MalformedMessage, decode_any

    message = scene_edit_message(time.time_ns() // 1000, 0, action, actor, prop, position, orientation)
    bus = open_lcm(url)
    heard = []
    answers = _answers(action, actor)

    def on_answer(channel: str, data: bytes) -> None:
        try:
            answer = decode_any(data)
        except MalformedMessage:
            return
        if answers(answer):
            heard.append(answer)

    bus.subscribe("scene/edited", on_answer)
    try:
        bus.publish("scene/edit", message.encode())
    except (OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"LCM at {url!r}: {exc}") from None
    deadline = time.monotonic() + timeout
    while not heard and time.monotonic() < deadline:
        bus.handle_timeout(max(1, int((deadline - time.monotonic()) * 1000)))
    return heard[0] if heard else None
