"""Looks: each camera's own appearance of one world (the sun's direction and strength, the ambient light,
the sky's colour, each material's albedo or a texture swapped in, a capture's colour, the camera's
exposure and gain), held as per-camera arrays that the render kernel reads. A batch of learning
environments renders as many looks as it has cameras, with no scene uploaded again per episode.

A ``[looks]`` table draws them (``LooksSpec``), per camera and episode, from the run's seed::

    [looks]
    sun_elevation_deg = { uniform = [15.0, 75.0] }   # the sun's height over the horizon (> 0)
    sun_azimuth_deg = { uniform = [0.0, 360.0] }     # its compass bearing: 0 north, 90 east
    sun_intensity = { uniform = [0.6, 1.2] }         # factor on the sunlight (>= 0)
    ambient = { uniform = [0.2, 0.6] }               # light that does not depend on the sun, [0, 1]
    sky = { uniform = [0.7, 1.2] }                   # factor per colour channel on the sky (>= 0)
    brightness = { uniform = [0.7, 1.3] }            # factor per material, every channel alike (>= 0)
    albedo = { normal = [1.0, 0.05] }                # factor per material and channel: its hue (>= 0)
    sun_directions = 16                              # the sun takes one of 16 drawn once (below)
    textures = "textures/"                           # images swapped in for materials (a folder)
    texture_probability = 0.5                        # each material's chance of a swapped texture
    exposure = { uniform = [0.7, 1.4] }              # the camera's exposure, a factor (> 0)
    gain_db = { normal = [0.0, 1.5] }                # the camera's gain, dB (x 10^(dB/20))
    capture_exposure = { uniform = [0.8, 1.2] }      # factor on a splat capture's colours (>= 0)
    capture_tint = { uniform = [0.9, 1.1] }          # factor per channel on them (>= 0)

Keys left out keep the scene's own value. A swapped texture replaces the material's colour and its own
texture (vertex colours stay), laid along the hit face's dominant axis in world metres
(``TEXTURE_METRES`` per image), so that a mesh without texture coordinates takes it too. Looks change
colour only: depth, segmentation, normals and faces are the same under every look.

Shadows: the renderer keeps, per sun, a table of the static faces that sun lights whole, whose pixels
skip their shadow ray (``goggles.render.sunlit``: 0.4 s to build for the arena on two cores). A sun
drawn anew each episode has none, and its camera traces every shadow ray (a quarter slower for 64
learning environments at 64x48 on the CPU). With ``sun_directions = N`` the sun's angles are drawn N
times once (from the seed) and each episode takes one of those N at random: N tables, built once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from goggles.checks import read_toml
from goggles.distributions import Distribution, parse_distribution
from goggles.errors import ConfigError

#: Each drawn key: (values drawn per camera: 1, 3 channels, 1 or 3 per material; its floor or None).
KEYS = {
    "sun_elevation_deg": ("one", (0.0, True)),
    "sun_azimuth_deg": ("one", None),
    "sun_intensity": ("one", (0.0, False)),
    "ambient": ("one", (0.0, False)),
    "sky": ("rgb", (0.0, False)),
    "brightness": ("material", (0.0, False)),
    "albedo": ("materials", (0.0, False)),
    "exposure": ("one", (0.0, True)),
    "gain_db": ("one", None),
    "capture_exposure": ("one", (0.0, False)),
    "capture_tint": ("rgb", (0.0, False)),
}
#: Keys that are settings, not distributions.
SETTINGS = ("textures", "texture_probability", "sun_directions")
#: Most suns a pool may hold (each a table of the static faces the sun lights whole, a byte per face).
MAX_SUN_DIRECTIONS = 256
#: A swapped texture covers this many metres of the world per image.
TEXTURE_METRES = 1.0
#: Swapped-in images are shrunk to at most this many pixels on their longer side (a photo folder would
#: otherwise put gigabytes of texels on the device).
MAX_TEXTURE_PX = 512
#: Image files a texture folder's are read from.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tga", ".tif", ".tiff", ".webp")
#: Apart from the physical randomisation's stream (seed, environment, episode), so that drawing looks
#: changes no airframe, wind or mount that a file without looks draws.
_STREAM = 0x100C5


@dataclass(frozen=True, eq=False)  # (arrays inside: compared by identity)
class Look:
    """One camera's appearance; the defaults are the scene's own look."""

    sun_W: tuple[float, float, float] | None = None
    """Direction towards the sun, world frame (None: the render settings')."""
    sun_table: bool = False
    """The sun is one of a few (a pool): the renderer builds its table of faces it lights whole once."""
    sun_intensity: float = 1.0
    ambient: float | None = None
    """Fraction of light that does not depend on the sun (None: the settings'); above 1 counts as 1."""
    sky: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """Factor per channel on the sky's (or background's) colour."""
    exposure: float = 1.0
    """Factor on everything the camera sees (exposure x gain)."""
    capture: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """Factor per channel on splat captures' colours (their own exposure and tint)."""
    albedo: np.ndarray | None = None
    """(materials, 3) factor on each material's albedo, or None."""
    texture: np.ndarray | None = None
    """(materials,) index into the looks' textures of the image swapped in, -1 for its own; or None."""
    values: dict[str, float] = field(default_factory=dict)
    """What was drawn, by key (the per-material and per-channel draws as their mean)."""


def sun_direction(elevation_deg: float, azimuth_deg: float) -> tuple[float, float, float]:
    """Unit vector towards a sun at this elevation and compass bearing, world ENU (x east, y north)."""
    el, az = math.radians(elevation_deg), math.radians(azimuth_deg)
    return (math.sin(az) * math.cos(el), math.cos(az) * math.cos(el), math.sin(el))


def sun_angles(sun_W) -> tuple[float, float]:
    """(elevation, compass bearing) in degrees of a direction towards the sun."""
    x, y, z = np.asarray(sun_W, float) / np.linalg.norm(sun_W)
    return math.degrees(math.asin(max(-1.0, min(1.0, z)))), math.degrees(math.atan2(x, y)) % 360.0


@dataclass(frozen=True, eq=False)  # (images inside: compared by identity)
class LooksSpec:
    """What a ``[looks]`` table draws per camera and episode."""

    distributions: dict[str, Distribution] = field(default_factory=dict)
    textures: tuple[np.ndarray, ...] = ()
    """(H, W, 3) uint8 images a material may take instead of its own colour."""
    texture_probability: float = 0.0
    sun_directions: int = 0
    """The sun takes one of this many directions drawn once per seed; 0: drawn anew each episode."""
    where: str = "looks"

    @classmethod
    def load(cls, path: str | Path) -> LooksSpec:
        """A file with a ``[looks]`` table (a randomisation or dataset file)."""
        path = Path(path)
        tables = read_toml(path, "looks file")
        if "looks" not in tables:
            raise ConfigError(f"{path}: no [looks] table")
        return cls.from_table(tables["looks"], f"{path}: [looks]", path.parent)

    @classmethod
    def from_table(cls, table, where: str = "[looks]", folder: Path | None = None) -> LooksSpec:
        """Raises ConfigError naming ``where`` and the key for anything it cannot draw from; a texture
        folder is read relative to ``folder`` (the file's own)."""
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        found = {}
        for key, spec in table.items():
            if key in SETTINGS:
                continue
            if key not in KEYS:
                raise ConfigError(f"{where} unknown key {key!r}; allowed: {sorted([*KEYS, *SETTINGS])}")
            found[key] = parse_distribution(spec, f"{where} {key}", KEYS[key][1])
        textures, probability = (), 0.0
        if "textures" in table:
            textures = _read_textures(table["textures"], f"{where} textures", folder or Path.cwd())
            probability = 1.0
        if "texture_probability" in table:
            value = table["texture_probability"]
            if not textures:
                raise ConfigError(f'{where} texture_probability needs textures = "<folder of images>"')
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ConfigError(f"{where} texture_probability {value!r}: a number in [0, 1]")
            probability = float(value)
        pool = table.get("sun_directions", 0)
        if isinstance(pool, bool) or not isinstance(pool, int) or not 0 <= pool <= MAX_SUN_DIRECTIONS:
            raise ConfigError(f"{where} sun_directions {pool!r}: a whole number from 0 to {MAX_SUN_DIRECTIONS}")
        return cls(found, textures, probability, pool, where)

    def _sun(self, rng: np.random.Generator, scene_sun_W) -> tuple[float, float, float]:
        elevation, azimuth = sun_angles(scene_sun_W if scene_sun_W is not None else (0.0, 0.0, 1.0))
        if "sun_elevation_deg" in self.distributions:
            elevation = self.distributions["sun_elevation_deg"].draw(rng)
        if "sun_azimuth_deg" in self.distributions:
            azimuth = self.distributions["sun_azimuth_deg"].draw(rng)
        return sun_direction(elevation, azimuth)

    def draw(self, seed: int, stream: int, episode: int, materials: int, scene_sun_W=None) -> Look:
        """One camera's look for one episode of stream ``stream`` (an environment, a dataset job's
        look): the same numbers for the same arguments, whatever else is drawn. ``scene_sun_W`` gives
        the sun's angle that a spec drawing only the other one keeps."""
        rng = np.random.default_rng([seed, stream, episode, _STREAM])
        drawn: dict[str, np.ndarray] = {}
        sun_W, sun_keys = None, ("sun_elevation_deg", "sun_azimuth_deg")
        if any(key in self.distributions for key in sun_keys):
            if self.sun_directions:  # one of the pool, the same N for every stream of this seed
                pool = np.random.default_rng([seed, _STREAM])
                suns = [self._sun(pool, scene_sun_W) for _ in range(self.sun_directions)]
                sun_W = suns[int(rng.integers(self.sun_directions))]
            else:
                sun_W = self._sun(rng, scene_sun_W)
            elevation, azimuth = sun_angles(sun_W)
            drawn |= {k: np.array([v]) for k, v in zip(sun_keys, (elevation, azimuth)) if k in self.distributions}
        for key, (shape, _) in KEYS.items():
            if key in self.distributions and key not in sun_keys:
                count = {"one": 1, "rgb": 3, "material": max(materials, 0), "materials": 3 * max(materials, 0)}[shape]
                drawn[key] = np.array([self.distributions[key].draw(rng) for _ in range(count)])
        texture = None
        if self.textures and materials > 0:
            swapped = rng.random(materials) < self.texture_probability
            texture = np.where(swapped, rng.integers(0, len(self.textures), materials), -1).astype(np.int32)

        def one(key: str, default: float) -> float:
            return float(drawn[key][0]) if key in drawn else default

        def rgb(key: str) -> tuple[float, float, float]:
            return tuple(float(v) for v in drawn[key]) if key in drawn else (1.0, 1.0, 1.0)

        exposure = one("exposure", 1.0) * 10.0 ** (one("gain_db", 0.0) / 20.0)
        capture = tuple(one("capture_exposure", 1.0) * v for v in rgb("capture_tint"))
        albedo = drawn["albedo"].reshape(materials, 3) if "albedo" in drawn else None
        if "brightness" in drawn:  # one factor per material on all three channels (and on its hue's)
            brightness = np.repeat(drawn["brightness"].reshape(materials, 1), 3, axis=1)
            albedo = brightness if albedo is None else albedo * brightness
        values = {f"looks.{key}": float(np.mean(v)) for key, v in drawn.items()}
        if texture is not None:
            values["looks.textures_swapped"] = float(np.count_nonzero(texture >= 0))
        return Look(
            sun_W=sun_W,
            sun_table=sun_W is not None and self.sun_directions > 0,
            sun_intensity=one("sun_intensity", 1.0),
            ambient=one("ambient", None) if "ambient" in drawn else None,
            sky=rgb("sky"),
            exposure=exposure,
            capture=capture,
            albedo=albedo,
            texture=texture,
            values=values,
        )


def _read_textures(value, where: str, folder: Path) -> tuple[np.ndarray, ...]:
    from PIL import Image, UnidentifiedImageError

    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where} {value!r}: the path of a folder of images")
    path = (folder / value).expanduser()
    if not path.is_dir():
        raise ConfigError(f"{where}: {path} is not a folder")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise ConfigError(f"{where}: {path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    images = []
    for file in files:
        try:
            with Image.open(file) as image:
                image.thumbnail((MAX_TEXTURE_PX, MAX_TEXTURE_PX))  # keeps the aspect ratio
                images.append(np.ascontiguousarray(np.asarray(image.convert("RGB"), np.uint8)))
        except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
            raise ConfigError(f"{where}: {file} is not an image PIL can read ({exc})") from exc
    return tuple(images)
