"""Live viewing: the Foxglove WebSocket server advertises and streams the engine's outputs."""

from __future__ import annotations

import dataclasses
import json
import struct
import time

from goggles.engine import Engine
from goggles.paths import default_course
from goggles.preview.foxglove_sink import FoxgloveSink
from tests.test_engine import free_port, run_config


def test_foxglove_server_streams_images_transforms_and_scene(device):
    from websockets.sync.client import connect

    config = dataclasses.replace(run_config(scale=3.0, route=False), zmq=None, course=default_course())
    sink = FoxgloveSink(port=free_port())
    engine = Engine(config, device=device, sinks=[sink])
    sink.set_scene(engine.scene_boxes)
    try:
        with connect(
            f"ws://127.0.0.1:{sink.port}", subprotocols=["foxglove.sdk.v1", "foxglove.websocket.v1"], max_size=2**26
        ) as socket:
            engine.run(duration=0.3)  # the channels appear with their first messages
            channels = {}
            expected = {
                "/quad0/stereo_left/depth",
                "/quad0/stereo_left/rgb",
                "/quad0/stereo_left/calibration",
                "/tf",
                "/scene",
            }
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not expected <= set(channels):
                message = socket.recv(timeout=5)
                if isinstance(message, str):
                    payload = json.loads(message)
                    if payload.get("op") == "advertise":
                        channels.update({c["topic"]: c for c in payload["channels"]})
            assert expected <= set(channels)
            assert channels["/quad0/stereo_left/depth"]["schemaName"] == "foxglove.RawImage"
            assert channels["/scene"]["schemaName"] == "foxglove.SceneUpdate"
            wanted = {1: channels["/quad0/stereo_left/depth"]["id"], 2: channels["/tf"]["id"]}
            socket.send(
                json.dumps(
                    {
                        "op": "subscribe",
                        "subscriptions": [{"id": sub, "channelId": channel} for sub, channel in wanted.items()],
                    }
                )
            )
            engine.run(duration=0.6)
            received = set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and received != {1, 2}:
                message = socket.recv(timeout=5)
                if isinstance(message, bytes) and message[0] == 1:  # message data: op, subscription, time, payload
                    (subscription,) = struct.unpack_from("<I", message, 1)
                    if len(message) > 13:
                        received.add(subscription)
            assert received == {1, 2}
    finally:
        engine.close()
        sink.close()
