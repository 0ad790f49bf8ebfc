"""How viewers draw a multirotor, built from its rotor layout so that every airframe looks like
itself: a body box at the centre, an arm to each rotor hub and a disc of the rotor's radius there,
turned to its thrust axis. The rotors ahead of the centre (+x, body FLU) are red and the others grey,
so the heading reads at a glance. Viewers draw it, and the sensors of a run's other vehicles see it."""

from __future__ import annotations

import numpy as np

from goggles.runtime.signals import signals_held
from goggles.scene.actors import ActorShape, paint
from goggles.scene.assets import MeshPart, part_from_trimesh
from goggles.scene.batch import StaticScene, merge_parts

BODY_RGB, ARM_RGB, FRONT_RGB, BACK_RGB = (0.15, 0.15, 0.15), (0.3, 0.3, 0.3), (0.9, 0.1, 0.1), (0.6, 0.6, 0.6)
#: A vehicle's class id in segmentation images (gates are 10, people 20).
VEHICLE_CLASS = 30


def vehicle_model(name: str, rotor_positions, rotor_axes, rotor_radius: float) -> StaticScene:
    """The model in the body frame (FLU, metres) of a vehicle with rotor hubs at ``rotor_positions``
    (N, 3), thrusting along ``rotor_axes`` (N, 3), of radius ``rotor_radius``."""
    parts = vehicle_parts(name, rotor_positions, rotor_axes, rotor_radius)
    return merge_parts(name, [(part, np.eye(4), 1) for part in parts])


def vehicle_shape(airframe, segmentation: int = VEHICLE_CLASS) -> ActorShape:
    """An airframe's model (``goggles.dynamics.Airframe``) as an actor shape a renderer can place."""
    parts = vehicle_parts(airframe.name, airframe.rotor_positions, airframe.rotor_axes, airframe.rotor_radius)
    return ActorShape(airframe.name, parts, segmentation)


@signals_held()
def vehicle_parts(name: str, rotor_positions, rotor_axes, rotor_radius: float) -> list[MeshPart]:
    """The model's coloured parts in the body frame (``vehicle_model``'s arguments)."""
    import trimesh

    hubs, axes = np.asarray(rotor_positions, float), np.asarray(rotor_axes, float)
    arm = max(float(np.linalg.norm(hubs[:, :2], axis=1).mean()), 1e-3)
    meshes = [(trimesh.creation.box(extents=[0.5 * arm, 0.35 * arm, 0.15 * arm]), BODY_RGB)]
    for hub, axis in zip(hubs, axes):
        reach = float(np.linalg.norm(hub[:2]))
        if reach > 1e-6:
            bar = trimesh.creation.box(extents=[reach, 0.08 * arm, 0.05 * arm])
            T = np.eye(4)
            T[:3, :3] = trimesh.transformations.rotation_matrix(np.arctan2(hub[1], hub[0]), [0, 0, 1])[:3, :3]
            T[:3, 3] = hub / 2.0
            meshes.append((bar.apply_transform(T), ARM_RGB))
        disc = trimesh.creation.cylinder(radius=rotor_radius, height=0.02 * arm, sections=24)
        T = trimesh.geometry.align_vectors([0.0, 0.0, 1.0], axis / np.linalg.norm(axis))
        T[:3, 3] = hub + axis / np.linalg.norm(axis) * 0.04 * arm
        meshes.append((disc.apply_transform(T), FRONT_RGB if hub[0] > 1e-6 else BACK_RGB))
    return [part_from_trimesh(paint(mesh, rgb), f"{name} part {i}") for i, (mesh, rgb) in enumerate(meshes)]
