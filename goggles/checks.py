"""How every file reader (run, scene, course, airframe, room) opens TOML and checks lists of numbers: decided once."""

import sys
from pathlib import Path

import numpy as np

from goggles.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_toml(path: Path, what: str, error: type[Exception] = ConfigError) -> dict:
    """The tables of the TOML file at `path`; `error` names the file if it is missing or not TOML.

    `what` says what the file was meant to be ("run file", "scene file", ...).
    """
    if not path.is_file():
        raise error(f"{path}: {what} not found")
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from exc
    return parse_toml(text, str(path), error)


def parse_toml(text: str, where: str, error: type[Exception] = ConfigError) -> dict:
    """The tables of TOML `text`; `error` starts with `where` if it is not TOML."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{where}: not valid TOML: {exc}") from exc


def finite_vector(value, n: int) -> np.ndarray | None:
    """`value` as a float64 array of shape (n,) with every entry finite, or None if it is not one.

    Callers raise their own error, so it names their file and key.
    """
    if isinstance(value, (list, tuple)) and not all(_is_number(v) for v in value):
        return None  # strings and booleans would convert silently
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if array.shape != (n,) or not np.all(np.isfinite(array)):
        return None
    return array


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
