"""The one rule for lists of numbers in every file goggles reads."""

import numpy as np
import pytest

from goggles.checks import finite_vector


def test_accepts_a_list_of_ints_and_floats():
    np.testing.assert_array_equal(finite_vector([1, 2.5, -3], 3), [1.0, 2.5, -3.0])


@pytest.mark.parametrize(
    "value",
    [
        None,
        "1,2,3",
        [1, 2],
        [1, 2, 3, 4],
        [1, float("nan"), 3],
        [1, float("inf"), 3],
        ["1", "2", "3"],
        [True, False, True],
        [[1], [2], [3]],
        {"x": 1},
    ],
)
def test_rejects_anything_else(value):
    assert finite_vector(value, 3) is None


def _readers():
    from bridges.mocap import load_room_calibration
    from goggles.config import load_run_config
    from goggles.dynamics.airframe import load_airframe
    from goggles.scene.gates import load_course
    from goggles.scene.scene_file import load_scene_spec

    return {
        "run": load_run_config,
        "scene": load_scene_spec,
        "course": load_course,
        "airframe": load_airframe,
        "room": lambda path: load_room_calibration(path, "optitrack"),
    }


@pytest.mark.parametrize("reader", ["run", "scene", "course", "airframe", "room"])
@pytest.mark.parametrize("content", [b"[table\nkey = ", b"\xff\xfe\x00binary\x89PNG"], ids=["malformed", "binary"])
def test_every_reader_names_a_file_that_is_not_toml(tmp_path, reader, content):
    from goggles.errors import GogglesError

    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(GogglesError, match=r"bad\.toml: not valid TOML"):
        _readers()[reader](path)
