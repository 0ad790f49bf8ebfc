"""Each camera's look on the device (``goggles.render.looks``): the per-camera arrays a render kernel
built with looks reads from ``Lighting``, their host rows (a batch's resets change a few cameras'), the
capture's tint the splat pass reads, and one table of sun-lit faces per sun a pool of looks uses."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import warp as wp

from goggles import checks
from goggles.errors import ConfigError
from goggles.render.looks import Look
from goggles.render.settings import RenderSettings
from goggles.render.shading import Lighting
from goggles.render.sunlit import sunlit_faces


class CameraLooks:
    """Per-camera look arrays, each camera's at first the scene's own look (``settings``').

    Args:
        scene: the renderer's ``DeviceScene`` (its materials; the textures a look swaps in go into it).
        settings: the renderer's settings (the scene's own sun, ambient light and sky).
        light: the renderer's ``Lighting``: its ``look_*`` arrays are set here, and ``sunlit`` grows by
            a table per pooled sun.
        cameras: how many (1, a placeholder, for a renderer without looks).
    """

    def __init__(self, scene, settings: RenderSettings, light: Lighting, cameras: int):
        self.scene, self.settings, self.light, self.cameras = scene, settings, light, cameras
        self.materials = max(1, scene.data.material_rgb.shape[0])
        """How many materials a look's ``albedo`` and ``texture`` cover (the scene's, when made)."""
        self._sun = np.asarray(settings.sun_W, np.float64) / np.linalg.norm(settings.sun_W)
        self._zenith = settings.sky_rgb if settings.sky_rgb is not None else settings.background_rgb
        m = self.materials
        self._rows = {
            "look_sun": (np.tile([*self._sun, 1.0], (cameras, 1)).astype(np.float32), wp.vec4),
            "look_ambient": (np.full(cameras, settings.ambient, np.float32), float),
            "look_horizon": (np.tile(settings.background_rgb, (cameras, 1)).astype(np.float32), wp.vec3),
            "look_zenith": (np.tile(self._zenith, (cameras, 1)).astype(np.float32), wp.vec3),
            "look_exposure": (np.ones(cameras, np.float32), float),
            "look_table": (np.zeros(cameras, np.int32), wp.int32),
            "look_albedo": (np.ones((cameras, m, 3), np.float32), wp.vec3),
            "look_texture": (np.full((cameras, m), -1, np.int32), wp.int32),
            "capture_tint": (np.ones((cameras, 3), np.float32), wp.vec3),
        }
        """Each array's host rows and Warp type, by its name in ``Lighting`` (the capture's tint is the
        splat pass's own argument)."""
        for name, (rows, dtype) in self._rows.items():
            array = wp.array(rows, dtype=dtype, device=scene.device)
            if name == "capture_tint":
                self.capture_tint = array
            else:
                setattr(light, name, array)
        self._sun_tables: dict[tuple, int] = {tuple(self._sun.round(9)): 0}
        """Which table in ``light.sunlit`` each sun has (the scene's first)."""
        self._first_texture = 0

    def set(
        self, looks: Sequence[Look], textures: Sequence[np.ndarray] = (), cameras: Sequence[int] | None = None
    ) -> None:
        """Give cameras their looks: one per camera, or one for each of ``cameras`` (indices; the others
        keep theirs). ``textures`` are the images a look's ``texture`` indexes (added to the scene's
        texture table once). Every look is checked before any row changes; the arrays are written in
        place (a recorded render sees them).

        Raises:
            ConfigError: looks that do not fit the cameras or the scene's materials, or numbers that
                are not finite, negative factors, a zero sun; naming the camera.
        """
        n, settings, rows = self.cameras, self.settings, {k: r for k, (r, _) in self._rows.items()}
        chosen = np.arange(n) if cameras is None else np.asarray(cameras, np.int64).reshape(-1)
        if chosen.size and (chosen.min() < 0 or chosen.max() >= n):
            raise ConfigError(f"set_looks: camera indices {chosen.tolist()} of {n} cameras")
        if len(looks) != len(chosen) or not all(isinstance(look, Look) for look in looks):
            raise ConfigError(f"set_looks needs one Look per camera ({len(chosen)}), got {len(looks)}")
        textures = tuple(textures)
        for i, look in zip(chosen, looks):
            _check_look(i, look, self.materials, len(textures))
        if textures:  # added once: the scene knows images it holds (by identity)
            self._first_texture = self.scene.add_textures(textures)
        for i, look in zip(chosen, looks):
            direction = self._sun if look.sun_W is None else np.asarray(look.sun_W, np.float64)
            direction = direction / np.linalg.norm(direction)
            rows["look_sun"][i] = [*direction, look.sun_intensity]
            rows["look_table"][i] = self._sun_table(direction, look.sun_W is None or look.sun_table)
            rows["look_ambient"][i] = settings.ambient if look.ambient is None else look.ambient
            rows["look_exposure"][i] = look.exposure
            rows["look_horizon"][i] = np.multiply(settings.background_rgb, look.sky)
            rows["look_zenith"][i] = np.multiply(self._zenith, look.sky)
            rows["capture_tint"][i] = np.multiply(look.capture, look.exposure)
            rows["look_albedo"][i] = 1.0 if look.albedo is None else look.albedo
            texture = np.full(self.materials, -1) if look.texture is None else np.asarray(look.texture)
            rows["look_texture"][i] = np.where(texture >= 0, texture + self._first_texture, -1)
        for name, values in rows.items():
            (self.capture_tint if name == "capture_tint" else getattr(self.light, name)).assign(values)

    def _sun_table(self, sun: np.ndarray, wanted: bool) -> int:
        """The index of ``sun``'s table of faces it lights whole in ``light.sunlit``, built now if
        ``wanted`` (a look's sun from a pool: ``goggles.render.looks``), or -1 (every shadow ray traced)."""
        key = tuple(np.asarray(sun, np.float64).round(9))
        if key in self._sun_tables:
            return self._sun_tables[key]
        light = self.light
        full = (len(self._sun_tables) + 1) * max(light.static_faces, 1) >= 2**31
        if not wanted or light.static_faces == 0 or full:
            return -1
        tables = light.sunlit.numpy().reshape(-1, light.static_faces)[: len(self._sun_tables)]
        added = sunlit_faces(self.scene, np.asarray(key)).numpy()
        light.sunlit = wp.array(np.concatenate([tables.ravel(), added]), dtype=wp.int8, device=self.scene.device)
        self._sun_tables[key] = len(self._sun_tables)
        return self._sun_tables[key]

    @property
    def sun_tables(self) -> int:
        """How many suns have a table of the faces they light whole (the scene's counts)."""
        return len(self._sun_tables)


def _check_look(i: int, look: Look, materials: int, textures: int) -> None:
    """Camera ``i``'s look: finite numbers, factors not negative, a sun direction not zero, albedo and
    texture arrays of the scene's materials, texture indices among the ``textures`` images (ConfigError)."""
    factors = [look.sun_intensity, look.exposure, *look.sky, *look.capture]
    if look.ambient is not None:
        factors.append(look.ambient)
    if look.albedo is not None:
        factors += list(np.ravel(look.albedo))
    if not all(np.isfinite(v) and v >= 0 for v in factors):
        raise ConfigError(
            f"look {i}: its intensity, ambient, exposure, sky, capture and albedo must be finite and >= 0"
        )
    if look.sun_W is not None:
        sun = checks.finite_vector(look.sun_W, 3)
        if sun is None or not np.linalg.norm(sun) > 0:
            raise ConfigError(f"look {i}: sun_W {look.sun_W!r} must be a direction of 3 finite numbers, not zero")
    for name, values, shape in (("albedo", look.albedo, (materials, 3)), ("texture", look.texture, (materials,))):
        if values is not None and np.shape(values) != shape:
            raise ConfigError(f"look {i}: {name} of shape {np.shape(values)}; this scene needs {shape}")
    if look.texture is not None and np.any(look.texture >= textures):
        raise ConfigError(f"look {i}: texture index {int(look.texture.max())} of {textures} images")
