"""A mesh as Gaussian splats: flat Gaussians sampled over its surface with its colours, so a known
mesh gives a splat whose renders can be compared with the mesh's own (``goggles splat from-mesh``).

Each Gaussian lies in its triangle's plane (its thin axis along the face normal, a tenth of the
others), is spread so that neighbours overlap (sigma = 0.7 x the mean spacing of the samples), is
nearly opaque (0.95) and carries the albedo at its centre (base colour x vertex colour x the
texture, sampled bilinearly with repeat, as the renderer samples it) as a degree-0 colour. Made, not
trained, it covers the surface without a screen-space filter (its cloud says so; placed from the PLY
it writes, its ``[[splat]]`` table says ``filter = "none"``).
"""

from __future__ import annotations

import numpy as np

from goggles.errors import SceneError
from goggles.scene.batch import StaticScene
from goggles.scene.splats import SH_C0, SplatCloud

#: Gaussians per sample spacing: sigma = SPREAD x the mean distance between neighbouring samples.
SPREAD = 0.7
THIN = 0.1
OPACITY = 0.95


def mesh_splats(scene: StaticScene, count: int, seed: int = 0) -> SplatCloud:
    """``count`` Gaussians on the surface of ``scene``'s meshes, area-weighted."""
    if count < 1:
        raise SceneError(f"{count} Gaussians: give at least one")
    v = scene.vertices.astype(np.float64)[scene.faces]  # (F, 3, 3)
    normals = np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
    areas = 0.5 * np.linalg.norm(normals, axis=1)
    total = areas.sum()
    if not total > 0.0:
        raise SceneError(f"{scene.name}: the mesh has no area to sample")
    rng = np.random.default_rng(seed)
    face = rng.choice(len(areas), size=count, p=areas / total)
    r1, r2 = rng.random(count), rng.random(count)
    s = np.sqrt(r1)
    # Barycentrics (a, b, c) of corners 0, 1, 2: uniform over each triangle.
    a, b = 1.0 - s, s * (1.0 - r2)
    c = s * r2
    positions = a[:, None] * v[face, 0] + b[:, None] * v[face, 1] + c[:, None] * v[face, 2]
    colour = _albedo(scene, face, a, b, c)
    sigma = SPREAD * np.sqrt(total / count)
    n = normals[face] / np.maximum(np.linalg.norm(normals[face], axis=1, keepdims=True), 1e-30)
    rotations = _frame_with_z(n)
    scales = np.tile([sigma, sigma, THIN * sigma], (count, 1))
    return SplatCloud(
        positions.astype(np.float32),
        scales.astype(np.float32),
        rotations.astype(np.float32),
        np.full(count, OPACITY, np.float32),
        ((colour - 0.5) / SH_C0)[:, None, :].astype(np.float32),
        scene.face_segment[face].astype(np.int32),
        np.zeros(count, np.int32),
        np.eye(3, dtype=np.float32)[None],
    ).filtered("none")


def _albedo(scene: StaticScene, face: np.ndarray, a, b, c) -> np.ndarray:
    """(n, 3) base colour x vertex colour x texture at barycentrics (a, b, c) of ``face``."""
    material = scene.face_material[face]
    mix = a[:, None] * scene.corner_rgb[face, 0] + b[:, None] * scene.corner_rgb[face, 1]
    colour = scene.material_rgb[material] * (mix + c[:, None] * scene.corner_rgb[face, 2])
    uv = (
        a[:, None] * scene.corner_uv[face, 0]
        + b[:, None] * scene.corner_uv[face, 1]
        + c[:, None] * scene.corner_uv[face, 2]
    )
    textured = scene.material_texture[material]
    for t in np.unique(textured[textured >= 0]):
        pick = textured == t
        colour[pick] *= _bilinear(scene.textures[t], uv[pick])
    return np.clip(colour, 0.0, 1.0)


def _bilinear(texture: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Texels at uv (0, 0 the bottom-left corner, texel centres at half steps), repeat addressing."""
    h, w = texture.shape[:2]
    x = (uv[:, 0] - np.floor(uv[:, 0])) * w - 0.5
    y = (1.0 - (uv[:, 1] - np.floor(uv[:, 1]))) * h - 0.5
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    t = texture.astype(np.float64) / 255.0

    def at(xi, yi):
        return t[yi % h, xi % w]

    top = at(x0, y0) * (1 - fx) + at(x0 + 1, y0) * fx
    bottom = at(x0, y0 + 1) * (1 - fx) + at(x0 + 1, y0 + 1) * fx
    return top * (1 - fy) + bottom * fy


def _frame_with_z(n: np.ndarray) -> np.ndarray:
    """(n, 4) unit quaternions (w, x, y, z) of rotations taking +z to each unit vector of ``n``."""
    z = np.array([0.0, 0.0, 1.0])
    axis = np.cross(z, n)
    cos = n[:, 2]
    q = np.column_stack([1.0 + cos, axis])
    flipped = cos < -1.0 + 1e-9  # pointing down: a half turn about x
    q[flipped] = [0.0, 1.0, 0.0, 0.0]
    return q / np.linalg.norm(q, axis=1, keepdims=True)
