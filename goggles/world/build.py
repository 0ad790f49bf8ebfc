"""One way to build the world: a static scene on a device, with a course's gates placed as actors and
the IR beacons on their corners. ``goggles render``, ``goggles race`` and the engine all start here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from goggles.scene.batch import StaticScene
from goggles.scene.gates import Course, gate_shape
from goggles.world.device_scene import DeviceScene
from goggles.world.viewed import ViewedActor


@dataclass(frozen=True)
class Beacon:
    id: str
    """``<landmark>/<marker>``, e.g. ``gate3/2``."""
    position: tuple[float, float, float]
    """Metres: in the world, or in the actor's frame when ``actor`` is set."""
    actor: int | None = None
    """Index of the actor instance (``DeviceScene.set_actors`` order) it is attached to."""


@dataclass
class World:
    """What the sensors and vehicles share: the scene on a device and the course in it."""

    scene: DeviceScene
    course: Course | None = None
    gate_poses: np.ndarray = field(default_factory=lambda: np.zeros((0, 4, 4)))
    """(k, 4, 4) world pose of each gate; gate i is actor instance i (and shape i)."""
    beacons: list[Beacon] = field(default_factory=list)
    """The four corner beacons of every gate, ``<gate>/<corner>``, attached to the gate's actor."""
    props: tuple = ()
    """The props a run may spawn (``PropSpec``): its boxes and meshes are shapes after the gates', in
    order; its captures (``splat``) are the scene's splat props, in order."""
    bodies: tuple[int, ...] = ()
    """The shape of each vehicle's body, after the props' (``build_world``'s ``bodies``)."""

    @property
    def device(self):
        return self.scene.device

    def reset(self) -> None:
        """Only the gates placed, where they were built (a world reused by another run): no prop, no
        captured one."""
        self.scene.set_actors(range(len(self.gate_poses)), self.gate_poses)
        if self.scene.splats is not None:
            self.scene.splats.remove_props()

    def on(self, device) -> World:
        """The static scene and the gates again, on ``device`` with BVHs of their own (a simulator's
        collision geometry kept apart from the render device); avatars and props are not copied."""
        return build_world(self.scene.static, course=self.course, device=device)

    def viewed_gates(self) -> list[ViewedActor]:
        """Every gate as viewers draw it: its shape's mesh where it stands."""
        gates = self.course.gates if self.course else ()
        poses = self.gate_poses
        return [ViewedActor(g.name, self.scene.shape_scene(i), T) for i, (g, T) in enumerate(zip(gates, poses))]


def build_world(
    scene: StaticScene | str | Path | None = None,
    *,
    course: Course | None = None,
    device=None,
    spare_actors: int = 0,
    props: tuple = (),
    bodies: tuple = (),
) -> World:
    """Upload ``scene`` (a StaticScene, a scene file or mesh path; None: the built-in arena) to
    ``device`` and place ``course``'s gates in it, leaving room for ``spare_actors`` more instances
    (avatars, props, vehicles); the shapes of ``props`` (``PropSpec``: boxes and meshes; captures are
    splat props) follow the gates', then those of the vehicles' ``bodies`` (``ActorShape``, one per
    vehicle; one object for those that look alike)."""
    if not isinstance(scene, StaticScene):
        from goggles.paths import default_scene
        from goggles.scene import load_static_scene

        scene = load_static_scene(scene or default_scene())
    gates = course.gates if course is not None else ()
    unique = list({id(b): b for b in bodies}.values())  # vehicles sharing a shape object share it here
    meshes = [p for p in props if p.splat is None]
    device_scene = DeviceScene(
        scene,
        device,
        shapes=[*(gate_shape(g.opening, g.name) for g in gates), *(p.shape() for p in meshes), *unique],
        max_actors=max(1, len(gates) + spare_actors),
        splat_props=[(p.splat_cloud(), p.instances) for p in props if p.splat is not None],
    )
    poses = np.array([g.T_WG for g in gates]).reshape(-1, 4, 4)
    device_scene.set_actors(range(len(gates)), poses)
    beacons = [
        Beacon(f"{gate.name}/{k}", tuple(p), actor=i)
        for i, gate in enumerate(gates)
        for k, p in enumerate(gate.beacon_positions_G())
    ]
    first = len(gates) + len(meshes)
    place = {id(b): first + i for i, b in enumerate(unique)}
    return World(device_scene, course, poses, beacons, tuple(props), tuple(place[id(b)] for b in bodies))
