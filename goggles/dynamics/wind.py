"""The air the vehicles fly through: a steady wind with a profile in height, Dryden turbulence and
discrete gusts, summed at each vehicle's position at each physics step (``wind_at``).

- **Steady wind**: ``speed`` at ``reference_height`` (6.096 m: the 20 ft of MIL-F-8785C's W20),
  blowing from the compass bearing ``from_deg`` (0: from the north, +y; 90: from the east, +x;
  meteorology's convention), uniform in height, or scaled by a power law (u(h) = u_ref (h/h_ref)^a,
  a = 1/7 over open ground) or a log law (u(h) = u_ref ln(h/z0) / ln(h_ref/z0), z0 the roughness).
- **Turbulence**: the Dryden model of MIL-F-8785C for low altitude (MIL-HDBK-1797 tabulates the
  same), light, moderate or severe (W20 = 15, 30, 45 knots): sigma_w = 0.1 W20, sigma_u = sigma_v =
  sigma_w / (0.177 + 0.000823 h)^0.4, L_w = h, L_u = L_v = h / (0.177 + 0.000823 h)^1.2, h in feet
  (held within the model's 10 to 1,000 ft). The velocities are those of the spectra
      Phi_u(w) = sigma_u^2 (2 L_u / pi V) / (1 + (L_u w / V)^2)
      Phi_v(w) = sigma_v^2 (L_v / pi V) (1 + 3 (L_v w / V)^2) / (1 + (L_v w / V)^2)^2  (w alike)
  along the mean wind (u), across it (v) and up (w), their time scale set by V, the speed the
  frozen turbulence passes the vehicle: its speed relative to the mean wind, at least ``MIN_PASSING``
  (a hovering drone in a 5 m/s wind sees it pass at 5 m/s). Each vehicle's turbulence is its own,
  drawn from its own random stream (the run's seed and the vehicle), so a run gives the same air twice.
- **A gridded field** (``WindField``, a ``.npz`` file: a CFD export around a building): velocities on a
  regular grid in the grid's own frame, placed in the world by a rigid pose, interpolated trilinearly
  at each vehicle's position and added to the rest; outside the grid it adds nothing.
- **Gusts**: 1-cosine gusts, each (start, duration, peak vector): v = peak (1 - cos(2 pi t'/T)) / 2
  for t' = t - start in [0, T]: up to the peak at T/2 and back to still air.

The airframe's drag (its linear, quadratic and isotropic terms) acts on the velocity relative to the
air; the rotors' thrust and torque do not see it (no inflow or blade-flapping model), nor does the
ground effect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import warp as wp

from goggles.errors import ConfigError

#: MIL-F-8785C's wind speed at 20 ft for each turbulence intensity, knots.
W20_KNOTS = {"none": 0.0, "light": 15.0, "moderate": 30.0, "severe": 45.0}
KNOT = 0.514444
FOOT = 0.3048
#: The low-altitude model holds from 10 to 1,000 ft.
LOWEST_FT, HIGHEST_FT = 10.0, 1000.0
#: The slowest the frozen turbulence is taken to pass a vehicle, m/s (Taylor's hypothesis needs it to pass).
MIN_PASSING = 0.5
PROFILES = ("uniform", "power", "log")
#: Most gusts one run describes.
MAX_GUSTS = 64

vec5 = wp.types.vector(length=5, dtype=wp.float32)


def finite(value) -> bool:
    """A finite real number (numpy's too), never a boolean."""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    return number and math.isfinite(value)


@dataclass(frozen=True)
class Gust:
    start_s: float
    duration_s: float
    peak: tuple[float, float, float]
    """The gust's velocity at its middle, world ENU, m/s."""


#: What a wind field file holds (``.npz``): each key and its shape.
FIELD_KEYS = {
    "velocity": "(nx, ny, nz, 3) m/s, the grid's axes, at least 2 points per axis",
    "origin": "(3,) m: grid point [0, 0, 0] in the grid's frame",
    "spacing": "(3,) m between grid points along each axis, > 0",
    "frame": "(4, 4) the grid's rigid pose in the world (T_WG)",
}


@dataclass(frozen=True, eq=False)
class WindField:
    """A gridded wind field: ``velocity`` (nx, ny, nz, 3) m/s at grid point (i, j, k), which lies at
    ``origin + (i, j, k) * spacing`` in the grid's frame, placed in the world by ``frame`` (T_WG)."""

    velocity: np.ndarray
    origin: np.ndarray
    spacing: np.ndarray
    frame: np.ndarray
    source: str = "wind field"

    @classmethod
    def load(cls, path) -> WindField:
        """Read a ``.npz`` of ``FIELD_KEYS``.

        Raises:
            ConfigError: one line naming the file and the key.
        """
        from pathlib import Path

        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                found = {k: np.asarray(data[k]) for k in data.files}
        except FileNotFoundError:
            raise ConfigError(f"{path}: wind field not found") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a wind field (.npz of {', '.join(FIELD_KEYS)}): {exc}") from None
        for key, meaning in FIELD_KEYS.items():
            if key not in found:
                raise ConfigError(f"{path}: no '{key}' ({meaning})")
        return cls(found["velocity"], found["origin"], found["spacing"], found["frame"], str(path))

    def __post_init__(self):
        where = self.source
        shapes = {"origin": (3,), "spacing": (3,), "frame": (4, 4)}
        velocity = np.asarray(self.velocity)
        if velocity.ndim != 4 or velocity.shape[3] != 3 or min(velocity.shape[:3]) < 2:
            raise ConfigError(f"{where}: 'velocity' must be {FIELD_KEYS['velocity']}, got shape {velocity.shape}")
        for key, shape in shapes.items():
            value = np.asarray(getattr(self, key))
            if value.shape != shape or value.dtype.kind not in "iuf":
                raise ConfigError(f"{where}: '{key}' must be {FIELD_KEYS[key]}, got {value.shape} {value.dtype}")
        for key in ("velocity", *shapes):
            if not np.all(np.isfinite(getattr(self, key))):
                raise ConfigError(f"{where}: '{key}' holds NaN or infinity")
        if np.any(np.asarray(self.spacing) <= 0.0):
            raise ConfigError(f"{where}: 'spacing' must be {FIELD_KEYS['spacing']}, got {self.spacing}")
        frame = np.asarray(self.frame, np.float64)
        R = frame[:3, :3]
        if not (
            np.allclose(R @ R.T, np.eye(3), atol=1e-6) and np.linalg.det(R) > 0 and np.allclose(frame[3], [0, 0, 0, 1])
        ):
            raise ConfigError(f"{where}: 'frame' must be {FIELD_KEYS['frame']}: a rotation and a translation")
        if np.abs(velocity).max(initial=0.0) > 200.0:
            raise ConfigError(
                f"{where}: 'velocity' reaches {np.abs(velocity).max():.3g} m/s: over 200, not air near a drone"
            )


@dataclass(frozen=True)
class WindSettings:
    """The air of a run (``[wind]`` in a run file); see the module's docstring for each model."""

    speed: float = 0.0
    from_deg: float = 0.0
    profile: str = "uniform"
    reference_height: float = 20.0 * FOOT
    exponent: float = 1.0 / 7.0
    roughness: float = 0.03
    turbulence: str = "none"
    gusts: tuple[Gust, ...] = ()
    field: WindField | None = None

    def __post_init__(self):
        for name in ("speed", "from_deg", "reference_height", "exponent", "roughness"):
            if not finite(getattr(self, name)):
                raise ConfigError(f"wind {name} must be a finite number, got {getattr(self, name)!r}")
        if not 0.0 <= self.speed <= 100.0:
            raise ConfigError(f"wind speed must be 0 to 100 m/s, got {self.speed!r}")
        if self.profile not in PROFILES:
            raise ConfigError(f"wind profile {self.profile!r}: use one of {', '.join(PROFILES)}")
        if self.reference_height <= 0.0:
            raise ConfigError(f"wind reference_height must be above 0 m, got {self.reference_height!r}")
        if not 0.0 < self.exponent <= 1.0:
            raise ConfigError(f"wind exponent must be in (0, 1] (1/7 over open ground), got {self.exponent!r}")
        if not 0.0 < self.roughness < self.reference_height:
            raise ConfigError(
                f"wind roughness must be above 0 m and below the reference height, got {self.roughness!r}"
            )
        if self.turbulence not in W20_KNOTS:
            raise ConfigError(f"wind turbulence {self.turbulence!r}: use one of {', '.join(W20_KNOTS)}")
        if len(self.gusts) > MAX_GUSTS:
            raise ConfigError(f"{len(self.gusts)} wind gusts: at most {MAX_GUSTS}")
        for k, gust in enumerate(self.gusts):
            values = (gust.start_s, gust.duration_s, *gust.peak)
            if len(gust.peak) != 3 or not all(finite(v) for v in values) or gust.duration_s <= 0.0:
                raise ConfigError(f"wind gust {k + 1}: a start (s), a duration above 0 s and a peak [x, y, z] m/s")

    def mean(self, height: float) -> np.ndarray:
        """The steady wind at ``height`` m above the ground, world ENU, m/s."""
        towards = -np.array([math.sin(math.radians(self.from_deg)), math.cos(math.radians(self.from_deg)), 0.0])
        return towards * self.speed * profile_factor(self, height)

    def gust(self, t: float) -> np.ndarray:
        """The gusts' velocity at sim time ``t``, world ENU, m/s."""
        total = np.zeros(3)
        for g in self.gusts:
            since = t - g.start_s
            if 0.0 <= since <= g.duration_s:
                total += np.asarray(g.peak) * 0.5 * (1.0 - math.cos(2.0 * math.pi * since / g.duration_s))
        return total


def profile_factor(settings: WindSettings, height: float) -> float:
    """u(h) / u(reference height) (host side, as ``mean_wind`` computes it on the device)."""
    h = max(height, settings.roughness if settings.profile == "log" else 0.0)
    if settings.profile == "power":
        return (h / settings.reference_height) ** settings.exponent
    if settings.profile == "log":
        return math.log(h / settings.roughness) / math.log(settings.reference_height / settings.roughness)
    return 1.0


def dryden_scales(w20: float, height: float) -> tuple[float, float, float, float]:
    """MIL-F-8785C low altitude: (sigma_u = sigma_v, sigma_w, L_u = L_v, L_w) in m/s and m for the
    wind speed at 20 ft ``w20`` (m/s) at ``height`` m (held to the model's 10 to 1,000 ft)."""
    h = min(max(height / FOOT, LOWEST_FT), HIGHEST_FT)
    sigma_w = 0.1 * w20
    base = 0.177 + 0.000823 * h
    return sigma_w / base**0.4, sigma_w, h / base**1.2 * FOOT, h * FOOT


@wp.struct
class WindParams:
    """A ``WindSettings`` as the physics kernel reads it."""

    towards: wp.vec3
    """Unit, horizontal: where the steady wind blows."""
    speed: float
    profile: int
    reference_height: float
    exponent: float
    roughness: float
    w20: float
    """MIL-F-8785C's wind speed at 20 ft of the turbulence, m/s (0: none)."""
    gust_start: wp.array(dtype=float)
    gust_duration: wp.array(dtype=float)
    gust_peak: wp.array(dtype=wp.vec3)
    gust_count: int
    field: wp.array3d(dtype=wp.vec3)
    """The gridded field's velocities, world axes (one still point when there is none)."""
    field_R: wp.mat33
    """World to grid rotation."""
    field_t: wp.vec3
    """The grid frame's origin in the world."""
    field_origin: wp.vec3
    field_spacing: wp.vec3
    has_field: int
    per_vehicle: int
    """1: each vehicle's steady wind and turbulence from the arrays below (``MultirotorSim.set_wind``)."""
    vehicle_towards: wp.array(dtype=wp.vec3)
    vehicle_speed: wp.array(dtype=float)
    vehicle_w20: wp.array(dtype=float)
    vehicle_gusts: int
    """1: each vehicle's own 1-cosine gust from the arrays below (``MultirotorSim.set_gusts``), besides the run's."""
    vehicle_gust_start: wp.array(dtype=float)
    vehicle_gust_duration: wp.array(dtype=float)
    vehicle_gust_peak: wp.array(dtype=wp.vec3)


def wind_params(settings: WindSettings | None, device, count: int = 1) -> WindParams:
    """The kernel's view of ``settings`` for ``count`` vehicles (each may get its own steady wind and
    turbulence later: ``per_vehicle``)."""
    s = settings or WindSettings()
    params = WindParams()
    params.per_vehicle = 0
    params.vehicle_towards = wp.zeros(max(count, 1), dtype=wp.vec3, device=device)
    params.vehicle_speed = wp.zeros(max(count, 1), dtype=float, device=device)
    params.vehicle_w20 = wp.zeros(max(count, 1), dtype=float, device=device)
    params.vehicle_gusts = 0
    params.vehicle_gust_start = wp.zeros(max(count, 1), dtype=float, device=device)
    params.vehicle_gust_duration = wp.ones(max(count, 1), dtype=float, device=device)
    params.vehicle_gust_peak = wp.zeros(max(count, 1), dtype=wp.vec3, device=device)
    towards = -np.array([math.sin(math.radians(s.from_deg)), math.cos(math.radians(s.from_deg)), 0.0])
    params.towards = wp.vec3(*towards.astype(np.float32))
    params.speed = float(s.speed)
    params.profile = PROFILES.index(s.profile)
    params.reference_height = float(s.reference_height)
    params.exponent = float(s.exponent)
    params.roughness = float(s.roughness)
    params.w20 = W20_KNOTS[s.turbulence] * KNOT
    gusts = s.gusts or (Gust(0.0, 1.0, (0.0, 0.0, 0.0)),)  # one still gust: Warp arrays are not empty
    params.gust_start = wp.array([g.start_s for g in gusts], dtype=float, device=device)
    params.gust_duration = wp.array([g.duration_s for g in gusts], dtype=float, device=device)
    params.gust_peak = wp.array([g.peak for g in gusts], dtype=wp.vec3, device=device)
    params.gust_count = len(s.gusts)
    params.has_field = int(s.field is not None)
    if s.field is None:
        params.field = wp.zeros((2, 2, 2), dtype=wp.vec3, device=device)
        params.field_R, params.field_t = wp.mat33(np.eye(3, dtype=np.float32)), wp.vec3(0.0)
        params.field_origin, params.field_spacing = wp.vec3(0.0), wp.vec3(1.0)
        return params
    frame = np.asarray(s.field.frame, np.float64)
    world_axes = np.asarray(s.field.velocity, np.float64) @ frame[:3, :3].T  # velocities into the world's axes
    params.field = wp.array(world_axes.astype(np.float32), dtype=wp.vec3, device=device)
    params.field_R = wp.mat33(frame[:3, :3].T.astype(np.float32))
    params.field_t = wp.vec3(*frame[:3, 3].astype(np.float32))
    params.field_origin = wp.vec3(*np.asarray(s.field.origin, np.float32))
    params.field_spacing = wp.vec3(*np.asarray(s.field.spacing, np.float32))
    return params


@wp.func
def steady_of(wind: WindParams, i: int) -> wp.vec4:
    """Vehicle ``i``'s steady wind (where it blows: x, y, z; its speed) and turbulence's W20 in m/s: the
    run's, or its own (``per_vehicle``)."""
    if wind.per_vehicle != 0:
        t = wind.vehicle_towards[i]
        return wp.vec4(t[0], t[1], t[2], wind.vehicle_speed[i])
    return wp.vec4(wind.towards[0], wind.towards[1], wind.towards[2], wind.speed)


@wp.func
def w20_of(wind: WindParams, i: int) -> float:
    if wind.per_vehicle != 0:
        return wind.vehicle_w20[i]
    return wind.w20


@wp.func
def mean_wind(wind: WindParams, height: float, steady: wp.vec4) -> wp.vec3:
    """The steady wind (``steady_of``) at ``height`` above the ground."""
    factor = 1.0
    if wind.profile == 1:
        factor = wp.pow(wp.max(height, 0.0) / wind.reference_height, wind.exponent)
    elif wind.profile == 2:
        h = wp.max(height, wind.roughness)
        factor = wp.log(h / wind.roughness) / wp.log(wind.reference_height / wind.roughness)
    return wp.vec3(steady[0], steady[1], steady[2]) * (steady[3] * factor)


@wp.func
def field_at(wind: WindParams, p: wp.vec3) -> wp.vec3:
    """The gridded field at world point ``p``: trilinear in its grid, zero outside it."""
    g = wp.cw_div(wind.field_R * (p - wind.field_t) - wind.field_origin, wind.field_spacing)
    nx = wind.field.shape[0]
    ny = wind.field.shape[1]
    nz = wind.field.shape[2]
    top = wp.vec3(float(nx - 1), float(ny - 1), float(nz - 1))
    if g[0] < 0.0 or g[1] < 0.0 or g[2] < 0.0 or g[0] > top[0] or g[1] > top[1] or g[2] > top[2]:
        return wp.vec3(0.0)
    i = wp.min(int(wp.floor(g[0])), nx - 2)
    j = wp.min(int(wp.floor(g[1])), ny - 2)
    k = wp.min(int(wp.floor(g[2])), nz - 2)
    fx = g[0] - float(i)
    fy = g[1] - float(j)
    fz = g[2] - float(k)
    low = wind.field[i, j, k] * (1.0 - fx) + wind.field[i + 1, j, k] * fx
    high = wind.field[i, j + 1, k] * (1.0 - fx) + wind.field[i + 1, j + 1, k] * fx
    bottom = low * (1.0 - fy) + high * fy
    low = wind.field[i, j, k + 1] * (1.0 - fx) + wind.field[i + 1, j, k + 1] * fx
    high = wind.field[i, j + 1, k + 1] * (1.0 - fx) + wind.field[i + 1, j + 1, k + 1] * fx
    top_layer = low * (1.0 - fy) + high * fy
    return bottom * (1.0 - fz) + top_layer * fz


@wp.func
def one_gust(start: float, duration: float, peak: wp.vec3, t: float) -> wp.vec3:
    """A 1-cosine gust's velocity at sim time ``t``."""
    since = t - start
    if since >= 0.0 and since <= duration:
        return peak * (0.5 * (1.0 - wp.cos(2.0 * wp.pi * since / duration)))
    return wp.vec3(0.0)


@wp.func
def gusts_at(wind: WindParams, i: int, t: float) -> wp.vec3:
    """The run's gusts and vehicle ``i``'s own at sim time ``t``."""
    total = wp.vec3(0.0)
    for k in range(wind.gust_count):
        total += one_gust(wind.gust_start[k], wind.gust_duration[k], wind.gust_peak[k], t)
    if wind.vehicle_gusts != 0:
        total += one_gust(wind.vehicle_gust_start[i], wind.vehicle_gust_duration[i], wind.vehicle_gust_peak[i], t)
    return total


@wp.func
def turbulence_step(wind: WindParams, z: vec5, height: float, passing: float, dt: float, rng: wp.uint32):
    """Advance a vehicle's turbulence state by ``dt``: u is a first-order Gauss-Markov process (its
    exact discretisation); v and w are two first-order lags in a row driven by white noise (the
    first exact, the second's input held over the step: dt / tau < 1 % at 960 Hz)."""
    h = wp.min(wp.max(height / 0.3048, 10.0), 1000.0)
    base = 0.177 + 0.000823 * h
    length_uv = h / wp.pow(base, 1.2) * 0.3048
    length_w = h * 0.3048
    speed = wp.max(passing, 0.5)
    out = vec5(z)
    a_u = wp.exp(-dt * speed / length_uv)
    out[0] = a_u * z[0] + wp.sqrt(1.0 - a_u * a_u) * wp.randn(rng)  # unit variance
    for axis in range(2):
        tau = wp.where(axis == 0, length_uv, length_w) / speed
        a = wp.exp(-dt / tau)
        first = 1 + 2 * axis
        out[first] = a * z[first] + wp.sqrt((1.0 - a * a) / (2.0 * tau)) * wp.randn(rng)
        out[first + 1] = a * z[first + 1] + (1.0 - a) * z[first]
    return out, rng


@wp.func
def turbulence_velocity(z: vec5, height: float, passing: float, steady: wp.vec4, w20: float) -> wp.vec3:
    """The turbulence's velocity (world ENU) from its state: u along the steady wind, v across it, w up."""
    h = wp.min(wp.max(height / 0.3048, 10.0), 1000.0)
    base = 0.177 + 0.000823 * h
    sigma_w = 0.1 * w20
    sigma_uv = sigma_w / wp.pow(base, 0.4)
    speed = wp.max(passing, 0.5)
    tau_uv = h / wp.pow(base, 1.2) * 0.3048 / speed
    tau_w = h * 0.3048 / speed
    root3 = wp.sqrt(3.0)
    # (1 + sqrt(3) tau s) / (1 + tau s)^2 of unit white noise has variance 1 / tau.
    v = sigma_uv * wp.sqrt(tau_uv) * ((1.0 - root3) * z[2] + root3 * z[1])
    w = sigma_w * wp.sqrt(tau_w) * ((1.0 - root3) * z[4] + root3 * z[3])
    along = wp.vec3(steady[0], steady[1], steady[2])
    if steady[3] <= 0.0:
        along = wp.vec3(1.0, 0.0, 0.0)
    across = wp.vec3(-along[1], along[0], 0.0)
    return along * (sigma_uv * z[0]) + across * v + wp.vec3(0.0, 0.0, w)
