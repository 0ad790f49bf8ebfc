"""goggles beside its peers: the same mesh rendered from the same camera poses by goggles' backends,
NVIDIA Newton's ``SensorCamera`` and MuJoCo Warp's ray-tracing renderer, through their documented public
APIs, where they are installed (``pip install goggles[bench]``); steady state (builds and compiles
timed apart); each peer's depth checked against goggles' before its speed counts.

All render z-depth of one static triangle mesh shared by every world, a camera per world, on one
device; on the CPU each renders on one thread (Warp launches a CPU kernel on one; goggles is given one),
so the ratios are per core.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from goggles.bench.measure import _time, bench_views
from goggles.render import CameraModel, RenderSettings, Shading
from goggles.rig import parts

#: Agreement with goggles' depth: a pixel agrees within this (m), and a peer's figures stand when at
#: least this fraction of the pixels both see do.
AGREE_M = 0.01
AGREE_FRACTION = 0.999


@dataclass(frozen=True)
class PeerRun:
    """One renderer's figures on one configuration."""

    renderer: str
    frames_per_s: float | None
    """Camera frames (one world's image) per second, steady state; None: skipped."""
    build_s: float = 0.0
    """Building its scene and compiling its kernels, first render included, s."""
    agree: float | None = None
    """Fraction of the pixels both see whose depths agree within ``AGREE_M`` with goggles' first backend."""
    why: str = ""
    """Why it was skipped or its figures do not stand."""


def bench_peers(
    scene,
    *,
    worlds: int,
    width: int,
    height: int,
    vfov_deg: float = 60.0,
    device: str | None = None,
    seconds: float = 2.0,
    backends: tuple[str, ...] = ("warp", "bvh", "wide", "embree"),
) -> list[PeerRun]:
    """Render ``scene`` (a StaticScene) in ``worlds`` worlds at ``width`` x ``height``: goggles' backends,
    then Newton and MuJoCo Warp; returns a ``PeerRun`` each (goggles' first backend is the reference)."""
    import warp as wp

    from goggles.frames import camera_pose_from_body
    from goggles.render.embree import embree_available
    from goggles.world import DeviceScene

    device = str(wp.get_device(device))
    T_WB = scene.view if scene.view is not None else np.eye(4)
    T_WC = np.stack([camera_pose_from_body(T) for T in bench_views(T_WB, worlds)])
    camera = CameraModel.from_fov(width, height, vfov_deg, min_depth=0.0, max_depth=1000.0)
    runs: list[PeerRun] = []
    reference: np.ndarray | None = None
    world = DeviceScene(scene, device)
    for backend in backends:
        if backend == "embree" and (world.device.is_cuda or not embree_available()):
            continue
        start = time.perf_counter()
        settings = RenderSettings(outputs={"depth"}, shading=Shading.NONE, backend=backend, threads=1)
        renderer = parts.renderer(world, [camera] * worlds, settings)

        def render(renderer=renderer) -> None:
            renderer.render(T_WC)
            wp.synchronize_device(renderer.device)

        render()
        build = time.perf_counter() - start
        depth = renderer.images().depth.copy()
        rate = worlds / _time(render, seconds)
        renderer.close()
        agree = None if reference is None else _agreement(reference, depth)
        reference = depth if reference is None else reference
        runs.append(PeerRun(f"goggles-{backend}", rate, build, agree))
    for name, make in (("newton", _newton), ("mujoco-warp", _mujoco_warp)):
        try:
            start = time.perf_counter()
            render, read = make(scene, T_WC, camera, device)
            render()
            build = time.perf_counter() - start
            depth = read()
        except ImportError as exc:
            runs.append(PeerRun(name, None, why=f"not installed ({exc.name}): pip install 'goggles[bench]'"))
            continue
        except Exception as exc:  # a peer that cannot run here says why, in one line
            runs.append(PeerRun(name, None, why=f"cannot run on {device}: {type(exc).__name__}: {exc}"[:300]))
            continue
        agree = _agreement(reference, depth)
        why = "" if agree >= AGREE_FRACTION else f"its depth agrees with goggles' on only {agree:.4%} of pixels"
        runs.append(PeerRun(name, worlds / _time(render, seconds), build, agree, why))
    return runs


def _agreement(reference: np.ndarray, depth: np.ndarray) -> float:
    both = np.isfinite(reference) & np.isfinite(depth) & (reference > 0) & (depth > 0)
    if not both.any():
        return 0.0
    return float(np.mean(np.abs(reference[both] - depth[both]) <= AGREE_M))


def _camera_axes_gl(T_WC: np.ndarray) -> np.ndarray:
    """(n, 3, 3) world axes of OpenGL cameras (x right, y up, looking along -z) at goggles' optical
    poses (x right, y down, z forward)."""
    return T_WC[:, :3, :3] @ np.diag([1.0, -1.0, -1.0])


def _newton(scene, T_WC: np.ndarray, camera: CameraModel, device: str) -> tuple[Callable, Callable]:
    """Newton: the mesh a global static shape, a world per camera, ``SensorCamera`` forward depth."""
    import newton
    import warp as wp
    from newton.sensors import SensorCamera

    from goggles.frames import matrix_to_quat

    builder = newton.ModelBuilder()
    builder.add_shape_mesh(body=-1, mesh=newton.Mesh(scene.vertices, scene.faces.ravel()))
    for _ in range(len(T_WC)):
        builder.begin_world()
        builder.end_world()
    model = builder.finalize(device=device)
    sensor = SensorCamera(model)
    rays = SensorCamera.compute_camera_rays_pinhole(
        camera.width, camera.height, camera_fov=float(np.radians(_vfov(camera))), device=device
    )
    transforms = []
    for T, R in zip(T_WC, _camera_axes_gl(T_WC)):
        w, x, y, z = matrix_to_quat(R)
        transforms.append(wp.transform(wp.vec3(*T[:3, 3]), wp.quat(x, y, z, w)))
    poses = wp.array(transforms, dtype=wp.transformf, device=device)
    depth = sensor.allocate_image_depth_forward(len(T_WC), camera.width, camera.height)
    state = model.state()

    def render() -> None:
        sensor.update(state, poses, rays, forward_depth_image=depth)
        wp.synchronize_device(device)

    def read() -> np.ndarray:
        out = depth.numpy().astype(np.float64)
        out[out <= 0] = np.inf  # nothing hit
        return out

    return render, read


def _mujoco_warp(scene, T_WC: np.ndarray, camera: CameraModel, device: str) -> tuple[Callable, Callable]:
    """MuJoCo Warp: the mesh one geom, a camera whose pose each world sets, its BVH renderer's depth."""
    import mujoco
    import mujoco_warp as mjw
    import warp as wp

    spec = mujoco.MjSpec()
    mesh = spec.add_mesh()
    mesh.name = "scene"
    mesh.uservert = scene.vertices.astype(np.float64).ravel().tolist()
    mesh.userface = scene.faces.ravel().tolist()
    mesh.inertia = mujoco.mjtMeshInertia.mjMESH_INERTIA_SHELL
    geom = spec.worldbody.add_geom()
    geom.type = mujoco.mjtGeom.mjGEOM_MESH
    geom.meshname = "scene"
    geom.contype = geom.conaffinity = 0
    cam = spec.worldbody.add_camera()
    cam.name = "camera"
    cam.fovy = _vfov(camera)
    model = spec.compile()
    n = len(T_WC)
    with wp.ScopedDevice(device):
        m = mjw.put_model(model)
        d = mjw.make_data(model, nworld=n)
        context = mjw.create_render_context(
            model, nworld=n, cam_res=(camera.width, camera.height), render_rgb=False, render_depth=True
        )
        mjw.forward(m, d)
        d.cam_xpos.assign(T_WC[:, None, :3, 3].astype(np.float32))
        d.cam_xmat.assign(_camera_axes_gl(T_WC)[:, None].astype(np.float32))

    def render() -> None:
        with wp.ScopedDevice(device):
            mjw.render(m, d, context)
        wp.synchronize_device(device)

    def read() -> np.ndarray:
        out = context.depth_data.numpy().reshape(n, camera.height, camera.width).astype(np.float64)
        out[out <= 0] = np.inf
        return out

    return render, read


def _vfov(camera: CameraModel) -> float:
    """The vertical field of view of a centred pinhole, degrees."""
    return float(np.degrees(2.0 * np.arctan((camera.height / 2.0) / camera.fy)))
