"""Device→host copies go through preallocated mirrors, one synchronisation per batch, and are counted."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from goggles.dynamics import MultirotorSim, SimulatorSettings, load_airframe
from goggles.render import RenderSettings
from goggles.runtime.device_copies import COPIES, HostMirror, fetch
from tests.support import Kept, run_config


def test_mirrors_copy_into_memory_allocated_once_and_count(device):
    source = wp.array(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    mirror = HostMirror(source)
    before = COPIES.count
    (first,) = fetch([mirror])
    np.testing.assert_array_equal(first, np.arange(12).reshape(3, 4))
    source.assign(np.ones((3, 4), np.float32))
    (second,) = fetch([mirror])
    assert second is first  # the same host memory each time
    np.testing.assert_array_equal(second, 1.0)
    assert COPIES.count - before == 2


def test_one_copy_serves_every_reader_of_a_step(device):
    sim = MultirotorSim(load_airframe("fg-quad"), 3, SimulatorSettings(seed=1), device=device)
    sim.step(5)
    before = COPIES.count
    states, contacts, again = sim.states(), sim.contacts(), sim.states()
    assert again is states and contacts == [] and COPIES.count - before == 1
    assert states.position.shape == (3, 3) and not states.position.flags.writeable
    sim.step(1)
    sim.contacts()
    sim.states()
    assert COPIES.count - before == 2  # one more step, one more copy


def test_render_buffers_reach_in_process_consumers_without_a_copy(device):
    """A learner in the same process takes the depth where it was rendered (DLPack: torch, JAX, CuPy,
    or numpy on the CPU), with no host copy and no count."""
    from goggles.render import CameraModel, Renderer
    from goggles.world import DeviceScene
    from tests.conftest import quad, scene_of

    wall = quad([[5, 5, -5], [5, -5, -5], [5, -5, 5], [5, 5, 5]])
    renderer = Renderer(DeviceScene(scene_of((wall, 1)), device), [CameraModel.from_fov(16, 12, 60.0)])
    before = COPIES.count
    renderer.render(np.array([[[0, 0, 1, 0], [-1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1]]], float))
    depth = renderer.buffers.depth
    assert COPIES.count == before
    if depth.device.is_cpu:
        shared = np.from_dlpack(depth)
        assert np.shares_memory(shared, depth.numpy()) and shared[0, 6, 8] == np.float32(5.0)
    else:
        assert depth.__dlpack_device__()[0] == 2  # kDLCUDA: the consumer gets device memory
    renderer.close()


@pytest.mark.slow
def test_imu_batches_publish_the_same_samples_in_fewer_copies(device):
    """``imu_batch = 4``: the IMU samples wait on the device and come with the state's copy; every
    IMU and state message is byte for byte the one an unbatched run publishes, with fewer copies."""
    import dataclasses

    import goggles_lcm
    from goggles.engine import Engine

    def _fields(message):  # all but the wall-clock stamp
        values = {k: getattr(message, k) for k in message.__slots__ if k != "header"}
        return message.header.seq, message.header.utime, values

    kept, copies = {}, {}
    for batch in (1, 4):
        config = dataclasses.replace(run_config(scale=1000.0, imu_batch=batch), zmq=None)
        sink = Kept()
        engine = Engine(config, device=device, sinks=[sink])
        before = COPIES.count
        engine.run(duration=0.5)
        copies[batch] = COPIES.count - before
        engine.close()
        kept[batch] = {
            channel: [_fields(kind.decode(data)) for name, data in sink.messages if name == channel]
            for channel, kind in (("quad0/imu", goggles_lcm.imu_t), ("quad0/state", goggles_lcm.vehicle_state_t))
        }
    assert len(kept[1]["quad0/imu"]) >= 119  # 240 Hz for 0.5 s
    assert kept[4] == kept[1]
    assert copies[4] <= copies[1] - 80  # 120 IMU samples in 0.5 s: 90 of their copies saved


def test_a_contact_between_state_copies_is_kept_until_read(device):
    """Contacts latch on the device until the host takes them: one touched in a step nobody read is
    reported at the next read, with the step it happened at, then cleared."""
    from goggles.world import DeviceScene
    from tests.conftest import quad, scene_of

    floor = quad([[-5, -5, 0], [5, -5, 0], [5, 5, 0], [-5, 5, 0]])
    world = DeviceScene(scene_of((floor, 1)), device)
    sim = MultirotorSim(
        load_airframe("fg-quad"), 1, SimulatorSettings(floor_z=None, seed=1), device=device, world=world
    )
    sim.reset(position=[0.0, 0.0, 0.3], rotor_speed=0.0)
    for _ in range(400):  # falls onto the floor mesh, nobody reading
        sim.step(1)
        if sim.state_arrays.contact_step.numpy()[0] >= 0:
            break
    touched = int(sim.state_arrays.contact_step.numpy()[0])
    assert touched >= 0
    sim.step(200)  # more steps: the first contact is kept
    (report,) = sim.contacts()
    assert report.step == touched and report.normal[2] > 0.9
    assert sim.contacts() == []  # taken
    assert int(sim.state_arrays.contact_step.numpy()[0]) == -1


def test_published_outputs_come_in_one_copy(device):
    """The outputs a renderer was asked for lie side by side in its device block: one copy brings
    them, and each host view equals that output (checked against the renderer's own copies)."""
    from goggles.render import CameraModel, Renderer
    from goggles.world import DeviceScene
    from tests.conftest import quad, scene_of

    wall = quad([[5, 5, -5], [5, -5, -5], [5, -5, 5], [5, 5, 5]])
    asked = {"depth", "rgb", "segmentation"}
    renderer = Renderer(
        DeviceScene(scene_of((wall, 1)), device),
        [CameraModel.from_fov(16, 12, 60.0)] * 2,
        RenderSettings(outputs=asked),
    )
    pose = np.array([[0, 0, 1, 0], [-1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1]], float)
    renderer.render(np.stack([pose, pose]))
    mirror = HostMirror(renderer.block(asked))
    before = COPIES.count
    (block,) = fetch([mirror])
    assert COPIES.count - before == 1
    start = min(renderer.layout[name].offset for name in asked)
    images = renderer.images()
    for name in asked:
        np.testing.assert_array_equal(renderer.layout[name].view(block, start), getattr(images, name))
    assert float(images.depth[0, 6, 8]) == 5.0 and images.segmentation[1, 6, 8] == 1
    try:
        renderer.block({"depth", "normal_W"})  # never asked for: not beside the others
    except ValueError as exc:
        assert "side by side" in str(exc)
    else:
        raise AssertionError("a block of outputs that are not side by side")
    renderer.close()


@pytest.mark.slow
def test_a_batch_of_cameras_over_two_gib_is_laid_out_and_one_output_over_it_is_refused(monkeypatch):
    """2048 cameras of 480x270 depth and segmentation (the learning benchmark's batch) take 2.4 GB in
    one block, more elements than one Warp dimension holds. They share one camera model, so one ray
    table: the memory they are checked against is their outputs' (and, on the CPU, their host copies'),
    4.5 GiB, not 40 GiB for a ray table per camera. One output over 2 GiB, which Warp's 32-bit byte
    offsets cannot index, is refused by name before anything is allocated."""
    import goggles.runtime.device_memory
    from goggles.errors import ConfigError
    from goggles.render import CameraModel, Renderer
    from goggles.world import DeviceScene
    from tests.conftest import quad, scene_of

    scene = DeviceScene(scene_of((quad([[5, 5, -5], [5, -5, -5], [5, -5, 5], [5, 5, 5]]), 1)), "cpu")
    cameras = [CameraModel.from_fov(480, 270, 60.0)] * 2048
    monkeypatch.setattr(goggles.runtime.device_memory, "available_memory", lambda device: 4 * 2**30)
    with pytest.raises(ConfigError, match=r"rendering 2048 camera\(s\) of 480x270 needs about 4.5 GiB on cpu"):
        Renderer(scene, cameras, RenderSettings(outputs={"depth", "segmentation"}))
    monkeypatch.setattr(goggles.runtime.device_memory, "available_memory", lambda device: 5 * 2**30)
    renderer = Renderer(scene, cameras, RenderSettings(outputs={"depth", "segmentation"}))
    pixels = 2048 * 270 * 480
    assert sum(span.size for span in renderer.layout.values()) == 9 * pixels + 23 > 2**31  # 23: one of each unused
    block = renderer.block({"depth", "segmentation"})
    assert block.dtype == wp.uint8 and block.size >= 8 * pixels  # their bytes, in rows
    for name in ("depth", "segmentation"):  # each view lies inside the block, whole
        view = getattr(renderer.buffers, name)
        assert view.shape == (2048, 270, 480) and block.ptr <= view.ptr <= block.ptr + block.size - 4 * pixels
    renderer.close()
    with pytest.raises(ConfigError, match=r"need 3.0 GiB of normal_W, over the 2 GiB"):
        Renderer(scene, cameras, RenderSettings(outputs={"depth", "normal_W"}))


def test_a_groups_images_and_beacon_detections_come_in_one_synchronisation(device):
    """A camera group that publishes images and beacons waits once per frame for both copies, and
    hands back what the beacon sensor alone detects and the renderer alone draws."""
    from goggles.render import CameraModel
    from goggles.rig.cameras import camera_groups
    from goggles.rig.runfile import CameraConfig
    from goggles.sensors.beacons import BeaconSensor
    from goggles.world import Beacon, DeviceScene
    from tests.conftest import quad, scene_of

    wall = quad([[5, 5, -5], [5, -5, -5], [5, -5, 5], [5, 5, 5]])
    scene = DeviceScene(scene_of((wall, 1)), device)
    beacons = [Beacon("post/1", (4.0, 1.0, 0.5)), Beacon("post/2", (4.0, -1.0, -0.5)), Beacon("hidden/1", (6, 0, 0))]
    model = CameraModel.from_fov(32, 24, 90.0)
    config = CameraConfig("quad0", "cam", model, np.eye(4), None, 30.0, ("depth", "beacons"))
    (group,) = camera_groups(scene, [config], 240.0, beacons, seed=0)
    pose = np.array([[[0, 0, 1, 0], [-1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1]]], float)
    copies, syncs = COPIES.count, COPIES.syncs
    images, detections, _ = group.render(pose)
    assert (COPIES.count - copies, COPIES.syncs - syncs) == (2, 1)
    alone = BeaconSensor(scene, beacons, [model]).detect(pose)
    assert [d.id for d in detections] == ["post/1", "post/2"] == [d.id for d in alone]  # the wall hides the third
    for got, want in zip(detections, alone, strict=True):
        assert got == want
    assert images["depth"].shape == (1, 24, 32)
    assert float(images["depth"][0, 12, 16]) == pytest.approx(5.0, rel=1e-6)  # CUDA's fused multiply-adds: 1 ulp
    group.renderer.close()
