"""Closest hits with Intel Embree (embreex): the CPU's primary-ray tracer, and the peer of benchmarks.

Embree's traversal is SIMD over wide BVH nodes, two to three times faster per thread than Warp's
scalar CPU traversal on the same rays. It traces the static scene only; actors are found after it,
by the same Warp code whatever traced the static scene (``kernels.shade_traced_kernel``).
embreex has wheels for x86-64 Linux and Windows; elsewhere the Warp tracer is used.
"""

from __future__ import annotations

import os
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from goggles.errors import ConfigError
from goggles.runtime.progress import busy
from goggles.scene.batch import StaticScene


def embree_available() -> bool:
    """Is embreex installed (so the ``embree`` backend can run)?"""
    try:
        import embreex.rtcore_scene  # noqa: F401
    except ImportError:
        return False
    return True


class EmbreeTracer:
    """An Embree scene over a StaticScene's triangles (triangle i is the scene's face i).

    Args:
        scene: the batched static scene.
        threads: threads sharing each ``trace`` call (embreex releases the GIL); default all cores.
    """

    def __init__(self, scene: StaticScene, threads: int | None = None):
        try:
            from embreex import rtcore_scene
            from embreex.mesh_construction import TriangleMesh
        except ImportError as exc:
            raise ConfigError("Embree is not installed: pip install embreex (x86-64 Linux or Windows)") from exc
        with busy(f"building Embree's BVH of the scene ({scene.num_faces:,} triangles)"):
            self._scene = rtcore_scene.EmbreeScene()
            TriangleMesh(
                self._scene,
                np.ascontiguousarray(scene.vertices, dtype=np.float32),
                np.ascontiguousarray(scene.faces, dtype=np.int32),
            )
            # Embree builds its BVH on the first query: build it now, not inside the first frame.
            self._scene.run(np.zeros((1, 3), np.float32), np.array([[0.0, 0.0, 1.0]], np.float32))
        self.threads = max(1, threads or os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None

    def closest(self, origins: np.ndarray, directions: np.ndarray, reach: np.ndarray) -> dict[str, np.ndarray]:
        """Closest hits of rays on the calling thread (the GIL is released while Embree traces).

        Args:
            origins, directions: (N, 3) float32, world frame; directions unit length.
            reach: (N,) float32 farthest distance of each ray; lowered in place to the hit distance.

        Returns:
            Embree's hit arrays: ``primID`` (-1 where nothing was hit), ``geomID``, ``u``, ``v``, ``Ng``
            (the unnormalised geometric normal), and ``tfar`` (which is ``reach``).
        """
        return self._scene.run(origins, directions, dists=reach, output=1)

    def faces(self, origins: np.ndarray, directions: np.ndarray, reach: np.ndarray) -> np.ndarray:
        """Like ``closest``, but only the index of the triangle hit, -1 where none is within ``reach``
        (which is left as it is): Embree's cheapest query that names the triangle."""
        return self._scene.run(origins, directions, dists=reach)

    def distances(self, origins: np.ndarray, directions: np.ndarray, reach: np.ndarray) -> None:
        """Like ``closest``, but only lowers ``reach`` to each hit's distance (what depth needs)."""
        self._scene.run(origins, directions, dists=reach, query="DISTANCE")

    def trace(self, origins: np.ndarray, directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Closest hit of each ray, shared by ``threads`` threads: Embree's bare hit rate.

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

        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="goggles-embree")
        # Several chunks per thread keep the threads busy when some chunks are cheaper (sky).
        bounds = np.linspace(0, len(origins), self.threads * 8 + 1).astype(int)
        list(self._pool.map(run, [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]))
        return t, face

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


_tracers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tracer_for(scene) -> EmbreeTracer:
    """The one Embree scene of a DeviceScene's static triangles, built on first use and shared by
    every renderer of that scene (the build is the expensive part)."""
    tracer = _tracers.get(scene)
    if tracer is None:
        tracer = _tracers[scene] = EmbreeTracer(scene.static)
    return tracer
