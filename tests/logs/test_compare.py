"""goggles recording compare: two recordings of one run are the same flight wall-clock fields aside; a
changed byte anywhere else, a missing message or a shifted time is found and named."""

from __future__ import annotations

import pytest

import goggles_lcm
from goggles.logs.compare import compare_recordings, wall_free
from goggles.logs.record import Recorder
from goggles.transport.messages import header
from tests.support import goggles_result


def _state(utime: int, wall: int, x: float) -> bytes:
    message = goggles_lcm.vehicle_state_t()
    message.header = header(utime, utime // 1000)
    message.header.wall_utime = wall
    message.vehicle = "quad0"
    message.position = [x, 0.0, 1.5]
    message.velocity = [0.0, 0.0, 0.0]
    message.orientation = [1.0, 0.0, 0.0, 0.0]
    message.angular_velocity = [0.0, 0.0, 0.0]
    message.num_rotors = 0
    message.rotor_speeds = []
    return message.encode()


def _clock(utime: int, wall: int, scale: float) -> bytes:
    message = goggles_lcm.clock_t()
    message.header = header(utime, 0)
    message.header.wall_utime = wall
    message.mode, message.scale, message.num_rates = 0, scale, 1
    message.rate_names, message.rates = ["imu"], [scale * 960.0]
    return message.encode()


def _record(path, states, clocks=()):
    recorder = Recorder(path)
    for utime, data in states:
        recorder.write("quad0/state", data, utime * 1000)
    for utime, data in clocks:
        recorder.write("clock", data, utime * 1000)
    recorder.close()
    return path


def test_wall_clock_fields_aside_two_runs_are_the_same_flight(tmp_path):
    a = _record(tmp_path / "a.mcap", [(t, _state(t, 111 + t, 0.5)) for t in (0, 1000, 2000)], [(0, _clock(0, 5, 0.97))])
    b = _record(tmp_path / "b.mcap", [(t, _state(t, 999 + t, 0.5)) for t in (0, 1000, 2000)], [(0, _clock(0, 7, 0.41))])
    result = compare_recordings(a, b)
    assert result.same and result.counts == {"clock": (1, 1), "quad0/state": (3, 3)}
    assert wall_free(_state(0, 1, 0.5)) == wall_free(_state(0, 2, 0.5)) != wall_free(_state(0, 1, 0.6))


def test_a_changed_value_a_missing_message_or_a_shifted_time_is_named(tmp_path):
    base = [(t, _state(t, 0, 0.5)) for t in (0, 1000, 2000)]
    a = _record(tmp_path / "a.mcap", base)
    moved = _record(tmp_path / "moved.mcap", base[:2] + [(2000, _state(2000, 0, 0.5000001))])
    assert compare_recordings(a, moved).difference == "quad0/state message 2 at 0.002000 s: the payloads differ"
    short = _record(tmp_path / "short.mcap", base[:2])
    assert "quad0/state: 3 messages" in compare_recordings(a, short).difference
    late = _record(tmp_path / "late.mcap", base[:2] + [(3000, base[2][1])])
    assert "logged at 0.002000 s and 0.003000 s" in compare_recordings(a, late).difference


@pytest.mark.slow
def test_the_command_says_same_or_where_they_differ(tmp_path):
    base = [(t, _state(t, 0, 0.5)) for t in (0, 1000)]
    a = _record(tmp_path / "a.mcap", base)
    b = _record(tmp_path / "b.mcap", base)
    c = _record(tmp_path / "c.mcap", base[:1] + [(1000, _state(1000, 0, 2.0))])
    same = goggles_result("recording", "compare", str(a), str(b))
    assert same.returncode == 0 and "the same flight: 2 messages on 1 channel (wall" in same.stdout
    differ = goggles_result("recording", "compare", str(a), str(c))
    assert differ.returncode == 1 and "quad0/state message 1" in differ.stdout
    missing = goggles_result("recording", "compare", str(a), str(tmp_path / "none.mcap"))
    assert missing.returncode == 2 and "none.mcap: no such recording" in missing.stderr
    assert "Traceback" not in missing.stderr
