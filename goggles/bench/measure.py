"""Benchmarks: goggles against a peer measured in the same run, on the same work.

Each benchmark warms up, synchronizes the device, then times repeated work for at least
``seconds`` of wall time, and reports rates with the peer's rate and the ratio.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.dynamics import SimulatorSettings
from goggles.errors import ConfigError, GogglesError
from goggles.render import RenderSettings
from goggles.rig import parts
from goggles.scene import StaticScene


@dataclass(frozen=True)
class RenderBench:
    """Result of ``bench_render``: primary rays per second of each goggles backend and of bare Embree."""

    rays_per_s: dict[tuple[str, str], float]
    """(backend, outputs) -> rays per second of the full render; outputs is ``all`` (every output, no
    shadows: the ideal render), ``depth``, ``all+shadows`` (the sun's shadows too),
    ``all+shadows+noise`` (and a camera's noise) or ``all+blur4`` (motion blur of four sub-frames)."""
    embree_rays_per_s: float | None
    """Embree alone: closest hits of the same rays, on the same threads (None without embreex)."""
    cost_vs_ideal: dict[tuple[str, str], float]
    """(backend, outputs) -> a realistic render's time over the ideal one's (``all``), the median of
    pairs timed back to back (a shared machine's drift cancels within a pair)."""
    width: int
    height: int
    views: int
    triangles: int
    threads: int
    device: str
    pixel_order: str
    """The warp and bvh backends' pixel order (``Renderer.pixel_order``)."""

    def ratio(self, backend: str, outputs: str) -> float:
        """Rays per second over Embree's (NaN without embreex)."""
        return self.rays_per_s[backend, outputs] / (self.embree_rays_per_s or float("nan"))


def bench_views(T_WB: np.ndarray, count: int) -> np.ndarray:
    """(count, 4, 4) body poses: ``T_WB`` turned about world z in equal steps (a look all around)."""
    from goggles.frames import quat_from_axis_angle, quat_to_matrix

    poses = np.repeat(T_WB[None], count, axis=0)
    for i in range(count):
        R = quat_to_matrix(quat_from_axis_angle([0.0, 0.0, 1.0], 2.0 * np.pi * i / count))
        poses[i, :3, :3] = R @ T_WB[:3, :3]
    return poses


def _time(work, seconds: float) -> float:
    """Seconds per call of ``work``, after one warm-up call, over at least ``seconds`` and 3 calls."""
    work()
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - start < seconds:
        work()
        calls += 1
    return (time.perf_counter() - start) / calls


def _paired_cost(work, ideal, seconds: float) -> float:
    """Median over pairs of ``work``'s time over ``ideal``'s, each pair run back to back (at least 3
    pairs and ``seconds``)."""
    ratios, start = [], time.perf_counter()
    while len(ratios) < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        ideal()
        t1 = time.perf_counter()
        work()
        ratios.append((time.perf_counter() - t1) / (t1 - t0))
    return float(np.median(ratios))


def bench_render(
    scene_path: Path | StaticScene,
    *,
    width: int,
    height: int,
    vfov_deg: float = 60.0,
    views: int = 8,
    threads: int | None = None,
    device: str | None = None,
    backends: tuple[str, ...] = ("warp", "bvh", "wide", "embree"),
    bvh: str | None = None,
    pixel_order: str = "auto",
    seconds: float = 2.0,
) -> RenderBench:
    """Render the same views of a scene with each backend, and trace the same rays with bare Embree.

    The views are one batch of cameras, rendered together as a camera group or a swarm's cameras
    are (one launch on CUDA). Each backend renders: every output (closest hit, depth, range, normal,
    segmentation, shaded texture), depth only (a depth camera), every output with the sun's shadows,
    with a global-shutter camera's noise and vignetting (``GLOBAL_SHUTTER``), with both, motion blur
    of four sub-frames, every output with a racing gate 4 m ahead of each view (the actors' path),
    and every output through a 200-degree equidistant fisheye whose circle reaches the image's
    corners (every pixel a ray; its rays per second against the pinhole's);
    and an OS1-64 LiDAR scans the same world (its cost too against the ideal
    render). Embree alone only finds the closest hits, on the same number of threads (where embreex is
    installed). A backend the device cannot run (Embree on CUDA, or without embreex) is left out.
    ``bvh`` picks Warp's BVH builder for the static mesh (``goggles.world.BVH_BUILDERS``; default per
    device), ``pixel_order`` the warp, bvh and wide backends' (``goggles.render.PIXEL_ORDERS``).
    """
    import warp as wp

    from goggles.frames import camera_pose_from_body
    from goggles.render import CameraModel, Shading
    from goggles.render.embree import EmbreeTracer, embree_available
    from goggles.scene import load_static_scene
    from goggles.scene.gates import gate_shape
    from goggles.sensors.camera_noise import GLOBAL_SHUTTER, CameraNoise
    from goggles.sensors.lidar import OS1_64
    from goggles.world import DeviceScene

    scene = scene_path if isinstance(scene_path, StaticScene) else load_static_scene(scene_path)
    T_WB = scene.view if scene.view is not None else np.eye(4)
    T_WB_views = bench_views(T_WB, views)
    T_WC = np.stack([camera_pose_from_body(T) for T in T_WB_views])
    camera = CameraModel.from_fov(width, height, vfov_deg)
    corner = np.hypot(width - 1, height - 1) / 2.0  # the 200-degree circle through the corners
    f = corner / np.radians(100.0)
    fisheye = CameraModel(width, height, f, f, (width - 1) / 2.0, (height - 1) / 2.0, (0.0,) * 4, lens="fisheye")
    world = DeviceScene(scene, device, bvh=bvh, shapes=[gate_shape((1.6, 1.6))])
    gates_T_WA = T_WB_views.copy()  # "all+gates": a racing gate 4 m ahead of each view, seen through
    gates_T_WA[:, :3, 3] += 4.0 * T_WB_views[:, :3, 0]
    rates: dict[tuple[str, str], float] = {}
    costs: dict[tuple[str, str], float] = {}
    warp_order = "rows"
    for backend in backends:
        if backend == "embree" and (world.device.is_cuda or (len(backends) > 1 and not embree_available())):
            continue
        every = {"depth", "range", "rgb", "segmentation", "normal_W", "face"}
        for outputs, chosen, shading, shadows in (
            ("all", every, Shading.SUN, False),
            ("depth", {"depth"}, Shading.NONE, False),
            ("all+shadows", every, Shading.SUN, True),
            ("all+noise", every, Shading.SUN, False),
            ("all+shadows+noise", every, Shading.SUN, True),
            ("all+blur4", every, Shading.SUN, False),
            ("all+gates", every, Shading.SUN, False),
            ("all+fisheye", every, Shading.SUN, False),
        ):
            lens = fisheye if outputs.endswith("fisheye") else camera
            renderer = parts.renderer(
                world,
                [lens] * views,
                RenderSettings(
                    threads=threads,
                    backend=backend,
                    outputs=chosen,
                    shading=shading,
                    shadows=shadows,
                    pixel_order=pixel_order if backend != "embree" else "auto",
                ),
            )
            if backend != "embree":
                warp_order = renderer.pixel_order
            noise = CameraNoise([GLOBAL_SHUTTER] * views, renderer) if outputs.endswith("noise") else None

            blur = 4 if outputs.endswith("blur4") else 0
            moved = T_WC.copy()  # a 4-sub-frame exposure while the cameras slide 5 cm sideways
            moved[:, :3, 3] += T_WC[:, :3, 0] * 0.05

            gates = outputs.endswith("gates")

            def render_views(renderer=renderer, noise=noise, blur=blur, moved=moved, gates=gates) -> None:
                if gates:  # placed for this render only: the ideal one it is paired with sees none
                    world.set_actors([0] * views, gates_T_WA)
                if blur:
                    renderer.render_exposure(T_WC, moved, blur)
                else:
                    renderer.render(T_WC)
                if noise is not None:
                    noise.apply()
                if gates:
                    world.set_actors([], gates_T_WA[:0])
                wp.synchronize_device(renderer.device)

            rates[backend, outputs] = views * width * height / _time(render_views, seconds)
            used_threads = renderer.threads
            if outputs == "all":
                ideal, ideal_renderer = render_views, renderer  # kept to time each realistic one against
                continue
            if "+" in outputs:
                costs[backend, outputs] = _paired_cost(render_views, ideal, seconds)
            renderer.close()
        # An OS1-64 scan (65,536 rays at 10 Hz) of the same world, the sensor turning during the scan.
        lidar = parts.lidar(world, OS1_64, backend=backend)  # on its own default thread count, as a LiDAR scans

        def scan(lidar=lidar, start=T_WB_views[0], end=T_WB_views[1]) -> None:
            lidar.scan(start, end)
            wp.synchronize_device(world.device)

        rates[backend, "lidar-os1-64"] = OS1_64.points_per_scan / _time(scan, seconds)
        costs[backend, "lidar-os1-64"] = _paired_cost(scan, ideal, seconds)
        lidar.close()
        ideal_renderer.close()

    embree_rays_per_s, peer_threads = None, used_threads
    if embree_available():  # the peer, where it is installed (a GPU machine may have none)
        embree = EmbreeTracer(scene, threads=used_threads if world.device.is_cpu else threads)
        rays_C = camera.ray_directions().reshape(-1, 3)
        origins = [np.broadcast_to(T[:3, 3], rays_C.shape).astype(np.float32) for T in T_WC]
        directions = [(rays_C @ T[:3, :3].T).astype(np.float32) for T in T_WC]

        def trace_views() -> None:
            for o, d in zip(origins, directions):
                embree.trace(o, d)

        embree_rays_per_s, peer_threads = views * width * height / _time(trace_views, seconds), embree.threads
        embree.close()
    return RenderBench(
        rays_per_s=rates,
        embree_rays_per_s=embree_rays_per_s,
        cost_vs_ideal=costs,
        width=width,
        height=height,
        views=views,
        triangles=scene.num_faces,
        threads=peer_threads,
        device=str(world.device),
        pixel_order=warp_order,
    )


@dataclass(frozen=True)
class SplatBench:
    """Result of ``bench_splats``: one capture rendered at one size."""

    name: str
    gaussians: int
    width: int
    height: int
    views: int
    frames_per_s: float
    """The renderer's own choice of splat pass here (``RenderSettings.splat_pass="auto"``)."""
    rays_frames_per_s: float
    """Each pixel's ray traced (``splat_pass="rays"``), the same world and views, timed after it."""
    bytes_per_gaussian: float
    device: str


#: The captures ``bench_splats`` renders, where goggles or ../shared holds them: (name, files relative to
#: the checkout, up axis).
SPLAT_CAPTURES = (
    (
        "houseplant",
        ("assets/splats/houseplant/plant.splat", "../shared/assets-real/splats/houseplant/plant.splat"),
        "-y",
    ),
    ("robot", ("../shared/assets-real/splats/playbot-125k/playbot_lod2_125k.ply",), "-y"),
)


def splat_capture(files: tuple[str, ...]) -> Path | None:
    """The first of ``files`` (relative to the checkout goggles runs from) that exists."""
    from goggles.paths import REPO_ROOT

    for file in files:
        path = (REPO_ROOT / file).resolve()
        if path.is_file():
            return path
    return None


def bench_splats(
    path: Path,
    up: str,
    *,
    width: int,
    height: int,
    views: int = 8,
    device: str | None = None,
    seconds: float = 2.0,
) -> SplatBench:
    """Render a capture alone (every output but normals, from ``views`` cameras around it at a
    distance where it fills most of a 60-degree view), a frame per camera, composited as the renderer
    chooses here and then ray by ray (one world, one upload); steady state: the BVH built and the
    kernels compiled first."""
    import warp as wp

    from goggles.frames import camera_pose_from_body, quat_from_euler, transform
    from goggles.render import CameraModel, Shading
    from goggles.scene.batch import batch_scene
    from goggles.scene.scene_file import AssetSpec, SceneSpec
    from goggles.world import DeviceScene

    splat = AssetSpec(path.stem, path, "m", up, np.eye(4), 1.0, 1)
    scene = batch_scene(SceneSpec(path.stem, path, (), splats=(splat,)))
    world = DeviceScene(scene, device)
    low, high = world.splats.bounds
    centre, size = (low + high) / 2.0, float(np.max(high - low))
    camera = CameraModel.from_fov(width, height, 60.0)
    distance = 1.1 * size / (2.0 * np.tan(np.radians(30.0)))
    poses = []
    for i in range(views):
        yaw = 2.0 * np.pi * i / views
        eye = centre + distance * np.array([-np.cos(yaw), -np.sin(yaw), 0.25])
        body = transform(eye, quat_from_euler(0.0, np.arctan2(0.25, 1.0), yaw))
        poses.append(camera_pose_from_body(body))
    T_WC = np.stack(poses)
    outputs = {"depth", "range", "rgb", "segmentation"}
    rates = []
    for splat_pass in ("auto", "rays"):
        settings = RenderSettings(outputs=outputs, shading=Shading.UNLIT, splat_pass=splat_pass)
        renderer = parts.renderer(world, [camera] * views, settings)

        def frame(renderer=renderer) -> None:
            renderer.render(T_WC)
            wp.synchronize_device(renderer.device)

        rates.append(views / _time(frame, seconds))
        renderer.close()
    per_gaussian = world.splats.nbytes / world.splats.count
    return SplatBench(path.stem, world.splats.count, width, height, views, *rates, per_gaussian, str(world.device))


@dataclass(frozen=True)
class EventBench:
    """Result of ``bench_events``: an event camera on the demo flight."""

    sim_seconds: float
    wall_seconds: float
    renders: int
    events: int
    width: int
    height: int
    device: str

    @property
    def renders_per_sim_s(self) -> float:
        return self.renders / self.sim_seconds

    @property
    def events_per_sim_s(self) -> float:
        return self.events / self.sim_seconds

    @property
    def events_per_wall_s(self) -> float:
        return self.events / self.wall_seconds


def bench_events(run_file: Path, seconds: float, device: str | None = None) -> EventBench:
    """Fly ``run_file`` (its event cameras alone, no buses, as fast as the machine goes) for
    ``seconds`` of sim time: the event cameras' renders and events, per sim and per wall second."""
    import dataclasses

    from goggles.clock import ClockMode
    from goggles.engine import Engine
    from goggles.errors import ConfigError
    from goggles.rig.runfile import load_run_config
    from goggles.transport.schema import decode_any

    config = load_run_config(run_file)
    cameras = [c for c in config.cameras if c.events is not None]
    if not cameras:
        raise ConfigError(f'{run_file}: no event camera (a [[camera]] with outputs = ["events"])')
    config = dataclasses.replace(
        config, cameras=tuple(cameras), lidars=(), range_sensors=(), lcm_url=None, zmq=None, ros2=None
    )
    config = dataclasses.replace(config, mode=ClockMode.SIM, scale=1e6, max_scale=1e6)

    class Count:
        renders = events = 0

        def write(self, channel: str, data, log_time_ns: int) -> None:
            if channel.endswith("/events"):
                Count.renders += 1
                Count.events += decode_any(data).num_events

    with Engine(config, device=device, sinks=[Count()]) as engine:
        start = time.perf_counter()
        engine.run(duration=seconds)
        wall = time.perf_counter() - start
        model = engine.rig.groups[0].cameras[0].model
        device = str(engine.rig.world.device)
        return EventBench(seconds, wall, Count.renders, Count.events, model.width, model.height, device)


@dataclass(frozen=True)
class FrameBreakdown:
    """Result of ``bench_breakdown``: where a camera frame's time goes, per frame, in milliseconds."""

    frames: int
    frame_ms: float
    """Wall time of a frame (render, sensor models, copies, publishing)."""
    wall_ms: dict[str, float]
    """Wall time of each stage the frame's own thread ran (they add up to ``frame_ms`` less the rest)."""
    cpu_ms: dict[str, float]
    """CPU time of each stage over every thread that ran it (the renderer's workers' rows summed)."""
    shadows_cpu_ms: float | None
    """The sun's shadow rays: the shading stage's CPU with shadows less without, from the same poses."""
    cameras: str
    threads: int


#: The stages a frame's own thread runs, in order (``goggles.runtime.profile.stage`` names); the
#: renderer's workers run the others inside "meshes".
FRAME_STAGES = (
    "people and bodies placed",
    "meshes (rays, primary hits, shading)",
    "primary hits, shading and shadows",
    "splats",
    "stereo shadow and invalid pixels",
    "noise models",
    "copies to the host",
    "publishing",
)


def bench_breakdown(run_file: Path, seconds: float = 5.0, device: str | None = None) -> FrameBreakdown:
    """Fly ``run_file`` (its cameras, no buses, as fast as the machine goes) for one sim second to warm
    up, then ``seconds`` more with each frame's stages timed (``goggles.runtime.profile``); then the
    same cameras' shading with and without the sun's shadows, from the last poses."""
    from goggles.clock import ClockMode
    from goggles.engine import Engine
    from goggles.rig.runfile import load_run_config
    from goggles.runtime.profile import Profile

    config = load_run_config(run_file)
    if not config.cameras:
        raise ConfigError(f"{run_file}: no [[camera]] to break down")
    config = dataclasses.replace(config, lcm_url=None, zmq=None, ros2=None, lidars=(), range_sensors=())
    config = dataclasses.replace(config, mode=ClockMode.SIM, scale=1e6, max_scale=1e6)
    with Engine(config, device=device) as engine:
        engine.run(duration=1.0)
        with Profile(root="frame") as profile:  # a run's warm-up render is no frame
            engine.run(duration=1.0 + seconds)
        group = max(engine.rig.groups, key=lambda g: len(g.cameras))
        poses = np.stack([engine.sensors.camera_pose(c) for c in group.cameras])
        shadows = _shadow_cost(group.renderer, poses)
        frames = max(1, profile.calls["frame"])
        every = [c for g in engine.rig.groups for c in g.cameras]  # every group's frames are counted
        sizes = ", ".join(f"{c.vehicle}/{c.name} {c.model.width}x{c.model.height}" for c in every)
        return FrameBreakdown(
            frames=profile.calls["frame"],
            frame_ms=profile.wall["frame"] * 1e3 / frames,
            wall_ms={k: profile.wall[k] * 1e3 / frames for k in FRAME_STAGES if k in profile.wall},
            cpu_ms={k: v * 1e3 / frames for k, v in profile.cpu.items() if k != "frame"},
            shadows_cpu_ms=shadows,
            cameras=sizes,
            threads=group.renderer.threads,
        )


#: The stages that shade (and, with shadows, trace the sun's rays) on each backend.
SHADING_STAGES = ("primary hits, shading and shadows", "shading and shadows", "sun's shadow rays (Embree)")


def _shadow_cost(renderer, poses: np.ndarray, repeats: int = 20) -> float | None:
    """CPU ms per frame the sun's shadow rays cost ``renderer``'s cameras at ``poses``: its shading
    stage with shadows less without (two renderers of the same scene, cameras and outputs)."""
    from goggles.render import Shading
    from goggles.runtime.profile import Profile

    settings = renderer.settings
    if settings.shading != Shading.SUN or not settings.shadows:
        return None
    cpu = []
    for shadows in (True, False):
        twin = parts.renderer(renderer.scene, renderer.cameras, dataclasses.replace(settings, shadows=shadows))
        try:
            twin.render(poses)  # compiled and warm
            with Profile() as profile:
                for _ in range(repeats):
                    twin.render(poses)
            shading = [v for k, v in profile.cpu.items() if k in SHADING_STAGES]
            cpu.append(sum(shading) * 1e3 / repeats)
        finally:
            twin.close()
    return cpu[0] - cpu[1]


@dataclass(frozen=True)
class DynamicsBench:
    """Result of ``bench_dynamics``: physics steps per second of each vehicle."""

    airframe: str
    integrator: str
    vehicles: int
    steps_per_s: float
    device: str
    threads: int

    @property
    def vehicle_steps_per_s(self) -> float:
        return self.steps_per_s * self.vehicles

    @property
    def realtime_factor(self) -> float:
        """Simulated seconds per wall second at the 960 Hz physics rate."""
        return self.steps_per_s / 960.0


def bench_dynamics(
    preset: str,
    *,
    vehicles: int,
    device: str | None = None,
    seconds: float = 1.0,
    threads: int | None = None,
    integrator=None,
) -> DynamicsBench:
    """Time full physics steps (the airframe's integrator unless given, position controller,
    disturbances, IMU) of a batch in flight."""
    import warp as wp

    from goggles.dynamics import ControlMode, load_airframe

    sim = parts.simulator(
        load_airframe(preset), vehicles, SimulatorSettings(threads=threads, integrator=integrator), device=device
    )
    sim.reset(position=[0.0, 0.0, 1.0], rotor_speed=sim.airframe.hover_speed)
    sim.set_command(ControlMode.POSITION, [1.0, -1.0, 2.0, 0.5])
    chunk = 960 if vehicles == 1 else max(1, 96_000 // vehicles)

    def run() -> None:
        sim.step(chunk)
        wp.synchronize_device(sim.device)

    seconds_per_call = _time(run, seconds)
    sim.close()
    return DynamicsBench(
        airframe=sim.airframe.name,
        integrator=sim.integrator.name.lower(),
        vehicles=vehicles,
        steps_per_s=chunk / seconds_per_call,
        device=str(sim.device),
        threads=sim.threads,
    )


@dataclass(frozen=True)
class LatencyBench:
    """Result of ``bench_latency``: pose sent -> both stereo depth images received, milliseconds."""

    p50_ms: float
    p99_ms: float
    frames: int
    sent: int
    width: int
    height: int
    embree_ms: float | None
    """Bare Embree's closest hits of the same two cameras' rays from the start pose, on the same
    threads (the floor a CPU render cannot go under), or None without embreex."""
    load_average: float
    """The machine's 1-minute load average before the run (the figure means little on a busy machine)."""
    engine_status: str | None = None
    """The engine's last status line (its render and frame times: where the latency goes), if it printed one."""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_latency(
    *,
    width: int,
    height: int,
    rate: float = 30.0,
    seconds: float = 10.0,
    device: str | None = None,
    transport: str = "zmq",
    recorded: bool | None = None,
    backend: str = "auto",
) -> LatencyBench:
    """Run ``goggles run`` in live mode in its own process, send poses at the camera rate, and time
    each pose until both depth images rendered from it have arrived: over ZeroMQ on loopback, or
    (``transport="ros2"``) as a ROS 2 PoseStamped in and sensor_msgs/Image out over DDS. ``backend``
    is the engine's primary-ray tracer (``goggles.render.BACKENDS``)."""
    import os
    import random
    import subprocess
    import sys
    import tempfile

    from goggles.transport.buses import ZmqEndpoints

    load_average = os.getloadavg()[0]
    ports = [_free_port() for _ in range(3)]
    endpoints = ZmqEndpoints(*(f"tcp://127.0.0.1:{p}" for p in ports))
    domain = random.randint(20, 220)
    run_file = f"""
[run]
mode = "live"
[lcm]
enabled = false
[zmq]
publish = "{endpoints.publish}"
inputs = "{endpoints.inputs}"
control = "{endpoints.control}"
[ros2]
enabled = {"true" if transport == "ros2" else "false"}
domain_id = {domain}
[[vehicle]]
name = "quad0"
start = [-4.0, 0.0, 1.5, 0.0]
[[camera]]
vehicle = "quad0"
name = "stereo"
width = {width}
height = {height}
vfov_deg = 60.0
baseline = 0.32
rate = {rate}
outputs = ["depth"]
max_depth = 50.0
"""
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/latency.toml"
        with open(path, "w") as f:
            f.write(run_file)
        command = [sys.executable, "-m", "goggles.cli", "run", path, "--backend", backend]
        if device:
            command += ["--device", device]
        if recorded is not None:
            command.append("--recorded" if recorded else "--no-recorded")
        # The engine's status lines and errors come through a pipe, read as they come (a pipe not read
        # fills in minutes and stops the engine); a bench killed outright breaks it, and the engine ends.
        engine = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        said = _Said(engine.stderr)
        client = _DdsClient(domain) if transport == "ros2" else _ZmqClient(endpoints)
        try:
            sent, arrived = _drive(client, engine, rate, seconds, said)
        finally:
            client.close()
            engine.terminate()
            engine.wait(30)
        lines = [line for line in said.lines() if line.startswith("t=")]
    latencies = [max(both.values()) - sent[utime] for utime, both in arrived.items() if len(both) == 2]
    if not latencies:
        raise GogglesError("no stereo frame came back from the engine")
    return LatencyBench(
        p50_ms=float(np.percentile(latencies, 50) * 1e3),
        p99_ms=float(np.percentile(latencies, 99) * 1e3),
        frames=len(latencies),
        sent=len(sent),
        width=width,
        height=height,
        embree_ms=_embree_stereo_ms(width, height),
        engine_status=lines[-1] if lines else None,
        load_average=load_average,
    )


class _ZmqClient:
    """The latency bench's side of ZeroMQ: poses out, the stereo depth images' pose stamps in."""

    def __init__(self, endpoints):
        from goggles.client import Client

        self._client = Client(endpoints)
        self._client.subscribe("quad0/stereo_left/depth", "quad0/stereo_right/depth")

    def send_pose(self, position) -> int:
        return self._client.send_pose("quad0", position, [1.0, 0.0, 0.0, 0.0])

    def receive(self, timeout: float):
        item = self._client.receive(timeout=timeout)
        return None if item is None else (item[0], item[1].pose_utime)

    def close(self) -> None:
        self._client.close()


class _DdsClient:
    """The latency bench's side of ROS 2: PoseStamped out, the depth Images' stamps in (what a ROS 2
    node would do; goggles' own DDS types, the same definitions any ROS 2 node has)."""

    def __init__(self, domain: int):
        import queue

        from cyclonedds.core import Listener
        from cyclonedds.domain import Domain, DomainParticipant
        from cyclonedds.pub import DataWriter
        from cyclonedds.qos import Policy, Qos
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        from goggles.transport.ros2 import LOCALHOST_ONLY_CONFIG
        from goggles.transport.ros2 import types as T

        self._T = T
        self._domain = Domain(domain, LOCALHOST_ONLY_CONFIG)  # as the engine: this machine only
        self._participant = DomainParticipant(domain)
        sensor = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(5))
        self._writer = DataWriter(
            self._participant, Topic(self._participant, "rt/goggles/quad0/pose", T.PoseStamped), qos=sensor
        )
        self._arrivals: queue.Queue = queue.Queue()
        self._readers = []
        for side in ("left", "right"):
            listener = Listener(on_data_available=lambda reader, side=side: self._take(reader, side))
            topic = Topic(self._participant, f"rt/goggles/quad0/stereo/{side}/image_depth", T.ImageStamp)
            self._readers.append(DataReader(self._participant, topic, qos=sensor, listener=listener))

    def _take(self, reader, side: str) -> None:
        for image in reader.take(N=16):
            stamp = image.header.stamp
            self._arrivals.put((side, stamp.sec * 1_000_000 + stamp.nanosec // 1000))

    def send_pose(self, position) -> int:
        T = self._T
        utime = time.time_ns() // 1000
        stamp = T.Time(utime // 1_000_000, (utime % 1_000_000) * 1000)
        point = T.Point(*(float(v) for v in position))
        self._writer.write(T.PoseStamped(T.Header(stamp, "map"), T.Pose(point, T.Quaternion(0.0, 0.0, 0.0, 1.0))))
        return utime

    def receive(self, timeout: float):
        import queue

        try:
            return self._arrivals.get(timeout=max(timeout, 0.0)) if timeout > 0 else self._arrivals.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        self._readers.clear()
        self._participant = None


def _embree_stereo_ms(width: int, height: int) -> float | None:
    """Median time of bare Embree tracing the latency run's stereo rays (start pose, default scene)."""
    from goggles.frames import camera_pose_from_body, transform
    from goggles.paths import default_scene
    from goggles.render import CameraModel, stereo_right_offset
    from goggles.render.embree import EmbreeTracer, embree_available
    from goggles.scene import load_static_scene

    if not embree_available():
        return None
    tracer = EmbreeTracer(load_static_scene(default_scene()))
    left = camera_pose_from_body(transform([-4.0, 0.0, 1.5], [1.0, 0.0, 0.0, 0.0]))
    camera = CameraModel.from_fov(width, height, 60.0, max_depth=50.0)
    rays_C = camera.ray_directions().reshape(-1, 3)
    poses = (left, left @ stereo_right_offset(0.32))
    origins = np.concatenate([np.broadcast_to(T[:3, 3], rays_C.shape) for T in poses]).astype(np.float32)
    directions = np.concatenate([rays_C @ T[:3, :3].T for T in poses]).astype(np.float32)
    times = []
    for _ in range(31):
        start = time.perf_counter()
        tracer.trace(origins, directions)
        times.append(time.perf_counter() - start)
    tracer.close()
    return float(np.median(times[1:]) * 1e3)


#: Seconds of poses sent before the timed ones: the engine's first frames from fresh poses load
#: modules and record their work (CUDA graphs), a start-up cost paid once per run, not per frame.
WARMUP_S = 1.0


class _Said:
    """What a child process writes to a pipe, read on a thread of its own as it comes."""

    def __init__(self, pipe):
        import threading

        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._lines.extend, args=(pipe,), daemon=True)
        self._reader.start()

    def lines(self) -> list[str]:
        """The non-empty lines so far (all of them once the child has ended)."""
        self._reader.join(timeout=5.0)
        return [line.strip() for line in list(self._lines) if line.strip()]


def _drive(client, engine, rate: float, seconds: float, said: _Said):
    """Send poses at ``rate`` (after the engine answers and ``WARMUP_S`` of poses not timed) and
    collect arrival times by pose utime (``client``: ``send_pose(position) -> utime``,
    ``receive(timeout) -> (channel, pose utime) | None``); ``said``: what the engine wrote."""
    sent: dict[int, float] = {}
    arrived: dict[int, dict[str, float]] = {}

    def collect(timeout: float) -> None:
        item = client.receive(timeout=timeout)
        while item is not None:
            now = time.perf_counter()
            channel, pose_utime = item
            if pose_utime in sent:
                arrived.setdefault(pose_utime, {})[channel] = now
            item = client.receive(timeout=0.0)

    # Wait for the engine to start (it renders from its start pose until poses arrive).
    deadline = time.perf_counter() + 120
    while client.receive(timeout=0.5) is None:
        if engine.poll() is not None or time.perf_counter() > deadline:
            lines = said.lines()
            raise GogglesError(f"the engine did not start: {lines[-1] if lines else 'it said nothing'}")
    period = 1.0 / rate
    start = time.perf_counter()
    k = 0
    while time.perf_counter() - start < WARMUP_S + seconds:
        position = [-4.0 + 0.5 * np.sin(0.5 * k * period), 0.3 * np.cos(0.7 * k * period), 1.5]
        utime = client.send_pose(position)
        if time.perf_counter() - start >= WARMUP_S:
            sent[utime] = time.perf_counter()
        k += 1
        next_send = start + k * period
        while (remaining := next_send - time.perf_counter()) > 0:
            collect(remaining)
    collect(0.5)
    return sent, arrived


@dataclass(frozen=True)
class DatasetBench:
    """Result of ``bench_dataset``: rendered frames per second of the same jobs with each worker count."""

    frames_per_s: dict[int, float]
    jobs: int
    frames: int

    def speedup(self, workers: int) -> float:
        return self.frames_per_s[workers] / self.frames_per_s[min(self.frames_per_s)]


def bench_dataset(
    *, jobs: int = 8, workers: tuple[int, ...] = (1, 2), width: int = 320, height: int = 240, flight_s: float = 2.0
) -> DatasetBench:
    """Render the same ``jobs`` dataset jobs (one recorded flight of the default scene, a seed each) on a
    local Ray cluster with each number of workers; workers are started and have built their world
    (one warm-up job each) before the clock starts, so the figure is the steady state a long dataset
    runs at."""
    import tempfile

    import ray

    from goggles.engine import Engine
    from goggles.logs.dataset import Job, SceneWorker
    from goggles.logs.record import Recorder
    from goggles.paths import default_run
    from goggles.rig.runfile import load_run_config

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        text = Path(default_run()).read_text(encoding="utf-8")
        home = Path(default_run()).parent

        def absolute(match: re.Match) -> str:  # the run's files stay where they are; its copy moves
            key, value = match.group(1), match.group(2)
            return f'{key} = "{value if Path(value).is_absolute() else (home / value).as_posix()}"'

        text = re.sub(r'^(scene|file|mesh|calibration) = "([^"]+)"', absolute, text, flags=re.MULTILINE)
        rig = folder / "rig.toml"
        rig.write_text(text.replace("width = 320", f"width = {width}").replace("height = 240", f"height = {height}"))
        flight = folder / "flight.mcap"
        recorder = Recorder(flight, metadata={"run_file": rig.read_text(encoding="utf-8"), "run_file_path": str(rig)})
        config = dataclasses.replace(load_run_config(rig), zmq=None, lcm_url=None, scale=None, max_scale=1e9)
        engine = Engine(config, recorder=recorder)
        engine.run(duration=flight_s)
        engine.close()
        recorder.close()
        ray.init(num_cpus=max(workers), include_dashboard=False, log_to_driver=False)
        try:
            actor = ray.remote(num_cpus=1)(SceneWorker)
            rates, frames = {}, 0
            for n in workers:
                output = folder / f"out{n}"
                output.mkdir()
                pool = [actor.remote(str(output), None) for _ in range(n)]
                warm = [Job(str(flight), str(rig), None, 1000 + i) for i in range(n)]
                ray.get([worker.render.remote(job) for worker, job in zip(pool, warm)])
                batch = [Job(str(flight), str(rig), None, seed) for seed in range(jobs)]
                start = time.perf_counter()
                rows = list(ray.util.ActorPool(pool).map_unordered(lambda w, job: w.render.remote(job), batch))
                elapsed = time.perf_counter() - start
                frames = sum(row.get("frames", 0) for row in rows)
                if frames == 0:  # a flight shorter than a camera frame, or every job failed
                    failed = [row["error"] for row in rows if row.get("status") != "done"]
                    why = failed[0] if failed else "make it at least a camera frame long"
                    raise ConfigError(f"a flight of {flight_s:g} s rendered no frames: {why}")
                rates[n] = frames / elapsed
                for worker in pool:
                    ray.kill(worker)
        finally:
            ray.shutdown()
    return DatasetBench(rates, jobs, frames)


@dataclass(frozen=True)
class LidarBench:
    """Result of ``bench_lidar``: time per scan, wall and CPU (all threads)."""

    model: str
    points: int
    wall_ms: float
    cpu_ms: float
    backend: str
    threads: int
    embree_ms: float | None
    """The peer: bare Embree finding the triangle each of the same rays hits (one thread; None on CUDA
    or without embreex), timed in the same run."""


def bench_lidar(
    model_name: str = "os1-64", *, scans: int = 50, backend: str = "auto", device=None, threads: int | None = 1
) -> LidarBench:
    """Scan the default scene from its viewpoint ``scans`` times, the sensor turning all the while (a
    scan from one pose of ``bench_views`` to the next, each point from its own pose, as the engine
    scans a flying vehicle's LiDAR); wall and process CPU time per scan (the renderer's threads included)."""
    from goggles.paths import default_scene
    from goggles.render.embree import embree_available, tracer_for
    from goggles.scene import load_static_scene
    from goggles.sensors.lidar import lidar_model
    from goggles.world import DeviceScene

    scene = load_static_scene(default_scene())
    lidar = parts.lidar(DeviceScene(scene, device), lidar_model(model_name), backend=backend, threads=threads)
    poses = bench_views(scene.view if scene.view is not None else np.eye(4), scans + 1)
    lidar.scan(poses[0], poses[1])  # warm-up
    wall, cpu = time.perf_counter(), time.process_time()
    for start, end in zip(poses[:-1], poses[1:]):
        lidar.scan(start, end)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    points = lidar.model.points_per_scan
    r = lidar.renderer
    embree_ms = None
    if r.device.is_cpu and embree_available():  # the peer: the same rays, Embree alone
        tracer = tracer_for(r.scene)  # the renderer's own Embree scene when it traces with Embree
        directions = np.ascontiguousarray(lidar.model.rays(0)[0].reshape(-1, 3) @ poses[0][:3, :3].T, np.float32)
        origins = np.ascontiguousarray(np.broadcast_to(poses[0][:3, 3], directions.shape), np.float32)
        reach = np.full(len(directions), lidar.model.max_range, np.float32)
        embree_ms = _time(lambda: tracer.faces(origins, directions, reach), 0.5) * 1e3
    result = LidarBench(model_name, points, wall / scans * 1e3, cpu / scans * 1e3, r.backend, r.threads, embree_ms)
    lidar.close()
    return result


@dataclass(frozen=True)
class EnvsBench:
    """Result of ``bench_envs``: batched learning-environment throughput against single environments."""

    envs: int
    steps_per_s: float
    """Environment steps per second (all environments together): one camera frame each."""
    single_steps_per_s: float
    """The same work done by one single-environment instance, stepped N times per batch step."""
    memory_per_env_kb: float
    """Device memory the batch allocated (arrays it owns, the shared scene apart), per environment."""
    memory_growth_kb: float
    """Process memory (CPU) or Warp's device memory (CUDA) gained over the timed steps."""
    device: str
    recorded: bool
    """Whether the steps replayed recordings of their device work (the observation's included)."""
    looks_steps_per_s: float | None = None
    """With ``randomization``: the same batch without it, taking turns with the batch that draws it (a
    look per camera costs this ratio: ``steps_per_s / looks_steps_per_s``)."""

    @property
    def vs_single(self) -> float:
        return self.steps_per_s / self.single_steps_per_s


def owned_device_bytes(root, shared=()) -> int:
    """Bytes of the Warp allocations reachable from ``root``'s attributes (arrays, structs of arrays,
    and the objects, lists and dicts holding them), each counted once; views and ``shared`` objects
    (a scene every environment uses) are not counted."""
    import warp as wp

    seen, total, stack = {id(s) for s in shared}, 0, [root]
    while stack:
        value = stack.pop()
        if id(value) in seen or value is None or isinstance(value, (str, bytes, int, float, bool, type)):
            continue
        seen.add(id(value))
        if isinstance(value, wp.array):
            total += value.capacity if value.deleter is not None else 0  # views own nothing
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif hasattr(value, "_cls") and hasattr(value._cls, "vars"):  # a Warp struct instance
            stack.extend(getattr(value, name) for name in value._cls.vars)
        elif type(value).__module__.startswith("goggles."):
            stack.extend(vars(value).values() if hasattr(value, "__dict__") else ())
    return total


def _memory_kb(device) -> float:
    """Warp's device memory in use on CUDA, the process's resident memory on the CPU, kB."""
    import warp as wp

    if device.is_cuda:
        return wp.get_mempool_used_mem_current(device) / 1024.0
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024.0


#: Turns the batch and the single environment take in ``bench_envs``.
ROUNDS = 5


def bench_envs(
    envs: int,
    *,
    width: int,
    height: int,
    steps: int = 200,
    device: str | None = None,
    outputs: tuple[str, ...] = ("depth",),
    backend: str = "auto",
    recorded: bool | None = None,
    randomization=None,
    progress=None,
) -> EnvsBench:
    """Step ``envs`` hovering vehicles with cameras of ``width`` x ``height`` (observing ``outputs``)
    in the default scene for ``steps`` steps, and one environment alone for ``steps`` steps (at least
    20), taking turns in ``ROUNDS`` (both with the renderer ``backend``, replaying recorded steps or
    not: ``DroneVectorEnv``'s ``recorded``). With ``randomization`` (a ``Randomization``) the batch draws
    it, and the same batch without it takes turns with the two (its rate: ``looks_steps_per_s``)."""
    import torch
    import warp as wp

    from goggles.envs import DroneVectorEnv
    from goggles.paths import default_scene
    from goggles.render import CameraModel
    from goggles.scene import load_static_scene
    from goggles.world import DeviceScene

    scene = DeviceScene(load_static_scene(default_scene()), device)
    camera = CameraModel.from_fov(width, height, 80.0)

    def made(n: int, drawn=None):
        env = DroneVectorEnv(
            n,
            camera=camera,
            camera_outputs=outputs,
            scene=scene,
            device=str(scene.device),
            backend=backend,
            recorded=recorded,
            randomization=drawn,
        )
        env.reset(seed=0)
        return env, torch.zeros((n, 4), device=env.torch_device)

    def timed(env, action, count: int, done: int, total: int) -> float:
        start = time.perf_counter()
        for k in range(count):
            env.step(action)
            if progress is not None and (done + k) % 50 == 0:
                progress(env.num_envs, done + k, total)
        wp.synchronize_device(scene.device)
        return time.perf_counter() - start

    batch, single = made(envs, randomization), made(1, randomization)
    plain = made(envs) if randomization is not None else None
    for env, action in [batch, single, *([plain] if plain else [])] * 2:  # warm, taking turns as the timed steps will
        for _ in range(3):
            env.step(action)
    wp.synchronize_device(scene.device)
    gc.collect()  # the set-up's garbage freed now, not among the timed steps (its pages reused there)
    first = _memory_kb(scene.device)
    owned = owned_device_bytes(batch[0], shared=[scene])
    # The two take turns, so that a change in the machine's load falls on both alike.
    single_steps, batch_time, single_time, plain_time = max(20, steps), 0.0, 0.0, 0.0
    for r in range(ROUNDS):
        b0, b1 = steps * r // ROUNDS, steps * (r + 1) // ROUNDS
        s0, s1 = single_steps * r // ROUNDS, single_steps * (r + 1) // ROUNDS
        batch_time += timed(*batch, b1 - b0, b0, steps)
        single_time += timed(*single, s1 - s0, s0, single_steps)
        if plain is not None:
            plain_time += timed(*plain, b1 - b0, b0, steps)
    gc.collect()
    growth = _memory_kb(scene.device) - first
    replayed = batch[0]._score_recorded.recordings > 0
    for env, _ in [batch, single, *([plain] if plain else [])]:
        env.close()
    batched, alone = envs * steps / batch_time, single_steps / single_time
    looks = envs * steps / plain_time if plain is not None else None
    return EnvsBench(envs, batched, alone, owned / 1024.0 / envs, growth, str(scene.device), replayed, looks)
