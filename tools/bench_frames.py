"""What carrying an image costs beyond ZeroMQ itself: a stereo depth pair from the engine's outputs to
a client's arrays, against bare pyzmq moving the same bytes, in one run.

goggles' path: ``messages.image_message`` and ``Outputs.publish`` (one frame per image, sent by the
engine's ``ZmqBus``), then ``Client.receive`` and ``image_array``; timed first with the C allocator
as it comes, then as every ``goggles`` command sets it (``goggles.runtime.host_memory``). The peer: a PUB
socket sending frames of the same size and a SUB socket receiving them with ``copy=False`` (the
transfer alone). All over TCP on loopback in this process. Prints the percentiles of each; the last
line is ``width= height= p50_ms= p99_ms= bare_p50_ms= ratio_p50=`` (goggles' path as tuned).

    python tools/bench_frames.py [--width 640 --height 480 --pairs 400]
"""

from __future__ import annotations

import argparse
import socket
import time

import numpy as np
import zmq

from goggles.cli.common import at_least
from goggles.client import Client, image_array
from goggles.engine.outputs import Outputs
from goggles.engine.status import Counters, StageTimes
from goggles.errors import GogglesError
from goggles.render import CameraModel
from goggles.runtime.host_memory import keep_large_allocations
from goggles.transport import messages
from goggles.transport.buses import ZmqBus, ZmqEndpoints


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def goggles_path(width: int, height: int, pairs: int) -> np.ndarray:
    """Seconds from publishing a stereo depth pair to having both as arrays, per pair."""
    endpoints = ZmqEndpoints(*(f"tcp://127.0.0.1:{_port()}" for _ in range(3)))
    bus = ZmqBus(endpoints)
    outputs = Outputs([bus], [], Counters(), StageTimes(), lambda: 0)
    client = Client(endpoints)
    client.subscribe("quad0/")
    time.sleep(0.5)  # the subscription joins
    model = CameraModel.from_fov(width, height, 60.0)
    rng = np.random.default_rng(0)
    pixels = [rng.random((height, width), np.float32) for _ in range(2)]
    seconds = []
    for k in range(pairs):
        start = time.perf_counter()
        for side, image in zip(("left", "right"), pixels):
            camera = f"quad0/stereo_{side}"
            header, payload = messages.image_message(
                k, k, camera=camera, output="depth", model=model, T_WC=np.eye(4), pose_utime=k, pixels=image
            )
            outputs.publish(f"{camera}/depth", header, payload)
        for _ in range(2):
            _, image = client.receive(timeout=5.0)
            image_array(image)
        seconds.append(time.perf_counter() - start)
    client.close()
    bus.close()
    return np.array(seconds)


def bare_zeromq(size: int, pairs: int) -> np.ndarray:
    """Seconds for pyzmq alone to move two frames of ``size`` bytes, per pair."""
    context = zmq.Context()
    publisher = context.socket(zmq.PUB)
    port = publisher.bind_to_random_port("tcp://127.0.0.1")
    subscriber = context.socket(zmq.SUB)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(f"tcp://127.0.0.1:{port}")
    time.sleep(0.5)
    frames = [bytes(size), bytes(size)]
    seconds = []
    for _ in range(pairs):
        start = time.perf_counter()
        for frame in frames:
            publisher.send(frame, copy=False)
        for _ in frames:
            subscriber.recv(copy=False)
        seconds.append(time.perf_counter() - start)
    publisher.close()
    subscriber.close()
    context.term()
    return np.array(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=at_least(1), default=640)
    parser.add_argument("--height", type=at_least(1), default=480)
    parser.add_argument("--pairs", type=at_least(1), default=400)
    args = parser.parse_args()
    try:
        CameraModel.from_fov(args.width, args.height, 60.0)  # a size goggles renders, or its one-line reason
    except GogglesError as exc:
        parser.error(str(exc))
    skip = args.pairs // 10  # the first pairs warm the allocators up
    untuned = goggles_path(args.width, args.height, args.pairs)[skip:] * 1e3
    tuned = keep_large_allocations()
    ours = goggles_path(args.width, args.height, args.pairs)[skip:] * 1e3
    bare = bare_zeromq(args.width * args.height * 4 + 200, args.pairs)[skip:] * 1e3
    runs = (("goggles, allocator as it comes", untuned), (f"goggles, tuned={tuned}", ours), ("bare pyzmq", bare))
    for name, ms in runs:
        print(f"{name}: p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms")
    print(
        f"width={args.width} height={args.height} p50_ms={np.percentile(ours, 50):.2f} "
        f"p99_ms={np.percentile(ours, 99):.2f} bare_p50_ms={np.percentile(bare, 50):.2f} "
        f"ratio_p50={np.percentile(ours, 50) / np.percentile(bare, 50):.2f}"
    )


if __name__ == "__main__":
    main()
