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
    from goggles.dynamics.airframe import load_airframe
    from goggles.rig.runfile import load_run_config
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


_RUN = """
[run]
{run}
[lcm]
{lcm}
[ros2]
{ros2}
[[vehicle]]
name = "quad0"
{vehicle}
[[camera]]
vehicle = "quad0"
name = "front"
{camera}
"""


@pytest.mark.parametrize(
    ("table", "line", "message"),
    [
        ("lcm", 'enabled = "no"', "[lcm]: 'enabled' must be true or false, got 'no'"),
        ("lcm", "enabled = 0", "[lcm]: 'enabled' must be true or false, got 0"),
        ("ros2", "expose = 1", "[ros2]: 'expose' must be true or false"),
        ("ros2", "domain_id = 7.5", "'domain_id' must be an integer from 0 to 232 (ROS_DOMAIN_ID), got 7.5"),
        ("ros2", 'distro = "kinetic"', "'distro' must be one of"),
        ("run", "seed = 1.5", "[run]: 'seed' must be an integer from 0 to 4294967295, got 1.5"),
        ("run", "seed = -1", "'seed' must be an integer from 0"),
        ("run", "perturb = true", "'perturb' must be an integer"),
        ("run", "mode = [1, 2]", "[run]: 'mode' must be one of ['live', 'lockstep', 'sim']"),
        ("run", 'collisions = "bounce"', "'collisions' must be one of"),
        ("vehicle", "route = -1", "[[vehicle]] #1: 'route' must be a list of waypoints"),
        ("vehicle", "imu_batch = 65", "'imu_batch' must be an integer from 1 to 64"),
        ("camera", "depth_model = [1, 2]", "[[camera]] #1: 'depth_model' must be one of"),
        ("camera", 'noise_model = "grainy"', "'noise_model' must be one of"),
        ("camera", "blur_subframes = 2.0", "'blur_subframes' must be an integer from 1 to 256"),
        ("vehicle", "start = [1e39, 0.0, 1.5, 0.0]", "got [1e+39, 0.0, 1.5, 0.0] (beyond float32's range"),
        ("camera", "max_depth = 1e39", "[[camera]] #1: 'max_depth' must be a finite number"),
        ("camera", "max_depth = " + "9" * 400, "(beyond float32's range"),
        ("vehicle", "start = [" + "9" * 400 + ", 0, 1, 0]", "'start' must be a list of 4 finite numbers"),
    ],
)
def test_a_run_file_value_of_the_wrong_kind_names_the_file_table_and_key(tmp_path, table, line, message):
    from goggles.errors import ConfigError
    from goggles.rig.runfile import load_run_config

    path = tmp_path / "run.toml"
    path.write_text(_RUN.format(**{t: line if t == table else "" for t in ("run", "lcm", "ros2", "vehicle", "camera")}))
    with pytest.raises(ConfigError) as error:
        load_run_config(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value), str(error.value)


_NAMED = """
[lcm]
enabled = {lcm}
[ros2]
enabled = {ros2}
namespace = "{namespace}"
[[vehicle]]
name = "{vehicle}"
[[camera]]
vehicle = "{vehicle}"
name = "{camera}"
outputs = ["depth", "segmentation"]
[[range_sensor]]
vehicle = "{vehicle}"
name = "{ranges}"
"""


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ({"vehicle": "quad0/x"}, "[[vehicle]] #1: 'name' must be a name without '/', spaces or control characters"),
        ({"vehicle": "quad 0"}, "'name' must be a name without '/', spaces"),
        ({"camera": "front\\u0000"}, "[[camera]] #1: 'name' must be a name without '/', spaces"),
        ({"ranges": "front"}, "[[camera]] 'front' and [[range_sensor]] 'front' both publish as quad0/front"),
        ({"vehicle": "q" * 40, "camera": "c" * 10}, "is 64 bytes in UTF-8, and LCM carries at most 63"),
        # LCM counts bytes: 48 characters, 77 bytes; it printed "channel name too long" and sent nothing.
        ({"vehicle": "к" * 29}, "is 77 bytes in UTF-8, and LCM carries at most 63"),
        ({"vehicle": "quad-0", "ros2": "true"}, "'quad-0' cannot be part of a ROS 2 topic name"),
        ({"camera": "2nd", "ros2": "true"}, "'2nd' cannot be part of a ROS 2 topic name"),
        ({"namespace": "/my-lab/goggles", "ros2": "true"}, "'my-lab' cannot be part of a ROS 2 topic name"),
    ],
)
def test_names_that_would_break_a_channel_or_a_topic_are_refused(tmp_path, names, message):
    """Two sensors under one name shared channels; a vehicle named past LCM's 63 characters ended the
    run at its first message ("channel name too long"); a '/' or a space made channels ambiguous; with
    ROS 2 on, a name no ROS 2 node can subscribe to published to no one."""
    from goggles.errors import ConfigError
    from goggles.rig.runfile import load_run_config

    fields = {"lcm": "true", "ros2": "false", "namespace": "/goggles", "vehicle": "quad0", "camera": "front"}
    fields |= {"ranges": "altimeter"} | names
    path = tmp_path / "run.toml"
    path.write_text(_NAMED.format(**fields))
    with pytest.raises(ConfigError) as error:
        load_run_config(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value), str(error.value)
    if "ros2" in names or "LCM" in message:  # the same names where that transport is off
        path.write_text(_NAMED.format(**(fields | {"ros2": "false", "lcm": "false"})))
        assert load_run_config(path).vehicles[0].name == fields["vehicle"]


@pytest.mark.parametrize(
    "inertia", ['"x"', "{ a = 1 }", "[[1.0, 0.0], [0.0, 1.0]]", "[[1, 2, 0], [0, 1, 0], [0, 0, 1]]", "[1, -1, 1]"]
)
def test_an_airframe_inertia_that_is_not_one_names_the_file_and_key(tmp_path, inertia):
    from goggles.dynamics.airframe import PRESETS_DIR, load_airframe
    from goggles.errors import ConfigError

    text = (PRESETS_DIR / "fg-quad.toml").read_text()
    path = tmp_path / "quad.toml"
    path.write_text(text.replace("inertia = [0.0049, 0.0049, 0.0069]", f"inertia = {inertia}"))
    with pytest.raises(ConfigError, match=r"quad\.toml: \[body\]: 'inertia' must be 3 positive principal moments"):
        load_airframe(path)


def test_an_airframe_inertia_may_be_a_full_matrix(tmp_path):
    from goggles.dynamics.airframe import PRESETS_DIR, load_airframe

    text = (PRESETS_DIR / "fg-quad.toml").read_text()
    path = tmp_path / "quad.toml"
    matrix = "[[0.0049, 0.0001, 0.0], [0.0001, 0.0049, 0.0], [0.0, 0.0, 0.0069]]"
    path.write_text(text.replace("inertia = [0.0049, 0.0049, 0.0069]", f"inertia = {matrix}"))
    np.testing.assert_array_equal(
        load_airframe(path).inertia, [[0.0049, 0.0001, 0.0], [0.0001, 0.0049, 0.0], [0.0, 0.0, 0.0069]]
    )


@pytest.mark.parametrize(
    "change, says",
    [
        (("thrust_coefficient = 1.91e-6", "thrust_coefficient = 1e30"), "yaw next to nothing, torque_coefficient"),
        (("torque_coefficient = 2.6e-7", "torque_coefficient = 0.0"), "yaw next to nothing, torque_coefficient"),
    ],
)
def test_an_airframe_that_cannot_yaw_says_which_coefficient(tmp_path, change, says):
    from goggles.dynamics.airframe import PRESETS_DIR, load_airframe
    from goggles.errors import ConfigError

    text = (PRESETS_DIR / "fg-quad.toml").read_text()
    assert change[0] in text
    path = tmp_path / "quad.toml"
    path.write_text(text.replace(*change))
    with pytest.raises(
        ConfigError, match=r"quad\.toml: the rotors cannot produce independent .*\(allocation rank < 4: "
    ) as e:
        load_airframe(path)
    assert says in str(e.value)


def test_an_airframe_value_beyond_float32_is_named(tmp_path):
    """1e39 kg is finite to TOML and Python, and infinite in the simulator's float32."""
    from goggles.dynamics.airframe import PRESETS_DIR, load_airframe
    from goggles.errors import ConfigError

    path = tmp_path / "quad.toml"
    path.write_text((PRESETS_DIR / "fg-quad.toml").read_text().replace("mass = 1.0 ", "mass = 1e39 "))
    with pytest.raises(ConfigError) as error:
        load_airframe(path)
    assert "quad.toml: [body]: 'mass' must be a finite number > 0, got 1e+39 (beyond float32's range" in str(
        error.value
    )
