"""Closest-hit ray casting with Intel Embree (embreex): the CPU reference peer for tests and benchmarks.

Same rays in, same (distance, face) out as the Warp renderer, so the two can be compared directly.
embreex is an optional extra: ``pip install 'goggles[bench]'``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from goggles.errors import ConfigError
from goggles.scene.batch import StaticScene


class EmbreeTracer:
    """An Embree scene over a StaticScene's triangles, traced by a pool of threads.

    Args:
        scene: the batched static scene.
        threads: threads sharing each ``trace`` call (embreex releases the GIL); default all cores.
    """

    def __init__(self, scene: StaticScene, threads: int | None = None):
        try:
            from embreex import rtcore_scene
            from embreex.mesh_construction import TriangleMesh
        except ImportError as exc:
            raise ConfigError("Embree is not installed: pip install 'goggles[bench]' (embreex)") from exc
        self._scene = rtcore_scene.EmbreeScene()
        TriangleMesh(self._scene, np.ascontiguousarray(scene.vertices[scene.faces], dtype=np.float32))
        self.threads = max(1, threads or os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="goggles-embree")

    def trace(self, origins: np.ndarray, directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Closest hit of each ray.

        Args:
            origins: (N, 3) float32 ray origins, metres.
            directions: (N, 3) float32 unit ray directions.

        Returns:
            t: (N,) float32 hit distance, metres, +inf where nothing is hit.
            face: (N,) int32 index of the triangle hit, -1 where nothing is hit.
        """
        origins = np.ascontiguousarray(origins, dtype=np.float32)
        directions = np.ascontiguousarray(directions, dtype=np.float32)
        t = np.full(len(origins), np.inf, np.float32)
        face = np.full(len(origins), -1, np.int32)

        def run(chunk: slice) -> None:
            hits = self._scene.run(origins[chunk], directions[chunk], output=1)
            hit = hits["geomID"] >= 0
            t[chunk][hit] = hits["tfar"][hit]
            face[chunk][hit] = hits["primID"][hit]

        # Several chunks per thread keep the threads busy when some chunks are cheaper (sky).
        bounds = np.linspace(0, len(origins), self.threads * 8 + 1).astype(int)
        list(self._pool.map(run, [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]))
        return t, face

    def close(self) -> None:
        self._pool.shutdown()
