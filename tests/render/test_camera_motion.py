"""A camera that moves while it exposes: with a rolling shutter a vertical pole seen while yawing leans by
the angle the row readout predicts (closed form, per row); with motion blur an edge smears over the
image-space motion during the exposure."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from goggles.frames import camera_pose_from_body, quat_from_axis_angle, transform
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of


def test_a_pole_leans_as_the_readout_predicts(tracer):
    device, backend = tracer
    pole = trimesh.creation.box(extents=[0.05, 0.05, 20.0])
    pole.apply_translation([5.0, 0.0, 0.0])
    wall = quad([[30, 50, -50], [30, -50, -50], [30, -50, 50], [30, 50, 50]])
    world = DeviceScene(scene_of((wall, 1), (pole, 2)), device)
    camera = CameraModel(160, 120, 140.0, 140.0, 79.5, 59.5)
    yaw_rate, readout = 3.0, 0.03  # rad/s while the 120 rows are read out over 30 ms
    first = camera_pose_from_body(transform([0, 0, 0], quat_from_axis_angle([0, 0, 1], -0.05)))
    last_yaw = -0.05 + yaw_rate * readout
    last = camera_pose_from_body(transform([0, 0, 0], quat_from_axis_angle([0, 0, 1], last_yaw)))
    renderer = Renderer(
        world, [camera], RenderSettings(backend=backend, shading=Shading.NONE, outputs={"segmentation"})
    )
    renderer.render(first[None], last[None])
    seen = renderer.images().segmentation[0] == 2
    renderer.close()

    rows = np.arange(camera.height)
    yaw = -0.05 + (rows / (camera.height - 1)) * yaw_rate * readout
    expected = camera.cx + camera.fx * np.tan(yaw)  # the pole's centre column in each row
    measured = np.array([np.flatnonzero(row).mean() for row in seen])
    np.testing.assert_allclose(measured, expected, atol=0.5)
    lean = np.degrees(np.arctan(np.polyfit(rows, measured, 1)[0]))  # the pole's slope in the image
    predicted = np.degrees(np.arctan(camera.fx * yaw_rate * readout / (camera.height - 1)))  # 12.6 px over 119 rows
    assert abs(lean - predicted) < 0.2 and predicted > 5.0


def test_a_global_shutter_sees_the_pole_upright(tracer):
    device, backend = tracer
    pole = trimesh.creation.box(extents=[0.05, 0.05, 20.0])
    pole.apply_translation([5.0, 0.0, 0.0])
    world = DeviceScene(scene_of((pole, 2)), device)
    camera = CameraModel(160, 120, 140.0, 140.0, 79.5, 59.5)
    renderer = Renderer(
        world, [camera], RenderSettings(backend=backend, shading=Shading.NONE, outputs={"segmentation"})
    )
    renderer.render(camera_pose_from_body(np.eye(4))[None])
    columns = [np.flatnonzero(row).mean() for row in renderer.images().segmentation[0] == 2]
    renderer.close()
    assert np.ptp(columns) < 1e-9


def test_a_blurred_edge_is_as_wide_as_the_motion_during_the_exposure(tracer):
    """The camera slides sideways while the shutter is open: a black/white edge on a wall D metres
    away smears over f * shift / D pixels."""
    device, backend = tracer
    D, shift = 5.0, 0.25
    black = quad([[D, 20, -20], [D, 0, -20], [D, 0, 20], [D, 20, 20]])
    white = quad([[D, 0, -20], [D, -20, -20], [D, -20, 20], [D, 0, 20]])
    black.visual.vertex_colors = np.tile([0, 0, 0, 255], (4, 1))
    white.visual.vertex_colors = np.tile([255, 255, 255, 255], (4, 1))
    world = DeviceScene(scene_of((black, 1), (white, 2)), device)
    camera = CameraModel(160, 40, 140.0, 140.0, 79.5, 19.5)
    renderer = Renderer(world, [camera], RenderSettings(backend=backend, shading=Shading.UNLIT, outputs={"rgb"}))
    T_open = camera_pose_from_body(transform([0, shift / 2, 0], [1, 0, 0, 0]))
    T_close = camera_pose_from_body(transform([0, -shift / 2, 0], [1, 0, 0, 0]))
    renderer.render_exposure(T_open[None], T_close[None], subframes=64)
    row = renderer.images().rgb[0][20, :, 0].astype(float)
    renderer.close()
    ramp = np.flatnonzero((row > 0.02 * 255) & (row < 0.98 * 255))
    motion = camera.fx * shift / D  # 7 px
    assert abs(len(ramp) - motion) <= 1.0, (len(ramp), motion)
    assert abs(ramp.mean() - camera.cx) <= 1.0  # centred on where the edge is mid-exposure


@pytest.mark.slow
def test_run_files_give_cameras_an_exposure_and_a_rolling_shutter(tmp_path):
    """The engine renders a moving vehicle's camera along its motion: images change with the exposure
    and readout a run file gives, and the same run file gives the same bytes again."""
    import dataclasses

    from goggles.engine import Engine
    from goggles.errors import ConfigError
    from goggles.logs.record import Recorder, read_log
    from goggles.rig.runfile import parse_run_config
    from goggles.transport.schema import decode_any

    def frames(**camera_keys) -> list[bytes]:
        camera = {"vehicle": "quad0", "name": "front", "width": 48, "height": 32, "outputs": ["rgb"], **camera_keys}
        data = {
            "run": {"mode": "sim"},
            "clock": {"scale": 50.0, "max_scale": 50.0},
            "vehicle": [{"name": "quad0", "start": [0, 0, 1, 0], "route": [[0, 0, 1.0], [6, 3, 2.0]]}],
            "camera": [camera],
        }
        config = dataclasses.replace(parse_run_config(data), zmq=None, lcm_url=None)
        path = tmp_path / f"run{len(list(tmp_path.iterdir()))}.mcap"
        recorder = Recorder(path)
        engine = Engine(config, recorder=recorder)
        engine.run(duration=1.0)
        engine.close()
        recorder.close()
        return [decode_any(d).data for _, c, d in read_log(path) if c.endswith("/rgb")]

    still, moving, again = frames(), frames(exposure_s=0.02, readout_s=0.01), frames(exposure_s=0.02, readout_s=0.01)
    assert len(still) == len(moving) == 31 and moving == again
    assert sum(a != b for a, b in zip(still[10:], moving[10:])) >= 15  # in flight, the pictures differ
    bad = {"vehicle": "quad0", "name": "f", "blur_subframes": 0}
    with pytest.raises(ConfigError, match="blur_subframes"):
        parse_run_config({"vehicle": [{"name": "quad0"}], "camera": [bad]})
