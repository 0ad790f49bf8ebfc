"""An example autonomy loop: fly goggles' simulated quad through waypoints over the bus.

It uses only what the engine publishes (the vehicle's state and its stereo depth) and sends only
velocity commands back, as an external autonomy stack would. Its own proportional position loop
turns the next waypoint into a velocity command; the depth image's nearest obstacle ahead caps the
speed. With ``--lockstep`` it also drives the clock (deterministic, as fast as the machine allows).

    goggles run assets/run-demo.toml --mode lockstep &      # or a run file without a route
    python tools/fly_waypoints.py --lockstep --waypoints "0,0,1.5;3,0,2;3,3,2;0,0,1"

Exits 0 when every waypoint was reached, 1 on timeout.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from goggles.cli.common import positive
from goggles.client import Client, image_array
from goggles.dynamics import ControlMode
from goggles.errors import GogglesError
from goggles.transport.buses import ZmqEndpoints

#: How long to wait for an engine to answer at the publish endpoint (one still starting up answers once
#: it runs).
ENGINE_WAIT_S = 30.0


def parse_waypoints(text: str) -> list[np.ndarray]:
    points = [np.array([float(v) for v in point.split(",")]) for point in text.split(";") if point.strip()]
    if not points or any(p.shape != (3,) or not np.all(np.isfinite(p)) for p in points):
        raise argparse.ArgumentTypeError(f"waypoints must be 'x,y,z;x,y,z;...' in metres, got {text!r}")
    return points


def velocity_command(position: np.ndarray, target: np.ndarray, max_speed: float, clearance: float) -> list[float]:
    """Proportional velocity towards the target, capped by speed and by the clearance ahead."""
    error = target - position
    velocity = 1.2 * error
    speed_limit = min(max_speed, max(0.3, 0.5 * (clearance - 0.5)))
    speed = np.linalg.norm(velocity)
    if speed > speed_limit:
        velocity *= speed_limit / speed
    yaw = float(np.arctan2(error[1], error[0])) if np.linalg.norm(error[:2]) > 0.3 else 0.0
    return [*velocity.tolist(), yaw]


def clearance_ahead(depth_image) -> float:
    """Nearest valid depth in the central third of the image, metres (inf if nothing)."""
    depth = image_array(depth_image)
    h, w = depth.shape
    centre = depth[h // 3 : 2 * h // 3, w // 3 : 2 * w // 3]
    valid = centre[np.isfinite(centre)]
    return float(valid.min()) if valid.size else float("inf")


def stepped(client, reply, state_channel: str, state, clearance: float):
    """Lockstep: the state at the instant ``reply`` reached, and the clearance of the newest depth image
    published before it, read in the engine's order from one stream. Each depth image comes before the
    state of the next instant, so a run reads the same images at the same steps every time (a
    ``latest`` read takes whichever image has arrived, and the flight differs from run to run)."""
    before, now = client.receive_until(state_channel, reply.header.utime)
    for channel, message in before:
        if channel != state_channel:
            clearance = clearance_ahead(message)
    return (state if now is None else now), clearance


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waypoints", type=parse_waypoints, default=parse_waypoints("0,0,1.5;3,0,2;3,3,2;0,0,1"))
    parser.add_argument("--vehicle", default="quad0")
    parser.add_argument("--camera", default="stereo_left", help="camera whose depth caps the speed")
    parser.add_argument("--tolerance", type=positive, default=0.25, help="m: a waypoint is reached within this")
    parser.add_argument("--max-speed", type=positive, default=2.0, help="m/s")
    parser.add_argument("--lockstep", action="store_true", help="advance the engine's clock (lockstep mode)")
    parser.add_argument("--timeout", type=positive, default=120.0, help="s of sim time before giving up")
    parser.add_argument("--publish", default="tcp://127.0.0.1:5555")
    parser.add_argument("--inputs", default="tcp://127.0.0.1:5556")
    parser.add_argument("--control", default="tcp://127.0.0.1:5557")
    args = parser.parse_args()
    try:
        return fly(args)
    except (GogglesError, TimeoutError, ConnectionError) as exc:  # a bad endpoint, no lockstep engine: one line
        parser.error(str(exc))


def fly(args) -> int:
    with Client(ZmqEndpoints(args.publish, args.inputs, args.control)) as client:
        state_channel = f"{args.vehicle}/state"
        depth_channel = f"{args.vehicle}/{args.camera}/depth"
        if args.lockstep:  # one stream, in the engine's order (see stepped)
            client.subscribe(state_channel, depth_channel)
            client.wait_for_subscriptions(ENGINE_WAIT_S)  # from here on nothing published is lost
        else:
            client.wait_for_subscriptions(ENGINE_WAIT_S)  # an engine answers there
            for channel in (state_channel, depth_channel):
                client.latest(channel, timeout=0.0)  # open the subscriptions
        state, clearance = None, float("inf")
        for _ in range(40):  # until a state has come through (``latest``'s own sockets are still joining)
            if args.lockstep:  # in lockstep nothing is published unless the clock moves
                state, clearance = stepped(client, client.step(16), state_channel, state, clearance)
            else:
                state = client.latest(state_channel, timeout=0.5)
            if state is not None:
                break
        if state is None:
            print(f"no {state_channel} from the engine at {args.publish}", file=sys.stderr)
            return 1
        index = 0
        while index < len(args.waypoints):
            position = np.array(state.position)
            if np.linalg.norm(args.waypoints[index] - position) < args.tolerance:
                print(f"t={state.header.utime / 1e6:7.2f} s reached waypoint {index}: {np.round(position, 2).tolist()}")
                index += 1
                continue
            if state.header.utime / 1e6 > args.timeout:
                print(f"timeout at waypoint {index}", file=sys.stderr)
                return 1
            client.send_command(
                args.vehicle,
                ControlMode.VELOCITY,
                velocity_command(position, args.waypoints[index], args.max_speed, clearance),
            )
            if args.lockstep:
                state, clearance = stepped(client, client.step(16), state_channel, state, clearance)
                continue
            depth = client.latest(depth_channel, timeout=0.0)
            if depth is not None:
                clearance = clearance_ahead(depth)
            state = client.latest(state_channel, timeout=1.0) or state
    print(f"all {len(args.waypoints)} waypoints reached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
