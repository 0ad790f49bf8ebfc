"""Betaflight's real firmware (its SITL, built by the ``betaflight`` package) flying goggles' simulator in
lockstep: arming as Betaflight's rules say and its flags by name, angle mode holding position, acro rates
as its "actual" rate curve says, yaw and motor order from the physics, the same flight twice at any load,
four firmwares at once, its own failsafe when the sticks stop, a firmware that dies, and the engine
flying it with its sensors."""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import time

import numpy as np
import pytest

from goggles.dynamics import ControlMode, MultirotorSim, SimulatorSettings, load_airframe
from goggles.errors import ConfigError
from goggles.firmware import betaflight
from goggles.firmware.betaflight import BetaflightSettings, BetaflightSitl, motor_map
from goggles.firmware.link import FirmwareLink, HoverPilot
from goggles.frames import quat_to_matrix


class Flight:
    """One vehicle of an airframe in goggles' simulator, flown by a fresh SITL from rest at the origin."""

    def __init__(self, cli=(), preset="fg-quad", imu_noise=True):
        self.airframe = airframe = load_airframe(preset)
        settings = SimulatorSettings(seed=1, imu_rate=960.0, imu_noise=imu_noise)
        self.sim = MultirotorSim(airframe, 1, settings, device="cpu")
        motors, props_out = motor_map(airframe.rotor_positions, airframe.rotor_spins)
        self.link = FirmwareLink(
            BetaflightSitl(BetaflightSettings(cli=tuple(cli)), motors, props_out),
            airframe.min_speed,
            airframe.max_speed,
            (0.0, 0.0, 1.5, 0.0),
        )
        self.digest = hashlib.sha256()  # every rotor command and state of the flight
        self.sim.set_command(ControlMode.ROTOR_SPEEDS, [0.0] * 4)
        self.t = 0.0
        self.log: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = []  # t, position, rpy (deg), rates (deg/s)

    def fly(self, seconds: float, sticks=None) -> None:
        """``sticks(t, states)``: the RC values (8), or None for the hover pilot's."""
        for _ in range(int(round(seconds / self.sim.dt))):
            s = self.sim.states()
            if sticks is not None:
                self.link.set_sticks(sticks(self.t, s))
            speeds = self.link.step(self.t, s, 0, self.sim.dt)
            self.digest.update(speeds.tobytes() + s.position.tobytes() + s.attitude.tobytes())
            self.sim.set_command(ControlMode.ROTOR_SPEEDS, speeds)
            self.sim.step(1)
            self.t += self.sim.dt
            R = quat_to_matrix(s.attitude[0])
            rpy = np.degrees(
                [np.arctan2(R[2, 1], R[2, 2]), -np.arcsin(np.clip(R[2, 0], -1, 1)), np.arctan2(R[1, 0], R[0, 0])]
            )
            self.log.append((self.t, s.position[0].copy(), rpy, np.degrees(s.rates[0])))

    def take_off(self) -> None:
        """The hover pilot arms it and climbs to 1.5 m in angle mode."""
        self.fly(6.0)
        assert self.link.pilot.armed, self.link.firmware.status

    def close(self) -> None:
        self.link.close()
        self.sim.close()


@pytest.fixture
def flight(firmware_available):
    made = []

    def make(*args, **kwargs) -> Flight:
        made.append(Flight(*args, **kwargs))
        return made[-1]

    yield make
    for f in made:
        f.close()


def sticks(roll=1500, pitch=1500, throttle=1000, yaw=1500, arm=1000, angle=1000):
    return [roll, pitch, throttle, yaw, arm, angle, 1000, 1000]


@pytest.mark.slow
def test_it_stays_disarmed_until_the_arm_switch_goes_up_with_the_throttle_low(flight):
    """Betaflight arms on its switch only with the throttle low: held up with the throttle up it stays
    disarmed (motors still) whatever else it waits for; goggles' pilot then arms it (switch down,
    throttle low, switch up once the firmware allows it) and its motors spin."""
    f = flight()
    f.fly(2.0, lambda t, s: sticks(throttle=1000))  # calibrated (1.6 s), switch down: disarmed, motors still
    status = f.link.firmware.status
    assert not status.armed and not set(status.flags) - {"THROTTLE", "ARM_SWITCH"}
    f.fly(1.5, lambda t, s: sticks(throttle=1400, arm=2000))  # switch up with the throttle up
    assert not f.link.firmware.status.armed and np.all(f.link.firmware.outputs == 0.0)
    f.link.rc = None  # the pilot's sticks from here
    f.fly(3.0)
    assert f.link.pilot.armed and np.all(f.link.firmware.outputs > 0.0)


@pytest.mark.slow
def test_its_arming_flags_read_by_name_as_msp_says_them(flight):
    """MSP_STATUS_EX read in msp.c's layout, against states forced on the real firmware: CALIBRATING while
    it calibrates its gyro at boot, THROTTLE with the throttle up, ARM_SWITCH once the switch is up while
    something else blocks arming, and FAILSAFE (after RXLOSS) when the sticks stop and its receiver hears
    nothing; once the sticks come back it arms again from the switch."""
    f = flight()
    seen = []
    f.fly(0.6, lambda t, s: sticks(pitch=1000, yaw=1000))  # Betaflight's calibration stick command
    seen.append(f.link.firmware.status.flags)
    assert "CALIBRATING" in seen[-1]
    f.fly(2.0, lambda t, s: sticks(throttle=1500))  # its sensors' calibration ends 1.6 s after boot
    assert "THROTTLE" in f.link.firmware.status.flags and "CALIBRATING" not in f.link.firmware.status.flags
    f.fly(0.5, lambda t, s: sticks(throttle=1500, arm=2000))
    assert {"THROTTLE", "ARM_SWITCH"} <= set(f.link.firmware.status.flags)
    f.link.rc = None
    f.take_off()  # the pilot's sticks: armed, flying
    f.link.set_sticks(sticks(throttle=1500, arm=2000, angle=2000))  # a client's sticks, once, then nothing
    f.fly(3.0)
    report = f.link.report()
    assert f.link.silent and report.receiver_silent and report.failsafe
    assert "FAILSAFE" in f.link.firmware.status.flags and not report.armed
    assert "FAILSAFE at" in f.link.problem() and "RC SILENT" in f.link.problem()
    f.fly(1.0, lambda t, s: sticks(throttle=1000))  # the link is back: switch down, throttle low
    assert not f.link.silent and "FAILSAFE" not in f.link.firmware.status.flags
    assert "FAILSAFE at" in f.link.problem()  # said to the end of the run


@pytest.mark.slow
def test_angle_mode_holds_the_vehicle_in_place_at_hover_with_a_tune_of_its_own(flight):
    """The hover pilot (position from goggles' state, sticks in angle mode) over 10 s after take-off, on a
    diff of the test's own: roll and pitch within 3 degrees, height within 0.15 m, drift under 0.5 m."""
    f = flight(cli=("set angle_limit = 45", "set roll_rc_rate = 8", "set pitch_rc_rate = 8", "set p_roll = 50"))
    f.take_off()
    start = len(f.log)
    f.fly(10.0)
    rpy = np.array([r for _, _, r, _ in f.log[start:]])
    position = np.array([p for _, p, _, _ in f.log[start:]])
    assert np.abs(rpy[:, :2]).max() < 3.0
    assert np.abs(position[:, 2] - 1.5).max() < 0.15
    assert np.linalg.norm(position[:, :2], axis=1).max() < 0.5
    assert f.link.report() == dataclasses.replace(f.link.report(), armed=True, failsafe=False, stopped=False)


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.slow
def test_the_same_sticks_give_the_same_flight_idle_and_with_both_cores_busy(flight):
    """Lockstep: the firmware runs the loops sim time implies, whatever the wall clock does. Two flights
    of the same sticks (take-off by the pilot, a client's roll and yaw, back to the pilot) give the same
    rotor commands and states bit for bit, one of them with two processes spinning both cores."""

    digests = []
    for loaded in (False, True):
        f = flight()
        spinners = [multiprocessing.Process(target=_spin, args=(60.0,), daemon=True) for _ in range(2 * loaded)]
        for p in spinners:
            p.start()
        try:
            f.fly(4.0)
            f.fly(0.5, lambda t, s: sticks(roll=1650, yaw=1400, throttle=1550, arm=2000, angle=2000))
            f.link.rc = None
            f.fly(1.0)
        finally:
            for p in spinners:
                p.kill()
        digests.append(f.digest.hexdigest())
        f.close()
    assert digests[0] == digests[1]


@pytest.mark.slow
def test_a_full_roll_stick_reaches_the_angle_limit_and_centring_it_comes_back_level(flight):
    """Angle mode on the default tune, RC feedforward on: a full right roll stick tilts to angle_limit
    (60 degrees, within 5) and centring it brings the quad back level, overshooting by at most 10."""
    f = flight()
    f.take_off()
    f.fly(1.0, lambda t, s: sticks(roll=2000, throttle=1750, arm=2000, angle=2000))
    roll = np.array([r[0] for _, _, r, _ in f.log[-100:]])
    assert np.median(roll) == pytest.approx(60.0, abs=5.0)
    start = len(f.log)
    f.fly(1.5, lambda t, s: sticks(throttle=1600, arm=2000, angle=2000))
    after = np.array([r[0] for _, _, r, _ in f.log[start:]])
    assert after.min() > -10.0 and abs(after[-100:]).max() < 3.0


@pytest.mark.slow
def test_four_firmwares_fly_at_once_each_with_its_own_tune(firmware_available):
    """Four SITLs side by side (no fixed ports: each binds free loopback ports through goggles' lockstep),
    each configured with its own angle_limit, flown step by step together: each tilts to its own limit
    at a full pitch stick."""
    limits = (30, 40, 50, 60)
    flights = [Flight(cli=(f"set angle_limit = {limit}",)) for limit in limits]
    try:
        ports = {f.link.firmware.process.ports[betaflight.PORT_CLI] for f in flights}
        assert len(ports) == 4
        for phase, seconds, values in (
            (0, 6.0, None),
            (1, 1.2, sticks(pitch=2000, throttle=1600, arm=2000, angle=2000)),
        ):
            for _ in range(int(round(seconds / flights[0].sim.dt))):
                for f in flights:
                    f.fly(f.sim.dt, None if values is None else (lambda t, s, v=values: v))
            if phase == 0:
                assert all(f.link.pilot.armed for f in flights)
        for f, limit in zip(flights, limits):
            pitch = np.array([r[1] for _, _, r, _ in f.log[-200:]])
            assert np.median(pitch) == pytest.approx(limit, abs=2.5)
    finally:
        for f in flights:
            f.close()


@pytest.mark.slow
def test_a_channel_map_in_the_diff_is_honoured(flight):
    """``map TAER1234``: the throttle on channel 1; goggles sends its sticks in that order, so the pilot's
    throttle still holds the height."""
    f = flight(cli=("map TAER1234",))
    f.take_off()
    f.fly(3.0)
    assert abs(f.log[-1][1][2] - 1.5) < 0.15


@pytest.mark.slow
def test_a_full_pitch_stick_in_angle_mode_tilts_to_the_angle_limit(flight):
    """Betaflight's angle_limit (its default, 60 degrees) at a full stick; forward is nose down."""
    f = flight(cli=("set angle_limit = 40",))
    f.take_off()
    f.fly(1.5, lambda t, s: sticks(pitch=2000, throttle=1600, arm=2000, angle=2000))
    pitch = np.array([r[1] for _, _, r, _ in f.log[-300:]])
    assert pitch.mean() == pytest.approx(40.0, abs=2.0)  # positive: nose down (FLU pitch about +y)


def actual_rate(stick: float, center: float = 70.0, maximum: float = 670.0, expo: float = 0.0) -> float:
    """Betaflight's "Actual" rates (the Rate Calculator of its wiki): deg/s at a stick in [-1, 1]."""
    curve = abs(stick) * (stick**5 * expo + stick * (1.0 - expo))
    return stick * center + max(0.0, maximum - center) * curve


@pytest.mark.slow
@pytest.mark.parametrize(("axis", "channel", "value"), [(0, 0, 1600), (1, 1, 1650), (2, 3, 1700)])
def test_acro_stick_steps_give_the_rate_betaflights_actual_curve_says(flight, axis, channel, value):
    """Roll right, pitch forward (nose down) and yaw right (nose right: clockwise seen from above, a
    negative rate about the body's up axis) at Betaflight's default rates (center 70, max 670 deg/s).
    An ideal IMU: with FlightGoggles' own, its gyro bias wanders (1.5 deg/s in 7 s) and the body rate
    is the curve's plus that bias, as a real quad's would be."""
    f = flight(imu_noise=False)
    f.take_off()
    s = f.sim.states()
    throttle = f.link.pilot.sticks(f.t, s.position[0], s.velocity[0], s.attitude[0], f.link.firmware, f.sim.dt)[2]

    def step(t, s):
        values = sticks(throttle=throttle, arm=2000)
        values[channel] = value
        return values

    f.fly(0.6, step)
    rates = np.array([r for _, _, _, r in f.log[-150:]])
    expected = actual_rate((value - 1500) / 500.0)
    sign = -1.0 if axis == 2 else 1.0  # FLU: yaw right is negative about +z
    assert np.median(rates[:, axis]) * sign == pytest.approx(expected, rel=0.05)


@pytest.mark.slow
def test_a_firmware_that_dies_stops_its_motors_and_the_vehicle_falls(flight):
    f = flight()
    f.take_off()
    f.link.firmware.process.process.kill()
    f.fly(1.0)
    assert f.link.firmware.lost and np.all(f.link.firmware.outputs == 0.0)
    assert f.log[-1][1][2] < 1.0  # falling
    f.fly(1.0)  # on the ground: what the status line says stays
    assert f.link.problem().startswith("FC STOPPED (exited (killed by SIGKILL")
    assert f.link.report().stopped and f.link.report().failsafe


def test_bad_firmware_settings_are_one_line_errors(firmware_available, tmp_path):
    motors, props_out = motor_map(load_airframe("fg-quad").rotor_positions, load_airframe("fg-quad").rotor_spins)
    with pytest.raises(ConfigError, match="not found or not executable"):
        BetaflightSitl(BetaflightSettings(executable=tmp_path / "none"), motors, props_out)
    with pytest.raises(ConfigError, match=r"tune.txt: Betaflight refused CLI line 2: 'set no_such_setting = 3'"):
        BetaflightSitl(
            BetaflightSettings(cli=("set roll_rc_rate = 8", "set no_such_setting = 3"), source="tune.txt"),
            motors,
            props_out,
        )
    import shutil
    import subprocess

    source = tmp_path / "static.c"
    source.write_text("int main(void) { return 0; }\n")
    built = subprocess.run(["gcc", "-static", "-o", str(tmp_path / "static"), str(source)], capture_output=True)
    if shutil.which("gcc") and built.returncode == 0:  # a SITL built with SITL_STATIC: no preload reaches it
        with pytest.raises(ConfigError, match="statically linked: goggles' lockstep preloads"):
            BetaflightSitl(BetaflightSettings(executable=tmp_path / "static"), motors, props_out)
    with pytest.raises(ConfigError, match="one rotor in each quadrant"):
        motor_map(np.array([[1, 1, 0], [1, 1, 0], [-1, -1, 0], [1, -1, 0]]), np.ones(4))
    with pytest.raises(ConfigError, match="diagonal rotors must turn the same way"):
        motor_map(np.array([[-1, -1, 0], [1, -1, 0], [-1, 1, 0], [1, 1, 0]]), np.array([1, 1, 1, 1]))


def test_the_pilot_waits_for_the_firmware_to_allow_arming():
    pilot = HoverPilot((0.0, 0.0, 1.5, 0.0))

    class Busy:
        status = betaflight.FirmwareStatus(False, ("CALIBRATING",))

    for k in range(20):
        channels = pilot.sticks(k * 0.05, np.zeros(3), np.zeros(3), (1.0, 0.0, 0.0, 0.0), Busy(), 0.05)
        assert channels[4] == 1000 and channels[2] == 1000


def test_a_channel_map_that_is_not_one_is_refused_naming_the_line():
    assert betaflight.channel_order(("map TAER1234",), "tune.txt")[:4] == (2, 0, 1, 3)
    for bad in ("map TAEX1234", "map TTER1234", "map AE", "map AET1"):
        with pytest.raises(ConfigError, match=r"tune.txt: CLI line 2: .*channel map|tune.txt: CLI line 2: .*A, E, T"):
            betaflight.channel_order(("set angle_limit = 40", bad), "tune.txt")


def test_tilt_sticks_invert_betaflights_actual_rate_curve():
    """The pilot's stick for a tilt, through the test's own copy of the curve, gives the tilt back."""
    for angle in (-60.0, -20.0, -1.0, 0.0, 3.0, 30.0, 60.0):
        stick = (betaflight_tilt(angle) - 1500) / 500.0
        assert 60.0 * actual_rate(stick) / 670.0 == pytest.approx(angle, abs=0.15)


def betaflight_tilt(angle: float) -> int:
    from goggles.firmware.link import tilt_stick

    return tilt_stick(angle, 60.0)


@pytest.mark.slow
def test_a_run_file_quad_flown_by_betaflight_hovers_in_the_arena_with_its_sensors_on_the_bus(firmware_available):
    """``controller = "betaflight"``: the engine starts the SITL, its pilot arms and holds 1.5 m in angle
    mode, the stereo depth and the IMU go out on ZeroMQ as any vehicle's; a client's sticks then take
    over (full throttle: it climbs); the SITL stops with the run."""
    from goggles.client import Client
    from tests.support import Running, run_config

    camera = {"vehicle": "quad0", "name": "stereo", "width": 32, "height": 24, "baseline": 0.32, "outputs": ["depth"]}
    config = run_config(scale=50.0, cameras=[camera], controller="betaflight", imu_rate=960.0, route=False)
    config = dataclasses.replace(
        config, vehicles=(dataclasses.replace(config.vehicles[0], route=((0.0, 0.0, 1.5, 0.0),)),)
    )
    client = Client(config.zmq)
    client.subscribe("quad0/")
    running = Running(config, duration=10.0)
    seen, heights = set(), []
    while running.thread.is_alive():
        item = client.receive(timeout=0.2)
        if item is None:
            continue
        channel, message = item
        seen.add(channel)
        if channel == "quad0/state":
            heights.append((message.header.utime * 1e-6, message.position[2]))
            if message.header.utime > 8_000_000 and len(seen) and not getattr(client, "_took_over", False):
                client.send_sticks("quad0", throttle=1900, arm=True)
                client._took_over = True
    process = running.engine.rig.vehicles["quad0"].firmware
    running.finish()
    client.close()
    assert {"quad0/stereo_left/depth", "quad0/imu", "quad0/state"} <= seen
    hover = [z for t, z in heights if 6.0 < t < 8.0]
    assert hover and np.abs(np.array(hover) - 1.5).max() < 0.2
    assert heights[-1][1] > 1.8  # the client's full throttle
    assert process is None or process.firmware.process is None  # stopped with the run


def _firmware_processes() -> list[int]:
    """This process's children that are Betaflight SITLs."""
    import os
    from pathlib import Path

    mine = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            comm = stat.with_name("comm").read_text()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and comm.startswith("betaflight"):
            mine.append(int(stat.parent.name))
    return mine


@pytest.mark.slow
def test_a_failed_start_leaves_no_firmware_running(firmware_available):
    """The engine's rig starts the firmware before its cameras; a camera part that cannot be built (an
    unknown backend) stops the start with one error, and the SITL it had started is gone."""
    from goggles.engine.engine import Engine
    from tests.support import run_config

    config = run_config(controller="betaflight", imu_rate=960.0, route=False)
    with pytest.raises(ConfigError, match="render backend 'nope'"):
        Engine(config, device="cpu", backend="nope")
    assert _firmware_processes() == []


FOUR = """
[run]
mode = "sim"
seed = 4
[clock]
scale = "auto"
max_scale = 20.0
physics_rate = 960.0
[lcm]
enabled = false
[zmq]
publish = "tcp://127.0.0.1:{p0}"
inputs = "tcp://127.0.0.1:{p1}"
control = "tcp://127.0.0.1:{p2}"
"""

VEHICLE = """
[[vehicle]]
name = "quad{k}"
start = [{x}, 0.0, 0.0, 0.0]
controller = "betaflight"
betaflight_cli = "tune{k}.txt"
imu_rate = 960.0
route = [[{x}, 0.0, {z}, 0.0]]
"""


@pytest.mark.slow
def test_four_firmwares_in_one_run_fly_the_same_flight_twice_at_any_load(firmware_available, tmp_path):
    """A run file with four Betaflight quads, each its own diff: ``goggles run`` twice, recorded, once at
    scale auto on an idle machine and once held to real time with two processes spinning both cores. The
    recordings are the same flight (``goggles recording compare``: every channel's bytes, wall-clock fields
    aside), and each quad armed, holds its own height and reports on <vehicle>/fc."""
    from goggles.logs.record import read_log
    from goggles.transport.schema import decode_any
    from tests.support import free_port, goggles_result

    text = FOUR.format(p0=free_port(), p1=free_port(), p2=free_port())
    for k in range(4):
        (tmp_path / f"tune{k}.txt").write_text(f"set angle_limit = {30 + 10 * k}\nset p_pitch = {45 + k}\n")
        text += VEHICLE.format(k=k, x=2.0 * k, z=1.0 + 0.25 * k)
    run_file = tmp_path / "four.toml"
    run_file.write_text(text)
    first = goggles_result("run", str(run_file), "--duration", "5", "--record", str(tmp_path / "a.mcap"), timeout=400)
    assert first.returncode == 0, first.stderr[-2000:]
    spinners = [multiprocessing.Process(target=_spin, args=(120.0,), daemon=True) for _ in range(2)]
    for p in spinners:
        p.start()
    try:
        second = goggles_result(
            "run", str(run_file), "--duration", "5", "--scale", "1", "--record", str(tmp_path / "b.mcap"), timeout=400
        )
    finally:
        for p in spinners:
            p.kill()
    assert second.returncode == 0, second.stderr[-2000:]
    same = goggles_result("recording", "compare", str(tmp_path / "a.mcap"), str(tmp_path / "b.mcap"))
    assert same.returncode == 0, same.stdout
    last = {}
    for _, channel, data in read_log(tmp_path / "a.mcap"):
        if channel.endswith("/fc") or channel.endswith("/state"):
            last[channel] = decode_any(data)
    for k in range(4):
        assert last[f"quad{k}/fc"].armed and not last[f"quad{k}/fc"].failsafe
        assert last[f"quad{k}/state"].position[2] == pytest.approx(1.0 + 0.25 * k, abs=0.15)


def _lockstep_firmware_flight() -> list:
    """A lockstep run of a Betaflight quad: the client steps it 4 s (the pilot arms it), sends sticks
    (acknowledged by the engine's input counter before the next step), steps on; the states it got."""
    from goggles.client import Client
    from tests.support import Running, endpoints, run_config

    config = run_config(mode="lockstep", cameras=[], controller="betaflight", imu_rate=960.0, route=False)
    running = Running(config)
    client = Client(endpoints(config))
    client.subscribe("quad0/state", "quad0/fc")
    client.wait_for_subscriptions(30.0)
    states = []
    try:
        for k in range(48):
            if k >= 40:  # a client's sticks: roll right a little, climb
                client.send_sticks("quad0", throttle=1600, roll=1560, arm=True, angle_mode=True)
                deadline = time.monotonic() + 10.0
                while running.engine.counters.received < k - 39 and time.monotonic() < deadline:
                    time.sleep(0.001)
            client.step(96)
            while (item := client.receive(timeout=0.2)) is not None:
                states.append(item[1].encode())
    finally:
        running.stop.set()
        running.finish()
        client.close()
    return states


@pytest.mark.slow
def test_lockstep_runs_of_a_firmware_quad_are_the_same_bytes(firmware_available):
    """Lockstep mode, a client stepping and sending sticks: two runs give the same state and status
    messages, wall-clock fields aside."""
    from goggles.logs.compare import wall_free

    first, second = _lockstep_firmware_flight(), _lockstep_firmware_flight()
    assert len(first) == len(second) > 200
    assert [wall_free(m) for m in first] == [wall_free(m) for m in second]
