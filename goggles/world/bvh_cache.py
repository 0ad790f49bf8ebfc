"""goggles' BVHs kept on disk by their triangles, so a scene's tree is built once per machine.

The build takes 1.4 s for the arena and 6-8 s for a million triangles on one core (and collapsing it
into wide nodes 1.3 and 4.5 s more); every process that renders with the ``bvh`` or ``wide`` backend (a
run, each replay or dataset job, each benchmark) would pay it again. A tree is a pure function of the
triangles and the builder's settings, so it is stored under a hash of both (``.npz``, read without
pickle) and loaded in milliseconds. The cache is a
convenience: a file that cannot be read is rebuilt and replaced, a folder that cannot be written is
skipped with a warning, and the newest ``MAX_FILES`` trees are kept.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from pathlib import Path

import numpy as np

from goggles.paths import cache_dir
from goggles.world.ray_bvh import BINS, LEAF_SIZE, STACK_DEPTH, RayBvhArrays, build_ray_bvh
from goggles.world.wide_bvh import WIDE_STACK, WIDTH, WideBvhArrays, build_wide_bvh

log = logging.getLogger(__name__)

#: Bump when the builder's output for the same triangles changes: older files are then never read.
FORMAT = 1
#: Trees kept in the folder (the oldest by last use go first): 8 scenes in both layouts.
MAX_FILES = 16
_FIELDS = {"boxes": (np.float32, 3), "children": (np.int32, 2), "triangles": (np.float32, 3), "faces": (np.int32, 1)}
#: The wide tree's own arrays (its triangles and faces are the binary tree's), and its format.
_WIDE_FIELDS = {
    "origin": (np.float32, 2),
    "scale": (np.float32, 2),
    "quantized": (np.uint32, 2),
    "children": (np.int32, 2),
}
WIDE_FORMAT = 1


def tree_key(vertices: np.ndarray, faces: np.ndarray) -> str:
    """The hash that names a tree: the triangles' bytes and the builder's settings."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.array([FORMAT, LEAF_SIZE, BINS, STACK_DEPTH, len(vertices), len(faces)], np.int64).tobytes())
    digest.update(np.ascontiguousarray(vertices, np.float32).tobytes())
    digest.update(np.ascontiguousarray(faces, np.int64).tobytes())
    return digest.hexdigest()


def cached_ray_bvh(vertices: np.ndarray, faces: np.ndarray, folder: Path | None = None) -> tuple[RayBvhArrays, bool]:
    """The tree over ``vertices[faces]``, from ``folder`` (default ``paths.cache_dir()/bvh``; None
    when caching is off) or built and stored there. Returns the tree and whether it was loaded."""
    folder = folder if folder is not None else _default_folder()
    if folder is None:
        return build_ray_bvh(vertices, faces), False
    path = folder / f"{tree_key(vertices, faces)}.npz"
    if path.is_file():
        tree = _load(path, len(faces))
        if tree is not None:
            _quietly(os.utime, path)  # last used: pruning keeps it
            return tree, True
    tree = build_ray_bvh(vertices, faces)
    _store(path, tree)
    return tree, False


def cached_wide_bvh(vertices: np.ndarray, faces: np.ndarray, folder: Path | None = None) -> tuple[WideBvhArrays, bool]:
    """The 8-wide collapse of ``cached_ray_bvh``'s tree, from the cache or made and stored there.
    Returns the tree and whether it was loaded."""
    folder = folder if folder is not None else _default_folder()
    binary, _ = cached_ray_bvh(vertices, faces, folder)
    if folder is None:
        return build_wide_bvh(binary), False
    digest = hashlib.blake2b(np.array([WIDE_FORMAT, WIDTH, WIDE_STACK], np.int64).tobytes(), digest_size=4)
    path = folder / f"{tree_key(vertices, faces)}-wide{digest.hexdigest()}.npz"
    if path.is_file():
        arrays = _read(path, _WIDE_FIELDS, ("stack",))
        if arrays is not None and arrays["children"].shape == (len(arrays["origin"]), WIDTH):
            _quietly(os.utime, path)
            stack = int(arrays.pop("stack"))
            return WideBvhArrays(**arrays, triangles=binary.triangles, faces=binary.faces, stack=stack), True
    wide = build_wide_bvh(binary)
    _write(path, {name: getattr(wide, name) for name in _WIDE_FIELDS} | {"stack": np.int64(wide.stack)})
    return wide, False


def _default_folder() -> Path | None:
    root = cache_dir()
    return None if root is None else root / "bvh"


def _load(path: Path, num_faces: int) -> RayBvhArrays | None:
    """The stored tree, or None (with a warning) if the file is not a whole tree of these faces."""
    arrays = _read(path, _FIELDS, ("depth",))
    if arrays is None:
        return None
    if len(arrays["faces"]) != num_faces:
        log.warning("BVH cache file %s does not hold a tree of %d faces: building it again", path, num_faces)
        return None
    return RayBvhArrays(**{name: arrays[name] for name in _FIELDS}, depth=int(arrays["depth"]))


def _read(path: Path, fields: dict, scalars: tuple[str, ...]) -> dict | None:
    """The arrays of a stored file, each of its dtype and rank, or None (with a warning)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in (*fields, *scalars)}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        log.warning("BVH cache file %s unreadable (%s): building the tree again", path, exc)
        return None
    for name, (dtype, ndim) in fields.items():
        if arrays[name].dtype != dtype or arrays[name].ndim != ndim:
            log.warning("BVH cache file %s has a bad %r array: building the tree again", path, name)
            return None
    if any(arrays[name].shape != () for name in scalars):
        log.warning("BVH cache file %s is not a whole tree: building it again", path)
        return None
    return arrays


def _store(path: Path, tree: RayBvhArrays) -> None:
    _write(path, {name: getattr(tree, name) for name in _FIELDS} | {"depth": np.int64(tree.depth)})


def _write(path: Path, arrays: dict) -> None:
    """Write the arrays whole or not at all (a temporary file renamed), then keep the newest files."""
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(temporary, **arrays)
        os.replace(temporary, path)
    except OSError as exc:
        log.warning("cannot keep the BVH in %s (%s); it will be built again next time", path.parent, exc)
        _quietly(temporary.unlink)
        return
    stored = sorted(path.parent.glob("*.npz"), key=_modified, reverse=True)
    for old in stored[MAX_FILES:]:
        _quietly(old.unlink)


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile by another process
        return 0.0


def _quietly(action, *args) -> None:
    """A cache chore that may fail (another process got there first, a read-only folder)."""
    try:
        action(*args)
    except OSError:
        pass
