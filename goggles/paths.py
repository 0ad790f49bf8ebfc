"""Where goggles finds its own data: the default scene and calibration files."""

from __future__ import annotations

import os
from pathlib import Path

from goggles.errors import ConfigError

#: The repository root when goggles runs from a checkout (editable install).
REPO_ROOT = Path(__file__).resolve().parents[1]


def assets_dir() -> Path:
    """The assets folder: $GOGGLES_ASSETS, else ``assets/`` of the checkout goggles runs from."""
    folder = Path(os.environ.get("GOGGLES_ASSETS", REPO_ROOT / "assets"))
    if not folder.is_dir():
        raise ConfigError(
            f"assets folder {folder} not found; install goggles from its checkout (pip install -e .) "
            "or set GOGGLES_ASSETS to the folder holding arena.toml"
        )
    return folder


def default_scene() -> Path:
    """The built-in default scene file (assets/arena.toml)."""
    return assets_dir() / "arena.toml"


def default_run() -> Path:
    """The built-in demo run file (assets/run-demo.toml)."""
    return assets_dir() / "run-demo.toml"


def default_course() -> Path:
    """The built-in racing course (assets/course.toml)."""
    return assets_dir() / "course.toml"


def default_randomization() -> Path:
    """The example domain randomisation, every parameter (assets/randomization.toml)."""
    return assets_dir() / "randomization.toml"


def cache_dir() -> Path | None:
    """Where goggles keeps what it can rebuild (BVHs): $GOGGLES_CACHE_DIR (empty: no cache), else
    $XDG_CACHE_HOME/goggles (if absolute), else ~/.cache/goggles."""
    folder = os.environ.get("GOGGLES_CACHE_DIR")
    if folder is not None:
        return Path(folder) if folder else None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec: a relative path there is invalid and ignored (it was a folder made in the working one).
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "goggles"


def writable_file(path: str | Path, option: str) -> Path:
    """``path`` checked as a file to write, before the work that fills it (a training, a flight) rather
    than after: not a folder, in a folder that exists (made here) and may be written."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a folder; give a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot make its folder ({exc.strerror or exc})") from exc
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"{option} {path}: its folder {path.parent} may not be written")
    return path
