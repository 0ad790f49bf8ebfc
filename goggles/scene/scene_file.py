"""Scene files: a TOML list of mesh assets and Gaussian splats with poses, scale, units, up axis and
segmentation class.

Example::

    [scene]
    name = "arena"
    view = [-4.0, 0.0, 1.5, 1.0, 0.0, 0.0, 0.0]  # default body pose x, y, z, qw, qx, qy, qz (optional)

    [[asset]]
    name = "terrain"
    file = "mars/dingo_gap_leaves.glb"   # relative to this file
    units = "m"                          # length unit of the file (m, cm, mm, dm, km, in, ft)
    up = "+y"                            # the file's up axis (+z, -z, +y, -y, +x, -x)
    position = [-200.0, 90.0, -12.0]     # metres, world ENU, applied after units and up
    rpy_deg = [0.0, 0.0, 0.0]            # roll, pitch, yaw (z-y'-x''), degrees; or
    # orientation = [1.0, 0.0, 0.0, 0.0] # quaternion (w, x, y, z)
    scale = 1.0                          # extra uniform scale
    segmentation = 1                     # class id in the segmentation image, >= 1

    [[splat]]                            # a 3D Gaussian splat (INRIA PLY or .splat), the same keys
    name = "plant"
    file = "splats/houseplant/plant.splat"
    units = "m"                          # what one unit of the file is (a capture's scale: see ``scale``)
    up = "-y"
    position = [2.0, -1.0, 0.6]
    scale = 1.0
    segmentation = 8
    filter = "3dgs"                      # the screen-space filter it was trained with ("3dgs", "none")

A path to a single mesh or splat file is also a scene: one asset at the origin with the format's own
units (metres, +Z up, but glTF's +Y).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.checks import Table, read_toml
from goggles.errors import SceneError
from goggles.frames import quat_from_euler, transform
from goggles.scene.assets import MESH_SUFFIXES, UNITS_M, UP_AXES, default_frame
from goggles.scene.splats import FILTERS, SPLAT_SUFFIXES, is_splat_file

_ASSET_KEYS = {"name", "file", "units", "up", "position", "orientation", "rpy_deg", "scale", "segmentation"}
_SPLAT_KEYS = _ASSET_KEYS | {"filter"}
_SCENE_KEYS = {"name", "description", "view"}
_TOP_KEYS = {"scene", "asset", "splat"}


@dataclass(frozen=True)
class AssetSpec:
    """One mesh file placed in the world."""

    name: str
    path: Path
    """Absolute path of the mesh file."""
    units: str
    """Length unit of the file's coordinates (a key of ``UNITS_M``)."""
    up: str
    """Up axis of the file (a key of ``UP_AXES``)."""
    T_WA: np.ndarray
    """(4, 4) pose of the asset frame in the world (metres), applied after units, up axis and scale."""
    scale: float
    """Extra uniform scale (dimensionless)."""
    segmentation: int
    """Class id written to the segmentation image (>= 1; 0 means nothing was hit)."""
    filter: str = "3dgs"
    """A splat's: the screen-space filter its capture was trained with (a key of ``FILTERS``)."""


@dataclass(frozen=True)
class SceneSpec:
    """What a scene file says: a name and its assets."""

    name: str
    source: Path
    assets: tuple[AssetSpec, ...]
    view: np.ndarray | None = None
    """(4, 4) default body pose T_WB for a first look at the scene (FLU body, camera along +x), or None."""
    splats: tuple[AssetSpec, ...] = ()
    """The Gaussian splats it places (``[[splat]]``), as assets are placed."""


def load_scene_spec(path: str | Path, *, units: str | None = None, up: str | None = None) -> SceneSpec:
    """Read a scene TOML file, or wrap a single mesh or capture path as a one-asset scene (in
    ``units`` with ``up`` its up axis, when given; else the format's own).

    Raises:
        SceneError: naming the file and the bad key or value.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise SceneError(f"{path}: scene file not found")
    for name, value, options in (("units", units, UNITS_M), ("up", up, UP_AXES)):
        if value is not None and value not in options:
            raise SceneError(f"{path}: {name} {value!r}: use one of {', '.join(options)}")
    bare = is_splat_file(path) or path.suffix.lower() in MESH_SUFFIXES
    if not bare and (units is not None or up is not None):
        raise SceneError(f"{path}: units and up are for a bare mesh or capture; a scene file gives them per [[asset]]")
    if is_splat_file(path):
        splat = AssetSpec(path.stem, path, units or "m", up or "+z", np.eye(4), 1.0, 1)
        return SceneSpec(path.stem, path, (), splats=(splat,))
    if path.suffix.lower() in MESH_SUFFIXES:
        own_units, own_up = default_frame(path)
        asset = AssetSpec(path.stem, path, units or own_units, up or own_up, np.eye(4), 1.0, 1)
        return SceneSpec(path.stem, path, (asset,))
    if path.suffix.lower() != ".toml":
        raise SceneError(f"{path}: a scene is a .toml file or a mesh file ({', '.join(MESH_SUFFIXES)})")
    data = read_toml(path, "scene file", SceneError)

    Table(path, "top level", data, _TOP_KEYS, SceneError)
    scene = Table(path, "[scene]", data.get("scene", {}), _SCENE_KEYS, SceneError)
    entries, splat_entries = data.get("asset", []), data.get("splat", [])
    if not isinstance(entries, list) or not isinstance(splat_entries, list) or not (entries or splat_entries):
        raise SceneError(f"{path}: needs at least one [[asset]] or [[splat]] table with a 'file' key")
    assets = tuple(asset_spec(path, i, entry) for i, entry in enumerate(entries))
    splats = tuple(asset_spec(path, i, entry, "splat") for i, entry in enumerate(splat_entries))
    view = None
    if "view" in scene.table:
        pose = scene.vector("view", 7, unit="x, y, z m and a quaternion w, x, y, z")
        if np.linalg.norm(pose[3:]) < 1e-9:
            raise SceneError(f"{path}: [scene]: 'view' quaternion (last four numbers) must be non-zero")
        view = transform(pose[:3], pose[3:])
    return SceneSpec(scene.text("name", path.stem), path, assets, view, splats)


def asset_spec(path: Path, index: int, entry: dict, kind: str = "asset") -> AssetSpec:
    """An ``[[asset]]`` (or ``[[splat]]``, ``kind``) table of the file at ``path``, checked: its file,
    frame and pose."""
    where = f"[[{kind}]] #{index + 1}"
    table = Table(path, where, entry, _ASSET_KEYS if kind == "asset" else _SPLAT_KEYS, SceneError)
    for key in ("file", "units", "up"):
        if key not in entry:
            raise SceneError(f"{path}: {where}: missing key {key!r} (units and up axis are never guessed)")
    file = path.parent / table.text("file")
    numbered = where
    table.where = where = f"{where} ({entry['file']})"
    units, up = table.choice("units", UNITS_M), table.choice("up", UP_AXES)
    position = table.vector("position", 3, [0.0, 0.0, 0.0], unit="m")
    if "orientation" in entry and "rpy_deg" in entry:
        raise SceneError(f"{path}: {where}: give 'orientation' or 'rpy_deg', not both")
    if "rpy_deg" in entry:
        roll, pitch, yaw = np.radians(table.vector("rpy_deg", 3, unit="deg"))
        orientation = quat_from_euler(roll, pitch, yaw)
    else:
        orientation = table.vector("orientation", 4, [1.0, 0.0, 0.0, 0.0], unit="quaternion w, x, y, z")
        if np.linalg.norm(orientation) < 1e-9:
            raise SceneError(f"{path}: {where}: 'orientation' must be a non-zero quaternion [w, x, y, z]")
    scale = table.number("scale", 1.0, positive=True)
    segmentation = table.integer("segmentation", 1, low=1, high=2**31 - 1, meaning="a class id")
    name = table.text("name", file.stem)
    screen_filter = table.choice("filter", FILTERS, "3dgs") if kind == "splat" else "3dgs"
    what = "mesh" if kind == "asset" else "splat"
    if not file.is_file():  # after the keys: a typo is named before the file it may have caused
        raise SceneError(f"{path}: {numbered}: 'file' {entry['file']!r}: {what} file not found ({file.resolve()})")
    if kind == "splat" and file.suffix.lower() not in SPLAT_SUFFIXES:
        raise SceneError(
            f"{path}: {numbered}: 'file' {entry['file']!r}: a splat is a {', '.join(SPLAT_SUFFIXES[:-1])} or "
            f"{SPLAT_SUFFIXES[-1]} file"
        )
    return AssetSpec(
        name,
        file,
        units,
        up,
        transform(position, orientation),
        scale,
        segmentation,
        screen_filter,
    )
