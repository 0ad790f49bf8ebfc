"""How a renderer renders: what it writes, how it lights and traces. One frozen, hashable value per
renderer, checked once when it is made."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

from goggles import checks
from goggles.errors import ConfigError
from goggles.render.shading import Shading

#: Every output a renderer can write (``RenderSettings.outputs``); depth and status are always written.
OUTPUTS = ("depth", "range", "rgb", "segmentation", "normal_W", "face", "status")
#: Primary-ray tracers: Warp's BVH, goggles' own BVH (binary or wide nodes), Intel Embree (CPU), or the
#: best one here.
BACKENDS = ("auto", "warp", "bvh", "wide", "embree")
#: Pixel orders of the render kernel's threads.
PIXEL_ORDERS = ("auto", "tiles", "rows")
#: How the splats' pass finds what a pixel meets: traced per ray, rasterised per tile, or the best here.
SPLAT_PASSES = ("auto", "rays", "raster")


@dataclass(frozen=True)
class RenderSettings:
    """Args (each a field):
    outputs: the outputs to write, from ``OUTPUTS`` (default all).
    shading: lighting of the intensity image (``Shading``).
    backend: primary-ray tracer, one of ``BACKENDS``.
    threads: CPU threads sharing a render; None: every core ($GOGGLES_RENDER_THREADS caps it). Ignored
        on CUDA.
    shadows: the sun casts shadows (one ray per lit point; SUN shading only).
    sun_W: direction towards the sun, world frame (normalised when used).
    ambient: fraction of light that does not depend on the sun, [0, 1] (what a shadow keeps).
    background_rgb: colour of pixels that hit nothing, [0, 1] (with a sky: at the horizon).
    sky_rgb: the sky's colour straight up, for a gradient from ``background_rgb`` at the horizon;
        None: a uniform background.
    pixel_order: which pixels a GPU warp's threads take together, one of ``PIXEL_ORDERS``: ``tiles``
        (8 x 4, rays side by side), ``rows`` (32 of one row), ``auto`` (tiles on CUDA where the width
        is a multiple of 8). Tiles on the CPU cost a thread per pixel: for comparisons only.
    looks: each camera has its own look (``Renderer.set_looks``, ``goggles.render.looks``: sun,
        ambient, sky, albedo and swapped textures, exposure, a capture's colour); each starts as the
        scene's own (the same bytes as without).
    splat_pass: how the captures' Gaussians are composited, one of ``SPLAT_PASSES``: ``raster``, the
        published 3DGS rasteriser (``goggles.render.splat_raster``) for undistorted pinholes in
        global-shutter frames, every other camera and frame traced; ``rays``, each pixel's ray traced
        through them (``goggles.render.splats``); ``auto``: raster on the CPU, rays on CUDA.
    """

    outputs: frozenset[str] = field(default=frozenset(OUTPUTS))
    shading: Shading = Shading.SUN
    backend: str = "auto"
    threads: int | None = None
    shadows: bool = True
    sun_W: tuple[float, float, float] = (0.35, 0.25, 0.9)
    ambient: float = 0.5
    background_rgb: tuple[float, float, float] = (0.62, 0.75, 0.90)
    sky_rgb: tuple[float, float, float] | None = None
    pixel_order: str = "auto"
    looks: bool = False
    splat_pass: str = "auto"

    def __post_init__(self):
        object.__setattr__(self, "outputs", frozenset(_strings(self.outputs, "outputs")))
        object.__setattr__(self, "shading", checks.member(Shading, self.shading, "shading"))
        unknown = sorted(self.outputs - set(OUTPUTS))
        if unknown:
            raise ConfigError(f"unknown render outputs {unknown}; choose from {', '.join(OUTPUTS)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"render backend {self.backend!r}: use one of {', '.join(BACKENDS)}")
        if self.splat_pass not in SPLAT_PASSES:
            raise ConfigError(f"splat pass {self.splat_pass!r}: use one of {', '.join(SPLAT_PASSES)}")
        if self.pixel_order not in PIXEL_ORDERS:
            raise ConfigError(f"pixel order {self.pixel_order!r}: use one of {', '.join(PIXEL_ORDERS)}")
        if self.threads is not None and not checks.is_whole(self.threads, 1):
            raise ConfigError(f"render threads {self.threads!r}: a whole number >= 1, or None for every core")
        sun = checks.finite_vector(self.sun_W, 3)
        if sun is None or not np.linalg.norm(sun) > 0:
            raise ConfigError(f"sun_W {self.sun_W!r}: a direction of 3 finite numbers, not zero")
        if checks.finite_vector([self.ambient], 1) is None:
            raise ConfigError(f"ambient {self.ambient!r}: a finite number")
        for name in ("background_rgb", "sky_rgb"):
            colour = getattr(self, name)
            if colour is not None and checks.finite_vector(colour, 3) is None:
                raise ConfigError(f"{name} {colour!r}: 3 finite numbers (0 to 1)")
            if colour is not None:
                object.__setattr__(self, name, tuple(float(v) for v in colour))
        object.__setattr__(self, "sun_W", tuple(float(v) for v in sun))
        if not isinstance(self.looks, bool):
            raise ConfigError(f"looks {self.looks!r}: true or false")


def _strings(values: Collection[str], what: str) -> list[str]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"render {what} {values!r}: a collection of names")
    return list(values)
