"""Props: objects a run spawns, moves and removes while it runs (``scene/edit`` inputs).

The run file declares what may be spawned (``[[prop]]``: a box or a mesh file); the world builds
each into an actor shape once, at start, so a spawn is a placement, never a mesh load in the loop. An
edit names the actor it places (unique names, at most ``MAX_PROPS``) and, to spawn, the prop it is
an instance of. Props are actors like the gates: cameras, range sensors, LiDARs and the simulated
vehicles' collisions see them from the edit on. They are placed after the gates and before the
people (the crowd places every instance).

A prop may be a capture (``[[prop]] splat``): its Gaussians are kept on the device once per instance
it may have placed at once (``instances``), and a placement writes an instance's Gaussians where it
stands (``DeviceSplats.place``). Cameras, LiDARs, range sensors and beacons see it as they see the
scene's captures; nothing collides with it.

A prop may also be tracked (``[[prop]] tracked``: motion-capture bodies that are instances of it, a
real box carried into the room): each ``pose/<body>`` places an actor named ``<body>`` there. The
newest pose of each waits until a sensor needs the world (``place_tracked``), so a 240 Hz stream costs
one placement per sensor instant.
"""

from __future__ import annotations

import logging

import numpy as np

from goggles.world.build import World
from goggles.world.crowd import Crowd
from goggles.world.viewed import ViewedActor

log = logging.getLogger(__name__)

#: Most props placed at once.
MAX_PROPS = 32

#: ``scene_edit_t.action`` values.
SPAWN, MOVE, REMOVE = 0, 1, 2


class Props:
    """The props placed now, by actor name, in spawn order.

    Args:
        crowd: places every actor instance (its fixed ones: the gates, then these).
        world: the gates (first: instance i is gate i, as their beacons say) and the props' shapes.
    """

    def __init__(self, crowd: Crowd, world: World):
        self.crowd = crowd
        self._gate_poses = np.array(world.gate_poses).reshape(-1, 4, 4)
        first = len(self._gate_poses)
        self.shapes = {p.name: first + i for i, p in enumerate(p for p in world.props if p.splat is None)}
        """Shape index of each box and mesh prop the run declares."""
        self.splats = {p.name: k for k, p in enumerate(p for p in world.props if p.splat is not None)}
        """Splat-prop index of each capture prop the run declares."""
        self._splats = world.scene.splats
        self._instances: dict[str, int] = {}
        """Placed splat actor -> its prop's instance it is."""
        self.placed: dict[str, tuple[str, np.ndarray]] = {}
        """Actor name -> (prop, (4, 4) pose in the world)."""
        self.tracked = {body: p.name for p in world.props for body in p.tracked}
        """Motion-capture body -> the prop it is an instance of."""
        self._pending: dict[str, np.ndarray] = {}
        self._no_room: set[str] = set()

    def track(self, body: str, T_WA: np.ndarray) -> None:
        """The newest pose of a tracked ``body`` (one of ``self.tracked``), placed by ``place_tracked``."""
        self._pending[body] = T_WA

    def place_tracked(self) -> None:
        """Place the tracked bodies whose poses came since the last call, in one placement."""
        if not self._pending:
            return
        placed = dict(self.placed)
        for body, T_WA in self._pending.items():
            if body in placed or len(placed) < MAX_PROPS:
                placed[body] = (self.tracked[body], T_WA)
            elif body not in self._no_room:  # spawned props took every place: said once
                self._no_room.add(body)
                log.warning("tracked body %s is not shown: %d props are placed already", body, MAX_PROPS)
        self._pending.clear()
        self._place(placed)

    def edit(self, action: int, actor: str, prop: str, T_WA: np.ndarray) -> str | None:
        """Apply one edit (``SPAWN``: place a new actor of ``prop``, or re-place one of that name;
        ``MOVE``; ``REMOVE``); returns None when applied, else why it was not (an unknown prop or
        actor, or no room)."""
        placed = dict(self.placed)  # kept only once the world has taken it
        if action == SPAWN:
            if prop not in self.shapes and prop not in self.splats:
                known = (
                    ", ".join(sorted([*self.shapes, *self.splats])) or "none: declare [[prop]] tables in the run file"
                )
                return f"no prop {prop!r} to spawn (the run file declares {known})"
            if actor not in placed and len(placed) >= MAX_PROPS:
                return f"no room for {actor!r}: {MAX_PROPS} props are placed already"
            if prop in self.splats and placed.get(actor, ("",))[0] != prop:
                kept = self._splats.instances(self.splats[prop])
                if sum(1 for p, _ in placed.values() if p == prop) >= kept:
                    return f"no room for {actor!r}: {kept} of {prop!r} placed already (its [[prop]] 'instances')"
            placed[actor] = (prop, T_WA)
        elif actor not in placed:
            return f"no actor {actor!r} to {'move' if action == MOVE else 'remove'}"
        elif action == MOVE:
            placed[actor] = (placed[actor][0], T_WA)
        else:
            del placed[actor]
        self._place(placed)
        return None

    def _place(self, placed: dict[str, tuple[str, np.ndarray]]) -> None:
        """Place the gates and ``placed``, kept once the world has taken them."""
        meshes = {name: (prop, T) for name, (prop, T) in placed.items() if prop in self.shapes}
        shapes = [*range(len(self._gate_poses)), *(self.shapes[prop] for prop, _ in meshes.values())]
        poses = [*self._gate_poses, *(T for _, T in meshes.values())]
        self.crowd.set_fixed(shapes, np.reshape(poses, (-1, 4, 4)))
        self._place_splats({name: (prop, T) for name, (prop, T) in placed.items() if prop in self.splats})
        self.placed = placed

    def _place_splats(self, placed: dict[str, tuple[str, np.ndarray]]) -> None:
        """Each placed capture actor keeps its instance while it stays; one that went frees its own."""
        for name in [n for n in self._instances if placed.get(n, ("",))[0] != self.placed.get(n, ("",))[0]]:
            prop = self.placed[name][0]
            self._splats.place(self.splats[prop], self._instances.pop(name), None)
        for name, (prop, T) in placed.items():
            if name not in self._instances:
                taken = {i for n, i in self._instances.items() if placed.get(n, ("",))[0] == prop}
                free = set(range(self._splats.instances(self.splats[prop]))) - taken
                if not free:  # spawned ones took every instance before a tracked body came
                    if name not in self._no_room:
                        self._no_room.add(name)
                        log.warning("%s is not shown: every instance of capture %s is placed already", name, prop)
                    continue
                self._instances[name] = min(free)
            elif self.placed.get(name, ("", None))[1] is T:
                continue
            self._splats.place(self.splats[prop], self._instances[name], T)

    def viewed(self) -> list[ViewedActor]:
        """Every placed box and mesh prop as viewers draw it: its shape's mesh where it is placed."""
        scene = self.crowd.scene
        return [
            ViewedActor(name, scene.shape_scene(self.shapes[prop]), T)
            for name, (prop, T) in self.placed.items()
            if prop in self.shapes
        ]
