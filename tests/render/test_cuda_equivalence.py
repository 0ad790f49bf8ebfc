"""The CUDA path gives what the CPU path gives: images, trajectories, and an engine run.

These run only where Warp has a CUDA device (they skip elsewhere, and fail with the reason where
nvidia-smi sees a GPU that Warp cannot use). Tolerances are float32's: the two compilers may fuse
multiply-adds differently.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from goggles.bench.measure import bench_views
from goggles.control_modes import ControlMode
from goggles.dynamics import MultirotorSim, SimulatorSettings, load_airframe
from goggles.frames import camera_pose_from_body, transform
from goggles.paths import default_scene
from goggles.render import CameraModel, Renderer, RenderSettings, stereo_right_offset
from goggles.scene import box_shape, load_static_scene
from goggles.world import DeviceScene
from tests.conftest import NO_CUDA, _require_cuda

pytestmark = NO_CUDA


@pytest.fixture(autouse=True)
def cuda_or_the_reason():
    _require_cuda("cuda:0")


def render_on(device: str, backend: str, scene, T_WC, actors=()):
    world = DeviceScene(scene, device, shapes=[box_shape("crate", [1.0, 1.0, 1.0], segmentation=7)])
    if actors:
        world.set_actors([0] * len(actors), actors)
    camera = CameraModel.from_fov(160, 120, 70.0)
    n = len(T_WC)
    renderer = Renderer(world, [camera] * n, RenderSettings(backend=backend), shadow_partner=[1, -1] * (n // 2))
    renderer.render(np.asarray(T_WC))
    images = renderer.images()
    renderer.close()
    return images


def test_cuda_images_equal_cpu_images():
    scene = load_static_scene(default_scene())
    T_WC = []
    for T_WB in bench_views(scene.view, 3):
        left = camera_pose_from_body(T_WB)
        T_WC += [left, left @ stereo_right_offset(0.3)]
    actors = [transform([2.0, 0.0, 1.0], [1, 0, 0, 0])]
    cuda = render_on("cuda:0", "warp", scene, T_WC, actors)
    for backend in ("warp", "embree"):
        cpu = render_on("cpu", backend, scene, T_WC, actors)
        assert (cpu.status != cuda.status).mean() < 1e-3  # ties: shared edges, the shadow test's threshold
        ties = cpu.face != cuda.face
        assert ties.mean() < 1e-3
        valid = np.isfinite(cpu.depth) & np.isfinite(cuda.depth) & ~ties
        np.testing.assert_allclose(cuda.depth[valid], cpu.depth[valid], rtol=1e-4)
        assert np.array_equal(cpu.segmentation[~ties], cuda.segmentation[~ties])
        assert np.abs(cpu.rgb[~ties].astype(int) - cuda.rgb[~ties]).max() <= 1


def test_cuda_trajectories_equal_cpu_trajectories():
    airframe = load_airframe("fg-quad")
    runs = {}
    for device in ("cpu", "cuda:0"):
        sim = MultirotorSim(airframe, 4, SimulatorSettings(seed=3, imu_rate=240.0), device=device)
        sim.reset(position=[[0, 0, 1], [1, 0, 1], [0, 1, 1], [1, 1, 1]])
        sim.set_command(ControlMode.POSITION, [[0.5, 0.5, 2.0, 0.3]] * 4)
        positions = []
        for _ in range(240):  # 1 s, read at the IMU rate as the engine does
            sim.step(4)
            positions.append(sim.states().position.copy())
        runs[device] = np.array(positions)
        sim.close()
    np.testing.assert_allclose(runs["cuda:0"], runs["cpu"], atol=1e-3)


def test_cuda_engine_run_equals_cpu_engine_run():
    from goggles.engine import Engine
    from goggles.paths import default_run
    from goggles.rig.runfile import load_run_config

    config = dataclasses.replace(load_run_config(default_run()), zmq=None, lcm_url=None)
    finals = {}
    for device in ("cpu", "cuda:0"):
        engine = Engine(config, device=device)
        engine.run(duration=1.0)
        finals[device] = next(iter(engine.vehicles.values())).sim.states().position.copy()
        engine.close()
    np.testing.assert_allclose(finals["cuda:0"], finals["cpu"], atol=1e-3)
