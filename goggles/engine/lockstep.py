"""The lockstep protocol: step requests on the engine's ZeroMQ control socket, and their replies.

A client asks for n physics steps (``step_t``); the engine runs them and replies once every output of
those steps is out. Requests taken together (several clients) queue and run in turn. A request that
says a barrier follows (``header.seq`` = ``BARRIER_FOLLOWS``) waits for that barrier on the inputs
socket, so the inputs its client sent before it are applied first (ZeroMQ orders messages within one
socket only). An engine that is not in lockstep answers every request at once with ``NOT_LOCKSTEP``;
a run that ends answers those still waiting with ``ENGINE_STOPPED``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import goggles_lcm
from goggles.transport import messages
from goggles.transport.buses import BARRIER_FOLLOWS, ENGINE_STOPPED, UNREADABLE_REQUEST
from goggles.transport.schema import MalformedMessage, decode_input

log = logging.getLogger(__name__)

#: Wall time a lockstep request waits for the barrier behind its client's inputs, s.
BARRIER_WAIT_S = 1.0


class StepRequests:
    """The requests of a lockstep run, taken from ``zmq`` (a ``ZmqBus``).

    Args:
        zmq: the engine's ZeroMQ bus (its control socket).
        inputs: the engine's ``InputHandler``: its ``barriers`` and its malformed-message counter.
        poll: applies the inputs waiting now (the engine's input poll).
        dt: the physics step, s (a reply says the sim time it reached).
    """

    def __init__(self, zmq, inputs, poll: Callable[[], None], dt: float):
        self.zmq, self.inputs, self._poll, self.dt = zmq, inputs, poll, dt
        self._waiting: deque[list[bytes]] = deque()  # taken from the socket, not yet run
        self._barrier_missed = False

    def next(self, stop: threading.Event, step: int, end_step: int | None):
        """Wait for the next request: ((envelope, request id, the step it starts at), the step to run
        to), or (None, ``step``) once ``stop`` is set."""
        while not stop.is_set():
            self._poll()
            if not self._waiting:  # taken only when all are run: the socket's queue bounds them
                self._waiting.extend(self.zmq.receive_control())
            while self._waiting:  # one at a time; the others wait their turn (several clients)
                frames = self._waiting.popleft()
                envelope, payload = frames[:-1], frames[-1]
                try:
                    message = decode_input(payload, goggles_lcm.step_t)
                except MalformedMessage as exc:
                    self.inputs.count_malformed("control", exc)
                    self.refuse([frames], UNREADABLE_REQUEST, step)
                    continue
                if message.header.seq == BARRIER_FOLLOWS:
                    self._await_barrier(message.request_id)
                target = step + message.steps if end_step is None else min(step + message.steps, end_step)
                return (envelope, message.request_id, step), target
            self.zmq.wait(0.05)
        return None, step

    def _await_barrier(self, request_id: int) -> None:
        """Apply the inputs a lockstep client sent before its request (they come on the inputs socket,
        the request on the control socket, in no set order) until its barrier, sent behind them, has
        come; said once if it has not within ``BARRIER_WAIT_S`` (an engine restarted under the client)."""
        deadline = time.monotonic() + BARRIER_WAIT_S
        while request_id not in self.inputs.barriers:
            if time.monotonic() > deadline:
                if not self._barrier_missed:
                    self._barrier_missed = True
                    log.warning(
                        "lockstep: the inputs sent before request %d did not all come within %g s; stepping "
                        "(further ones are not told)",
                        request_id,
                        BARRIER_WAIT_S,
                    )
                return
            self.zmq.wait_for_input(0.01)
            self._poll()
        self.inputs.barriers.remove(request_id)

    def reply(self, request, step: int) -> None:
        """Answer ``request`` with the steps it ran: fewer than asked where the run ended (``--duration``)."""
        envelope, request_id, started = request
        self.zmq.reply(envelope, messages.step_reply(request_id, step - started, step, self.dt))

    def refuse_waiting(self, step: int) -> None:
        """A run that ends (and an engine that closes) answers the requests still waiting
        (``ENGINE_STOPPED``): their clients would otherwise wait out their timeouts."""
        self.refuse([*self._waiting, *self.zmq.receive_control(limit=1024)], ENGINE_STOPPED, step)
        self._waiting.clear()

    def refuse(self, requests: list[list[bytes]], code: int, step: int) -> None:
        """Answer requests (as received: envelope, then payload) with a refusal ``code``
        (``goggles.transport.buses``) in place of the request id, having run no step."""
        for frames in requests:
            self.zmq.reply(frames[:-1], messages.step_reply(code, 0, step, self.dt))
