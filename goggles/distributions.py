"""What a randomisation file draws from: ``{ uniform = [low, high] }`` or ``{ normal = [mean, std] }``,
with a floor that no draw may reach. One parser for every table that randomises (the airframe's, the
wind's, the looks'), so each says its errors the same way."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from goggles.checks import finite_vector
from goggles.errors import ConfigError

#: A floor: (value, whether the value itself is excluded).
Floor = tuple[float, bool]


def above_floor(value: float, floor: Floor) -> bool:
    bound, excluded = floor
    return value > bound or (value == bound and not excluded)


def floor_text(floor: Floor) -> str:
    return f"{'>' if floor[1] else '>='} {floor[0]:g}"


@dataclass(frozen=True)
class Distribution:
    kind: str
    """'uniform' (low, high) or 'normal' (mean, standard deviation)."""
    a: float
    b: float
    floor: Floor | None = None
    """Draws at or below it are drawn again; a uniform range lies above it."""

    def admits(self, value: float) -> bool:
        return self.floor is None or above_floor(value, self.floor)

    def draw(self, rng: np.random.Generator) -> float:
        while True:  # a normal's mean is admitted, so each draw is admitted with probability >= 1/2
            value = float(rng.uniform(self.a, self.b) if self.kind == "uniform" else rng.normal(self.a, self.b))
            if self.admits(value):
                return value


def parse_distribution(spec, where: str, floor: Floor | None = None) -> Distribution:
    """Raises ConfigError naming ``where`` for anything it cannot draw from."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in ("uniform", "normal"):
        raise ConfigError(f"{where} must be {{ uniform = [low, high] }} or {{ normal = [mean, std] }}")
    kind, bounds = next(iter(spec.items()))
    pair = finite_vector(bounds, 2)
    if pair is None:
        raise ConfigError(f"{where}: {kind} needs two finite numbers, got {bounds!r}")
    if kind == "uniform" and pair[0] > pair[1]:
        raise ConfigError(f"{where}: uniform low {pair[0]} exceeds high {pair[1]}")
    if kind == "normal" and pair[1] < 0:
        raise ConfigError(f"{where}: normal standard deviation {pair[1]} is negative")
    distribution = Distribution(kind, float(pair[0]), float(pair[1]), floor)
    if not distribution.admits(distribution.a):
        first = "low" if kind == "uniform" else "mean"
        raise ConfigError(f"{where}: {kind} {first} {pair[0]:g} must be {floor_text(floor)}")
    return distribution
