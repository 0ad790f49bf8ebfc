"""The run's cameras, grouped so that cameras of one size and rate render in one launch.

A stereo camera ``stereo`` becomes ``stereo_left`` and ``stereo_right`` (its right eye at −baseline
along the body y axis, or where a calibrated pair's extrinsics put it), the left one invalidated
where the right one cannot see (the stereo shadow).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from goggles.dynamics.model import period_steps
from goggles.render import CameraModel, Renderer, RenderSettings, Shading
from goggles.render.looks import Look, LooksSpec
from goggles.rig import parts
from goggles.rig.runfile import IMAGE_OUTPUTS, CameraConfig
from goggles.runtime.device_copies import HostMirror, collect
from goggles.runtime.profile import stage
from goggles.runtime.recorded_work import RecordedWork
from goggles.sensors.beacons import BeaconSensor, Detection
from goggles.sensors.camera_noise import CameraNoise
from goggles.sensors.draws import stream_of
from goggles.sensors.events import EventSensor
from goggles.sensors.stereo_depth import StereoDepth
from goggles.world import Beacon, DeviceScene


@dataclass
class Camera:
    vehicle: str
    name: str
    """``stereo_left``, ``stereo_right``, or the configured name of a mono camera."""
    config: CameraConfig
    T_BC: np.ndarray
    """Optical frame in the vehicle's body frame."""
    model: CameraModel
    """Its lens and intrinsics (a calibrated stereo pair's eyes may differ)."""

    @property
    def channel_prefix(self) -> str:
        return f"{self.vehicle}/{self.name}"


@dataclass
class CameraGroup:
    """Cameras of one size and rate, rendered together in one launch."""

    cameras: list[Camera]
    renderer: Renderer
    period_steps: int
    beacons: BeaconSensor | None = None
    """Beacon detections of the group's cameras, when any of them outputs beacons."""
    depth: StereoDepth | None = None
    """How the group's depth cameras measure depth (their ``depth_model``), when any has one."""
    noise: CameraNoise | None = None
    """The group's colour sensors (their ``noise_model``), when any has one."""
    events: EventSensor | None = None
    """The group's event cameras (``outputs = ["events"]``): it renders when their events say."""
    last_render_wall: float = 0.0
    recorded: bool | None = None
    """Replay a recording of each frame's trace, sensor models and copy (``goggles.runtime.recorded_work``; None:
    on CUDA)."""
    _host: HostMirror | None = None
    _poses: np.ndarray | None = None
    _previous_poses: np.ndarray | None = None
    _boxes: np.ndarray | None = None
    """Event cameras: the world's actors' boxes at the last render, and at the one before."""
    _previous_boxes: np.ndarray | None = None
    _carriers: np.ndarray | None = None

    def __post_init__(self):
        enabled = self.recorded if self.renderer.recordable and self.events is None else False
        self._frame = RecordedWork(self._trace_and_measure, self.renderer.device, enabled=enabled)

    @property
    def name(self) -> str:
        """``<vehicle>/<camera>`` of its first camera's configuration (the schedule's name for it)."""
        return self.names[0]

    @property
    def names(self) -> list[str]:
        """``<vehicle>/<camera>`` of each camera configuration it renders (a stereo pair's eyes are one):
        the names its achieved rate is reported under."""
        return list(dict.fromkeys(f"{c.vehicle}/{c.config.name}" for c in self.cameras))

    def due_live(self, now: float, period: float, fresh: bool, pose_utime: int = 0) -> bool:
        """Live mode: render on a fresh pose (at most twice the rate), else every two periods. An
        event camera renders on each pose newer than its last window's end (``pose_utime``, µs), and
        never without one: its windows are the poses' intervals."""
        if self.events is not None:
            window = self.events.window
            return fresh and pose_utime > 0 and (window is None or pose_utime * 1000 > window[1])
        elapsed = now - self.last_render_wall
        return (fresh and elapsed >= 0.5 * period) or elapsed >= 2.0 * period

    def outputs(self) -> set[str]:
        return {o for c in self.cameras for o in c.config.outputs if o in IMAGE_OUTPUTS}

    def next_steps(self, dt: float) -> int:
        """Physics steps (of ``dt`` s) to the group's next render: its period, or, for event cameras,
        the interval their motion, and that of what moves near them, asks for
        (``EventSensor.next_interval``) within their rates. Motion is that between their last two
        renders: their poses, and the boxes of the world's actors (people, props, other vehicles; a
        camera's own vehicle aside), each seen from the camera at its box's nearest point. So a still
        event camera watching a person walk by renders as often as the walk demands; what a replay
        renders again."""
        if self.events is None:
            return self.period_steps
        config = self.cameras[0].config
        motions, others = [(0.0, 0.0)] * len(self.cameras), None
        window = self.events.window
        if self._previous_poses is not None and window is not None and window[1] > window[0]:
            seconds = (window[1] - window[0]) * 1e-9
            motions = [_motion(T0, T1, seconds) for T0, T1 in zip(self._previous_poses, self._poses)]
            others = self._moving_near(seconds)
        interval = self.events.next_interval(self.period_steps * dt, 1.0 / config.min_rate, motions, others)
        return max(self.period_steps, int(interval / dt + 1e-9))

    def _moving_near(self, seconds: float) -> list[list[tuple[float, float]]]:
        """Per camera, (speed m/s, distance m) of each actor that moved between the last two renders
        (its box's farthest-moving corner; the distance to the box's nearest point now). Actors that
        came or went move infinitely fast: the next render comes at the shortest interval."""
        before, now = self._previous_boxes, self._boxes
        if before.shape != now.shape:
            return [[(np.inf, 1.0)]] * len(self.cameras)
        moved = np.abs(now - before).max(axis=(1, 2), initial=0.0) / seconds  # (k,)
        found = []
        for i, T_WC in enumerate(self._poses):
            near = []
            for a in np.flatnonzero(moved > 0.0):
                if self._carriers is not None and a == self._carriers[i]:
                    continue  # its own vehicle's body moves with it
                centre = T_WC[:3, 3]
                away = float(np.linalg.norm(centre - np.clip(centre, now[a, 0], now[a, 1])))
                near.append((float(moved[a]), away))
            found.append(near)
        return found

    def render(
        self,
        T_WC: np.ndarray,
        moving=None,
        T_WA: np.ndarray | None = None,
        carriers: np.ndarray | None = None,
        key: int | None = None,
    ) -> tuple[dict[str, np.ndarray], list[Detection], list[np.ndarray] | None]:
        """Render every camera from its (n, 4, 4) pose. Returns the image outputs any of them publishes,
        (n, H, W[, 3]) each, on the host (copied into memory allocated once, pinned on CUDA, valid until
        the next render), the beacon detections (``BeaconSensor.detect``; ``T_WA``: the actors'
        poses, for beacons on gates), both with one synchronisation, and, for event cameras, each
        one's events since its last render (``EventSensor.events``; None on the first render and for
        other cameras). ``key``: the frame's time, µs (the noise's draw; the events' window's end).

        ``moving(dt)`` gives the (n, 4, 4) poses ``dt`` seconds from the frame's time (dt an (n,)
        array, <= 0), for cameras with an exposure time (motion blur) or a rolling shutter: the last
        row ends its exposure at the frame's time, the first ``readout_s`` earlier. ``carriers``: the
        actor instance carrying each camera (its vehicle's body, which it does not see), -1 none.
        """
        exposure = np.array([c.config.exposure_s for c in self.cameras])
        readout = np.array([c.config.readout_s for c in self.cameras])
        published = self.outputs()
        if key is not None:
            for model in (self.depth, self.noise, self.beacons):
                if model is not None:
                    model.at(key)
        if published and self._host is None:  # the published outputs lie side by side on the device: one copy
            self._host = HostMirror(self.renderer.block(published))
        # Beacons first: their poses go up from pageable memory, which on CUDA waits for the stream,
        # idle now, and behind the frame's work otherwise.
        beacons = self.beacons.launch(T_WC, T_WA, carriers) if self.beacons is not None else None
        if exposure.any() and moving is not None:  # sub-frames summed on the device: run eagerly
            subframes = max(c.config.blur_subframes for c in self.cameras)
            self.renderer.render_exposure(
                moving(-readout - exposure),
                moving(-readout),
                subframes,
                T_open_last_row=moving(-exposure),
                T_close_last_row=moving(np.zeros_like(exposure)),
                carriers=carriers,
            )
            self._measure()
        else:
            if moving is None or not readout.any():
                self.renderer.set_poses(T_WC, carriers=carriers)
            else:
                self.renderer.set_poses(moving(-readout), moving(np.zeros_like(readout)), carriers)
            self._frame(key=self.renderer.trace_key)
        events = None
        if self.events is not None:
            first = self.events.window is None
            self._previous_poses, self._poses = (None if first else self._poses), np.array(T_WC[: len(self.cameras)])
            self._previous_boxes, self._boxes = self._boxes, self.renderer.scene.actor_boxes.copy()
            self._carriers = None if carriers is None else np.array(carriers)
            self.events.update(int(key if key is not None else 0) * 1000)
            events = None if first else self.events.events()
        with stage("copies to the host"):
            collect([m for m in (self._host, beacons) if m is not None])
        detections = self.beacons.read() if self.beacons is not None else []
        if not published:  # beacons or events only
            return {}, detections, events
        start = min(self.renderer.layout[o].offset for o in published)
        images = {output: self.renderer.layout[output].view(self._host.array, start) for output in published}
        return images, detections, events

    def _trace_and_measure(self) -> None:
        """A frame's device work after the poses: recorded on CUDA (``goggles.runtime.recorded_work``)."""
        self.renderer.trace()
        self._measure()

    def _measure(self) -> None:
        """The sensor models on the rendered images, then the published block's copy to the host."""
        with stage("noise models"):
            if self.depth is not None:
                self.depth.apply()
            if self.noise is not None:
                self.noise.apply()
        if self._host is not None:
            with stage("copies to the host"):
                self._host.enqueue()


def _motion(T0: np.ndarray, T1: np.ndarray, seconds: float) -> tuple[float, float]:
    """Speed (m/s) and turn rate (rad/s) of a camera that went from pose ``T0`` to ``T1`` in ``seconds``."""
    cos = np.clip((np.trace(T1[:3, :3] @ T0[:3, :3].T) - 1.0) / 2.0, -1.0, 1.0)
    return float(np.linalg.norm(T1[:3, 3] - T0[:3, 3]) / seconds), float(np.arccos(cos) / seconds)


def _camera_look(looks: LooksSpec, seed: int, look: int, camera: Camera, renderer) -> Look:
    """The world's look ``look`` (stream 0: every camera sees the same sun and colours) with this
    camera's own exposure and gain (its stream: both eyes of a pair share it)."""
    materials, sun = renderer.look_materials, renderer.settings.sun_W
    world = looks.draw(seed, 0, look, materials, sun)
    own = looks.draw(seed, stream_of(f"{camera.vehicle}/{camera.config.name}"), look, materials, sun)
    return dataclasses.replace(world, exposure=own.exposure)


def camera_groups(
    scene: DeviceScene,
    configs,
    physics_rate: float,
    beacons: list[Beacon],
    seed: int,
    backend: str = "auto",
    recorded: bool | None = None,
    threads: int | None = None,
    looks: LooksSpec | None = None,
    look: int = 0,
) -> list[CameraGroup]:
    """Group the configured cameras by size and rate and give each group a renderer (``backend``: the
    primary-ray tracer, ``goggles.render.BACKENDS``; ``threads``: its CPU threads, None one per core)
    that writes only the outputs the group publishes; ``recorded``: replay recorded frames
    (``CameraGroup.recorded``; None: on CUDA); ``looks``: the world's look number ``look`` (one for
    every camera: the sun, sky, albedo, textures, a capture's colour) and each camera's own exposure."""
    by_key: dict[tuple, list[tuple[Camera, int]]] = {}
    for c in configs:  # event cameras render at their own times: a group of their own each
        own = f"{c.vehicle}/{c.name}" if c.events is not None else ""
        cameras = by_key.setdefault((c.model.width, c.model.height, c.rate, own), [])
        if c.baseline is None:
            cameras.append((Camera(c.vehicle, c.eyes[0], c, c.T_BC, c.model), -1))
        else:
            left, right = c.eyes
            cameras.append((Camera(c.vehicle, left, c, c.T_BC, c.model), len(cameras) + 1))
            cameras.append((Camera(c.vehicle, right, c, c.T_BR, c.right), -1))
    groups = []
    for (_, _, rate, own), members in by_key.items():
        models = [m.model for m, _ in members]
        published = {o for m, _ in members for o in m.config.outputs if o in IMAGE_OUTPUTS}
        rendered = published | ({"rgb", "range"} if own else set())  # an event camera's light and reach
        streams = [stream_of(m.channel_prefix) for m, _ in members]  # each eye's noise its own
        renderer = parts.renderer(
            scene,
            models,
            RenderSettings(
                shading=Shading.SUN if "rgb" in rendered else Shading.NONE,
                outputs=rendered,
                backend=backend,
                threads=threads,
                looks=looks is not None and "rgb" in rendered,
            ),
            shadow_partner=[p for _, p in members],
        )
        if looks is not None and "rgb" in rendered:
            renderer.set_looks([_camera_look(looks, seed, look, m, renderer) for m, _ in members], looks.textures)
        detector = None
        if any("beacons" in m.config.outputs for m, _ in members):
            detector = BeaconSensor(scene, beacons, models, seed=seed, streams=streams)
        depth = None
        if any(m.config.depth_model is not None for m, _ in members):
            models = [m.config.depth_model for m, _ in members]
            baselines = [m.config.baseline for m, _ in members]
            depth = StereoDepth(models, renderer, baselines, seed=seed, streams=streams)
        noise = None
        if "rgb" in rendered and any(m.config.noise_model is not None for m, _ in members):
            noise = CameraNoise([m.config.noise_model for m, _ in members], renderer, seed=seed, streams=streams)
        name = f"camera {members[0][0].vehicle}/{members[0][0].config.name}"
        events = None
        if own:  # its fastest rate sets the shortest interval, in whole steps
            events = EventSensor([m.config.events for m, _ in members], renderer, seed=seed, streams=streams)
            period = max(1, int(physics_rate / rate + 1e-9))
        else:
            period = period_steps(physics_rate, rate, name)
        cameras = [m for m, _ in members]
        groups.append(CameraGroup(cameras, renderer, period, detector, depth, noise, events, recorded=recorded))
    return groups
