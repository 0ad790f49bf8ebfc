"""Lockstep: deterministic runs, inputs applied before the steps they were sent for, requests queued,
refused or answered when a run ends, and replies after every output of their steps."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

import goggles_lcm
from goggles.client import Client
from goggles.dynamics import ControlMode
from goggles.engine import Engine
from goggles.transport.buses import ZmqEndpoints
from tests.support import Kept, Running, endpoints, run_config


def _lockstep_flight(device):
    config = run_config(mode="lockstep", route=False)
    running = Running(config, device=device)
    client = Client(endpoints(config))
    client.subscribe("quad0/stereo_left/depth", "quad0/state")
    client.wait_for_subscriptions(30.0)  # the engine has them: the frame of step 0 comes
    depths, states = [], []
    for k in range(12):
        client.send_command("quad0", ControlMode.POSITION, [0.5 * k, 0.2, 1.0 + 0.1 * k, 0.0])
        # The command and the step request travel on different sockets: step only once the engine
        # has taken the command (its input counter is the acknowledgement), never after a guessed sleep.
        deadline = time.monotonic() + 10.0
        while running.engine.counters.received < k + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert running.engine.counters.received == k + 1
        reply = client.step(32)
        assert reply.steps == 32 and reply.header.utime == round((k + 1) * 32 / 960 * 1e6)
        while (item := client.receive(timeout=0.2)) is not None:
            (depths if item[0].endswith("depth") else states).append(item[1])
    running.stop.set()
    running.finish()
    client.close()
    return depths, states


@pytest.mark.slow
def test_lockstep_is_deterministic(device):
    first_depths, first_states = _lockstep_flight(device)
    second_depths, second_states = _lockstep_flight(device)
    # One frame per 32 steps, none lost: at step 0 and at the end of each of the 12 requests.
    assert len(first_depths) == 13 and len(second_depths) == 13
    assert [d.header.utime for d in first_depths] == [round(k * 32 / 960 * 1e6) for k in range(13)]
    assert [d.data for d in first_depths] == [d.data for d in second_depths]
    assert [s.position for s in first_states] == [s.position for s in second_states]
    assert first_states[-1].position[2] > 0.3  # it took off on the commands


@pytest.mark.slow
@pytest.mark.parametrize("engine_first", [True, False])
def test_a_command_sent_before_a_lockstep_request_is_applied_before_its_steps(monkeypatch, engine_first):
    """The command goes on the inputs socket, the request on the control socket, and ZeroMQ orders
    neither against the other: under load about one command in a hundred reached the engine after the
    steps it was sent for. Here the inputs socket holds each message back for a few polls (a command
    late by a hair, every time); the request waits for the barrier the client sent behind it. Also
    with a client whose first input went out before any engine listened (that one is lost)."""
    import goggles.client
    from goggles.transport.buses import ZmqBus

    receive = ZmqBus.receive_inputs
    held: list = []

    def late(self, limit=64):  # what came is handed over only three polls later
        held.append(receive(self, limit))
        return held.pop(0) if len(held) > 3 else []

    monkeypatch.setattr(ZmqBus, "receive_inputs", late)
    monkeypatch.setattr(goggles.client, "FIRST_SEND_WAIT_S", 0.1)
    config = run_config(mode="lockstep", route=False)
    client = Client(endpoints(config))
    if not engine_first:
        client.send_command("quad0", ControlMode.POSITION, [9.0, 0.0, 1.0, 0.0])  # nobody listens yet
    running = Running(config)
    sim = running.engine.vehicles["quad0"].sim
    applied = []
    set_command = sim.set_command

    def noting(mode, values, **kwargs):  # the engine's step when each command is applied
        if values[0] != 9.0:  # not one of those sent before the engine listened
            applied.append(running.engine.step)
        return set_command(mode, values, **kwargs)

    monkeypatch.setattr(sim, "set_command", noting)
    if engine_first:
        client.wait_for_engine(10.0)
    else:  # until an input gets through (the client has not looked for the engine's subscription)
        deadline = time.monotonic() + 10.0
        while running.engine.counters.received == 0 and time.monotonic() < deadline:
            client.send_command("quad0", ControlMode.POSITION, [9.0, 0.0, 1.0, 0.0])
            time.sleep(0.05)
    for k in range(6):
        client.send_command("quad0", ControlMode.POSITION, [0.1 * k, 0.0, 1.0, 0.0])
        client.step(16)
    assert applied == [16 * k for k in range(6)]  # each before its own request's steps
    running.stop.set()
    running.finish()
    client.close()


def test_a_lockstep_request_the_engine_cannot_use_is_refused_and_the_client_says_so():
    """The client refuses a step count the engine would drop; the engine answers a request it cannot
    read with request id -1 and goes on; a client given that answer raises instead of returning it as
    if its steps had run."""
    import zmq

    config = run_config(mode="lockstep", route=False)
    running = Running(config)
    client = Client(endpoints(config))
    for steps in (0, -1, 10_000_001, 2**40, 2.5, "8", True):  # 2.5 was sent as 2 steps
        with pytest.raises(ValueError, match="1 to 10,000,000"):
            client.step(steps)
    raw = zmq.Context.instance().socket(zmq.REQ)
    raw.connect(config.zmq.control)
    raw.send(b"not a step request")
    assert raw.poll(10_000)
    refused = goggles_lcm.step_t.decode(raw.recv())
    assert refused.request_id == -1 and refused.steps == 0
    assert client.step(8).steps == 8 and running.engine.step == 8  # still stepping
    raw.close(0)
    running.stop.set()
    running.finish()
    client.close()

    refusing = zmq.Context.instance().socket(zmq.REP)  # a control socket that refuses as the engine does
    port = refusing.bind_to_random_port("tcp://127.0.0.1")
    answer = threading.Thread(target=lambda: (refusing.recv(), refusing.send(refused.encode())), daemon=True)
    answer.start()
    client = Client(ZmqEndpoints(control=f"tcp://127.0.0.1:{port}"))
    with pytest.raises(ConnectionError, match="refused lockstep request"):
        client.step(8)
    answer.join(10)
    client.close()
    refusing.close(0)


@pytest.mark.slow
def test_lockstep_clients_that_step_at_once_are_each_answered():
    """Requests that came together were drained from the socket and all but the first dropped: the
    other clients waited for a reply that never came."""
    config = run_config(mode="lockstep", route=False)
    running = Running(config)
    replies, errors = [], []

    def step_50_times():
        with Client(endpoints(config)) as client:
            try:
                replies.extend(client.step(4, timeout=30.0).steps for _ in range(50))
            except (TimeoutError, ConnectionError) as exc:
                errors.append(exc)

    clients = [threading.Thread(target=step_50_times) for _ in range(3)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(120)
    running.stop.set()
    running.finish()
    assert not errors and replies == [4] * 150 and running.engine.step == 600


@pytest.mark.parametrize("mode", ["sim", "live"])
def test_a_step_request_to_an_engine_not_in_lockstep_is_refused_at_once(mode):
    """It went unanswered: the client waited its whole timeout, then asked whether a lockstep engine
    was running there."""
    config = run_config(mode=mode, route=False)
    running = Running(config)
    with Client(endpoints(config)) as client:
        start = time.monotonic()
        with pytest.raises(ConnectionError, match="does not run in lockstep mode.*goggles run --mode lockstep"):
            client.step(8, timeout=60.0)
        assert time.monotonic() - start < 30.0
    running.stop.set()
    running.finish()


@pytest.mark.slow
def test_a_lockstep_run_that_ends_says_how_many_steps_ran_and_refuses_what_waits():
    """The reply claimed every step asked for where the run's end (--duration) clipped the request, and
    a request still waiting when the run ended was never answered: its client waited out its timeout."""
    config = run_config(mode="lockstep", route=False)
    running = Running(config, duration=0.1)  # 96 steps at 960 Hz
    with Client(endpoints(config)) as client:
        assert client.step(64).steps == 64
        last = client.step(64)
        assert last.steps == 32 and last.header.utime == 100_000
    running.finish()

    engine = Engine(config, device="cpu")
    refused = []

    def step():
        with Client(endpoints(config)) as client:
            try:
                client.step(8, timeout=60.0)
            except ConnectionError as exc:
                refused.append(str(exc))

    waiting = threading.Thread(target=step)
    late = threading.Thread(target=step)  # one that comes after the run, before the engine closes
    waiting.start()
    try:
        assert engine.zmq.wait(30.0)  # the request has come, and waits
        engine.run(duration=0.0)  # a run that ends at once
        waiting.join(30)
        late.start()
        assert engine.zmq.wait(30.0)
    finally:
        engine.close()
        for thread in (waiting, late):
            if thread.ident is not None:  # started
                thread.join(30)
    assert len(refused) == 2 and all("stopped: its run ended before this request" in r for r in refused)


@pytest.mark.slow
def test_a_lockstep_client_that_reads_after_each_reply_gets_every_message():
    """A lockstep client reads a request's outputs after its reply. The publisher queued 8 messages per
    subscriber, and a frame's images filled that queue: the IMU samples and states behind them were
    dropped (a tenth of a run's messages). In lockstep it queues 1024: every message of requests of
    two frames arrives. The count is compared once the engine waits for the next request (no timing)."""
    from collections import Counter

    cameras = [
        {"vehicle": "quad0", "name": f"cam{k}", "width": 320, "height": 240, "rate": 30.0, "outputs": ["depth", "rgb"]}
        for k in range(3)
    ]
    config = run_config(mode="lockstep", cameras=cameras, route=False)
    sink = Kept()
    engine = Engine(config, device="cpu", sinks=[sink])
    stop = threading.Event()
    thread = threading.Thread(target=engine.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    client = Client(endpoints(config))
    got: Counter = Counter()
    try:
        client.subscribe("quad0/")
        client.wait_for_subscriptions(30.0)
        for _ in range(6):
            client.step(64)  # two frames: their outputs are published before the reply, while this client waits
            for channel, _message in iter(lambda: client.receive(timeout=0.0), None):
                got[channel] += 1
        # The engine waits for the next request now: what it published is all there is. Whatever is
        # still on its way is read up to that count (a lost message never comes: the wait ends there).
        published = Counter(channel for channel, _ in sink.messages if channel.startswith("quad0/"))
        while sum(got.values()) < sum(published.values()):
            item = client.receive(timeout=10.0)
            if item is None:
                break
            got[item[0]] += 1
    finally:
        stop.set()
        thread.join(30)
        engine.close()
        client.close()
    assert published["quad0/imu"] >= 90 and published["quad0/cam2/rgb"] >= 12
    assert {c: got[c] for c in published} == dict(published)


@contextlib.contextmanager
def lockstep_engine(config, device):
    """An engine of ``config`` running in a thread, keeping every message it publishes (the sink), and a
    client of its buses; both closed on the way out."""

    sink = Kept()
    engine = Engine(config, device=device, sinks=[sink])
    stop = threading.Event()
    thread = threading.Thread(target=engine.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    client = Client(endpoints(config))
    try:
        yield sink, client
    finally:
        stop.set()
        thread.join(10)
        engine.close()
        client.close()


@pytest.mark.slow
def test_lockstep_replies_after_the_queued_imu_samples_are_out(device):
    """With ``imu_batch = 4`` the samples wait on the device, but a lockstep reply still comes only
    once every sample of the requested steps is published (a step of 10 ends between state copies)."""
    config = run_config(mode="lockstep", route=False, imu_batch=4)
    with lockstep_engine(config, device) as (sink, client):
        for k in range(1, 6):
            reply = client.step(10)
            ticks = 10 * k // 4 + 1  # IMU samples at steps 0, 4, 8, ... <= 10 k
            imu = [goggles_lcm.imu_t.decode(d) for c, d in sink.messages if c == "quad0/imu"]
            assert reply.header.utime == round(10 * k / 960 * 1e6)
            assert [m.header.utime for m in imu] == [round(4 * j / 960 * 1e6) for j in range(ticks)]


def test_lockstep_replies_after_a_contact_of_its_steps_is_out(device):
    """Contacts wait on the device for a state copy, but a lockstep reply publishes one made during
    its steps first: resting on the landing pad is reported by the reply to the very first step."""
    config = run_config(mode="lockstep", route=False, start=[0.0, 0.0, 0.1, 0.0], floor_z=0.1)
    with lockstep_engine(config, device) as (sink, client):
        reply = client.step(1)
        collisions = [goggles_lcm.collision_t.decode(d) for c, d in sink.messages if c == "quad0/collision"]
        assert len(collisions) == 1 and collisions[0].vehicle == "quad0"
        assert collisions[0].header.utime <= reply.header.utime
