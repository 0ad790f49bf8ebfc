"""A generated terrain: fractal relief of a chosen triangle count, for benchmarks and tests on a
scene that is not the default one (rough like a scan, seeded, nothing to download)."""

from __future__ import annotations

import numpy as np

from goggles.frames import quat_from_axis_angle, transform
from goggles.runtime.signals import signals_held
from goggles.scene.assets import part_from_trimesh
from goggles.scene.batch import StaticScene, merge_parts


def fractal_heights(cells: int, *, relief_m: float, seed: int) -> np.ndarray:
    """(cells + 1, cells + 1) heights, metres: octaves of bilinearly upsampled noise, each half the
    amplitude of the one before (a 1/f spectrum, like natural terrain)."""
    rng = np.random.default_rng(seed)
    n = cells + 1
    heights = np.zeros((n, n))
    amplitude, size = 1.0, 4
    while size <= n:
        coarse = rng.standard_normal((size, size))
        at = np.linspace(0, size - 1, n)
        i0 = np.minimum(at.astype(int), size - 2)
        w = at - i0
        rows = coarse[i0] * (1 - w)[:, None] + coarse[i0 + 1] * w[:, None]
        heights += amplitude * (rows[:, i0] * (1 - w) + rows[:, i0 + 1] * w)
        amplitude, size = amplitude * 0.5, size * 2
    heights -= heights.mean()
    return heights * (relief_m / max(np.ptp(heights), 1e-9))


@signals_held()
def terrain_scene(triangles: int = 230_000, *, size_m: float = 200.0, relief_m: float = 20.0, seed: int = 0):
    """A square terrain of about ``triangles`` triangles, centred on the origin, with a view 2 m above
    its centre looking along +x, 10 degrees down (the benchmarks' viewpoint)."""
    import trimesh

    cells = max(1, int(round(np.sqrt(triangles / 2))))
    heights = fractal_heights(cells, relief_m=relief_m, seed=seed)
    xy = np.linspace(-size_m / 2, size_m / 2, cells + 1)
    x, y = np.meshgrid(xy, xy, indexing="ij")
    vertices = np.c_[x.ravel(), y.ravel(), heights.ravel()]
    corner = (np.arange(cells)[:, None] * (cells + 1) + np.arange(cells)[None, :]).ravel()
    a, b, c, d = corner, corner + cells + 1, corner + cells + 2, corner + 1
    faces = np.r_[np.c_[a, b, c], np.c_[a, c, d]]
    mesh = trimesh.Trimesh(vertices, faces, process=False)
    scene: StaticScene = merge_parts("terrain", [(part_from_trimesh(mesh, "terrain"), np.eye(4), 1)])
    centre = heights[cells // 2, cells // 2]
    scene.view = transform([0.0, 0.0, centre + 2.0], quat_from_axis_angle([0.0, 1.0, 0.0], np.radians(10.0)))
    return scene
