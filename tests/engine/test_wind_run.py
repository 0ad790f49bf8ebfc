"""A run file's ``[wind]``: a quad holding its place in a steady 5 m/s crosswind leans into it as its
drag says, and the wind it feels (with moderate turbulence, too) goes out on ``<vehicle>/wind`` with
its state, into the recording."""

from __future__ import annotations

import math

import numpy as np
import pytest

import goggles_lcm
from goggles.engine import Engine
from goggles.frames import quat_to_matrix
from goggles.logs.record import Recorder, read_log
from goggles.rig.runfile import parse_run_config


def fly(tmp_path, turbulence: str):
    """12 s of a quad told to hold (0, 0, 2) in wind from the west; its recorded winds and states."""
    config = parse_run_config(
        {
            "run": {"mode": "sim", "seed": 2},
            "clock": {"scale": 1000.0},
            "lcm": {"enabled": False},
            "zmq": {"enabled": False},
            "wind": {"speed": 5.0, "from_deg": 270.0, "turbulence": turbulence, "reference_height": 2.0},
            "vehicle": [{"name": "quad0", "start": [0.0, 0.0, 2.0, 0.0], "state_rate": 60.0, "route": [[0, 0, 2]]}],
            "camera": [],
        }
    )
    recording = tmp_path / f"{turbulence}.mcap"
    recorder = Recorder(recording)
    engine = Engine(config, device="cpu", recorder=recorder)
    try:
        engine.run(duration=12.0)
    finally:
        engine.close()
        recorder.close()
    logged = [(c, d) for _, c, d in read_log(recording)]
    winds = [goggles_lcm.wind_t.decode(d) for c, d in logged if c == "quad0/wind"]
    states = [goggles_lcm.vehicle_state_t.decode(d) for c, d in logged if c == "quad0/state"]
    assert len(winds) == len(states) >= 700  # one with each state, 60 Hz
    assert [w.header.utime for w in winds] == [s.header.utime for s in states]
    late = slice(5 * 60, None)  # after it settled
    return np.array([w.velocity for w in winds[late]]), states[late]


@pytest.mark.slow
def test_a_quad_holding_its_place_in_a_crosswind_leans_into_it_and_its_wind_is_published(tmp_path):
    air, held = fly(tmp_path, "none")
    assert np.allclose(air, [5.0, 0.0, 0.0], atol=1e-5)  # towards +x, from the west
    # fg-quad's drag is isotropic, 0.1 |r| r for the air's velocity r past it (m = 1 kg): holding its
    # place it leans upwind by atan(0.1 * 5^2 / g) = 14.3 degrees.
    lean = [math.degrees(math.atan2(-R[0, 2], R[2, 2])) for R in (quat_to_matrix(s.orientation) for s in held)]
    assert np.mean(lean) == pytest.approx(math.degrees(math.atan(0.1 * 25.0 / 9.80665)), abs=0.5)
    assert np.abs(np.array([s.position for s in held])[:, :2]).max() < 1.0  # the pilot holds its place

    air, held = fly(tmp_path, "moderate")
    # Moderate turbulence at 10 ft: sigma_u 1.7 m/s along the wind on a 4.6 s time scale, so 7 s of it
    # average to 5 m/s within about 2; across and up it moves too.
    assert air[:, 0].mean() == pytest.approx(5.0, abs=2.5) and air[:, 0].std() > 0.2
    assert air[:, 1].std() > 0.1 and air[:, 2].std() > 0.1
    assert np.abs(np.array([s.position for s in held])[:, :2]).max() < 2.0
