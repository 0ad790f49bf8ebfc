"""The rig: what a run flies and senses, built from its run file, without buses or a clock.

The world (the scene, the course's gates, the props a run may spawn, its people, each vehicle's body),
the vehicles (a fleet of simulators per airframe, stepped as one swarm, or bodies posed from outside
with their contact test), the camera groups with their sensor models, the range sensors and the
LiDARs. The engine drives a rig over time; viewers read what it holds (``viewed_actors``,
``sensor_pose``, ``range_beams``) and never call into the engine.
"""

from __future__ import annotations

import logging

import numpy as np

from goggles.clock import ClockMode
from goggles.dynamics import PosedContacts, Swarm
from goggles.errors import ConfigError
from goggles.rig import parts
from goggles.rig.cameras import camera_groups
from goggles.rig.runfile import RunConfig, check_simulated_starts
from goggles.rig.vehicles import body_shapes, drawn_airframes, make_vehicles, viewed_vehicles
from goggles.scene.bvh import load_bvh
from goggles.scene.gates import load_course
from goggles.sensors.draws import stream_of
from goggles.sensors.ranges import RangeSensor
from goggles.world.build import World, build_world
from goggles.world.crowd import BUILD_INTERVAL_S, MAX_AVATARS, Crowd
from goggles.world.props import MAX_PROPS, Props

log = logging.getLogger(__name__)


class Rig:
    """Every part of a run, built once from its configuration.

    Args:
        config: the run file's contents (``goggles.rig.runfile.RunConfig``).
        device: Warp device of the world and its sensors (and of physics, unless ``physics_device``).
        physics_device: Warp device of the simulated vehicles, with its own copy of the static scene and
            the gates to collide with (people, whose meshes live on the render device, are not
            obstacles then); None: the render device's, sharing its world.
        backend: primary-ray tracer of the cameras and LiDARs (``goggles.render.BACKENDS``).
        recorded: replay recordings of the physics steps and of each camera group's frame
            (``goggles.runtime.recorded_work``); None: on CUDA.
        world: a ``goggles.world.World`` built for this run's scene, course and vehicles
            (``build_run_world``) to reuse instead of building one (a dataset worker keeps it).
        threads: CPU threads of each camera group's renderer (None: one per core; a batch of replays
            running a process per core gives 1).

    Its vehicles are simulated in sim and lockstep mode, posed from outside (live, replay) otherwise.
    Closing it (or leaving its ``with``) frees its renderers, simulators and threads.
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        device=None,
        physics_device=None,
        backend: str = "auto",
        recorded: bool | None = None,
        world=None,
        threads: int | None = None,
    ):
        self.config = config
        self.vehicles, self.fleets, self.groups, self.lidars = {}, [], [], []
        try:
            self._build(config, device, physics_device, backend, recorded, world, threads)
        except BaseException:  # what was started (a firmware's process, a renderer's threads) stops with it
            self.close()
            raise

    def _build(self, config: RunConfig, device, physics_device, backend: str, recorded, world, threads) -> None:
        self.simulated = simulated = config.mode not in (ClockMode.LIVE, ClockMode.REPLAY)
        if simulated:
            check_simulated_starts(config)
        self.airframes = drawn_airframes(config.vehicles)  # loaded once: a missing one is said once
        bodies = body_shapes(config.vehicles, self.airframes)
        if world is None:
            world = build_run_world(config, device, bodies)
        else:
            shapes = [world.scene.shapes[i] for i in world.bodies]
            if [(s.name, s.segmentation) for s in shapes] != [(b.name, b.segmentation) for b in bodies]:
                raise ConfigError("the world given was built for other vehicles: build_run_world(config, ...)")
            world.reset()
        self.built = world
        self.world = scene = world.scene
        self.clips = [(a, load_bvh(a.bvh)) for a in config.avatars]
        real_time = config.mode in (ClockMode.SIM, ClockMode.LIVE)  # elsewhere, bytes must not depend on speed
        self.crowd = Crowd(
            scene,
            world.gate_poses,
            keep={a.name for a, _ in self.clips},
            build_interval=BUILD_INTERVAL_S * real_time,
            bodies=world.bodies,
        )
        self.props = Props(self.crowd, world)
        self.physics_world = scene
        if physics_device is not None and not simulated:
            log.warning("the physics device is not used: %s mode simulates no vehicle", config.mode.name.lower())
        elif physics_device is not None:
            self.physics_world = world.on(physics_device).scene
            log.info("physics on %s, rendering on %s: people are not obstacles", self.physics_world.device, device)
        self.vehicles, self.fleets = make_vehicles(
            config.vehicles,
            simulate=simulated,
            world=self.physics_world,
            dt=1.0 / config.physics_rate,
            seed=config.seed,
            collisions=config.collisions,
            recorded=recorded,
            wind=config.wind,
        )
        self.swarm = Swarm([fleet.sim for fleet in self.fleets])
        self.posed = None if simulated else PosedContacts([self.airframes[v.preset] for v in config.vehicles], scene)
        """The contact test of vehicles posed from outside (live, replay); None when they are simulated."""
        self.groups = camera_groups(
            scene,
            config.cameras,
            config.physics_rate,
            world.beacons,
            config.seed,
            backend=backend,
            recorded=recorded,
            threads=threads,
            looks=config.looks,
            look=config.look,
        )
        self.range_sensors = [
            (c, RangeSensor(scene, c.model, seed=config.seed, stream=stream_of(f"{c.vehicle}/{c.name}")))
            for c in config.range_sensors
        ]
        self.lidars = [
            (
                c,
                parts.lidar(
                    scene, c.model, backend=backend, seed=config.seed, stream=stream_of(f"{c.vehicle}/{c.name}")
                ),
            )
            for c in config.lidars
        ]
        self._viewed_vehicles = None

    # ------------------------------------------------------------------ what viewers read

    @property
    def static(self):
        """The static scene (``goggles.scene.StaticScene``) as loaded: what viewers draw once."""
        return self.built.scene.static

    def viewed_actors(self) -> list:
        """Every gate, prop, person and vehicle as viewers draw them (``ViewedActor``: its mesh and
        where it is now)."""
        if self._viewed_vehicles is None:  # built on the first call: a run without viewers never pays
            cameras = [camera for group in self.groups for camera in group.cameras]
            self._viewed_vehicles = viewed_vehicles(self.config.vehicles, self.airframes, cameras)
        return self.built.viewed_gates() + self.props.viewed() + self.crowd.viewed() + self._viewed_vehicles

    def sensor_pose(self, sensor: str) -> np.ndarray | None:
        """(4, 4) where range sensor or LiDAR ``<vehicle>/<name>`` is in the world now, or None for
        another name: viewers place its readings there (their messages hold the sensor frame's)."""
        for c in (*self.config.lidars, *self.config.range_sensors):
            if f"{c.vehicle}/{c.name}" == sensor:
                return self.vehicles[c.vehicle].pose(self.config.extrapolate) @ c.T_BS
        return None

    def range_beams(self, sensor: str) -> np.ndarray | None:
        """(n, 3) unit beam directions, in its frame and in the order of its readings, of range sensor
        ``<vehicle>/<name>``, or None for another name: viewers draw its readings where they hit."""
        for c in self.config.range_sensors:
            if f"{c.vehicle}/{c.name}" == sensor:
                return c.model.directions().reshape(-1, 3)
        return None

    def scene_boxes(self) -> list:
        """The actors in the world as boxes, for viewers that draw boxes: (name, [(T_WA (4, 4), size
        (3,))]) per gate, prop and person, each its mesh's box where it is now."""
        boxes = []
        for actor in self.viewed_actors():
            if actor.frame != "world":  # a vehicle: it has its own frame on every viewer
                continue
            points = actor.mesh.vertices if actor.vertices is None else actor.vertices
            low, high = points.min(axis=0), points.max(axis=0)
            T = np.array(actor.T_WA, dtype=np.float64)
            T[:3, 3] = T[:3, :3] @ ((low + high) / 2.0) + T[:3, 3]
            boxes.append((actor.name, [(T, high - low)]))
        return boxes

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        for group in self.groups:
            group.renderer.close()
        for _, lidar in self.lidars:
            lidar.close()
        for fleet in self.fleets:
            fleet.sim.close()
        for vehicle in self.vehicles.values():  # flight controllers' SITL processes stop with the rig
            if vehicle.firmware is not None:
                vehicle.firmware.close()
                vehicle.firmware = None

    def __enter__(self) -> Rig:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def build_run_world(config: RunConfig, device=None, bodies: tuple = ()) -> World:
    """The world a run (``RunConfig``) flies in: its scene, and its course's gates (shifted by the
    run's ``perturb`` seed), with room for the avatars a run may bring, the props it may spawn and its
    vehicles' ``bodies`` (``goggles.rig.vehicles.body_shapes``)."""
    course = load_course(config.course) if config.course is not None else None
    if course is not None and config.perturb is not None:
        course = course.perturbed(config.perturb)
    spare = MAX_AVATARS + (MAX_PROPS if config.props else 0) + len(bodies)
    scene = config.scene
    if config.splats:  # the run's own captures join its scene
        from goggles.paths import default_scene
        from goggles.scene import load_static_scene
        from goggles.scene.batch import place_splats

        scene = place_splats(load_static_scene(scene or default_scene()), config.splats, config.source)
    return build_world(
        scene, course=course, device=device, spare_actors=spare, props=config.props, bodies=tuple(bodies)
    )
