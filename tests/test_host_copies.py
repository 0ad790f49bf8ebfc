"""Device→host copies go through preallocated mirrors, one synchronisation per batch, and are counted."""

from __future__ import annotations

import numpy as np
import warp as wp

from goggles.dynamics import MultirotorSim, load_airframe
from goggles.host_copies import COPIES, HostMirror, fetch


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
    sim = MultirotorSim(load_airframe("fg-quad"), 3, device=device, seed=1)
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
