"""The one place each part of a pipeline is constructed: renderers, simulators, LiDARs and firmwares.

Every front door (the engine's rig, the learning environments, ``goggles render``, ``race``, ``fly``,
the benchmarks, the preview) builds its parts here, so what a part needs from the world (the static
scene, its actors, whatever new kind of geometry the world gains) is wired in once, and a change to
how a part is made reaches every mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from goggles.dynamics import MultirotorSim, SimulatorSettings
from goggles.firmware.betaflight import BetaflightSettings, BetaflightSitl, motor_map
from goggles.firmware.link import RC_TIMEOUT_S, FirmwareLink
from goggles.render import Renderer, RenderSettings, Shading
from goggles.sensors.lidar import Lidar, LidarModel, RayTable, lidar_model
from goggles.world import DeviceScene


def renderer(
    scene: DeviceScene,
    cameras: Sequence,
    settings: RenderSettings | None = None,
    *,
    shadow_partner: Sequence[int] | None = None,
) -> Renderer:
    """A renderer of ``cameras`` (``CameraModel``s of one size) in ``scene``: see ``goggles.render.Renderer``."""
    return Renderer(scene, cameras, settings, shadow_partner=shadow_partner)


def simulator(
    airframe,
    count: int = 1,
    settings: SimulatorSettings | None = None,
    *,
    device=None,
    world: DeviceScene | None = None,
) -> MultirotorSim:
    """A batch of ``count`` simulated vehicles of ``airframe``: see ``goggles.dynamics.MultirotorSim``."""
    return MultirotorSim(airframe, count, settings, device=device, world=world)


def lidar(
    scene: DeviceScene,
    model: LidarModel | str,
    *,
    backend: str = "auto",
    threads: int | None = 1,
    seed: int = 0,
    stream: int = 0,
    noise: bool = True,
) -> Lidar:
    """A LiDAR in ``scene``: its rays a camera of the renderer (``goggles.sensors.lidar``). One CPU
    thread by default: a scan's 65,536 rays are too few to share well (two threads were 1.5x faster for
    1.2x the CPU time per scan), and a scan's latency is its 0.1 s sweep anyway."""
    model = lidar_model(model)
    table = RayTable(*model.rays(0)[:1], model.min_range, model.max_range)
    settings = RenderSettings(
        outputs=frozenset({"depth", "rgb"}),
        shading=Shading.LIDAR,
        background_rgb=(0.0, 0.0, 0.0),  # no return: intensity 0
        backend=backend,
        threads=threads,
        shadows=False,
    )
    return Lidar(renderer(scene, [table], settings), model, seed=seed, stream=stream, noise=noise)


def firmware(airframe, settings: BetaflightSettings, hold, *, rc_timeout: float = RC_TIMEOUT_S) -> FirmwareLink:
    """A vehicle's flight-controller firmware (Betaflight's SITL), started and configured, its motors
    mapped to ``airframe``'s rotors; its pilot holds ``hold`` (x, y, z, yaw) until sticks come
    (``goggles.firmware.link``)."""
    motors, props_out = motor_map(airframe.rotor_positions, airframe.rotor_spins)
    sitl = BetaflightSitl(settings, motors, props_out)
    return FirmwareLink(sitl, airframe.min_speed, airframe.max_speed, hold, rc_timeout)
