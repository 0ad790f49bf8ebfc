"""A small client for the engine over ZeroMQ: subscribe to outputs, send commands and poses, step.

    with Client() as client:
        client.subscribe("quad0/imu")                  # an in-order stream: client.receive()
        client.wait_for_subscriptions()                # from here on, nothing published is lost
        depth = client.latest("quad0/stereo_left/depth")  # the newest frame of one channel
        client.send_command("quad0", ControlMode.POSITION, [1, 0, 2, 0])
        client.step(32)                                # lockstep mode: advance 32 physics steps

Inputs reach an engine that listens: the first waits for the engine to subscribe (a publisher drops
what it sends before then), and closing leaves queued ones a second to go out.

``latest(channel)`` reads a socket of its own with ZMQ_CONFLATE, which keeps only the newest frame:
a slow client gets the latest frame, never an ever-growing queue or a stale one. ``receive()`` gives
every message of the subscribed channels in order (bounded by RECEIVE_HWM), from the moment the
subscription has joined: ``wait_for_subscriptions`` says when.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import numbers
import secrets
import time
from collections import deque
from collections.abc import Callable
from enum import IntEnum

import numpy as np

import goggles_lcm
from goggles.checks import is_whole
from goggles.clock import ClockMode
from goggles.control_modes import ControlMode, control_mode
from goggles.errors import ConfigError
from goggles.transport.buses import (
    BARRIER_FOLLOWS,
    ENGINE_STOPPED,
    LOCKSTEP_BARRIER,
    NOT_LOCKSTEP,
    SUBSCRIBED,
    ZmqEndpoints,
    connect,
    frame,
    split_frame,
)
from goggles.transport.messages import scene_edit_message
from goggles.transport.schema import EDIT_ACTIONS, EVENT_DTYPE, MAX_STEPS, Encoding, decode_any, header

#: Receive queue bound per subscription socket: newer frames replace nothing, older ones are dropped.
RECEIVE_HWM = 16
#: How long a client's first input waits for the engine to subscribe to it (it takes milliseconds).
FIRST_SEND_WAIT_S = 2.0
#: How long ``wait_for_subscriptions`` waits for the engine's answer before it asks again.
ANSWER_RETRY_S = 0.5
#: How long closing a client leaves its queued inputs to reach the engine.
CLOSE_LINGER_S = 1.0

log = logging.getLogger(__name__)

_DTYPES = {Encoding.DEPTH_F32: np.float32, Encoding.RANGE_F32: np.float32, Encoding.SEGMENTATION_I32: np.int32}


def image_array(image: goggles_lcm.image_t) -> np.ndarray:
    """Pixels of an image_t: (H, W) float32 depth/range, int32 segmentation, or (H, W, 3) uint8 RGB."""
    encoding = Encoding(image.encoding)
    if encoding == Encoding.RGB8:
        return np.frombuffer(image.data, np.uint8).reshape(image.height, image.width, 3)
    return np.frombuffer(image.data, _DTYPES[encoding]).reshape(image.height, image.width)


class Client:
    """ZeroMQ client of one engine.

    Args:
        endpoints: the engine's endpoints (default: those of ``goggles run``).
        context: a ``zmq.Context`` (default: the process's shared instance).
        keys: for an engine exposed with CURVE: a folder with ``client.key_secret`` and ``server.key``
            (as ``goggles keys`` makes them).
    """

    def __init__(self, endpoints: ZmqEndpoints | None = None, *, context=None, keys: str | None = None):
        import zmq

        endpoints = endpoints or ZmqEndpoints()
        self._curve = None
        if keys is not None:  # an exposed engine: this client's key pair and the server's public key
            import zmq.auth

            folder = __import__("pathlib").Path(keys)
            try:
                public, secret = zmq.auth.load_certificate(folder / "client.key_secret")
                server, _ = zmq.auth.load_certificate(folder / "server.key")
            except (OSError, ValueError) as exc:
                raise ConfigError(f"CURVE keys in {folder}: {exc} (make them with: goggles keys DIR)") from exc
            self._curve = (public, secret, server)

        self._zmq = zmq
        self._context = context or zmq.Context.instance()
        self.endpoints = endpoints
        self._sub = self._socket(zmq.SUB)
        self._sub.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._early: deque = deque(maxlen=RECEIVE_HWM)  # what came while ``wait_for_subscriptions`` waited
        self._req = None
        self._latest: dict[str, object] = {}
        # XPUB: a PUB that also hears the engine's subscription, so ``wait_for_engine`` knows when a
        # message would arrive (a publisher drops what it sends before the engine has subscribed).
        self._pub = self._socket(zmq.XPUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._engine_heard, self._sent = False, False  # the engine's subscription heard; any input sent
        for socket, endpoint in ((self._sub, endpoints.publish), (self._pub, endpoints.inputs)):
            try:
                connect(socket, endpoint)
            except ConfigError:
                self.close()
                raise
        # Request ids double as barrier ids on the engine's shared inputs socket: unique per client.
        self._request_ids = itertools.count(secrets.randbits(48) + 1)
        self._seq = itertools.count()

    def _socket(self, kind):
        socket = self._context.socket(kind)
        if self._curve is not None:
            socket.curve_publickey, socket.curve_secretkey, socket.curve_serverkey = self._curve
        return socket

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def subscribe(self, *channels: str) -> None:
        """Receive these channels (prefix match, as ZeroMQ topics); none given: everything. The engine
        drops, unseen, what it publishes before a subscription has joined: see ``wait_for_subscriptions``."""
        for channel in channels or ("",):
            self._sub.setsockopt(self._zmq.SUBSCRIBE, channel.encode())

    def wait_for_subscriptions(self, timeout: float = 5.0) -> None:
        """Return once the engine has every subscription made so far, so that all it publishes from then
        on arrives (a lockstep client's first frame, say); TimeoutError if no engine answers at the
        publish endpoint within ``timeout`` s. Messages that come meanwhile wait for ``receive`` (the
        newest ``RECEIVE_HWM`` of them, as many as the socket itself keeps).

        It subscribes to a topic of this call's own (``SUBSCRIBED``), which the engine answers: ZeroMQ
        applies one socket's subscriptions in order, so the channels subscribed before are in place.
        """
        deadline = time.monotonic() + _milliseconds(timeout) / 1000.0
        answers: list[bytes] = []
        try:
            while True:
                # A fresh topic at first and then every ANSWER_RETRY_S: an answer is dropped, as any
                # message, when this socket's queue at the engine is full (frames this client has not read).
                answers.append(f"{SUBSCRIBED}{secrets.token_hex(8)}".encode())
                self._sub.setsockopt(self._zmq.SUBSCRIBE, answers[-1])
                retry = min(deadline, time.monotonic() + ANSWER_RETRY_S)
                while self._sub.poll(max(0, int((retry - time.monotonic()) * 1000))):
                    frames = self._sub.recv_multipart()
                    if len(frames) == 1 and frames[0][:-1] in answers and frames[0][-1:] == b"\0":
                        return
                    self._early.append(frames)
                    if time.monotonic() >= retry:
                        break
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"no engine answered at {self.endpoints.publish} within {timeout:g} s: is goggles run "
                        "running there?"
                    )
        finally:
            for answer in answers:
                self._sub.setsockopt(self._zmq.UNSUBSCRIBE, answer)

    def receive(self, timeout: float = 1.0):
        """The next message in arrival order as (channel, decoded message), or None after ``timeout`` s."""
        deadline = time.monotonic() + _milliseconds(timeout) / 1000.0
        while True:
            if self._early:
                frames = self._early.popleft()
            elif self._sub.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                frames = self._sub.recv_multipart(copy=False)
            else:
                return None
            channel, data = split_frame(frames)
            if not channel.startswith(SUBSCRIBED):  # an answer to a subscription (another client's)
                return channel, decode_any(data)

    def receive_until(self, channel: str, utime: int, timeout: float = 5.0):
        """Lockstep: the messages in arrival order up to the first of ``channel`` stamped at ``utime`` or
        later (a step reply's instant), as (the ones before it, it); it is None if no message came for
        ``timeout`` s. The engine's order is kept, so a run reads the same messages at the same steps
        every time, where ``latest`` reads take whichever frame has arrived."""
        before = []
        while (item := self.receive(timeout=timeout)) is not None:
            if item[0] == channel and item[1].header.utime >= utime:
                return before, item[1]
            before.append(item)
        return before, None

    def latest(self, channel: str, timeout: float = 1.0):
        """The newest message of exactly ``channel`` (decoded), or None if none came within ``timeout`` s.

        The first call opens a conflating socket for the channel (allow for the PUB/SUB join); later
        calls return at once if a newer frame has arrived, else wait for the next one.
        """
        socket = self._latest.get(channel)
        if socket is None:
            socket = self._latest[channel] = self._socket(self._zmq.SUB)
            socket.setsockopt(self._zmq.CONFLATE, 1)
            socket.setsockopt(self._zmq.LINGER, 0)
            socket.setsockopt(self._zmq.SUBSCRIBE, channel.encode() + b"\0")
            socket.connect(self.endpoints.publish)
        if not socket.poll(_milliseconds(timeout)):
            return None
        return decode_any(split_frame([socket.recv(copy=False)])[1])

    def send_command(self, vehicle: str, mode: ControlMode | int | str, values) -> None:
        """Command a simulated vehicle's controller (``mode``: a ControlMode, its number or its name;
        see ``goggles.dynamics.control`` for the values). Sent as given: the engine checks commands
        (and counts and drops what it cannot use), so a client can test it with bad ones."""
        message = goggles_lcm.command_t()
        message.header = header(0, next(self._seq))
        message.vehicle = vehicle
        message.mode = int(control_mode(mode)) if isinstance(mode, str) else _mode_number(mode)
        message.values = _numbers(values, None, "command values")
        message.num_values = len(message.values)
        self._send([frame(f"{vehicle}/command", message.encode())])

    def send_sticks(
        self, vehicle: str, roll=1500, pitch=1500, throttle=1000, yaw=1500, arm=False, angle_mode=True, aux=(1000, 1000)
    ) -> None:
        """A vehicle its firmware flies: its RC sticks and switches, 1000-2000 us (Betaflight's AETR:
        roll right, pitch forward, throttle up and yaw right above 1500), the arm switch (AUX1) and
        angle mode (AUX2), AUX3 and AUX4. They replace goggles' hover pilot from then on."""
        values = [roll, pitch, throttle, yaw, 2000 if arm else 1000, 2000 if angle_mode else 1000, *aux]
        self.send_command(vehicle, ControlMode.RC, values)

    def send_pose(self, name: str, position, orientation, utime: int | None = None, valid: bool = True) -> int:
        """Publish a body pose (live mode); returns the utime it carries (wall µs by default)."""
        message = goggles_lcm.pose_t()
        utime = time.time_ns() // 1000 if utime is None else _utime(utime)
        message.header = header(utime, next(self._seq))
        message.name = name
        message.position = _numbers(position, 3, "position")
        message.orientation = _numbers(orientation, 4, "orientation")
        message.valid = bool(valid)
        self._send([frame(f"pose/{name}", message.encode())])
        return utime

    def spawn(self, actor: str, prop: str, position, orientation=(1.0, 0.0, 0.0, 0.0)) -> None:
        """Place a new actor ``actor`` of the run file's ``[[prop]]`` ``prop`` at a world pose
        (orientation w, x, y, z); an actor of that name already placed is placed anew."""
        self._edit("spawn", actor, prop, position, orientation)

    def move(self, actor: str, position, orientation=(1.0, 0.0, 0.0, 0.0)) -> None:
        """Move a spawned actor to a world pose."""
        self._edit("move", actor, "", position, orientation)

    def remove(self, actor: str) -> None:
        """Take a spawned actor out of the world."""
        self._edit("remove", actor, "", (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0))

    def _edit(self, action: str, actor: str, prop: str, position, orientation) -> None:
        position, orientation = _numbers(position, 3, "position"), _numbers(orientation, 4, "orientation")
        utime, seq = time.time_ns() // 1000, next(self._seq)
        message = scene_edit_message(utime, seq, action, actor, prop, position, orientation)
        self._send([frame("scene/edit", message.encode())])

    def wait_for_engine(self, timeout: float = 5.0) -> None:
        """Return once the engine's input socket has subscribed to this client (what is sent from then
        on arrives); TimeoutError if no engine listens at the inputs endpoint within ``timeout`` s."""
        deadline = time.monotonic() + _milliseconds(timeout) / 1000.0
        while not self._engine_heard:
            remaining = deadline - time.monotonic()
            if not self._pub.poll(max(0, int(remaining * 1000))):  # 0 s: only what has come already
                raise TimeoutError(f"no engine subscribed at {self.endpoints.inputs} within {timeout:g} s")
            self._engine_heard = self._pub.recv()[:1] == b"\x01"  # 1: subscribe (0: unsubscribe)

    def send_raw(self, frames: list[bytes]) -> None:
        """Send arbitrary frames to the engine's input socket (for tests of malformed input)."""
        self._send(frames)

    def send(self, channel: str, data: bytes) -> None:
        """Send already-encoded bytes on an input channel."""
        self._send([frame(channel, data)])

    def _send(self, frames: list) -> None:
        """Send one message; the first waits (up to ``FIRST_SEND_WAIT_S``) for the engine to subscribe,
        since a publisher drops what it sends before then: a one-shot command sent right after
        connecting would otherwise be lost, silently, about one time in two."""
        if not self._engine_heard and not self._sent:
            try:
                self.wait_for_engine(FIRST_SEND_WAIT_S)
            except TimeoutError:
                log.warning(
                    "no engine subscribed at %s within %g s: inputs sent before one does are dropped",
                    self.endpoints.inputs,
                    FIRST_SEND_WAIT_S,
                )
        self._pub.send_multipart(frames)
        self._sent = True

    def step(self, steps: int, timeout: float = 30.0) -> goggles_lcm.step_t:
        """Lockstep: advance ``steps`` physics steps; returns once their outputs are published (the
        reply's ``steps``: those run, fewer where the engine's run ended first).

        The inputs this client sent before (commands, poses, edits) are applied before the steps,
        every time: the request waits in the engine for a barrier sent behind them.

        Raises:
            ValueError: ``steps`` outside 1 to ``MAX_STEPS``.
            TimeoutError: no reply within ``timeout`` s (the request socket is reset).
            ConnectionError: the engine refused the request (its log says why), does not run in
                lockstep mode, or stopped before the request's turn.
        """
        if not is_whole(steps, 1, MAX_STEPS):  # 2.5 would have been sent as 2
            raise ValueError(f"a lockstep request advances a whole 1 to {MAX_STEPS:,} steps, not {steps!r}")
        if self._req is None:
            self._req = self._socket(self._zmq.REQ)
            self._req.setsockopt(self._zmq.LINGER, 0)
            self._req.connect(self.endpoints.control)
        # Inputs sent before this request travel on another socket and could reach the engine after
        # it: a barrier behind them on their own socket tells the engine when all have come.
        if self._sent and not self._engine_heard:  # an engine that subscribed after the first input
            with contextlib.suppress(TimeoutError):
                self.wait_for_engine(0.0)
        barrier = self._sent and self._engine_heard
        request = goggles_lcm.step_t()
        request.header = header(0, BARRIER_FOLLOWS if barrier else 0)
        request.request_id = next(self._request_ids)
        request.steps = int(steps)
        if barrier:
            self._pub.send(frame(LOCKSTEP_BARRIER, request.encode()))
        self._req.send(request.encode())
        if not self._req.poll(_milliseconds(timeout)):
            self._req.close(0)
            self._req = None
            raise TimeoutError(
                f"no lockstep reply from {self.endpoints.control} within {timeout:g} s: is goggles run --mode "
                "lockstep running there?"
            )
        reply = goggles_lcm.step_t.decode(self._req.recv())
        if reply.request_id == NOT_LOCKSTEP:
            raise ConnectionError(
                f"the engine at {self.endpoints.control} does not run in lockstep mode (its clock runs on its own); "
                "start it with goggles run --mode lockstep"
            )
        if reply.request_id == ENGINE_STOPPED:
            raise ConnectionError(f"the engine at {self.endpoints.control} stopped: its run ended before this request")
        if reply.request_id != request.request_id:  # UNREADABLE_REQUEST: the engine could not read it
            raise ConnectionError(f"{self.endpoints.control} refused lockstep request {request.request_id}")
        return reply

    def close(self, linger: float = CLOSE_LINGER_S) -> None:
        """Close the sockets; ``linger`` s: time left to deliver inputs still queued (the last command
        of a one-shot sender; nothing waits where no engine listens, since nothing is queued then)."""
        for socket in (self._sub, self._pub, self._req, *self._latest.values()):
            if socket is not None:
                socket.close(int(linger * 1000) if socket is self._pub else 0)


def _numbers(values, count: int | None, what: str) -> list[float]:
    """``values`` as ``count`` floats (None: any number of them) for a message; the values themselves
    are sent as given (the engine counts and drops a NaN pose), but a list the message cannot hold is
    refused here."""
    try:
        floats = [float(v) for v in values]
    except (TypeError, ValueError):
        floats = None
    if floats is None or count is not None and len(floats) != count:
        raise ConfigError(f"{what} must be {'' if count is None else f'{count} '}numbers, got {values!r}")
    return floats


def _mode_number(mode) -> int:
    """A control mode's number as ``command_t`` holds it (int8), even one the engine will refuse (a
    client may test that); 1.5 was sent as mode 1, 2**40 was struct.error from the encoder."""
    if not is_whole(mode, -128, 127):
        raise ConfigError(f"control mode {mode!r}: give a ControlMode, its name or its number")
    return int(mode)


def _utime(value) -> int:
    """A time stamp in µs as a message holds it (int64); one it cannot hold is refused here (the LCM
    encoder's own error was "int too large to convert")."""
    try:
        utime = int(value)
    except (TypeError, ValueError, OverflowError):
        utime = None
    if utime is None or not -(2**63) <= utime < 2**63:
        raise ConfigError(f"utime must be a whole number of microseconds (int64), got {value!r}")
    return utime


def _milliseconds(timeout: float) -> int:
    """A wait in s as ZeroMQ's poll takes it; a negative or NaN one (which ZeroMQ waits on for ever) is
    refused, and one past a day is a day."""
    if not (isinstance(timeout, numbers.Real) and not isinstance(timeout, bool) and timeout >= 0):
        raise ConfigError(f"timeout must be 0 or more seconds, got {timeout!r}")
    return int(min(timeout, 86400.0) * 1000)


def _named(enum) -> Callable[[int], str]:
    """An enum field's value as ``NAME(number)``; a number the enum does not know, as it is."""

    def name(value: int) -> str:
        try:
            return f"{enum(value).name}({value})"
        except ValueError:
            return str(value)

    return name


#: The fields ``describe`` shows by name: (type, field) -> how.
_ENUM_FIELDS = {
    ("image_t", "encoding"): _named(Encoding),
    ("command_t", "mode"): _named(ControlMode),
    ("clock_t", "mode"): _named(ClockMode),
    ("scene_edit_t", "action"): _named(IntEnum("EditAction", {k.upper(): v for k, v in EDIT_ACTIONS.items()})),
}
_ENUM_FIELDS["edit_result_t", "action"] = _ENUM_FIELDS["scene_edit_t", "action"]


def event_array(message) -> np.ndarray:
    """An ``events_t`` packet's events as a NumPy record array (``EVENT_DTYPE``: x, y, t in ns after
    ``header.utime``, polarity +1/-1), a view of its bytes."""
    return np.frombuffer(message.data, EVENT_DTYPE, count=message.num_events)


def describe(message) -> str:
    """One line per message for ``goggles echo``: every field, images summarised, enums by name."""
    kind = type(message).__name__
    if isinstance(message, goggles_lcm.image_t):
        pixels = image_array(message)
        finite = pixels[np.isfinite(pixels)] if pixels.dtype.kind == "f" else pixels
        span = f"{finite.min():.3g}..{finite.max():.3g}" if finite.size else "none"
        return (
            f"image_t utime={message.header.utime} seq={message.header.seq} camera={message.camera} "
            f"{message.width}x{message.height} encoding={_ENUM_FIELDS[kind, 'encoding'](message.encoding)} "
            f"values {span} "
            f"pose_utime={message.pose_utime} position={np.round(message.position, 3).tolist()} lens={message.lens}"
        )
    if isinstance(message, goggles_lcm.events_t):
        events = event_array(message)
        on = int(np.count_nonzero(events["polarity"] > 0))
        return (
            f"events_t utime={message.header.utime} seq={message.header.seq} camera={message.camera} "
            f"{message.width}x{message.height} window {message.header.utime}..{message.end_utime} "
            f"events={len(events)} (on {on}, off {len(events) - on})"
        )
    fields = []
    for name in message.__slots__:
        value = getattr(message, name)
        if isinstance(value, goggles_lcm.header_t):
            fields.append(f"utime={value.utime} seq={value.seq}")
        elif (kind, name) in _ENUM_FIELDS:
            fields.append(f"{name}={_ENUM_FIELDS[kind, name](value)}")
        elif isinstance(value, float):
            fields.append(f"{name}={value:.6g}")
        elif isinstance(value, (list, tuple)):
            fields.append(
                f"{name}={np.round(np.asarray(value, dtype=float), 4).tolist()}"
                if value and not isinstance(value[0], str)
                else f"{name}={list(value)}"
            )
        else:
            fields.append(f"{name}={value}")
    return f"{kind} " + " ".join(fields)
