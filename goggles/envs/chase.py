"""What a learning environment's ``render()`` shows (``render_mode="rgb_array"``): each environment's
vehicle from behind and above, as a chase camera following its heading sees it, in its world (the
static scene, or a tiled floor where the environments have none), with that environment's own actors
(a race's gates) and its target as a small green cube. Gymnasium's ``RecordVideo`` and
``HumanRendering`` wrappers take these frames.

The view has a world of its own (the static triangles again, the vehicle's model and the target's
cube as actor shapes), built on the first ``render()``: the observations' world never holds the
vehicles, so no camera of a policy ever sees one. A task's things that are not the scene's actors (a
race's gates where there is no camera) come from the task (``shown``, a ``tasks.Shown``).
"""

from __future__ import annotations

import numpy as np

from goggles.frames import look_at
from goggles.render import CameraModel, RenderSettings, Shading
from goggles.rig import parts
from goggles.scene.actors import box_shape
from goggles.scene.assets import Material, MeshPart
from goggles.scene.batch import StaticScene, merge_parts
from goggles.scene.vehicle_model import vehicle_shape
from goggles.world import DeviceScene

#: Where the chase camera rides: metres behind the vehicle (along its heading) and above it.
BEHIND_M, ABOVE_M = 1.5, 0.6
#: The chase camera's vertical field of view, degrees.
VFOV_DEG = 60.0
#: The floor shown where the environments have no scene: tiles of ``TILE_M`` out to ``FLOOR_HALF_M``.
TILE_M, FLOOR_HALF_M = 2.0, 60.0
#: Segmentation class of the target cube (the view's segmentation is never shown).
TARGET_SEGMENT = 31
TARGET_RGB = (0.1, 0.85, 0.25)


def tiled_floor(half: float = FLOOR_HALF_M, tile: float = TILE_M) -> StaticScene:
    """A chequered floor at z = 0 from -``half`` to ``half`` m in x and y: what makes motion visible
    over the physics' bare floor plane."""
    edges = np.arange(-half, half + 1e-9, tile)
    count = len(edges) - 1
    x, y = np.meshgrid(edges, edges, indexing="ij")
    vertices = np.stack([x.ravel(), y.ravel(), np.zeros(x.size)], axis=1)
    i, j = np.meshgrid(np.arange(count), np.arange(count), indexing="ij")
    a = (i * (count + 1) + j).ravel()  # each tile's corner at (i, j); b, c, d counter-clockwise from above
    b, c, d = a + count + 1, a + count + 2, a + 1
    faces = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    light = ((i + j) % 2 == 0).ravel()
    rgb = np.where(np.concatenate([light, light])[:, None], [0.78, 0.78, 0.74], [0.46, 0.48, 0.52])
    part = MeshPart(
        name="floor",
        vertices=vertices,
        faces=faces,
        corner_uv=None,
        corner_rgb=np.repeat(rgb[:, None, :], 3, axis=1).astype(np.float32),
        material=Material("floor", (1.0, 1.0, 1.0), None),
    )
    return merge_parts("floor", [(part, np.eye(4), 1)])


def chase_poses(T_WB: np.ndarray) -> np.ndarray:
    """(n, 4, 4) chase camera poses (optical frame) behind and above bodies at ``T_WB``, looking at
    them: behind along the body's heading (its x axis in the horizontal plane; east where it points
    straight up or down)."""
    poses = np.empty_like(T_WB, dtype=np.float64)
    for k, T in enumerate(T_WB):
        heading = np.array([T[0, 0], T[1, 0], 0.0])
        length = np.linalg.norm(heading)
        heading = heading / length if length > 1e-6 else np.array([1.0, 0.0, 0.0])
        eye = T[:3, 3] - BEHIND_M * heading + [0.0, 0.0, ABOVE_M]
        poses[k] = look_at(eye, T[:3, 3])
    return poses


class ChaseView:
    """Chase-camera frames of ``num_envs`` vehicles of ``airframe``, in ``scene``'s static world (or a
    tiled floor for None) with its shapes and those of the task's things ``shown`` (a ``tasks.Shown``),
    ``width`` x ``height`` pixels each."""

    def __init__(self, scene: DeviceScene | None, airframe, num_envs: int, width: int, height: int, device, shown=None):
        own = [
            vehicle_shape(airframe),
            box_shape("target", (0.12,) * 3, TARGET_RGB, TARGET_SEGMENT),
        ]
        scene_shapes = list(scene.shapes) if scene is not None else []
        self._scene_first = len(own)  # the scene's shapes come after the view's own
        self._shown_first = len(own) + len(scene_shapes)  # and the task's after the scene's
        things = 0 if shown is None else num_envs * len(shown.shape_of)
        self.world = DeviceScene(
            tiled_floor() if scene is None else scene.static,
            device,
            shapes=[*own, *scene_shapes, *(shown.shapes if shown is not None else [])],
            max_actors=(0 if scene is None else scene.max_actors) + things + 2 * num_envs,
        )
        camera = CameraModel.from_fov(width, height, VFOV_DEG)
        self.renderer = parts.renderer(
            self.world, [camera] * num_envs, RenderSettings(outputs={"rgb"}, shading=Shading.SUN)
        )
        self.num_envs = num_envs

    def frames(
        self, T_WB: np.ndarray, targets: np.ndarray, scene: DeviceScene | None, actors_per_camera, shown=None
    ) -> tuple:
        """One (H, W, 3) uint8 frame per environment: its vehicle at ``T_WB[i]``, its target at
        ``targets[i]``, the actors ``scene`` has placed that its camera sees (``actors_per_camera``
        (n, k) of them, or all), and its own of the task's things ``shown``."""
        n = self.num_envs
        shapes, poses = self._scene_placements(scene)
        if actors_per_camera is not None:
            seen = np.asarray(actors_per_camera, np.int32)
        else:
            seen = np.tile(np.arange(len(shapes), dtype=np.int32), (n, 1))
        if shown is not None:  # environment i's k things: instances len(shapes) + i k + (0 .. k - 1)
            k = len(shown.shape_of)
            things = len(shapes) + k * np.arange(n)[:, None] + np.arange(k)
            seen = np.concatenate([seen, things.astype(np.int32)], axis=1)
            shapes = np.concatenate([shapes, np.tile(self._shown_first + np.asarray(shown.shape_of), n)])
            poses = np.concatenate([poses, np.asarray(shown.T_WA, np.float64).reshape(-1, 4, 4)])
        placed = len(shapes)
        T_target = np.tile(np.eye(4), (n, 1, 1))
        T_target[:, :3, 3] = targets
        self.world.set_actors(
            np.concatenate([shapes, np.zeros(n, np.int64), np.ones(n, np.int64)]),
            np.concatenate([poses, T_WB, T_target]),
        )
        own = np.stack([placed + np.arange(n), placed + n + np.arange(n)], axis=1)
        T_WC = chase_poses(T_WB)
        R_WC, p_WC = self.renderer.camera_poses
        rows = self.renderer.height
        R_WC.assign(np.ascontiguousarray(np.broadcast_to(T_WC[:, None, :3, :3], (n, rows, 3, 3)), np.float32))
        p_WC.assign(np.ascontiguousarray(np.broadcast_to(T_WC[:, None, :3, 3], (n, rows, 3)), np.float32))
        self.renderer.render_posed(np.concatenate([seen, own], axis=1))
        rgb = self.renderer.buffers.rgb.numpy()
        return tuple(np.array(rgb[i]) for i in range(n))

    def _scene_placements(self, scene: DeviceScene | None) -> tuple[np.ndarray, np.ndarray]:
        """The shapes (indices in this view's world) and poses of the actors ``scene`` has placed."""
        count = 0 if scene is None else scene.actors.count
        if not count:
            return np.zeros(0, np.int64), np.zeros((0, 4, 4))
        actors = scene.actors
        T = np.tile(np.eye(4), (count, 1, 1))
        T[:, :3, :3] = actors.R_WA.numpy()[:count]
        T[:, :3, 3] = actors.p_WA.numpy()[:count]
        return actors.shape.numpy()[:count].astype(np.int64) + self._scene_first, T

    def close(self) -> None:
        self.renderer.close()
