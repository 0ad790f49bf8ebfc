"""BVH motion: parsing, forward kinematics against hand-computed poses, units and up axis, errors."""

from __future__ import annotations

import numpy as np
import pytest

from goggles.errors import SceneError
from goggles.scene.bvh import load_bvh
from tests.support import Running, endpoints, run_config

ARM = """HIERARCHY
ROOT hips
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
  JOINT shoulder
  {
    OFFSET 0 150 0
    CHANNELS 3 Zrotation Xrotation Yrotation
    End Site
    {
      OFFSET 0 0 60
    }
  }
}
MOTION
Frames: 2
Frame Time: 0.5
100 0 0  0 0 0   0 0 0
100 0 0  0 0 90  90 0 0
"""


def test_forward_kinematics_units_and_up_axis(tmp_path):
    path = tmp_path / "arm.bvh"
    path.write_text(ARM)
    motion = load_bvh(path)
    assert motion.bones == ["hips", "shoulder", "shoulder_end"] and motion.parents == [-1, 0, 1]
    assert motion.duration == 1.0
    # Frame 0, cm and +Y up: hips at (100, 0, 0) cm -> (1, 0, 0) m; shoulder 150 cm up -> z = 1.5;
    # the end site 60 cm along file +z (towards the viewer) -> goggles -y.
    rest = motion.pose(0.0, units="cm", up="+y")
    np.testing.assert_allclose(rest.T_WJ[:, :3, 3], [[1.0, 0, 0], [1.0, 0, 1.5], [1.0, -0.6, 1.5]], atol=1e-12)
    # Frame 1: hips turned 90 deg about file +y (goggles +z); shoulder turned 90 deg about its z:
    # the end site, 60 cm along +z, turns about z (no change) then about file y: +z -> +x -> goggles +x.
    turned = motion.pose(0.6, units="cm", up="+y")
    np.testing.assert_allclose(turned.T_WJ[2, :3, 3], [1.6, 0.0, 1.5], atol=1e-12)
    np.testing.assert_allclose(motion.pose(1.1, units="cm", up="+y").T_WJ, rest.T_WJ)  # loops
    np.testing.assert_allclose(motion.pose(9.0, units="cm", up="+y", loop=False).T_WJ, turned.T_WJ)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("HIERARCHY\nROOT a\n{\nOFFSET 0 0\n", "expected .CHANNELS., found .end of file."),
        (ARM.replace("Frames: 2", "Frames: 3"), "motion values for 3 frames"),
        (
            ARM.replace("Zrotation Xrotation Yrotation\n    End", "Zrotation Xrotation Wrotation\n    End"),
            "unknown channels",
        ),
        ("MOTION\n", "expected 'HIERARCHY'"),
        (ARM.replace("100 0 0  0 0 90", "1e39 0 0  0 0 90"), "beyond float32's range"),
        (ARM.replace("OFFSET 0 150 0", "OFFSET 0 1e39 0"), "beyond float32's range"),
        (ARM.replace("100 0 0  0 0 90", "nan 0 0  0 0 90"), "non-finite offsets or motion values"),
        # A clip of no frames was a ZeroDivisionError at its first pose, a frame time of 1e-320 an
        # OverflowError; one of inf froze the clip.
        (ARM[: ARM.index("Frames:")] + "Frames: 0\nFrame Time: 0.5\n", "0 motion values for 0 frames"),
        (ARM.replace("Frame Time: 0.5", "Frame Time: 1e-320"), r"'Frame Time: 1e-320' must be 1e-06 to 3600 s"),
        (ARM.replace("Frame Time: 0.5", "Frame Time: inf"), "'Frame Time: inf' must be"),
    ],
)
def test_bad_bvh_files(tmp_path, text, message):
    path = tmp_path / "bad.bvh"
    path.write_text(text)
    with pytest.raises(SceneError, match=message):
        load_bvh(path)


WAVE = """HIERARCHY
ROOT hips
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
  JOINT chest
  {
    OFFSET 0 40 0
    CHANNELS 3 Zrotation Xrotation Yrotation
    JOINT head
    {
      OFFSET 0 30 0
      CHANNELS 3 Zrotation Xrotation Yrotation
      End Site
      {
        OFFSET 0 20 0
      }
    }
    JOINT arm
    {
      OFFSET -20 20 0
      CHANNELS 3 Zrotation Xrotation Yrotation
      End Site
      {
        OFFSET -50 0 0
      }
    }
  }
}
MOTION
Frames: 4
Frame Time: 0.25
0 100 0  0 0 0  0 0 0  0 0 0  0 0 0
0 100 0  0 0 0  0 0 0  0 0 0  -45 0 0
0 100 0  0 0 0  0 0 0  0 0 0  -90 0 0
0 100 0  0 0 0  0 0 0  0 0 0  -45 0 0
"""


@pytest.mark.slow
def test_run_file_avatar_plays_a_bvh_clip_in_sim_time(tmp_path):
    """A person from a BVH clip, 4 m in front of the camera, waving: lockstep renders are
    deterministic and the arm's pixels change with sim time."""

    from goggles.client import Client, image_array
    from goggles.scene.avatar import HUMAN_CLASS

    (tmp_path / "wave.bvh").write_text(WAVE)
    config = run_config(
        mode="lockstep",
        route=False,
        cameras=[
            {
                "vehicle": "quad0",
                "name": "front",
                "width": 48,
                "height": 48,
                "vfov_deg": 50.0,
                "rate": 30.0,
                "outputs": ["segmentation"],
                "position": [0.0, 0.0, 1.2],
            }
        ],
    )
    import dataclasses

    from goggles.rig.runfile import parse_run_config

    avatar = parse_run_config(
        {
            "vehicle": [{"name": "quad0"}],
            "avatar": [
                {
                    "name": "bob",
                    "bvh": str(tmp_path / "wave.bvh"),
                    "units": "cm",
                    "up": "+y",
                    "position": [4.0, 0.0, 0.0],
                    "yaw_deg": 90.0,
                }
            ],
        }
    ).avatars
    config = dataclasses.replace(config, avatars=avatar)
    running = Running(config)
    client = Client(endpoints(config))
    client.subscribe("quad0/front/segmentation")
    client.wait_for_subscriptions(30.0)
    frames = []
    for _ in range(30):  # one second of sim time, a frame every 32 steps
        client.step(32)
        while (item := client.receive(timeout=0.2)) is not None:
            frames.append(image_array(item[1]) == HUMAN_CLASS)
    running.stop.set()
    running.finish()
    client.close()
    assert len(frames) >= 25
    seen = np.array(frames)
    assert seen.any(axis=0).sum() > 20  # the person is there
    assert (seen.any(axis=0) & ~seen.all(axis=0)).sum() > 3  # and the arm moves with sim time
