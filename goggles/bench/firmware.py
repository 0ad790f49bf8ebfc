"""goggles bench firmware: Betaflight's SITL flying hovers in lockstep, flight after flight (a soak): the
failsafes, the worst errors over each hover's last seconds, the scale it ran at, the wall time to armed
and what a lockstep FC tick costs in wall time."""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from goggles.dynamics import ControlMode, SimulatorSettings, load_airframe
from goggles.firmware.betaflight import BetaflightSettings
from goggles.firmware.link import FirmwareLink
from goggles.rig import parts


@dataclass(frozen=True)
class HoverFlight:
    """One flight of ``vehicles`` quads, each its own firmware, hovering where the pilot holds them."""

    failsafes: int
    """Vehicles whose firmware went into failsafe, or stopped."""
    height_error_m: float
    tilt_deg: float
    drift_m: float
    """The worst over the judged seconds, of every vehicle."""
    scale: float
    """Sim seconds per wall second of the flight (the firmwares' starts aside)."""
    start_s: float
    """Wall seconds to start and configure the firmwares."""
    armed_after_s: float
    """Wall seconds from the start to the last vehicle armed (nan: one never armed)."""
    tick_us: float
    """Median wall microseconds of one FC tick: the state to each firmware, its loops, its motors back."""


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def fly_hover(
    seconds: float = 30.0, judged: float = 10.0, vehicles: int = 1, cli: tuple[str, ...] = (), seed: int = 0
) -> HoverFlight:
    """``vehicles`` fg-quads, 3 m apart, each flown by a fresh firmware with ``cli`` from rest to a hover at
    1.5 m by goggles' pilot for ``seconds`` of sim time; errors judged over the last ``judged`` seconds."""
    started = time.perf_counter()
    airframe = load_airframe("fg-quad")
    sim = parts.simulator(airframe, vehicles, SimulatorSettings(seed=seed, imu_rate=960.0), device="cpu")
    holds = [(3.0 * k, 0.0, 1.5, 0.0) for k in range(vehicles)]
    links: list[FirmwareLink] = []
    try:
        for hold in holds:
            links.append(parts.firmware(airframe, BetaflightSettings(cli=cli, source="goggles bench firmware"), hold))
        sim.reset(position=[(x, y, 0.0) for x, y, _, _ in holds])
        sim.set_command(ControlMode.ROTOR_SPEEDS, [0.0] * airframe.num_rotors)
        start_s = time.perf_counter() - started
        steps, dt = int(round(seconds / sim.dt)), sim.dt
        first_judged = steps - int(round(judged / dt))
        errors = np.zeros(3)
        failsafe = [False] * vehicles
        armed_at = [math.nan] * vehicles
        ticks = []
        flying = time.perf_counter()
        for step in range(steps):
            t = step * dt
            s = sim.states()
            tick = time.perf_counter()
            speeds = [link.step(t, s, row, dt) for row, link in enumerate(links)]
            ticks.append(time.perf_counter() - tick)
            sim.set_command(ControlMode.ROTOR_SPEEDS, np.array(speeds))
            sim.step(1)
            for row, link in enumerate(links):
                report = link.report()
                failsafe[row] |= report.failsafe
                if report.armed and math.isnan(armed_at[row]):
                    armed_at[row] = time.perf_counter() - started
            if step >= first_judged:
                for row, (x, y, z, _) in enumerate(holds):
                    p, q = s.position[row], s.attitude[row]
                    tilt = math.degrees(2.0 * math.asin(min(1.0, math.hypot(q[1], q[2]))))
                    errors = np.maximum(errors, (abs(p[2] - z), tilt, math.hypot(p[0] - x, p[1] - y)))
        wall = time.perf_counter() - flying
    finally:
        for link in links:
            link.close()
        sim.close()
    return HoverFlight(
        failsafes=sum(failsafe),
        height_error_m=float(errors[0]),
        tilt_deg=float(errors[1]),
        drift_m=float(errors[2]),
        scale=seconds / wall,
        start_s=start_s,
        armed_after_s=max(armed_at),
        tick_us=float(np.median(ticks)) * 1e6,
    )


def bench_firmware(
    flights: int,
    seconds: float,
    vehicles: int = 1,
    load: int = 0,
    cli: tuple[str, ...] = (),
    progress: Callable[[int, HoverFlight], None] | None = None,
) -> list[HoverFlight]:
    """``flights`` hovers in a row (each its own firmwares), with ``load`` processes spinning meanwhile."""
    spinners = [multiprocessing.Process(target=_spin, args=(1e9,), daemon=True) for _ in range(load)]
    for spinner in spinners:
        spinner.start()
    results = []
    try:
        for k in range(flights):
            results.append(fly_hover(seconds, min(10.0, seconds / 3.0), vehicles, cli, seed=k))
            if progress is not None:
                progress(k, results[-1])
    finally:
        for spinner in spinners:
            spinner.kill()
    return results
