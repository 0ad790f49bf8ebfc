"""How every file reader (run, scene, course, airframe, room) opens TOML and checks lists of numbers: decided once."""

import math
import sys
from pathlib import Path

import numpy as np

from goggles.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


#: Seeds are 32-bit unsigned (Warp's random streams and NumPy's generators both take them).
MAX_SEED = 2**32 - 1
#: Largest magnitude a float32 holds: what the renderer and the wire use in float32 must stay below it
#: (beyond it is infinity).
FLOAT32_MAX = 3.4028234663852886e38
#: Largest int32: counts a kernel takes as int32 (steps between samples) must stay within it.
INT32_MAX = 2**31 - 1


def read_toml(path: Path, what: str, error: type[Exception] = ConfigError) -> dict:
    """The tables of the TOML file at `path`; `error` names the file if it is missing or not TOML.

    `what` says what the file was meant to be ("run file", "scene file", ...).
    """
    if not path.is_file():
        raise error(f"{path}: {what} not found")
    try:
        text = path.read_text(encoding="utf-8-sig")  # TOML is UTF-8; a Windows editor may put a BOM first
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from exc
    return parse_toml(text, str(path), error)


#: How deep tables and arrays may nest in a goggles TOML file (the deepest any file needs is 3: a route's
#: waypoints in an array of vehicle tables); deeper nesting is refused before anything walks it.
MAX_TOML_DEPTH = 16


def parse_toml(text: str, where: str, error: type[Exception] = ConfigError) -> dict:
    """The tables of TOML `text`; `error` starts with `where` if it is not TOML, or if its tables and
    arrays nest deeper than ``MAX_TOML_DEPTH`` (500 nested brackets exhausted the parser's recursion)."""
    try:
        data = tomllib.loads(text.removeprefix("\ufeff"))  # a BOM kept in a recording's copy of a run file
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{where}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise error(f"{where}: not valid TOML for goggles: arrays or tables nested too deep to read") from None
    path = _too_deep(data)
    if path is not None:
        raise error(f"{where}: '{path}' nests arrays or tables deeper than {MAX_TOML_DEPTH} levels")
    return data


def _too_deep(data: dict) -> str | None:
    """The key under which ``data`` nests deeper than ``MAX_TOML_DEPTH``, or None (walked without recursion)."""
    stack = [(value, str(key), 1) for key, value in data.items()]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_TOML_DEPTH:
            return path
        if isinstance(value, dict):
            stack.extend((v, f"{path}.{k}", depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, path, depth + 1) for v in value)
    return None


def finite_vector(value, n: int) -> np.ndarray | None:
    """`value` as a float64 array of shape (n,) with every entry finite in float32 (what goggles
    computes in), or None if it is not one.

    Callers raise their own error, so it names their file and key.
    """
    if isinstance(value, (list, tuple)) and not all(is_number(v) for v in value):
        return None  # strings and booleans would convert silently
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of hundreds of digits
        return None
    if array.shape != (n,) or not np.all(np.abs(array) <= FLOAT32_MAX):  # NaN fails too
        return None
    return array


def poses(value, what: str, count: int | None = None) -> np.ndarray:
    """``value`` as (n, 4, 4) float64 rigid poses (one (4, 4) pose: a batch of one; an empty list: none),
    ``count`` of them where given; a ConfigError naming ``what`` for anything else: not numbers,
    another shape, a value that is not finite, a rotation that is not orthonormal (a scaled or sheared
    pose would stretch every ray cast from it)."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{what} must be (n, 4, 4) arrays of numbers, got {type(value).__name__}") from None
    if array.shape == (4, 4) or array.size == 0:  # one pose; no poses at all (an empty list)
        array = array.reshape(-1, 4, 4)
    if array.ndim != 3 or array.shape[1:] != (4, 4) or (count is not None and len(array) != count):
        raise ConfigError(f"{what} must be a ({'n' if count is None else count}, 4, 4) array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ConfigError(f"{what} must be finite rigid transforms")
    R = array[:, :3, :3]
    if len(array) and np.abs(R @ R.transpose(0, 2, 1) - np.eye(3)).max() > 1e-5:
        raise ConfigError(f"{what} must have orthonormal rotations")
    return array


def carriers(value, count: int, what: str) -> np.ndarray:
    """``value`` as (count,) int32 actor instances, each the one carrying a sensor (its vehicle's body,
    which that sensor does not see), -1 for none; None: none carries any. A ConfigError naming ``what``
    for anything else."""
    if value is None:
        return np.full(count, -1, np.int32)
    array = np.asarray(value)
    if array.shape != (count,) or array.dtype.kind not in "iu" or (count and array.min() < -1):
        raise ConfigError(f"the carriers of {what} must be {count} actor indices (-1: none), got {value!r:.80}")
    return array.astype(np.int32)


def member(kind, value, what: str):
    """``value`` as a member of the enum ``kind``: a member, its value, or its name in any case; a
    ConfigError starting with ``what`` and naming the members otherwise."""
    if isinstance(value, str) and value.upper() in kind.__members__:
        return kind[value.upper()]
    if not isinstance(value, (bool, np.bool_, str)):
        try:
            return kind(value)
        except (ValueError, TypeError):
            pass
    names = ", ".join(f"{m.name} ({m.value})" for m in kind)
    raise ConfigError(f"{what} {value!r}: one of {names} ({kind.__module__}.{kind.__name__})")


def is_whole(value, low: int | None = None, high: int | None = None) -> bool:
    """Is ``value`` an integer (not a boolean, not a float) in [``low``, ``high``] where given?"""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        return False
    return (low is None or value >= low) and (high is None or value <= high)


def beyond_float32(value) -> bool:
    """A finite number (a float, or an integer of any size) too large for float32."""
    try:
        value = float(value)
    except OverflowError:
        return True
    return math.isfinite(value) and abs(value) > FLOAT32_MAX


def warp_device(name, what: str = "device"):
    """The Warp device called ``name`` (None: Warp's default); one error naming the devices this
    machine has, for a name it lacks ('cuda' where there is no GPU, 'cuda:7', a typo).

    Raises:
        ConfigError: starting with ``what`` (a flag, or a file and its key).
    """
    import warp as wp

    if name is not None and not isinstance(name, (str, wp.Device)):
        raise ConfigError(f"{what} {name!r}: a Warp device name such as 'cpu', 'cuda' or 'cuda:0'")
    try:
        return wp.get_device(name)
    except (RuntimeError, ValueError):  # Warp: RuntimeError for CUDA without a GPU, ValueError for a name
        pass
    available = [str(d) for d in wp.get_devices()]
    if str(name).startswith("cuda") and not wp.is_cuda_available():
        raise ConfigError(f"{what} {name}: no CUDA device is available on this machine; devices: {available}")
    raise ConfigError(f"{what} {name!r} is not a Warp device here; devices: {available} (or 'cuda' for the first GPU)")


def clipped(text: str, limit: int = 80) -> str:
    """A prefix of text someone else chose (a sender's name, a file's value), safe to log or say in an
    error: such text can be megabytes long."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def is_number(value) -> bool:
    """A real number (Python's or NumPy's), not a boolean (``True`` is 1 to Python, never a value)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


_MISSING = object()


class Table:
    """Typed reads of one TOML table, the same for every file goggles reads (run, scene, course,
    airframe, room): required keys, booleans refused where numbers are meant, units in the message,
    and every error naming the file, the table and the key.

    Args:
        path: the file (for messages).
        where: the table, e.g. ``[clock]`` or ``[[camera]] #2``.
        table: its contents.
        allowed: its keys; any other is refused (None: not checked here).
    """

    def __init__(self, path, where: str, table, allowed: set[str] | None = None, error: type[Exception] = ConfigError):
        self.path, self.where, self.table, self._error = path, where, table, error
        if not isinstance(table, dict):
            raise error(f"{path}: {where} must be a table")
        unknown = sorted(set(table) - allowed) if allowed is not None else []
        if unknown:
            raise error(f"{path}: {where}: unknown key {unknown[0]!r}; allowed keys are {sorted(allowed)}")

    def error(self, key: str, expected: str) -> Exception:
        value = self.table.get(key)
        values = value if isinstance(value, (list, tuple)) else [value]
        huge = any(is_number(v) and beyond_float32(v) for v in values)
        why = " (beyond float32's range, which goggles computes in)" if huge else ""
        return self._error(f"{self.path}: {self.where}: {key!r} must be {expected}, got {value!r}{why}")

    def get(self, key: str, default=None, *, required: bool = False):
        if required and key not in self.table:
            raise self._error(f"{self.path}: {self.where}: missing key {key!r}")
        return self.table.get(key, default)

    def number(
        self,
        key: str,
        default=_MISSING,
        *,
        positive: bool = False,
        minimum: float | None = None,
        unit: str = "",
        required: bool = False,
    ) -> float:
        """A finite number (never a boolean), > 0 or >= ``minimum`` if asked; without a default the
        key is required."""
        value = self.get(key, None if default is _MISSING else default, required=required or default is _MISSING)
        bound = " > 0" if positive else f" >= {minimum:g}" if minimum is not None else ""
        expected = f"a finite number{bound}" + (f" ({unit})" if unit else "")
        if not is_number(value) or not abs(value) <= FLOAT32_MAX:  # NaN fails too
            raise self.error(key, expected)
        if positive and value <= 0 or minimum is not None and value < minimum:
            raise self.error(key, expected)
        return float(value)

    def vector(self, key: str, n: int, default=_MISSING, *, minimum: float | None = None, unit: str = "") -> np.ndarray:
        """``n`` finite numbers (each >= ``minimum`` if asked); without a default the key is required."""
        value = self.get(key, None if default is _MISSING else default, required=default is _MISSING)
        array = finite_vector(value, n)
        if array is None or minimum is not None and np.any(array < minimum):
            bound = "" if minimum is None else f" >= {minimum:g}"
            raise self.error(key, f"a list of {n} finite numbers{bound}" + (f" ({unit})" if unit else ""))
        return array

    def integer(
        self, key: str, default=_MISSING, *, low: int | None = None, high: int | None = None, meaning: str = ""
    ) -> int | None:
        """A whole number (never a boolean or a float) in [``low``, ``high``] where given; without a
        default the key is required, a default of None makes it optional (None when absent)."""
        value = self.get(key, None if default is _MISSING else default, required=default is _MISSING)
        if value is None and default is None:
            return None
        if not is_whole(value, low, high):
            span = f" from {low} to {high}" if None not in (low, high) else f" >= {low}" if low is not None else ""
            raise self.error(key, f"an integer{span}" + (f" ({meaning})" if meaning else ""))
        return int(value)

    def choice(self, key: str, options, default=_MISSING) -> str | None:
        """One of ``options`` (names); a default of None makes the key optional (None when absent)."""
        value = self.get(key, None if default is _MISSING else default, required=default is _MISSING)
        if value is None and default is None:
            return None
        if not isinstance(value, str) or value not in options:
            raise self.error(key, f"one of {sorted(options)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        """true or false (never a number or a string that would read as one)."""
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, "true or false")
        return value

    def text(self, key: str, default=_MISSING, *, required: bool = False) -> str:
        value = self.get(key, None if default is _MISSING else default, required=required or default is _MISSING)
        if not isinstance(value, str) or not value:
            raise self.error(key, "a non-empty string")
        return value
