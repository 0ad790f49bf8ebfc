"""Inputs from the buses: decoded, validated, applied to the vehicles and the crowd, counted.

Every input is checked before it is used (``goggles.transport.schema.decode_input``); a bad one is
counted and dropped, never fatal. A loop spends at most ``INPUT_BUDGET_S`` on inputs, so a flood,
or one costly message after another, waits for the next loop instead of stalling the outputs.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np

import goggles_lcm
from goggles.checks import clipped
from goggles.clock import came_late
from goggles.dynamics import ControlMode
from goggles.engine.status import Counters
from goggles.errors import ConfigError
from goggles.frames import transform
from goggles.rig.vehicles import Vehicle
from goggles.scene.avatar import SkeletonPose
from goggles.transport.buses import LOCKSTEP_BARRIER
from goggles.transport.schema import MalformedMessage, decode_input
from goggles.world.crowd import Crowd
from goggles.world.props import Props

log = logging.getLogger(__name__)

#: Wall time the loop spends on inputs before it goes on with physics and outputs, s.
INPUT_BUDGET_S = 0.02
#: Scene edits that cannot apply are said one by one up to this many (each actor and reason once).
TOLD_EDITS = 16


class InputHandler:
    """Applies inputs to ``vehicles``, ``crowd`` and ``props``; accepted ones also go to ``sinks``
    (recordings) stamped with ``log_time_ns()``, but for poses that place nothing in this run (a
    simulated vehicle's: a replay would place it there, and a ROS 2 recording draw it in ``/tf``).
    ``edited(message, why)`` hears every scene edit read: ``why`` None where it applied."""

    def __init__(
        self,
        buses,
        vehicles: dict[str, Vehicle],
        crowd: Crowd,
        props: Props | None = None,
        *,
        sinks=(),
        log_time_ns: Callable[[], int] = time.time_ns,
        edited: Callable[[object, str | None], None] | None = None,
    ):
        self.buses, self.vehicles, self.crowd, self.props = buses, vehicles, crowd, props
        self.sinks, self.log_time_ns, self._edited = sinks, log_time_ns, edited
        self.counters = Counters()
        self.barriers: deque[int] = deque(maxlen=64)
        """Request ids of the lockstep barriers that came (``goggles.transport.buses.LOCKSTEP_BARRIER``)."""
        self._last_drop_log = 0.0
        self._turn = 0
        self._edits_refused: set[tuple[str, str]] = set()
        self._edits_ignored = 0
        self._faulted = False
        self._last_edit_log = -float("inf")
        self._backlog: deque = deque()
        """Inputs taken from a bus but not applied yet: the budget ran out (the next poll starts here)."""
        self._tracked_utime: dict[str, int] = {}
        """The newest stamp taken of each tracked prop's pose (a later copy is only heard)."""

    def poll(self) -> None:
        """Apply the inputs waiting on the buses, until ``INPUT_BUDGET_S`` is spent (the budget is
        checked after every message; what is left waits for the next poll, in order)."""
        start = time.perf_counter()
        while time.perf_counter() - start < INPUT_BUDGET_S:
            if not self._backlog and not self._refill():
                return
            self.receive(*self._backlog.popleft())

    def _refill(self) -> bool:
        """Take the next batch of waiting inputs, from the buses in turn (a flood on one cannot
        starve the other); False when none has anything waiting."""
        for _ in range(len(self.buses)):
            bus = self.buses[self._turn % len(self.buses)]
            self._turn += 1
            items = bus.receive_inputs()
            if items:
                self._backlog.extend(items)
                return True
        return False

    def receive(self, channel: str | None, data) -> None:
        if channel is None:  # not a goggles frame at all
            self.count_malformed("zmq", MalformedMessage(data))
            return
        if channel == LOCKSTEP_BARRIER:  # not an input to the world: a marker in the inputs' order
            try:
                self.barriers.append(decode_input(data, goggles_lcm.step_t).request_id)
            except MalformedMessage as exc:
                self.count_malformed(channel, exc)
            return
        self.counters.received += 1
        try:
            self.apply(channel, data)
        except MalformedMessage as exc:
            self.count_malformed(channel, exc)
            return
        except Exception as exc:  # a fault of goggles' own that a message found: told, and the run goes on
            if not self._faulted:
                self._faulted = True
                log.exception(
                    "input on %s could not be applied (a fault in goggles; further ones are counted)",
                    clipped(channel, 80),
                )
            self.count_malformed(channel, MalformedMessage(f"{type(exc).__name__}: {exc}"))
            return
        if channel.startswith("pose/") and not self.places(channel[len("pose/") :]):
            return
        for sink in self.sinks:
            sink.write(channel, data, self.log_time_ns())

    def places(self, body: str) -> bool:
        """Does ``pose/<body>`` place something in this run: a vehicle posed from outside, or a tracked prop?"""
        vehicle = self.vehicles.get(body)
        return self.tracks(body) or (vehicle is not None and vehicle.sim is None)

    def count_malformed(self, channel: str, exc: Exception) -> None:
        self.counters.count_malformed(channel, self._is_input_channel(channel))
        now = time.monotonic()
        if self.counters.malformed <= 10 or now - self._last_drop_log > 10.0:  # then one line per 10 s at most
            self._last_drop_log = now
            log.warning(
                "dropped input on %s (%d so far): %s",
                clipped(channel, 80),
                self.counters.malformed,
                clipped(str(exc), 200),
            )

    def _is_input_channel(self, channel: str) -> bool:
        """A channel this run reads: a vehicle's command or pose, a skeleton, scene edits."""
        if channel in ("scene/edit", "zmq", LOCKSTEP_BARRIER):
            return True
        if channel.endswith("/command"):
            return channel[: -len("/command")] in self.vehicles
        if channel.startswith("pose/"):
            return channel[len("pose/") :] in self.vehicles or self.tracks(channel[len("pose/") :])
        return channel.startswith("skeleton/") and len(channel) <= 64

    def tracks(self, body: str) -> bool:
        """Is ``body`` a tracked prop of this run (``[[prop]] tracked``)?"""
        return self.props is not None and body in self.props.tracked

    def apply(self, channel: str, data: bytes) -> bool:
        """Apply one input; False for a pose no body of this run took (another body's, a stale flag, a
        late copy). Raises MalformedMessage with the reason it cannot be used."""
        if channel.endswith("/command"):
            self._command(channel[: -len("/command")], decode_input(data, goggles_lcm.command_t))
        elif channel.startswith("pose/"):
            return self._pose(channel[len("pose/") :], decode_input(data, goggles_lcm.pose_t))
        elif channel.startswith("skeleton/"):
            message = decode_input(data, goggles_lcm.skeleton_t)
            try:
                pose = SkeletonPose.from_arrays(
                    message.bone_names, message.parents, message.positions, message.orientations
                )
            except Exception as exc:  # inconsistent bone lists, cyclic parents
                raise MalformedMessage(str(exc)) from exc
            if not self.crowd.offer(channel[len("skeleton/") :], pose, message.header.utime):
                self.counters.ignored += 1
        elif channel == "scene/edit":
            self._edit(decode_input(data, goggles_lcm.scene_edit_t))
        else:
            raise MalformedMessage(f"no input channel {channel!r}")
        return True

    def apply_recorded_state(self, name: str, data: bytes) -> bool:
        """A recorded ``<vehicle>/state`` places that vehicle (replay); False if this run has none."""
        message = decode_input(data, goggles_lcm.vehicle_state_t)
        vehicle = self.vehicles.get(name)
        if vehicle is None:
            self.counters.ignored += 1
            return False
        vehicle.set_pose(transform(message.position, message.orientation), message.header.utime)
        vehicle.motion = (np.array(message.velocity), np.array(message.angular_velocity))
        return True

    def _edit(self, message) -> None:
        """A well-formed edit that cannot apply (an unknown prop or actor, no room) is ignored, and
        said once per actor and reason for the first ``TOLD_EDITS``, then in one line per 10 s with
        the count (300 spawns under new names said 300 lines)."""
        T_WA = transform(message.position, message.orientation)
        why = "this run declares no props" if self.props is None else None
        if why is None:
            try:
                why = self.props.edit(message.action, message.actor, message.asset, T_WA)
            except ConfigError as exc:  # a pose the world refuses: the message's fault, never the run's
                self._answer(message, str(exc))
                raise MalformedMessage(str(exc)) from exc
        self._answer(message, why)
        if why is None:
            return
        self.counters.ignored += 1
        self._edits_ignored += 1
        if (message.actor, why) in self._edits_refused:
            return
        now = time.monotonic()
        if len(self._edits_refused) < TOLD_EDITS:
            self._edits_refused.add((message.actor, why))
            log.warning("scene edit of %s ignored: %s", clipped(message.actor, 64), clipped(why, 200))
        elif now - self._last_edit_log > 10.0:
            self._last_edit_log = now
            log.warning(
                "scene edits ignored: %d so far; the latest, of %s: %s",
                self._edits_ignored,
                clipped(message.actor, 64),
                clipped(why, 200),
            )

    def _command(self, name: str, message) -> None:
        vehicle = self.vehicles.get(name)
        if vehicle is None or vehicle.sim is None:
            self.counters.ignored += 1
            return
        mode = ControlMode(message.mode)
        if (mode == ControlMode.RC) != (vehicle.firmware is not None):
            why = (
                "its firmware takes RC commands alone" if vehicle.firmware else "RC is for a vehicle flown by firmware"
            )
            raise MalformedMessage(f"{name}: {mode.name} command: {why}")
        try:
            if vehicle.firmware is not None:
                vehicle.firmware.set_sticks(message.values)
            else:
                vehicle.sim.set_command(mode, message.values, vehicles=[vehicle.row])
        except Exception as exc:  # wrong value count for the mode, zero quaternion...
            raise MalformedMessage(str(exc)) from exc
        vehicle.external_control, vehicle.commanded = True, mode

    def _pose(self, name: str, message) -> bool:
        if self.tracks(name):
            return self._tracked_pose(name, message)
        vehicle = self.vehicles.get(name)
        if vehicle is None or vehicle.sim is not None:
            self.counters.ignored += 1
            return False
        if not message.valid:  # the source lost it: keep its last pose, and say so
            if not vehicle.stale:
                log.warning("%s is stale: keeping its last pose", vehicle.name)
            vehicle.stale = True
            return False
        return vehicle.take_live_pose(transform(message.position, message.orientation), message.header.utime)

    def _tracked_pose(self, body: str, message) -> bool:
        """A tracked prop's pose: kept as its newest (``Props.track``); a pose flagged lost leaves it
        where it was, and a late copy (the other bus's) is only heard."""
        if not message.valid or came_late(message.header.utime, self._tracked_utime.get(body, 0)):
            return False
        self._tracked_utime[body] = message.header.utime
        self.props.track(body, transform(message.position, message.orientation))
        return True

    def _answer(self, message, why: str | None) -> None:
        if self._edited is not None:
            self._edited(message, why)
