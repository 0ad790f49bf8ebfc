"""Racing: the AlphaPilot pass rule and score against hand-computed flights; courses; the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.errors import ConfigError
from goggles.race import RunEnd, score_flight
from goggles.scene.gates import Course, Gate, gate_shape, load_course
from tests.support import goggles


def straight_course(timeout=30.0) -> Course:
    gates = (
        Gate("a", (5.0, 0.0, 2.0), 0.0, (1.6, 1.6), (0, 0, 0)),
        Gate("b", (10.0, 0.0, 2.0), 0.0, (1.6, 1.6), (0, 0, 0)),
    )
    return Course("straight", gates, timeout, (0.0, 0.0, 2.0, 0.0))


def straight_flight(speed=2.0, y=0.0, rate=100.0, duration=8.0):
    t = np.arange(0.0, duration, 1.0 / rate)
    return t, np.column_stack([speed * t, np.full_like(t, y), np.full_like(t, 2.0)])


def test_scripted_flight_scores_what_the_rule_says():
    # Along x at 2 m/s sampled at 100 Hz. The gate at x = 5 faces along x, so its corners all have
    # x = 5 and their box inflated by 0.1 m spans x in [4.9, 5.1]: it counts at x >= 4.9, t = 2.45 s
    # (the 0.3 m plane distance binds only for turned gates); the gate at x = 10 at t = 4.95 s.
    t, p = straight_flight()
    result = score_flight(straight_course(), t, p)
    assert result.gates_passed == 2 and result.end == RunEnd.DONE
    assert result.gate_times == pytest.approx((2.45, 4.95))
    assert result.score == pytest.approx(20.0 - 4.95)
    assert result.line() == "gates=2 time_s=4.950 score=15.050 end=done"


def test_plane_distance_binds_for_a_turned_gate():
    # A gate at the origin turned 45 deg: corners at (-+0.566, +-0.566, +-0.8): the inflated box spans
    # x in [-0.666, 0.666] on the line y = 0, z = 0. Flying along x, the distance to the plane is
    # |x| cos 45 deg <= 0.3 -> |x| <= 0.4243: it counts at x = -0.42 (samples every 0.01 m from -3).
    gate = Gate("turned", (0.0, 0.0, 0.0), np.pi / 4, (1.6, 1.6), (0, 0, 0))
    course = Course("one", (gate,), 30.0, (-3.0, 0.0, 0.0, 0.0))
    t = np.arange(0.0, 4.0, 0.01)
    p = np.column_stack([-3.0 + t, np.zeros_like(t), np.zeros_like(t)])
    result = score_flight(course, t, p)
    assert result.gates_passed == 1 and result.gate_times[0] == pytest.approx(2.58)


def test_box_inflation_and_skipped_gates():
    # The opening is 1.6 m wide: corners at y = +-0.8, inflated by 0.1 m -> passes up to |y| = 0.9.
    t, p = straight_flight(y=0.89)
    assert score_flight(straight_course(), t, p).gates_passed == 2
    t, p = straight_flight(y=0.91)
    assert score_flight(straight_course(), t, p).gates_passed == 0
    # Around gate a, then through gate b: b does not count (gates count only in order).
    t, p = straight_flight()
    p[:, 1] = np.where(p[:, 0] < 7.0, 3.0, 0.0)
    result = score_flight(straight_course(), t, p)
    assert result.gates_passed == 0 and result.end == RunEnd.INCOMPLETE and result.score == 0.0


def test_crash_and_timeout_score_zero():
    t, p = straight_flight()
    crashed = t > 3.0  # after gate a
    result = score_flight(straight_course(), t, p, crashed)
    assert (result.gates_passed, result.end, result.score) == (1, RunEnd.CRASH, 0.0)
    t, p = straight_flight(speed=1.0, duration=20.0)
    result = score_flight(straight_course(timeout=6.0), t, p)
    assert (result.gates_passed, result.end, result.score) == (1, RunEnd.TIMEOUT, 0.0)
    t, p = straight_flight(duration=3.0)
    result = score_flight(straight_course(), t, p)  # the log ends after gate a: partial credit
    assert (result.gates_passed, result.end) == (1, RunEnd.INCOMPLETE) and result.score == pytest.approx(10 - 2.45)


def test_default_course_and_perturbation():
    from goggles.paths import default_course

    course = load_course(default_course())
    assert len(course.gates) == 6 and course.timeout == 60.0
    shifted = course.perturbed(7)
    assert shifted.perturbed(7) != shifted and course.perturbed(7) == shifted  # seeded
    for gate, moved in zip(course.gates, shifted.gates):
        dx, dy = np.subtract(moved.position[:2], gate.position[:2])
        assert abs(dx) <= gate.perturbation[0] and abs(dy) <= gate.perturbation[1]
        assert abs(moved.yaw - gate.yaw) <= gate.perturbation[2] and moved.position[2] == gate.position[2]
    assert any(m.position != g.position for g, m in zip(course.gates, shifted.gates))


def test_gate_shape_and_beacons_frame_the_opening():
    gate = Gate("g", (0.0, 0.0, 0.0), 0.0, (1.6, 1.2), (0, 0, 0))
    bounds = gate_shape(gate.opening).bounds()
    np.testing.assert_allclose(bounds[1, 1:], [0.8 + 0.15, 0.6 + 0.15])
    beacons = gate.beacon_positions_G()
    np.testing.assert_allclose(np.abs(beacons[:, 1:]), [[0.8, 0.6]] * 4)
    assert np.all(beacons[:, 0] < -0.075)  # on the front face, in front of the frame


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[course]\nname = 'x'\n", "at least one"),
        ("[[gate]]\nname = 'a'\n", "missing key 'position'"),
        ("[[gate]]\nposition = [1, 2, 3]\n", "missing key 'name'"),
        ("[[gate]]\nname = 'a'\nposition = [1, 2]\n", "'position' must be a list of 3"),
        (
            "[course]\ntimeout = true\n[[gate]]\nname = 'a'\nposition = [1, 2, 3]\n",
            "'timeout' must be a finite number > 0 .s., got True",
        ),
        ("[[gate]]\nname = 'a'\nposition = [1, 2, 3]\ncolor = 1\n", "unknown key 'color'"),
        (
            "[[gate]]\nname = 'a'\nposition = [1, 2, 3]\nopening = [0, 1]\n",
            "'opening' must be a list of 2 finite numbers >= 0.001",
        ),
        ("[[gate]]\nname = 'a'\nposition = [1, 2, 3]\n[[gate]]\nname = 'a'\nposition = [4, 2, 3]\n", "unique"),
    ],
)
def test_bad_course_files(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_course(path)


@pytest.mark.slow
def test_race_cli_flies_the_default_course_and_scores_its_log(tmp_path):

    log = tmp_path / "flight.csv"
    flown = goggles("race", "--out", str(log)).stdout.strip().splitlines()[-1]
    assert flown.startswith("gates=6 ") and flown.endswith(" end=done")
    scored = goggles("race", "--log", str(log)).stdout.strip().splitlines()[-1]
    assert scored == flown
    # What flies is not used where a log is scored: said, and --out writes nothing over anything.
    told = goggles("race", "--log", str(log), "--seed", "2", "--out", str(tmp_path / "other.csv"))
    assert told.stdout.strip().splitlines()[-1] == flown and not (tmp_path / "other.csv").exists()
    assert told.stderr.splitlines() == [
        f"goggles: {o} is not used: --log scores a flown log" for o in ("--seed", "--out")
    ]
    bad = goggles("race", "--log", str(tmp_path / "missing.csv"), check=False)
    assert bad.returncode == 2 and "flight log" in bad.stderr


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ("0,0,0,0\n1,nan,0,0\n", "line 3: t, px, py and pz must be finite numbers"),
        ("1,0,0,0\n0,1,0,0\n", "line 3: t goes back; a flight log is in time order"),
        ("", "a flight log needs rows of 4 values"),
        ("0,0,0\n", "a flight log needs rows of 4 values"),
    ],
)
def test_a_flight_log_that_cannot_be_scored_is_named_by_line(tmp_path, rows, says):
    """A NaN or a time going back was scored as an incomplete flight: a wrong score, silently."""
    import warnings

    from goggles.errors import ConfigError
    from goggles.race import read_flight_log

    path = tmp_path / "flight.csv"
    path.write_text("t,px,py,pz\n" + rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing printed beside the one-line error
        with pytest.raises(ConfigError) as error:
            read_flight_log(path)
    assert str(error.value).startswith(f"{path}: {says}")
