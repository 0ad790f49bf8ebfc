"""The engine on its buses: every output reaches ZeroMQ and LCM, subscriptions join before they are
answered, and malformed inputs are counted and dropped."""

from __future__ import annotations

import threading
import time

import lcm
import numpy as np
import pytest

import goggles_lcm
from goggles.client import Client, describe, event_array, image_array
from goggles.dynamics import ControlMode
from goggles.engine.status import OTHER_CHANNELS
from goggles.transport.buses import ZmqEndpoints
from goggles.transport.schema import decode_any
from tests.support import Running, endpoints, free_port, run_config


@pytest.mark.slow
def test_every_output_reaches_both_buses(device):
    lcm_port = free_port()
    stereo = {"vehicle": "quad0", "name": "stereo", "width": 48, "height": 32, "baseline": 0.32}
    stereo |= {"outputs": ["depth", "rgb"], "max_depth": 60.0}
    fisheye = {"vehicle": "quad0", "name": "fisheye", "width": 40, "height": 40, "lens": "fisheye", "fov_deg": 190.0}
    events = {"vehicle": "quad0", "name": "dvs", "width": 40, "height": 30, "outputs": ["events"], "rate": 240.0}
    config = run_config(lcm_port=lcm_port, scale=4.0, cameras=[stereo, fisheye | {"outputs": ["range"]}, events])
    lcm_messages = {}
    bus = lcm.LCM(config.lcm_url)
    bus.subscribe("(clock|quad0/.*)", lambda channel, data: lcm_messages.setdefault(channel, decode_any(data)))
    client = Client(endpoints(config))
    client.subscribe()
    running = Running(config, duration=1.5, device=device)
    zmq_messages = {}
    deadline = time.monotonic() + 60
    while running.thread.is_alive() and time.monotonic() < deadline:
        received = client.receive(timeout=0.05)
        if received:
            zmq_messages.setdefault(received[0], received[1])
        bus.handle_timeout(1)
    running.finish()
    for _ in range(50):
        bus.handle_timeout(10)
    client.close()
    expected = {
        "clock": goggles_lcm.clock_t,
        "quad0/imu": goggles_lcm.imu_t,
        "quad0/state": goggles_lcm.vehicle_state_t,
        "quad0/stereo_left/depth": goggles_lcm.image_t,
        "quad0/stereo_left/rgb": goggles_lcm.image_t,
        "quad0/stereo_right/depth": goggles_lcm.image_t,
        "quad0/stereo_right/rgb": goggles_lcm.image_t,
        "quad0/fisheye/range": goggles_lcm.image_t,
        "quad0/dvs/events": goggles_lcm.events_t,
    }
    for received in (zmq_messages, lcm_messages):
        for channel, message_type in expected.items():
            assert isinstance(received.get(channel), message_type), (channel, sorted(received))
    depth = image_array(zmq_messages["quad0/stereo_left/depth"])
    assert depth.shape == (32, 48) and np.isfinite(depth).any()
    assert image_array(lcm_messages["quad0/stereo_right/rgb"]).shape == (32, 48, 3)
    imu = zmq_messages["quad0/imu"]
    assert 5.0 < imu.linear_acceleration[2] < 25.0  # at rest or taking off: roughly +g up
    fisheye = zmq_messages["quad0/fisheye/range"]
    assert fisheye.lens == "fisheye" and np.isnan(image_array(fisheye)[0, 0])  # a corner outside the lens
    packet = lcm_messages["quad0/dvs/events"]
    fired = event_array(packet)
    assert packet.end_utime > packet.header.utime and len(fired) == packet.num_events
    assert "events_t" in describe(packet) and f"events={len(fired)}" in describe(packet)


@pytest.mark.slow
def test_a_subscription_that_waits_is_in_place_when_it_returns_and_others_never_see_its_answer():
    with Client(ZmqEndpoints(*(f"tcp://127.0.0.1:{free_port()}" for _ in range(3)))) as lonely:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="no engine answered at tcp://127.0.0.1:"):
            lonely.wait_for_subscriptions(0.2)
        assert time.monotonic() - start < 10.0
    config = run_config(mode="lockstep", route=False)
    running = Running(config)
    everything, client = Client(endpoints(config)), Client(endpoints(config))
    everything.subscribe()  # every channel: the other client's answers pass this topic filter
    everything.wait_for_subscriptions(30.0)
    client.subscribe("quad0/state")
    for _ in range(3):  # answered each time, on a topic of its own
        client.wait_for_subscriptions(30.0)
    client.step(16)  # the lockstep engine publishes nothing before: the state of step 0 comes first
    assert [client.receive(timeout=10.0)[1].header.utime for _ in range(2)] == [0, round(16 / 960 * 1e6)]
    heard = []
    while (item := everything.receive(timeout=0.5)) is not None:
        heard.append(item[0])
    running.stop.set()
    running.finish()
    client.close()
    everything.close()
    assert heard and not [channel for channel in heard if channel.startswith("subscribed/")]
    assert "quad0/state" in heard and "clock" in heard


def test_a_subscription_whose_answer_was_dropped_is_asked_again():
    """A publisher drops an answer as any message when the subscriber's queue is full: the client asks
    on a fresh topic (a publisher that answers only the second question stands for that engine)."""
    import zmq

    publish = f"tcp://127.0.0.1:{free_port()}"
    publisher = zmq.Context.instance().socket(zmq.XPUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.bind(publish)
    questions = []

    def answer_the_second():
        while len(questions) < 2 and publisher.poll(20_000):
            message = publisher.recv()
            if message.startswith(b"\x01subscribed/"):
                questions.append(message[1:])
        publisher.send(questions[-1] + b"\0")

    thread = threading.Thread(target=answer_the_second, daemon=True)
    thread.start()
    with Client(ZmqEndpoints(publish, f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}")) as client:
        client.subscribe("quad0/state")
        client.wait_for_subscriptions(30.0)
    thread.join(5)
    publisher.close(0)
    assert len(questions) == 2 and questions[0] != questions[1]


@pytest.mark.slow
def test_malformed_inputs_are_counted_and_dropped(device):
    """10 000 malformed messages on every input channel of both buses: counted, dropped, engine alive."""
    lcm_port = free_port()
    config = run_config(lcm_port=lcm_port, scale=2.0, route=False)
    running = Running(config, duration=None, device=device)
    client = Client(endpoints(config))
    client.latest("quad0/state", timeout=2.0)  # join; then read nothing during the flood
    bus = lcm.LCM(config.lcm_url)
    time.sleep(0.5)
    nan_pose = goggles_lcm.pose_t()
    nan_pose.orientation = [1.0, 0.0, 0.0, 0.0]
    nan_pose.position = [0.0, float("nan"), 0.0]
    rng = np.random.default_rng(0)
    zmq_sent = lcm_sent = 0
    channels = ["quad0/command", "pose/quad0", "skeleton/alice", "scene/edit", "unknown/channel"]
    for _ in range(100):
        for channel in channels:
            for _ in range(100):
                junk = rng.integers(0, 256, rng.integers(0, 64), dtype=np.uint8).tobytes()
                client.send(channel, junk)
                zmq_sent += 1
                if channel != "unknown/channel":  # the engine's LCM reads only its input channels
                    bus.publish(channel, junk)
                    lcm_sent += 1
        client.send("quad0/command", nan_pose.encode())  # the wrong type for the channel
        client.send("pose/quad0", nan_pose.encode())  # a NaN pose
        client.send_raw([b"no separator"])
        client.send_raw([b"two\0frames", b"in one message"])
        client.send_raw([b"\xff\xfe\0a channel that is not UTF-8"])
        zmq_sent += 5
        time.sleep(0.02)  # stay under the sockets' queue bounds
    deadline = time.monotonic() + 30
    while running.engine.counters.malformed < zmq_sent + lcm_sent and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running.thread.is_alive()
    counted = running.engine.counters
    assert counted.malformed_by_channel[OTHER_CHANNELS] == 10_000  # ZeroMQ only, lossless, in one bucket
    assert zmq_sent + 0.95 * lcm_sent <= counted.malformed <= zmq_sent + lcm_sent  # UDP may lose a few
    # Still alive and obeying: a valid command moves the vehicle.
    client.send_command("quad0", ControlMode.POSITION, [0.0, 0.0, 1.0, 0.0])
    time.sleep(3.0)
    state = client.latest("quad0/state", timeout=2.0)  # the newest, although this client read nothing
    assert state.position[2] > 0.5
    running.stop.set()
    running.finish()
    client.close()


def test_a_paused_lockstep_subscriber_holds_a_bounded_number_of_bytes_not_of_messages():
    """A lockstep run's publisher queues at most LOCKSTEP_PUBLISH_BYTES for a subscriber that stops
    reading (ZeroMQ counts messages; the mark is the budget over the run's largest message): a 640x480
    event camera's packets of up to 3.7 MB each. Published 400 of them into a real subscriber that reads
    nothing (its own queue one deep), at most the mark and what the sockets' kernel buffers hold
    arrive once it reads: not 1024."""
    import zmq

    from goggles.transport import buses

    events = {"vehicle": "quad0", "name": "dvs", "width": 640, "height": 480, "outputs": ["events"], "rate": 60.0}
    config = run_config(mode="lockstep", cameras=[events])
    largest = buses.largest_message(config)
    assert largest >= 640 * 480 * 12
    opened = buses.open_buses(config)
    try:
        (bus,) = opened
        hwm = bus._publisher.getsockopt(zmq.SNDHWM)
        assert hwm == buses.LOCKSTEP_PUBLISH_BYTES // largest < buses.LOCKSTEP_PUBLISH_HWM
        context = zmq.Context.instance()
        subscriber = context.socket(zmq.SUB)
        subscriber.setsockopt(zmq.RCVHWM, 1)
        subscriber.setsockopt(zmq.RCVBUF, 65536)
        subscriber.setsockopt(zmq.SUBSCRIBE, b"")
        subscriber.connect(config.zmq.publish)
        packet = bytes(largest - 1024)
        deadline = time.monotonic() + 10
        while not subscriber.poll(10):  # the subscription is in place once one arrives
            assert time.monotonic() < deadline
            bus.publish("quad0/dvs/events", packet)
        subscriber.recv()
        for _ in range(400):
            bus.publish("quad0/dvs/events", packet)
        received = 0
        while subscriber.poll(500):
            subscriber.recv()
            received += 1
        subscriber.close(0)
        assert received <= hwm + 8, (received, hwm)
    finally:
        for bus in opened:
            bus.close()
