"""What counts as a valid list of numbers, decided once for every file reader (run, scene, course, airframe, room)."""

import numpy as np


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
