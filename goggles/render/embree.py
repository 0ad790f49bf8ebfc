"""Closest hits with Intel Embree (embreex): the CPU's primary-ray tracer, and the peer of benchmarks.

Embree's traversal is SIMD over wide BVH nodes, two to three times faster per thread than Warp's
scalar CPU traversal on the same rays. It traces the static scene only; actors are found after it,
by the same Warp code whatever traced the static scene (``kernels.render_kernel``'s ``rows``).
embreex has wheels for x86-64 Linux and Windows; elsewhere the Warp tracer is used.

embreex traces a ray per call. Where a C compiler is there (Linux), camera rays go to Embree in
packets of sixteen, a 4 x 4 block of pixels each, and so do the sun's shadow rays from what those hit
(``occluded``: one direction, neighbouring origins), through ``embree_packets.c``, built once into
goggles' cache and linked to the Embree library embreex ships: the same hits, fewer node visits. Without a
compiler, or with ``GOGGLES_EMBREE_PACKETS=0``, embreex's single rays trace as before.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import sys
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from goggles.errors import ConfigError
from goggles.runtime.native import build_library
from goggles.runtime.progress import busy
from goggles.scene.batch import StaticScene

log = logging.getLogger(__name__)

PACKETS_SOURCE = Path(__file__).with_name("embree_packets.c")
_FLOATS = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
_packets: list = []  # the loaded library, or the reason it is not (one try per process)


def packets_library():
    """The packet tracer (``embree_packets.c`` linked to embreex's Embree), loaded; or None, with the
    reason logged once (no compiler, not Linux, no Embree library in embreex's wheel, a failed build)."""
    if _packets:
        return _packets[0] if not isinstance(_packets[0], str) else None
    reason = None
    if os.environ.get("GOGGLES_EMBREE_PACKETS", "1") == "0":
        reason = "GOGGLES_EMBREE_PACKETS=0"
    elif not sys.platform.startswith("linux"):
        reason = f"not built on {sys.platform}"
    else:
        import embreex

        found = sorted(glob.glob(str(Path(embreex.__file__).parent.parent / "embreex.libs" / "libembree4*.so*")))
        if not found:
            reason = "embreex's wheel holds no libembree4"
        else:
            folder = str(Path(found[0]).parent)
            try:
                path = build_library(
                    PACKETS_SOURCE, "embree-packets", "Embree's ray packets", [found[0], f"-Wl,-rpath,{folder}"]
                )
                library = ctypes.CDLL(str(path))
            except (ConfigError, OSError) as exc:
                reason = str(exc)
            else:
                library.goggles_embree_new.restype = ctypes.c_void_p
                library.goggles_embree_new.argtypes = [
                    _FLOATS, ctypes.c_long, np.ctypeslib.ndpointer(np.uint32, flags="C_CONTIGUOUS"),
                    ctypes.c_long, ctypes.POINTER(ctypes.c_int),
                ]  # fmt: skip
                library.goggles_embree_free.argtypes = [ctypes.c_void_p]
                library.goggles_embree_trace.argtypes = [
                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                    ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                ]  # fmt: skip
                library.goggles_embree_occluded.argtypes = [
                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long,
                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                ]  # fmt: skip
                _packets.append(library)
                return library
    log.info("Embree traces single rays (no packets: %s)", reason)
    _packets.append(reason)
    return None


def _pointer(array: np.ndarray | None) -> int | None:
    return None if array is None else array.ctypes.data


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

    def __init__(self, scene: StaticScene, threads: int | None = None, packets: bool | None = None):
        try:
            from embreex import rtcore_scene
            from embreex.mesh_construction import TriangleMesh
        except ImportError as exc:
            raise ConfigError("Embree is not installed: pip install embreex (x86-64 Linux or Windows)") from exc
        self._packed = None
        """The packet tracer's scene (``packets_library``), or None: embreex's single rays."""
        library = packets_library() if packets is not False else None
        if packets and library is None:
            raise ConfigError(f"Embree's ray packets cannot be used here: {_packets[0]}")
        if library is not None:
            with busy(f"building Embree's BVH of the scene ({scene.num_faces:,} triangles, for packets)"):
                self._vertices = np.ascontiguousarray(scene.vertices, dtype=np.float32)  # Embree shares them
                self._faces = np.ascontiguousarray(scene.faces, dtype=np.uint32)
                error = ctypes.c_int(0)
                handle = library.goggles_embree_new(
                    self._vertices, len(self._vertices), self._faces, len(self._faces), ctypes.byref(error)
                )
            if handle:
                self._library, self._packed = library, handle
                weakref.finalize(self, library.goggles_embree_free, handle)
            else:
                log.warning("Embree's packet scene failed (error %d): single rays", error.value)
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

    def closest(
        self,
        origins: np.ndarray,
        directions: np.ndarray,
        reach: np.ndarray,
        width: int | None = None,
        out: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Closest hits of rays on the calling thread (the GIL is released while Embree traces).

        Args:
            origins, directions: (N, 3) float32, world frame; directions unit length.
            reach: (N,) float32 farthest distance of each ray; lowered in place to the hit distance.
            width: the rays are rows of this many pixels (a camera's width: packets take 4 x 4 blocks).
            out: ``primID``, ``u``, ``v`` and ``Ng`` arrays to write the hits into (contiguous, (N,) int32,
                float32, float32 and (N, 3) float32), the only ones returned (a caller's buffers,
                reused frame after frame); None: new arrays, ``geomID`` and ``tfar`` with them.

        Returns:
            Embree's hit arrays: ``primID`` (-1 where nothing was hit), ``geomID``, ``u``, ``v``, ``Ng``
            (the unnormalised geometric normal), and ``tfar`` (which is ``reach``).
        """
        n = len(reach)
        if out is not None:
            _check_hits(out, n, _HITS)
        if self._packed is not None:
            hits = out if out is not None else hit_arrays(n)
            self._trace_packets(origins, directions, reach, hits["primID"], hits["u"], hits["v"], hits["Ng"], width)
            if out is not None:
                return out
            hits["geomID"] = np.where(hits["primID"] >= 0, 0, -1).astype(np.int32)
            hits["tfar"] = reach
            return hits
        hits = self._scene.run(origins, directions, dists=reach, output=1)
        if out is None:
            return hits
        for name, array in out.items():
            array[...] = hits[name]
        return out

    @property
    def packets(self) -> bool:
        """Does this tracer trace in packets of 16 (else embreex's single rays)?"""
        return self._packed is not None

    def _trace_packets(self, origins, directions, reach, face=None, u=None, v=None, normal=None, width=None) -> None:
        """Closest hits in 4 x 4 blocks of rays laid out in rows of ``width`` (a camera's; None: 16 rays a
        row); ``origins`` with a zero stride (``np.broadcast_to``) is one origin for every ray."""
        one_origin = origins.ndim == 2 and origins.strides[0] == 0
        origins = np.ascontiguousarray(origins[:1] if one_origin else origins, dtype=np.float32)
        directions = np.ascontiguousarray(directions, dtype=np.float32)
        if not (reach.dtype == np.float32 and reach.flags.c_contiguous):
            raise ValueError("reach must be a contiguous float32 array (lowered in place)")
        n = len(reach)
        width = width or min(n, 16)
        rows = -(-n // max(width, 1))
        if rows * width != n:  # a ragged chunk: the rays as one row
            rows, width = 1, n
        self._library.goggles_embree_trace(
            self._packed, _pointer(origins), int(one_origin), _pointer(directions), _pointer(reach),
            rows, width, _pointer(face), _pointer(u), _pointer(v), _pointer(normal),
        )  # fmt: skip

    def faces(self, origins: np.ndarray, directions: np.ndarray, reach: np.ndarray, width=None, out=None) -> np.ndarray:
        """Like ``closest``, but only the index of the triangle hit, -1 where none is within ``reach``
        (which the packets lower to the hit's distance): Embree's cheapest query that names the triangle.
        ``out``: a contiguous (N,) int32 array to write them into (returned)."""
        if out is not None:
            _check_hits({"primID": out}, len(reach), ["primID"])
        if self._packed is not None:
            face = out if out is not None else np.empty(len(reach), np.int32)
            self._trace_packets(origins, directions, reach, face, width=width)
            return face
        face = self._scene.run(origins, directions, dists=reach)
        if out is None:
            return face
        out[...] = face
        return out

    def distances(self, origins: np.ndarray, directions: np.ndarray, reach: np.ndarray, width=None) -> None:
        """Like ``closest``, but only lowers ``reach`` to each hit's distance (what depth needs)."""
        if self._packed is not None:
            self._trace_packets(origins, directions, reach, width=width)
            return
        self._scene.run(origins, directions, dists=reach, query="DISTANCE")

    def occluded(
        self,
        origins: np.ndarray,
        directions: np.ndarray,
        reach: np.ndarray,
        width: int,
        dark: np.ndarray | None = None,
        colour: np.ndarray | None = None,
    ) -> np.ndarray:
        """Is anything within ``reach`` of each ray (Embree's occlusion query: any hit, not the closest)?
        Rays of ``reach`` 0 are not traced (False). With ``dark`` and ``colour``, a blocked ray's pixel
        takes its colour in shadow: ``colour[i] = dark[i]`` (the renderer's deferred shadow rays).

        Args:
            origins, directions: (N, 3) float32, contiguous; directions unit length.
            reach: (N,) float32 contiguous.
            width: the rays are rows of this many pixels (packets take 4 x 4 blocks).
            dark, colour: (N, 3) uint8 contiguous each, or None.

        Returns:
            (N,) bool.
        """
        n = len(reach)
        if self._packed is not None:
            origins, directions, reach = [np.ascontiguousarray(a, np.float32) for a in (origins, directions, reach)]
            for name, pixels in (("dark", dark), ("colour", colour)):  # read and written where they lie
                if pixels is not None:
                    _check_writable(name, pixels, np.uint8, (n, 3))
            blocked = np.empty(n, np.int8)
            rows = n // width if width and n % width == 0 else 1
            self._library.goggles_embree_occluded(
                self._packed, _pointer(origins), _pointer(directions), _pointer(reach), rows, n // rows,
                _pointer(blocked), _pointer(dark), _pointer(colour),
            )  # fmt: skip
            return blocked.view(bool)
        blocked = np.zeros(n, bool)
        live = np.flatnonzero(reach > 0.0)
        if len(live):
            found = self._scene.run(origins[live], directions[live], dists=reach[live], query="OCCLUDED")
            blocked[live] = found >= 0
        if dark is not None and colour is not None:
            shadowed = np.flatnonzero(blocked)
            colour[shadowed] = dark[shadowed]
        return blocked

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


_HITS = {"primID": (np.int32, ()), "u": (np.float32, ()), "v": (np.float32, ()), "Ng": (np.float32, (3,))}
"""The hit arrays ``closest`` writes: dtype and shape after the ray's index."""


def hit_arrays(n: int, names=tuple(_HITS)) -> dict[str, np.ndarray]:
    """Arrays for ``n`` rays' hits, as ``closest`` (all of them) or ``faces`` (``primID``) write them."""
    return {name: np.empty((n, *_HITS[name][1]), _HITS[name][0]) for name in names}


def _check_hits(out: dict[str, np.ndarray], n: int, names) -> None:
    """Refuse hit arrays Embree cannot write where they lie (the packets write through their addresses)."""
    if sorted(out) != sorted(names):
        raise ValueError(f"the hit arrays must be {sorted(names)}, not {sorted(out)}")
    for name, array in out.items():
        dtype, shape = _HITS[name]
        _check_writable(name, array, dtype, (n, *shape))


def _check_writable(name: str, array: np.ndarray, dtype, shape: tuple) -> None:
    """Refuse an array the C layer would write through its address: not contiguous, or not this dtype and shape."""
    if (array.dtype, array.shape) != (np.dtype(dtype), shape) or not array.flags.c_contiguous:
        raise ValueError(f"{name} must be a contiguous {shape} {np.dtype(dtype)} array")


_tracers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tracer_for(scene) -> EmbreeTracer:
    """The one Embree scene of a DeviceScene's static triangles, built on first use and shared by
    every renderer of that scene (the build is the expensive part)."""
    tracer = _tracers.get(scene)
    if tracer is None:
        tracer = _tracers[scene] = EmbreeTracer(scene.static)
    return tracer
