"""The engine's side of the two buses, LCM and ZeroMQ, carrying the same encoded bytes.

ZeroMQ: the engine binds an XPUB socket (outputs), a SUB socket (inputs that clients publish to it) and
a ROUTER socket (lockstep requests and replies). Every stream message is one frame,
``channel + b"\0" + LCM bytes``: single-part, so a subscriber can keep only the newest frame of a
channel with ZMQ_CONFLATE, and the topic prefix filters by channel. The XPUB hears subscriptions: one
to ``SUBSCRIBED + token`` is answered with an empty message on that topic, so a client knows when its
subscriptions are in place (a PUB drops, silently, what it sends before). LCM: one ``lcm.LCM``
for both directions; inputs are the channels matching ``INPUT_CHANNELS``.

Everything binds to 127.0.0.1 unless an endpoint names another address: exposing a port is explicit.
"""

from __future__ import annotations

import logging
import re
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from goggles.clock import ClockMode
from goggles.errors import ConfigError
from goggles.transport.endpoints import DEFAULT_LCM_URL, ZmqEndpoints  # noqa: F401 (re-exported)
from goggles.transport.schema import MAX_CHANNEL_BYTES, MAX_INPUT_BYTES

log = logging.getLogger(__name__)

#: LCM channels the engine reads (regular expression).
INPUT_CHANNELS = r"(pose/.*|skeleton/.*|.*/command|scene/edit)"
#: ZeroMQ input channel of a lockstep client's barrier: a ``step_t`` sent on the inputs socket right
#: before its step request (of the same ``request_id``, ``header.seq`` = ``BARRIER_FOLLOWS``) goes on
#: the control socket. ZeroMQ keeps order on one socket only, so once the barrier has come, every input
#: the client sent before the request has too: the engine applies them all before it steps.
LOCKSTEP_BARRIER = "lockstep/barrier"
#: ZeroMQ topic prefix of a subscription check: a client subscribes to ``SUBSCRIBED + token`` after its
#: channels, and the engine publishes an empty message on that topic when it hears the subscription.
#: ZeroMQ applies one socket's subscriptions in order, so every channel subscribed before is in place
#: by then: what the engine publishes after the answer reaches the client.
SUBSCRIBED = "subscribed/"
#: ``step_t.header.seq`` of a step request whose client sent a barrier before it.
BARRIER_FOLLOWS = 1
#: ``request_id`` of a lockstep reply that refuses the request: the engine could not read it.
UNREADABLE_REQUEST = -1
#: ``request_id`` of a lockstep reply that refuses the request: the engine runs in sim or live mode,
#: where the clock does not wait for requests (answered at once, so the client need not time out).
NOT_LOCKSTEP = -2
#: ``request_id`` of a lockstep reply that refuses the request: the run ended before its turn came.
ENGINE_STOPPED = -3
#: LCM's longest channel name: over UDP multicast a longer one is refused ("channel name too long").
LCM_MAX_CHANNEL = 63
#: Frames a slow ZeroMQ subscriber may have queued before the PUB socket drops new ones for it.
PUBLISH_HWM = 8
#: The same in lockstep mode, where a client reads a request's outputs after its reply: one frame of a
#: run with three cameras, IMUs at 240 Hz and range sensors is about 40 messages, and at 8 a client that
#: read after the reply lost a tenth of them behind the images. The engine waits for its clients there,
#: so a deeper queue costs no freshness, up to this many messages ...
LOCKSTEP_PUBLISH_HWM = 1024
#: ... and this many bytes per subscriber: ZeroMQ counts its queue in messages, so the mark is this over
#: the run's largest message (a paused subscriber of a 640x480 event camera's 3.7 MB packets held 1024
#: of them, 3.1 GB and climbing, where 256 MiB holds 72).
LOCKSTEP_PUBLISH_BYTES = 256 * 2**20
#: LCM input messages queued between two engine polls (LCM's default of 30 drops bursts of commands).
LCM_INPUT_QUEUE = 4096
#: ZeroMQ input messages queued for the engine (with the size limit, at most 256 MiB waiting).
INPUT_HWM = 256


def frame(channel: str, data: bytes) -> bytes:
    """One ZeroMQ stream frame: the channel name, a NUL, the LCM-encoded message."""
    return channel.encode() + b"\0" + data


def framed(channel: str, *parts) -> tuple[bytearray, memoryview]:
    """One ZeroMQ stream frame built from the parts of an LCM message (bytes-like, None skipped), and
    a read-only view of its LCM bytes: the parts are copied once, into the frame, and every bus and
    sink reads that one buffer (a 640x480 depth image was copied five times on its way out)."""
    prefix = channel.encode() + b"\0"
    parts = [memoryview(p).cast("B") for p in parts if p is not None]
    buffer = bytearray(len(prefix) + sum(len(p) for p in parts))
    view = memoryview(buffer)  # (a bytearray's own slice assignment from a view is 20x slower)
    view[: len(prefix)] = prefix
    at = len(prefix)
    for part in parts:
        view[at : at + len(part)] = part
        at += len(part)
    return buffer, view[len(prefix) :].toreadonly()


def split_frame(frames: list) -> tuple[str, memoryview]:
    """(channel, a read-only view of the LCM bytes) of a received stream message: its frames as bytes
    or as ``zmq.Frame`` (received with ``copy=False``: the LCM bytes are then never copied here).

    Raises:
        ValueError: not exactly one frame, no NUL separator, or a channel that is not UTF-8.
    """
    if len(frames) != 1:
        raise ValueError(f"{len(frames)} frames; a goggles message is one frame 'channel\\0data'")
    view = memoryview(getattr(frames[0], "buffer", frames[0])).cast("B").toreadonly()
    end = view[: MAX_CHANNEL_BYTES + 1].tobytes().find(b"\0")
    if end < 0:
        if len(view) > MAX_CHANNEL_BYTES:
            raise ValueError(f"channel name of over {MAX_CHANNEL_BYTES} bytes")
        raise ValueError("no NUL between channel and data")
    return view[:end].tobytes().decode(), view[end + 1 :]


def connect(socket, endpoint: str) -> None:
    """Connect a ZeroMQ socket, or a ConfigError naming the endpoint (pyzmq says only "Invalid argument")."""
    import zmq

    try:
        socket.connect(endpoint)
    except zmq.ZMQError as exc:
        raise ConfigError(
            f"cannot connect to {endpoint!r}: {exc.strerror} (a ZeroMQ endpoint is tcp://HOST:PORT)"
        ) from None


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def is_loopback(endpoint: str) -> bool:
    """True for tcp:// endpoints on the loopback interface, and for ipc:// and inproc://."""
    if not endpoint.startswith("tcp://"):
        return True
    host = endpoint[len("tcp://") :].rsplit(":", 1)[0]
    return host in LOOPBACK_HOSTS or host.startswith("127.")


@dataclass(frozen=True)
class CurveServer:
    """ZeroMQ CURVE for an exposed engine: its secret key, and the client public keys it accepts."""

    secret_key_file: Path
    """``server.key_secret`` from ``goggles keys``."""
    clients_folder: Path
    """Folder of accepted clients' public ``*.key`` files."""


class ZmqBus:
    """Engine-side ZeroMQ sockets.

    Args:
        endpoints: bind addresses.
        context: a ``zmq.Context`` (default: the process's shared instance).
        curve: the CURVE server keys and allowed clients of an exposed engine.
        publish_hwm: messages queued per subscriber before the publisher drops new ones for it.
    """

    def __init__(
        self,
        endpoints: ZmqEndpoints | None = None,
        context=None,
        curve: CurveServer | None = None,
        publish_hwm: int = PUBLISH_HWM,
    ):
        import zmq

        self._zmq = zmq
        self.endpoints = endpoints = endpoints or ZmqEndpoints()
        context = context or zmq.Context.instance()
        exposed = [e for e in (endpoints.publish, endpoints.inputs, endpoints.control) if not is_loopback(e)]
        if exposed and curve is None:
            raise ConfigError(
                f"ZeroMQ endpoints {exposed} leave this machine: an exposed engine needs CURVE keys "
                "(goggles keys DIR, then [zmq] curve_secret_key and curve_clients in the run file, or --keys DIR)"
            )
        self._authenticator = None
        keys = None
        if curve is not None:
            keys = self._curve(context, curve)
        self._publisher = context.socket(zmq.XPUB)  # a PUB that hears subscriptions (see SUBSCRIBED)
        self._publisher.setsockopt(zmq.SNDHWM, publish_hwm)
        self._publisher.setsockopt(zmq.LINGER, 0)
        self._publisher.setsockopt(zmq.MAXMSGSIZE, 4096)  # a subscription: a channel prefix (a longer one
        # disconnects its subscriber, before it is kept, and that subscriber only)
        # Inputs over the size limit are refused by ZeroMQ itself (the sender is disconnected) before
        # a byte of them is kept: a 100 MB frame never reaches this process's memory.
        self._inputs = context.socket(zmq.SUB)
        self._inputs.setsockopt(zmq.SUBSCRIBE, b"")
        self._inputs.setsockopt(zmq.LINGER, 0)
        self._inputs.setsockopt(zmq.MAXMSGSIZE, MAX_INPUT_BYTES + MAX_CHANNEL_BYTES + 1)
        self._inputs.setsockopt(zmq.RCVHWM, INPUT_HWM)
        self._control = context.socket(zmq.ROUTER)
        self._control.setsockopt(zmq.LINGER, 0)
        self._control.setsockopt(zmq.MAXMSGSIZE, 4096)
        for socket, endpoint in (
            (self._publisher, endpoints.publish),
            (self._inputs, endpoints.inputs),
            (self._control, endpoints.control),
        ):
            if keys is not None:  # CURVE: encrypted, and only the listed clients get in (ZAP)
                socket.curve_publickey, socket.curve_secretkey = keys
                socket.curve_server = True
            try:
                socket.bind(endpoint)
            except zmq.ZMQError as exc:
                self.close()
                hint = "; is another goggles running?" if exc.errno == zmq.EADDRINUSE else ""
                raise ConfigError(f"cannot bind ZeroMQ endpoint {endpoint}: {exc}{hint}") from exc
        self.poller = zmq.Poller()
        self.poller.register(self._inputs, zmq.POLLIN)
        self.poller.register(self._control, zmq.POLLIN)
        self.poller.register(self._publisher, zmq.POLLIN)  # a subscription to answer

    def _curve(self, context, curve: CurveServer):
        """Start the ZAP authenticator that admits only the listed client keys; returns the server keys."""
        import zmq.auth
        from zmq.auth.thread import ThreadAuthenticator

        if not Path(curve.secret_key_file).is_file():
            raise ConfigError(f"CURVE secret key {curve.secret_key_file} not found (make one with goggles keys DIR)")
        if not Path(curve.clients_folder).is_dir() or not list(Path(curve.clients_folder).glob("*.key")):
            raise ConfigError(f"CURVE clients folder {curve.clients_folder} holds no client public keys (*.key)")
        public, secret = zmq.auth.load_certificate(curve.secret_key_file)
        if secret is None:
            raise ConfigError(f"{curve.secret_key_file} is a public key; give the server's .key_secret file")
        self._authenticator = ThreadAuthenticator(context)
        self._authenticator.start()
        self._authenticator.configure_curve(domain="*", location=str(curve.clients_folder))
        return public, secret

    def publish(self, channel: str, data, frame_buffer: bytearray | None = None) -> None:
        """``data``: the LCM bytes; ``frame_buffer``: the whole frame when the caller built it (``framed``)."""
        self._publisher.send(frame_buffer if frame_buffer is not None else frame(channel, bytes(data)), copy=False)

    def receive_inputs(self, limit: int = 64) -> list[tuple[str | None, bytes | str]]:
        """Up to ``limit`` input messages waiting, as (channel, bytes); a message that is not one
        ``channel\0bytes`` frame comes as (None, why) for the engine to count. Subscription checks
        that have come are answered first."""
        self._answer_subscriptions()
        messages: list[tuple[str | None, bytes | str]] = []
        while len(messages) < limit and self._inputs.poll(0):
            try:
                messages.append(split_frame(self._inputs.recv_multipart()))
            except ValueError as exc:  # includes UnicodeDecodeError
                messages.append((None, str(exc)))
        return messages

    def _answer_subscriptions(self, limit: int = 64) -> None:
        """Answer each subscription to ``SUBSCRIBED + token`` heard, up to ``limit`` of them a call (a
        flood waits for the next poll; ZeroMQ passes a topic up once, while some subscriber holds it).
        The rest, channels and unsubscriptions, are only drained."""
        prefix = b"\x01" + SUBSCRIBED.encode()
        for _ in range(limit):
            if not self._publisher.poll(0):
                return
            message = self._publisher.recv()
            if message.startswith(prefix):
                self._publisher.send(message[1:] + b"\0")

    def receive_control(self, limit: int = 64) -> list[list[bytes]]:
        """Up to ``limit`` control messages waiting (a flood waits for the next call): [identity, empty
        delimiter (REQ), payload] frames."""
        messages = []
        while len(messages) < limit and self._control.poll(0):
            messages.append(self._control.recv_multipart())
        return messages

    def reply(self, envelope: list[bytes], data: bytes) -> None:
        """Answer a control message, keeping its routing envelope."""
        self._control.send_multipart([*envelope, data])

    def wait(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for an input or control message; True if one is waiting."""
        return bool(self.poller.poll(max(0, int(timeout_s * 1000))))

    def wait_for_input(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for an input message; True if one is waiting."""
        return bool(self._inputs.poll(max(0, int(timeout_s * 1000))))

    def close(self) -> None:
        for socket in (self._publisher, self._inputs, self._control):
            socket.close(0)
        if self._authenticator is not None:
            self._authenticator.stop()


def open_lcm(url: str):
    """An ``lcm.LCM`` on ``url``, or a ConfigError naming the URL (LCM itself says only that it failed)."""
    import lcm

    from goggles.runtime.c_stderr import captured_c_stderr

    error = None
    with captured_c_stderr() as said:  # LCM prints its reason there, and raises without it
        try:
            bus = lcm.LCM(url)
        except Exception as exc:
            error = exc
    if error is None:
        if said.text:  # what it printed on success (a warning) is not lost
            sys.stderr.write(said.text + "\n")
        return bus
    reason = said.text.removeprefix("Error: ").splitlines()[0] if said.text else str(error)
    raise ConfigError(f"cannot open LCM at {url!r}: {reason} (a provider URL such as {DEFAULT_LCM_URL!r})") from None


class LcmBus:
    """Engine-side LCM: publishes outputs, queues inputs of the ``INPUT_CHANNELS`` channels.

    Args:
        url: LCM provider URL (``udpm://...?ttl=0`` by default; ``memq://`` in one process).
    """

    def __init__(self, url: str = DEFAULT_LCM_URL):
        self.lcm = open_lcm(url)
        self.url = url
        self._queue: deque[tuple[str, bytes]] = deque(maxlen=LCM_INPUT_QUEUE)
        self.oversized = 0
        """Inputs dropped for their size before they were queued."""
        self.failed = 0
        """Outputs LCM could not send."""
        self._pattern = re.compile(INPUT_CHANNELS)
        self._subscription = self.lcm.subscribe(INPUT_CHANNELS, self._on_message)
        self._subscription.set_queue_capacity(LCM_INPUT_QUEUE)

    def _on_message(self, channel: str, data: bytes) -> None:
        if len(data) > MAX_INPUT_BYTES:
            self.oversized += 1
        elif self._pattern.fullmatch(channel):
            self._queue.append((channel, data))

    def publish(self, channel: str, data, frame_buffer: bytearray | None = None) -> None:
        try:
            self.lcm.publish(channel, data if isinstance(data, bytes) else bytes(data))  # LCM takes bytes only
        except OSError as exc:  # a send LCM refused (a network gone, a name it cannot carry): lost, not fatal
            self.failed += 1
            if self.failed == 1 or self.failed % 1000 == 0:
                log.warning("LCM could not send %s (%d so far): %s", channel[:80], self.failed, exc)

    def receive_inputs(self, limit: int = 64) -> list[tuple[str, bytes]]:
        """Up to ``limit`` input messages waiting, as (channel, bytes); the rest wait for the next call."""
        while len(self._queue) < limit and self.lcm.handle_timeout(0) > 0:
            pass
        return [self._queue.popleft() for _ in range(min(limit, len(self._queue)))]

    def close(self) -> None:
        self.lcm.unsubscribe(self._subscription)


def largest_message(config) -> int:
    """The most bytes one message of a run (``RunConfig``) can take: a camera's image of 4-byte pixels
    (depth, range, segmentation; colour takes 3), an event camera's packet of one 12-byte event per
    pixel (what a render can fire), a LiDAR scan of 16-byte points; 64 KiB for the rest."""
    largest = 64 * 1024
    for camera in config.cameras:
        per_pixel = 12 if camera.events is not None else 4
        largest = max(largest, camera.model.width * camera.model.height * per_pixel + 1024)
    for lidar in config.lidars:
        largest = max(largest, len(lidar.model.elevations_deg) * lidar.model.columns * 16 + 1024)
    return largest


def open_buses(config) -> list:
    """The buses a run (``RunConfig``) asked for: ZeroMQ (bound at ``config.zmq``), LCM (at
    ``config.lcm_url``) and ROS 2 over DDS (``config.ros2``); None: not that one."""
    buses: list = []
    try:
        if config.zmq is not None:
            hwm = PUBLISH_HWM
            if config.mode == ClockMode.LOCKSTEP:
                hwm = max(PUBLISH_HWM, min(LOCKSTEP_PUBLISH_HWM, LOCKSTEP_PUBLISH_BYTES // largest_message(config)))
            buses.append(ZmqBus(config.zmq, curve=config.curve, publish_hwm=hwm))
        if config.lcm_url is not None:
            buses.append(LcmBus(config.lcm_url))
        if config.ros2 is not None:
            from goggles.transport.ros2.bus import Ros2Bus

            vehicles = [v.name for v in config.vehicles]
            buses.append(Ros2Bus(config.ros2, config.cameras, config.range_sensors, vehicles, lidars=config.lidars))
    except Exception:
        for bus in buses:
            bus.close()
        raise
    return buses
