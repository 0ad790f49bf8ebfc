"""Human avatars driven by skeletons: a body mesh built around the bones, skinned on the device.

Mocap skeletons differ (NatNet, Qualisys, BVH), so the avatar's mesh is generated from the skeleton
itself: a tapered capsule along every bone segment (joint to child joint), a sphere for a head (a
leaf bone), all in the pose of the first skeleton frame, which is the bind pose. Each vertex is
weighted to its segment's bone, blending towards the child bone near the child joint so elbows and
knees bend smoothly (linear blend skinning, at most two bones per vertex). Every frame, the bones'
current poses give M_j = T_WJ(now) T_WJ(bind)^-1, a Warp kernel writes the skinned vertices into the
avatar's BVH mesh, and the mesh is refit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles.errors import ConfigError
from goggles.frames import matrices_to_quats, quat_to_matrix
from goggles.runtime.device_copies import HostMirror, fetch
from goggles.runtime.kernel_options import FORWARD_ONLY
from goggles.runtime.signals import signals_held
from goggles.scene.actors import ActorShape
from goggles.scene.assets import Material, MeshPart

#: Forward kernels only: no autodiff, a tenth of the compile time (CUDA 82 s -> 8 s).
wp.set_module_options(FORWARD_ONLY)

#: Widest a skeleton may be, m: a person is a few metres across, and an avatar's limbs are sized
#: from its width (one spanning ±3e38 m had limbs whose vertices overflowed float32).
MAX_SKELETON_SPAN_M = 100.0
#: Segmentation class of humans.
HUMAN_CLASS = 20
#: Skin colour of the avatar, linear RGB.
SKIN_RGB = (0.80, 0.62, 0.50)


@dataclass(frozen=True)
class SkeletonPose:
    """Bone names, parents and world poses of one skeleton frame."""

    bones: tuple[str, ...]
    parents: tuple[int, ...]
    """Index of each bone's parent, -1 for the root."""
    T_WJ: np.ndarray
    """(B, 4, 4) world pose of every bone (its joint at the origin), metres."""

    @classmethod
    def from_arrays(cls, bones, parents, positions, orientations) -> SkeletonPose:
        positions = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
        orientations = np.asarray(orientations, dtype=np.float64).reshape(-1, 4)
        if not (len(bones) == len(parents) == len(positions) == len(orientations) > 0):
            raise ConfigError("a skeleton needs as many names, parents, positions and orientations as bones")
        if any(not -1 <= p < len(bones) or p == i for i, p in enumerate(parents)):
            raise ConfigError(f"skeleton parents {list(parents)[:16]}... must index other bones or be -1")
        if all(p == -1 for p in parents):  # an avatar is drawn along bones from parent to child
            raise ConfigError(f"skeleton {list(bones)[:16]}: no bone has a parent, so there is no body to draw")
        span = float(np.ptp(positions, axis=0).max())
        if not span <= MAX_SKELETON_SPAN_M:
            raise ConfigError(f"skeleton spans {span:.3g} m: a person is at most {MAX_SKELETON_SPAN_M:g} m across")
        _check_acyclic(parents)
        T = np.repeat(np.eye(4)[None], len(bones), axis=0)
        T[:, :3, :3] = quat_to_matrix(orientations / np.linalg.norm(orientations, axis=1, keepdims=True))
        T[:, :3, 3] = positions
        return cls(tuple(bones), tuple(int(p) for p in parents), T)


def _check_acyclic(parents) -> None:
    """Every bone's chain of parents must end at a root (-1): a cycle is not a skeleton."""
    depth = [0 if p == -1 else None for p in parents]
    for i in range(len(parents)):
        chain, j = [], i
        while depth[j] is None:
            if len(chain) > len(parents):
                raise ConfigError(f"skeleton parents form a cycle through bone {i}")
            chain.append(j)
            j = parents[j]
        for k, bone in enumerate(reversed(chain)):
            depth[bone] = depth[j] + k + 1


@functools.cache
def _capsule_faces(rings: int, sides: int) -> np.ndarray:
    """Triangles of a tube of ``rings`` x ``sides`` quads, closed by a fan at each end."""
    faces = []
    for i in range(rings):
        for k in range(sides):
            p, q = i * sides + k, i * sides + (k + 1) % sides
            faces += [[p, q, q + sides], [p, q + sides, p + sides]]
    start, end = (rings + 1) * sides, (rings + 1) * sides + 1  # the end caps' centres
    for k in range(sides):
        faces.append([start, (k + 1) % sides, k])
        faces.append([end, rings * sides + k, rings * sides + (k + 1) % sides])
    return np.array(faces)


def _capsule(a: np.ndarray, b: np.ndarray, r_a: float, r_b: float, rings: int = 8, sides: int = 10):
    """Vertices, faces and the fraction along a->b of each vertex of a closed tapered tube."""
    axis = b - a
    length = np.linalg.norm(axis)
    z = axis / length
    x = np.cross(z, [0.0, 0.0, 1.0] if abs(z[2]) < 0.9 else [1.0, 0.0, 0.0])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    f = np.repeat(np.arange(rings + 1) / rings, sides)
    angle = np.tile(2.0 * np.pi * np.arange(sides) / sides, rings + 1)
    r = (r_a + (r_b - r_a) * f)[:, None]
    ring = a + axis * f[:, None] + r * (np.cos(angle)[:, None] * x + np.sin(angle)[:, None] * y)
    vertices = np.concatenate([ring, [a, b]])
    return vertices, _capsule_faces(rings, sides), np.concatenate([f, [0.0, 1.0]])


@functools.cache
@signals_held()
def _unit_sphere() -> tuple[np.ndarray, np.ndarray]:
    import trimesh

    ball = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
    return np.asarray(ball.vertices), np.asarray(ball.faces)


def _sphere(centre: np.ndarray, radius: float):
    vertices, faces = _unit_sphere()
    return vertices * radius + centre, faces


@dataclass
class AvatarMesh:
    """The bind-pose mesh and its skinning weights."""

    vertices: np.ndarray
    """(V, 3) bind-pose world positions, metres."""
    faces: np.ndarray
    """(F, 3) vertex indices."""
    bone_index: np.ndarray
    """(V, 2) the two bones each vertex follows."""
    bone_weight: np.ndarray
    """(V, 2) their weights, summing to 1."""


def build_avatar_mesh(bind: SkeletonPose) -> AvatarMesh:
    """Capsules along every bone segment and a head sphere on leaf bones, skinned to the bones."""
    joints = bind.T_WJ[:, :3, 3]
    children: dict[int, list[int]] = {i: [] for i in range(len(bind.bones))}
    for child, parent in enumerate(bind.parents):
        if parent >= 0:
            children[parent].append(child)
    scale = max(np.ptp(joints, axis=0).max(), 0.5)  # the skeleton's size sets limb thickness
    vertices, faces, bones, weights = [], [], [], []
    count = 0
    for parent, kids in children.items():
        for child in kids:
            length = np.linalg.norm(joints[child] - joints[parent])
            if length < 1e-3:
                continue
            radius = np.clip(0.18 * length, 0.03 * scale / 1.7, 0.09 * scale / 1.7)
            v, f, fraction = _capsule(joints[parent], joints[child], radius, 0.85 * radius)
            blend = np.clip((fraction - 0.75) / 0.5, 0.0, 0.5)  # towards the child near its joint
            vertices.append(v)
            faces.append(f + count)
            bones.append(np.column_stack([np.full(len(v), parent), np.full(len(v), child)]))
            weights.append(np.column_stack([1.0 - blend, blend]))
            count += len(v)
        if not kids and bind.parents[parent] >= 0:  # a leaf: a head (or hand, foot) sphere
            length = np.linalg.norm(joints[parent] - joints[bind.parents[parent]])
            v, f = _sphere(joints[parent], max(0.5 * length, 0.04 * scale / 1.7))
            vertices.append(v)
            faces.append(f + count)
            bones.append(np.column_stack([np.full(len(v), parent), np.full(len(v), parent)]))
            weights.append(np.column_stack([np.ones(len(v)), np.zeros(len(v))]))
            count += len(v)
    if not vertices:
        raise ConfigError(f"skeleton {list(bind.bones)} has no bone segments to build an avatar around")
    return AvatarMesh(
        np.concatenate(vertices),
        np.concatenate(faces).astype(np.int64),
        np.concatenate(bones).astype(np.int32),
        np.concatenate(weights),
    )


def avatar_shape(name: str, mesh: AvatarMesh, segmentation: int = HUMAN_CLASS) -> ActorShape:
    """The avatar as an actor shape in the world frame (placed with the identity pose)."""
    part = MeshPart(name, mesh.vertices, mesh.faces, None, None, Material(name, SKIN_RGB, None))
    return ActorShape(name, [part], segmentation)


@wp.kernel
def skin_vertices_kernel(
    rest: wp.array(dtype=wp.vec3),
    bone_index: wp.array(dtype=wp.vec2i),
    bone_weight: wp.array(dtype=wp.vec2),
    bones: wp.array(dtype=wp.transform),
    out_points: wp.array(dtype=wp.vec3),
):
    """Linear blend skinning: each vertex is its two bones' motions blended by weight."""
    i = wp.tid()
    b = bone_index[i]
    w = bone_weight[i]
    p = rest[i]
    out_points[i] = wp.transform_point(bones[b[0]], p) * w[0] + wp.transform_point(bones[b[1]], p) * w[1]


class SkinnedAvatar:
    """Drives one avatar shape's BVH mesh from skeleton poses.

    Args:
        mesh: the bind-pose mesh and weights.
        bind: the bind pose.
        target: the ``wp.Mesh`` of the avatar's shape in the DeviceScene (its points are rewritten).
    """

    def __init__(self, mesh: AvatarMesh, bind: SkeletonPose, target: wp.Mesh):
        d = target.points.device
        self.bones = bind.bones
        self._bind_inverse = np.linalg.inv(bind.T_WJ)
        self._target = target
        self._rest = wp.array(mesh.vertices, dtype=wp.vec3, device=d)
        self._index = wp.array(mesh.bone_index, dtype=wp.vec2i, device=d)
        self._weight = wp.array(mesh.bone_weight, dtype=wp.vec2, device=d)
        self._motions = wp.zeros(len(bind.bones), dtype=wp.transform, device=d)
        self._points = HostMirror(target.points)
        # Per bone, the rest-pose box of the vertices it moves: a skinned vertex is a blend of its bones'
        # motions of it, so it lies in the union of those boxes moved by their bones (no vertex read back).
        self._bone_boxes = []
        for j in range(len(bind.bones)):
            moved = ((mesh.bone_index == j) & (mesh.bone_weight > 0)).any(axis=1)
            if moved.any():
                self._bone_boxes.append((j, mesh.vertices[moved].min(axis=0), mesh.vertices[moved].max(axis=0)))

    def pose(self, pose: SkeletonPose) -> np.ndarray:
        """Skin the mesh into ``pose`` and refit its BVH; returns (2, 3) world bounds that contain it
        (from the bones' motions, without reading the vertices back)."""
        if pose.bones != self.bones:
            raise ConfigError(f"skeleton bones {list(pose.bones)} differ from the avatar's {list(self.bones)}")
        M = pose.T_WJ @ self._bind_inverse
        motions = np.zeros((len(M), 7), np.float32)
        motions[:, :3] = M[:, :3, 3]
        motions[:, 3:] = np.roll(matrices_to_quats(M[:, :3, :3]), -1, axis=1)  # (x, y, z, w), as Warp transforms
        self._motions.assign(motions)
        wp.launch(
            skin_vertices_kernel,
            dim=len(self._rest),
            inputs=[self._rest, self._index, self._weight, self._motions],
            outputs=[self._target.points],
            device=self._rest.device,
        )
        self._target.refit()
        corners = []
        for j, low, high in self._bone_boxes:
            box = np.array([[x, y, z] for x in (low[0], high[0]) for y in (low[1], high[1]) for z in (low[2], high[2])])
            corners.append(box @ M[j, :3, :3].T + M[j, :3, 3])
        corners = np.concatenate(corners)
        return np.stack([corners.min(axis=0), corners.max(axis=0)])

    def vertices(self) -> np.ndarray:
        """(V, 3) the mesh as skinned last, a host copy (for viewers; the renderer never needs it)."""
        return fetch([self._points])[0].copy()
