"""The people in the world: tracked skeletons as skinned avatars placed beside the gates and props,
and then the vehicles' bodies, which every sensor but their own sees.

Skeletons arrive as inputs (mocap, recordings) or from BVH clips; the newest pose per person waits
until a camera needs the world, so a 240 Hz mocap stream costs one skinning per rendered frame.
The crowd is bounded: at most ``MAX_AVATARS`` people, one new avatar built per update and, in real
time, per ``BUILD_INTERVAL_S`` of wall time (building one costs tens of milliseconds), and an avatar
whose skeleton is silent for ``AVATAR_TIMEOUT_S`` is removed, its shape slot reused by the next one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from goggles.clock import came_late
from goggles.errors import ConfigError, GogglesError
from goggles.runtime.progress import load_kernels
from goggles.scene import avatar as skinning
from goggles.scene.avatar import SkeletonPose, SkinnedAvatar, avatar_shape, build_avatar_mesh
from goggles.world.device_scene import DeviceScene
from goggles.world.viewed import ViewedActor

log = logging.getLogger(__name__)

#: Most skeletons shown as avatars at once.
MAX_AVATARS = 8
#: An avatar whose skeleton has not come for this long (s of the caller's clock) is removed.
AVATAR_TIMEOUT_S = 5.0
#: Skeletons remembered as refused (no avatar could be built for them), and warnings said once.
MAX_REFUSED = 64
#: Wall time between two new avatars: building one takes tens of milliseconds, and a crowd walking
#: in at once must not pile those into one stall of the outputs.
BUILD_INTERVAL_S = 0.1


@dataclass
class Avatar:
    skinned: SkinnedAvatar
    shape: int
    last: SkeletonPose | None = None
    heard: float = 0.0
    """When its skeleton last came (the caller's clock, s)."""


class Crowd:
    """Avatars in ``scene``, placed after the actor instances that are not people (the gates, then
    the props: ``set_fixed``), and the vehicles' bodies after them (``place_vehicles``); the crowd
    places every instance. Vehicles collide with the gates, props and people (the scene's
    ``obstacles``), not with each other.

    Args:
        scene: the world on the device.
        fixed_poses: (k, 4, 4) poses of the actors that are not people at start; instance i is shape i.
        keep: names never removed for silence (BVH clips, posed on every update).
        build_interval: wall seconds between two new avatars (0 where the result must not depend on
            the machine's speed: lockstep, replay).
        bodies: the shape of each vehicle's body (``place_vehicles`` gives their poses).
    """

    def __init__(
        self,
        scene: DeviceScene,
        fixed_poses: np.ndarray,
        keep: set[str] = frozenset(),
        build_interval: float = BUILD_INTERVAL_S,
        bodies: tuple[int, ...] = (),
    ):
        self.scene = scene
        self.bodies = tuple(bodies)
        self._body_poses: np.ndarray | None = None
        self.fixed_poses = np.asarray(fixed_poses).reshape(-1, 4, 4)
        self.fixed_shapes = list(range(len(self.fixed_poses)))
        self.keep = set(keep)
        self.avatars: dict[str, Avatar] = {}
        self._pending: dict[str, SkeletonPose] = {}
        self._newest_utime: dict[str, int] = {}
        self._refused: dict[str, tuple[str, ...]] = {}  # skeletons no avatar could be built for, by name
        self._told: set[tuple[str, str]] = set()
        self._free_shapes: list[int] = []
        self.build_interval = build_interval
        self._last_build = -float("inf")
        load_kernels(skinning, scene.device)  # compiled now, not when the first person walks in

    def offer(self, name: str, pose: SkeletonPose, utime: int = 0) -> bool:
        """Keep ``pose`` (stamped ``utime`` µs, 0: no time) as the newest of ``name``; False (ignored)
        if the crowd is full of others. A late copy (``clock.came_late``: a bridge sends on both buses)
        is only heard: kept, it would move the person back a frame."""
        known = name in self.avatars or name in self._pending
        if not known and len(self.avatars.keys() | self._pending.keys()) >= MAX_AVATARS:
            return False
        if came_late(utime, self._newest_utime.get(name, 0)):
            return True
        self._newest_utime[name] = utime
        self._pending[name] = pose
        return True

    @property
    def busy(self) -> bool:
        return bool(self._pending or self.avatars)

    def update(self, now: float) -> None:
        """Skin every avatar whose skeleton moved (creating at most one new one), remove the silent
        ones, and re-place the actors if anything changed."""
        changed = bool(self._pending)
        waiting: dict[str, SkeletonPose] = {}
        created = time.monotonic() - self._last_build < self.build_interval  # (as if) one was just built
        for name, pose in self._pending.items():
            avatar = self.avatars.get(name)
            if avatar is not None and pose.bones != avatar.skinned.bones:
                self._tell_once(name, "changed its bones; its avatar keeps the first ones")
                continue
            if avatar is None and created:
                waiting[name] = pose
                continue
            if avatar is None:
                if self._refused.get(name) == pose.bones:
                    continue
                created = True
                try:
                    avatar = self.avatars[name] = self._build(name, pose)
                except GogglesError as exc:  # this person is not shown; the run goes on
                    self._refuse(name, pose.bones, str(exc))
                    continue
                finally:
                    self._last_build = time.monotonic()
            self.scene.set_shape_bounds(avatar.shape, avatar.skinned.pose(pose))
            avatar.last = pose
            avatar.heard = now
        self._pending = waiting
        for name in [n for n, a in self.avatars.items() if n not in self.keep and now - a.heard > AVATAR_TIMEOUT_S]:
            log.info("avatar %s removed: no skeleton for %.0f s", name, AVATAR_TIMEOUT_S)
            self._free_shapes.append(self.avatars.pop(name).shape)
            self._newest_utime.pop(name, None)
            changed = True
        if changed:
            self._place()

    def set_fixed(self, shapes, poses: np.ndarray) -> None:
        """The actors that are not people, (k,) shape indices and (k, 4, 4) poses, placed now (kept
        only if the scene takes them: ``ConfigError`` otherwise)."""
        shapes, poses = list(shapes), np.asarray(poses).reshape(-1, 4, 4)
        self._place(shapes, poses)
        self.fixed_shapes, self.fixed_poses = shapes, poses

    def place_vehicles(self, poses: np.ndarray) -> None:
        """Place the vehicles' bodies at ``poses`` (one (4, 4) pose each, in ``bodies`` order)."""
        poses = np.asarray(poses, dtype=np.float64).reshape(-1, 4, 4)
        if len(poses) != len(self.bodies):
            raise ConfigError(f"{len(poses)} poses for {len(self.bodies)} vehicle bodies")
        if self._body_poses is None or not np.array_equal(poses, self._body_poses):
            self._body_poses = poses
            self._place()

    def vehicle_instances(self) -> np.ndarray:
        """(vehicles,) the instance index of each vehicle's body, -1 before ``place_vehicles``."""
        if self._body_poses is None:
            return np.full(len(self.bodies), -1)
        return len(self.fixed_shapes) + len(self.avatars) + np.arange(len(self.bodies))

    def _place(self, shapes=None, poses=None) -> None:
        shapes = self.fixed_shapes if shapes is None else shapes
        poses = self.fixed_poses if poses is None else poses
        people = [a.shape for a in self.avatars.values()]
        obstacles = len(shapes) + len(people)
        bodies = self._body_poses if self._body_poses is not None else np.zeros((0, 4, 4))
        placed = np.concatenate([poses, np.repeat(np.eye(4)[None], len(people), axis=0), bodies])
        self.scene.set_actors([*shapes, *people, *self.bodies[: len(bodies)]], placed, obstacles=obstacles)

    def _refuse(self, name: str, bones: tuple[str, ...], why: str) -> None:
        """Say once that ``name``'s skeleton cannot be an avatar, and try again only when its bones
        change (a stream of it comes at the mocap rate); at most ``MAX_REFUSED`` names are kept."""
        if len(self._refused) >= MAX_REFUSED:
            self._refused.pop(next(iter(self._refused)))
        self._refused[name] = bones
        self._newest_utime.pop(name, None)  # (kept for people shown, and those waiting to be)
        self._tell_once(name, f"is not shown: {why}")

    def _tell_once(self, name: str, what: str) -> None:
        if (name, what) not in self._told and len(self._told) < MAX_REFUSED:
            self._told.add((name, what))
            log.warning("skeleton %.64s %s", name, what)

    def _build(self, name: str, pose: SkeletonPose) -> Avatar:
        mesh = build_avatar_mesh(pose)
        shape = avatar_shape(name, mesh)
        if self._free_shapes:
            index = self.scene.replace_shape(self._free_shapes.pop(), shape)
        else:
            index = self.scene.add_shape(shape)
        log.info("avatar %s: %d bones, %d triangles", name, len(pose.bones), len(mesh.faces))
        return Avatar(SkinnedAvatar(mesh, pose, self.scene.shape_mesh(index)), index)

    def viewed(self) -> list[ViewedActor]:
        """Every person as viewers draw them: the avatar's mesh as skinned now (copied to the host)."""
        return [
            ViewedActor(name, self.scene.shape_scene(a.shape), np.eye(4), a.skinned.vertices())
            for name, a in self.avatars.items()
            if a.last is not None
        ]
