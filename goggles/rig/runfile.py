"""Run files: TOML naming the scene, vehicles, cameras, clock and buses, loaded into frozen dataclasses.

Every error names the file and the key. Camera intrinsics come inline (width, height and vfov_deg,
fov_deg for a fisheye, or intrinsics with a lens and its distortion) or from a calibration file: a ROS
camera_info or OpenCV YAML (``calib/*.yaml``), or a Kalibr camchain (a stereo pair from cam0 and
cam1, the mount from T_cam_imu). See ``assets/run-demo.toml``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from goggles.checks import MAX_SEED, Table, finite_vector, is_number, read_toml
from goggles.clock import AUTO, MIN_SCALE, ClockMode, parse_scale
from goggles.dynamics.airframe import PRESET_NAMES as AIRFRAME_PRESETS
from goggles.dynamics.airframe import load_airframe
from goggles.dynamics.model import MAX_PHYSICS_RATE, MIN_PHYSICS_RATE, CollisionResponse, steps_per_sample
from goggles.dynamics.wind import PROFILES, W20_KNOTS, Gust, WindField, WindSettings
from goggles.errors import ConfigError, SceneError
from goggles.firmware.betaflight import BetaflightSettings, diff_settings
from goggles.frames import quat_from_euler, quat_to_matrix
from goggles.render.calibration import load_calibration
from goggles.render.camera import MAX_IMAGE_SIDE, CameraModel, blindness, stereo_right_offset
from goggles.render.lenses import LENSES
from goggles.render.looks import LooksSpec
from goggles.scene.actors import PropSpec
from goggles.scene.assets import UNITS_M, UP_AXES
from goggles.scene.scene_file import AssetSpec, asset_spec
from goggles.scene.vehicle_model import VEHICLE_CLASS
from goggles.sensors.camera_noise import PRESETS as CAMERA_NOISE_MODELS
from goggles.sensors.camera_noise import CameraNoiseModel
from goggles.sensors.events import EventCameraModel
from goggles.sensors.lidar import PRESETS as LIDAR_PRESETS
from goggles.sensors.lidar import LidarModel
from goggles.sensors.ranges import PRESETS as RANGE_PRESETS
from goggles.sensors.ranges import RangeSensorModel
from goggles.sensors.stereo_depth import PRESETS as STEREO_DEPTH_MODELS
from goggles.sensors.stereo_depth import StereoDepthModel
from goggles.transport.buses import DEFAULT_LCM_URL, LCM_MAX_CHANNEL, CurveServer, ZmqEndpoints
from goggles.transport.ros2 import DISTROS, Ros2Settings, default_domain
from goggles.transport.schema import MAX_EDIT_NAME

log = logging.getLogger(__name__)

CAMERA_OUTPUTS = ("depth", "range", "rgb", "segmentation", "beacons", "events")
IMAGE_OUTPUTS = ("depth", "range", "rgb", "segmentation")
#: The widest stereo pair, m: a larger baseline is a unit mistake (millimetres given as metres).
MAX_BASELINE = 100.0


@dataclass(frozen=True)
class VehicleConfig:
    name: str
    preset: str
    """Airframe preset name or TOML path."""
    start: tuple[float, float, float, float]
    """x, y, z (m) and yaw (rad) at rest."""
    route: tuple[tuple[float, float, float, float], ...]
    """Waypoints x, y, z, yaw flown in a loop by the position controller (empty: wait for commands)."""
    route_tolerance: float
    """m: distance at which the next waypoint is taken."""
    imu_rate: float
    """Hz; must divide the physics rate."""
    imu_batch: int
    """IMU samples delivered together (1: each as it is sampled). A batch waits on the device and
    reaches the host in one copy, as an IMU's FIFO does; each message keeps its sample's time."""
    state_rate: float
    """Hz of ground-truth state messages."""
    floor_z: float
    """m: height of the floor plane the vehicle rests on."""
    segmentation: int = VEHICLE_CLASS
    """Class id of its body in the segmentation images of the other vehicles' cameras."""
    betaflight: BetaflightSettings | None = None
    """``controller = "betaflight"``: Betaflight's SITL flies it (``goggles.firmware``); None: goggles' own
    controllers."""
    fc_rate: float = 0.0
    """Hz of sim time: how often its firmware gets its state and answers with its motors."""
    command_timeout: float = 0.5
    """s of sim time a client's velocity, attitude, rates or rotor-speed command lasts (0: for ever): then
    the vehicle holds its position (a position command lasts: it is a place to be). A firmware's
    vehicle: its receiver hears nothing once its sticks are that old, and the firmware's failsafe acts."""


@dataclass(frozen=True)
class CameraConfig:
    vehicle: str
    name: str
    model: CameraModel
    T_BC: np.ndarray
    """(4, 4) pose of the (left) camera's optical frame in the body frame."""
    baseline: float | None
    """m: a stereo rig's right camera sits at -baseline along body y (or at ``T_LR``); None for a mono camera."""
    rate: float
    """Hz of sim time."""
    outputs: tuple[str, ...]
    depth_model: StereoDepthModel | None = None
    """How the depth is measured (``goggles.sensors.stereo_depth.PRESETS``); None: exact."""
    noise_model: CameraNoiseModel | None = None
    """The colour's sensor (``goggles.sensors.camera_noise.PRESETS``); None: ideal."""
    exposure_s: float = 0.0
    """Shutter open time ending at the frame's time, s (motion blur over ``blur_subframes``); 0: instantaneous."""
    blur_subframes: int = 8
    readout_s: float = 0.0
    """Rolling shutter: time from the first row's exposure to the last's, s; 0: a global shutter."""
    right_model: CameraModel | None = None
    """A stereo rig's right camera, when it is not the left one's twin (a calibrated pair)."""
    T_LR: np.ndarray | None = None
    """(4, 4) a stereo rig's right optical frame in the left's, when not ``baseline`` along x (a calibrated pair)."""
    events: EventCameraModel | None = None
    """An event camera's pixels (``outputs = ["events"]``): it renders at times its events choose,
    from ``min_rate`` to ``rate``."""
    min_rate: float = 0.0
    """An event camera's slowest render rate, Hz of sim time."""

    @property
    def right(self) -> CameraModel:
        """A stereo rig's right camera."""
        return self.right_model if self.right_model is not None else self.model

    @property
    def T_BR(self) -> np.ndarray:
        """(4, 4) a stereo rig's right optical frame in the body frame."""
        return self.T_BC @ (self.T_LR if self.T_LR is not None else stereo_right_offset(self.baseline))

    @property
    def rectified(self) -> bool:
        """A stereo rig whose right eye is the left's twin moved along x: its disparity is f·B/Z."""
        return self.right_model is None and self.T_LR is None

    @property
    def eyes(self) -> tuple[str, ...]:
        """The names its images are published under: ``<name>_left`` and ``<name>_right`` for a stereo
        rig, ``<name>`` for a mono camera (channels ``<vehicle>/<eye>/<output>``)."""
        return (self.name,) if self.baseline is None else (f"{self.name}_left", f"{self.name}_right")


@dataclass(frozen=True)
class RangeSensorConfig:
    vehicle: str
    name: str
    model: RangeSensorModel
    T_BS: np.ndarray
    """(4, 4) sensor pose in the body frame; the beam is the sensor's +z."""
    rate: float
    """Hz of sim time."""


@dataclass(frozen=True)
class LidarConfig:
    vehicle: str
    name: str
    model: LidarModel
    T_BS: np.ndarray
    """(4, 4) sensor pose in the body frame (x forward, z up: the spin axis)."""

    @property
    def rate(self) -> float:
        return self.model.rate_hz


@dataclass(frozen=True)
class AvatarConfig:
    """A human played from a BVH clip, in sim time (or wall time in live mode)."""

    name: str
    bvh: Path
    units: str
    up: str
    T_WR: np.ndarray
    """(4, 4) where the clip's origin goes in the world."""
    speed: float
    """Playback speed (1: as recorded)."""


@dataclass(frozen=True)
class RunConfig:
    source: Path | None
    mode: ClockMode
    scene: Path | None
    """Scene file; None for the built-in arena."""
    physics_rate: float
    scale: float | None
    """Fixed clock scale, or None for automatic."""
    max_scale: float
    seed: int
    vehicles: tuple[VehicleConfig, ...]
    cameras: tuple[CameraConfig, ...]
    lcm_url: str | None
    """None: LCM off."""
    zmq: ZmqEndpoints | None
    """None: ZeroMQ off."""
    course: Path | None = None
    """Racing course whose gates (with their beacons) join the world as actors."""
    perturb: int | None = None
    """Seed of a random shift of the course's gates within their bounds, or None."""
    collisions: CollisionResponse = CollisionResponse.CRASH
    range_sensors: tuple[RangeSensorConfig, ...] = ()
    extrapolate: float = 0.0
    """s: live mode carries each pose forward to the render time by at most this much (0: off)."""
    avatars: tuple[AvatarConfig, ...] = ()
    curve: CurveServer | None = None
    """CURVE keys for ZeroMQ endpoints exposed beyond this machine."""
    lidars: tuple[LidarConfig, ...] = ()
    ros2: Ros2Settings | None = None
    """None: ROS 2 off."""
    props: tuple[PropSpec, ...] = ()
    """What scene edits may spawn, by name."""
    splats: tuple[AssetSpec, ...] = ()
    """Gaussian splats the run places in its scene (``[[splat]]`` tables, as a scene file's)."""
    wind: WindSettings | None = None
    """The air the simulated vehicles fly through (``[wind]``); None: still air."""
    looks: LooksSpec | None = None
    """How the world looks to the colour cameras (``[looks]``, ``goggles.render.looks``); None: the scene's own."""
    look: int = 0
    """Which of the looks' draws this run sees (a dataset renders one flight under several)."""


def load_run_config(path: str | Path) -> RunConfig:
    """Read a run file.

    Raises:
        ConfigError: naming the file and the bad key.
    """
    path = Path(path).resolve()
    return parse_run_config(read_toml(path, "run file"), path)


def parse_run_config(data: dict, path: Path | None = None) -> RunConfig:
    """Build a RunConfig from parsed TOML (``path`` only names the file in errors and anchors paths)."""
    tables = {
        "run",
        "clock",
        "lcm",
        "zmq",
        "ros2",
        "vehicle",
        "camera",
        "range_sensor",
        "lidar",
        "avatar",
        "prop",
        "splat",
        "wind",
        "looks",
    }
    top = Table(path, "top level", data, tables)
    base = path.parent if path is not None else Path.cwd()
    run = Table(
        path, "[run]", data.get("run", {}), {"mode", "scene", "seed", "course", "perturb", "collisions", "extrapolate"}
    )
    modes = {"sim": ClockMode.SIM, "lockstep": ClockMode.LOCKSTEP, "live": ClockMode.LIVE}
    mode_name = run.choice("mode", modes, "sim")
    scene = run.get("scene")
    if scene is not None and not isinstance(scene, str):
        raise run.error("scene", "a path")

    clock = Table(path, "[clock]", data.get("clock", {}), {"scale", "max_scale", "physics_rate"})
    scale = parse_scale(clock.get("scale", AUTO), f"{path}: [clock]: 'scale'")
    physics_rate = clock.number("physics_rate", 960.0, positive=True)
    if not MIN_PHYSICS_RATE <= physics_rate <= MAX_PHYSICS_RATE:
        raise clock.error("physics_rate", f"a rate from {MIN_PHYSICS_RATE:g} Hz to {MAX_PHYSICS_RATE:g} Hz")

    lcm = Table(path, "[lcm]", data.get("lcm", {}), {"enabled", "url"})
    zmq = Table(
        path,
        "[zmq]",
        data.get("zmq", {}),
        {"enabled", "publish", "inputs", "control", "curve_secret_key", "curve_clients"},
    )
    endpoints = ZmqEndpoints(
        publish=zmq.text("publish", ZmqEndpoints.publish),
        inputs=zmq.text("inputs", ZmqEndpoints.inputs),
        control=zmq.text("control", ZmqEndpoints.control),
    )

    ros2 = Table(path, "[ros2]", data.get("ros2", {}), {"enabled", "namespace", "domain_id", "distro", "expose"})
    distro = ros2.choice("distro", DISTROS, "humble")
    domain_id = ros2.integer("domain_id", None, low=0, high=232, meaning="ROS_DOMAIN_ID")
    if domain_id is None:
        domain_id = default_domain()
    ros2_settings = Ros2Settings(ros2.text("namespace", "/goggles"), domain_id, distro, ros2.flag("expose", False))

    vehicle_tables = top.get("vehicle", [])
    if not isinstance(vehicle_tables, list) or not vehicle_tables:
        raise ConfigError(f"{path}: needs at least one [[vehicle]] table")
    vehicles = tuple(_vehicle(path, base, i, v, physics_rate) for i, v in enumerate(vehicle_tables))
    names = [v.name for v in vehicles]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: vehicle names must be unique, got {names}")
    cameras = tuple(_camera(path, base, i, c, set(names), physics_rate) for i, c in enumerate(top.get("camera", [])))
    ranges = tuple(
        _range_sensor(path, i, c, set(names), physics_rate) for i, c in enumerate(top.get("range_sensor", []))
    )
    responses = {r.name.lower(): r for r in CollisionResponse}
    collisions = run.choice("collisions", responses, "crash")
    course = run.get("course")
    if course is not None and not isinstance(course, str):
        raise run.error("course", "a path")
    perturb = run.integer("perturb", None, low=0, high=MAX_SEED, meaning="a seed")
    config = RunConfig(
        source=path,
        mode=modes[mode_name],
        scene=None if scene is None else (base / scene).resolve(),
        physics_rate=physics_rate,
        scale=scale,
        max_scale=clock.number("max_scale", 1.0, minimum=MIN_SCALE, unit="sim s per wall s"),
        seed=run.integer("seed", 0, low=0, high=MAX_SEED),
        vehicles=vehicles,
        cameras=cameras,
        lcm_url=lcm.text("url", DEFAULT_LCM_URL) if lcm.flag("enabled", True) else None,
        zmq=endpoints if zmq.flag("enabled", True) else None,
        ros2=ros2_settings if ros2.flag("enabled", False) else None,
        course=None if course is None else (base / course).resolve(),
        perturb=perturb,
        collisions=responses[collisions],
        range_sensors=ranges,
        lidars=tuple(_lidar(path, i, c, set(names), physics_rate) for i, c in enumerate(top.get("lidar", []))),
        extrapolate=run.number("extrapolate", 0.0, minimum=0.0, unit="s"),
        avatars=tuple(_avatar(path, base, i, a) for i, a in enumerate(top.get("avatar", []))),
        props=_props(path, base, top.get("prop", [])),
        splats=_splats(path, base, top.get("splat", [])),
        wind=_wind(path, base, top.get("wind", None)),
        looks=None if "looks" not in data else LooksSpec.from_table(data["looks"], f"{path}: [looks]", base),
        curve=CurveServer((base / zmq.text("curve_secret_key")).resolve(), (base / zmq.text("curve_clients")).resolve())
        if "curve_secret_key" in zmq.table
        else None,
    )
    both = sorted({b for p in config.props for b in p.tracked} & {v.name for v in config.vehicles})
    if both:
        raise ConfigError(f"{path}: [[prop]] tracked: {both} are vehicles of this run; pose/<name> places a vehicle")
    check_channels(path, config)
    return config


def _wind(path, base: Path, data) -> WindSettings | None:
    """``[wind]``: a steady wind, its profile in height, turbulence and gusts (``goggles.dynamics.wind``)."""
    if data is None:
        return None
    table = Table(
        path,
        "[wind]",
        data,
        {"speed", "from_deg", "profile", "reference_height", "exponent", "roughness", "turbulence", "gusts", "field"},
    )
    field = None
    if "field" in table.table:
        try:
            field = WindField.load(base / table.text("field"))
        except ConfigError as exc:
            raise ConfigError(f"{path}: [wind] 'field': {exc}") from None
    gusts = table.get("gusts", [])
    if not isinstance(gusts, list) or not all(isinstance(g, dict) for g in gusts):
        raise table.error("gusts", "an array of tables (each start_s, duration_s, peak = [x, y, z] m/s)")
    made = []
    for k, g in enumerate(gusts):
        gust = Table(path, f"[wind] gust {k + 1}", g, {"start_s", "duration_s", "peak"})
        start = gust.number("start_s", minimum=0.0, unit="s")
        duration = gust.number("duration_s", positive=True, unit="s")
        made.append(Gust(start, duration, tuple(float(v) for v in gust.vector("peak", 3, unit="m/s, world ENU"))))
    defaults = WindSettings()
    values = {
        "speed": table.number("speed", 0.0, minimum=0.0, unit="m/s at the reference height"),
        "from_deg": table.number("from_deg", 0.0, unit="compass degrees it blows from"),
        "profile": table.choice("profile", PROFILES, "uniform"),
        "reference_height": table.number("reference_height", defaults.reference_height, positive=True, unit="m"),
        "exponent": table.number("exponent", defaults.exponent, positive=True),
        "roughness": table.number("roughness", defaults.roughness, positive=True, unit="m"),
        "turbulence": table.choice("turbulence", tuple(W20_KNOTS), "none"),
    }
    try:
        return WindSettings(**values, gusts=tuple(made), field=field)
    except ConfigError as exc:  # a value past the model's range: the file and the table named
        raise ConfigError(f"{path}: [wind]: {exc}") from None


#: What a vehicle's, a sensor's or a person's name may hold: it becomes part of channel names
#: (``<vehicle>/<camera>/depth``), frame ids and file names.
_NAME = re.compile(r"[^\s/\x00-\x1f\x7f]+")
#: A ROS 2 topic name token: letters, digits and single underscores, not starting with a digit.
_ROS2_TOKEN = re.compile(r"(?!.*__)[A-Za-z_][A-Za-z0-9_]*")


def _name(r: Table, key: str = "name") -> str:
    name = r.text(key, required=True)
    if not _NAME.fullmatch(name):
        raise r.error(
            key,
            "a name without '/', spaces or control characters (channels are <vehicle>/<sensor>/...; a mocap "
            "body called so is renamed in the bridge's room calibration: [[body]] rename)",
        )
    return name


def check_channels(path, config: RunConfig) -> None:
    """Every sensor of a vehicle publishes under its own ``<vehicle>/<name>`` (two cameras called
    alike would share channels), every channel fits LCM where LCM is on, and every name is a ROS 2
    topic token where ROS 2 is on (a topic no ROS 2 node can subscribe to is no use).

    Raises:
        ConfigError: naming the file, the sensors or the name.
    """
    sensors: dict[str, str] = {}
    kinds = [("[[camera]]", c.vehicle, eye, c.outputs) for c in config.cameras for eye in c.eyes]
    kinds += [("[[range_sensor]]", r.vehicle, r.name, ("ranges",)) for r in config.range_sensors]
    kinds += [("[[lidar]]", lidar.vehicle, lidar.name, ("lidar",)) for lidar in config.lidars]
    channels = [f"{v.name}/collision" for v in config.vehicles] + [f"skeleton/{a.name}" for a in config.avatars]
    for kind, vehicle, name, outputs in kinds:
        prefix = f"{vehicle}/{name}"
        if prefix in sensors:
            raise ConfigError(
                f"{path}: {sensors[prefix]} and {kind} {name!r} both publish as {prefix}: give them other names"
            )
        sensors[prefix] = f"{kind} {name!r}"
        channels += [f"{prefix}/{output}" for output in outputs]
    longest = max(channels, key=lambda channel: len(channel.encode()))  # LCM counts UTF-8 bytes
    if config.lcm_url is not None and len(longest.encode()) > LCM_MAX_CHANNEL:
        raise ConfigError(
            f"{path}: channel {longest} is {len(longest.encode())} bytes in UTF-8, and LCM carries at most "
            f"{LCM_MAX_CHANNEL}: give the vehicle or the sensor a shorter name"
        )
    if config.ros2 is not None:
        tokens = [v.name for v in config.vehicles] + [c.name for c in config.cameras]
        tokens += [sensor.name for sensor in (*config.range_sensors, *config.lidars)]
        tokens += [token for token in config.ros2.namespace.split("/") if token]
        for token in tokens:
            check_ros2_name(token, str(path), "rename it, or turn [ros2] off")


def check_ros2_name(token: str, where: str, advice: str) -> None:
    """Refuse a name that cannot be a token of a ROS 2 topic name (``where``: the file or the flag).

    Raises:
        ConfigError: "<where>: '<token>' cannot be part of a ROS 2 topic name (...): <advice>".
    """
    if not _ROS2_TOKEN.fullmatch(token):
        raise ConfigError(
            f"{where}: {token!r} cannot be part of a ROS 2 topic name (letters, digits and single underscores, "
            f"not starting with a digit): {advice}"
        )


def _divides(reader: Table, key: str, rate: float, physics_rate: float) -> float:
    if steps_per_sample(physics_rate, rate) is None:
        if key not in reader.table:  # its default: say which, and that the file may give one that does
            raise ConfigError(
                f"{reader.path}: {reader.where}: {key!r} is not given, and its default {rate:g} Hz does not divide "
                f"the physics rate {physics_rate:g} Hz: give a rate that does"
            )
        raise reader.error(key, f"a rate in Hz that divides the physics rate {physics_rate:g} Hz")
    return rate


def _vehicle(path, base: Path, index: int, table, physics_rate: float) -> VehicleConfig:
    r = Table(
        path,
        f"[[vehicle]] #{index + 1}",
        table,
        {
            "name",
            "preset",
            "start",
            "route",
            "route_tolerance",
            "imu_rate",
            "imu_batch",
            "state_rate",
            "floor_z",
            "segmentation",
            "controller",
            "betaflight_cli",
            "betaflight_executable",
            "fc_rate",
            "command_timeout",
        },
    )
    imu_batch = r.integer("imu_batch", 1, low=1, high=64, meaning="IMU samples delivered together")
    controller = r.choice("controller", ("goggles", "betaflight"), "goggles")
    firmware_keys = [k for k in ("betaflight_cli", "betaflight_executable", "fc_rate") if k in r.table]
    if controller != "betaflight" and firmware_keys:
        raise r.error(firmware_keys[0], 'left out: it is for a vehicle with controller = "betaflight"')
    firmware, fc_rate = None, 0.0
    if controller == "betaflight":
        executable = base / r.text("betaflight_executable") if "betaflight_executable" in r.table else None
        firmware = BetaflightSettings(executable, (), "[[vehicle]] betaflight_cli")
        if "betaflight_cli" in r.table:
            script = base / r.text("betaflight_cli")
            if not script.is_file():
                raise r.error("betaflight_cli", f"a Betaflight CLI script (a 'diff all'); {script} not found")
            firmware = diff_settings(script, executable)
        fc_rate = _divides(r, "fc_rate", r.number("fc_rate", physics_rate, positive=True), physics_rate)
        if fc_rate < 50.0:
            raise r.error("fc_rate", "at least 50 Hz (the SITL's own floor for its state packets)")
    start = r.get("start", [0.0, 0.0, 0.0, 0.0])
    if isinstance(start, list) and len(start) == 3:
        start = [*start, 0.0]
    route = []
    waypoints = r.get("route", [])
    if not isinstance(waypoints, list):
        raise r.error("route", "a list of waypoints [x, y, z] or [x, y, z, yaw]")
    for point in waypoints:
        if isinstance(point, list) and len(point) == 3:
            point = [*point, 0.0]
        array = finite_vector(point, 4)
        if array is None:
            raise r.error("route", "a list of waypoints [x, y, z] or [x, y, z, yaw]")
        route.append(tuple(float(v) for v in array))
    r.table = {**r.table, "start": start}
    return VehicleConfig(
        name=_name(r),
        preset=_airframe_preset(r, base),
        start=tuple(float(v) for v in r.vector("start", 4)),
        route=tuple(route),
        route_tolerance=r.number("route_tolerance", 0.4, positive=True),
        imu_rate=_divides(r, "imu_rate", r.number("imu_rate", 240.0, positive=True), physics_rate),
        imu_batch=imu_batch,
        state_rate=_divides(r, "state_rate", r.number("state_rate", 60.0, positive=True), physics_rate),
        floor_z=r.number("floor_z", 0.0),
        segmentation=r.integer("segmentation", VEHICLE_CLASS, low=1, high=2**31 - 1, meaning="a class id"),
        betaflight=firmware,
        fc_rate=fc_rate,
        command_timeout=r.number("command_timeout", 0.5, minimum=0.0, unit="s of sim time; 0: never"),
    )


def check_simulated_starts(config: RunConfig) -> None:
    """A simulated vehicle's airframe can be read, and it starts on or above its floor (live and
    replayed ones are only drawn and have no floor, and the command line may change the mode after the
    file is read). Vehicles that start inside each other are told: they touch from the start (a
    collision each, not a crash: they do not approach), which a run file seldom means."""
    where = f"{config.source}: " if config.source is not None else ""
    radii = {}
    for v in config.vehicles:
        if v.start[2] < v.floor_z:
            raise ConfigError(
                f"{where}[[vehicle]] {v.name!r}: 'start' z {v.start[2]:g} m is below its "
                f"'floor_z' {v.floor_z:g} m, the floor it is simulated over"
            )
        try:
            radii[v.preset] = radii.get(v.preset) or load_airframe(v.preset).meeting_radius
        except ConfigError as exc:
            raise ConfigError(f"{where}[[vehicle]] {v.name!r}: 'preset': {exc}") from None
    pairs, count = _starting_inside_each_other(config.vehicles, radii)
    if count:
        named = ", ".join(f"{a} and {b} ({apart:.3g} m apart)" for a, b, apart in pairs)
        log.warning(
            "%s%s pair(s) of [[vehicle]]s start inside each other's collision spheres (%s%s): they touch from "
            "the start; start them further apart",
            where,
            f"{count:,}",
            named,
            ", ..." if count > len(pairs) else "",
        )


def _starting_inside_each_other(vehicles, radii: dict, told: int = 3, rows: int = 256):
    """The first ``told`` pairs of vehicles whose starts lie closer than their meeting spheres reach,
    (name, name, distance), and how many pairs there are: vectorised over ``rows`` vehicles at a time
    (10,000 vehicles in about a second, where a pair at a time took minutes)."""
    starts = np.array([v.start[:3] for v in vehicles], np.float64).reshape(-1, 3)
    reach = np.array([radii[v.preset] for v in vehicles], np.float64)
    pairs, count = [], 0
    for first in range(0, len(vehicles), rows):
        mine, later = slice(first, first + rows), slice(first + 1, None)  # each pair once: j > i
        gap = starts[mine, None, :] - starts[None, later, :]
        apart_sq = np.einsum("ijk,ijk->ij", gap, gap)
        inside = apart_sq < np.square(reach[mine, None] + reach[None, later])
        inside &= np.arange(first + 1, len(vehicles))[None, :] > np.arange(first, first + len(inside))[:, None]
        count += int(np.count_nonzero(inside))
        if len(pairs) < told:
            for i, j in zip(*np.nonzero(inside)):
                if len(pairs) >= told:
                    break
                pairs.append((vehicles[first + i].name, vehicles[first + 1 + j].name, float(np.sqrt(apart_sq[i, j]))))
    return pairs, count


def _airframe_preset(r: Table, base: Path) -> str:
    """A preset's name, or its TOML file's path made absolute from the run file's folder (the file
    need not exist here: a recording's or a live run's airframe is only drawn)."""
    preset = r.text("preset", "fg-quad")
    if Path(preset).suffix:
        return str((base / preset).resolve())
    if preset not in AIRFRAME_PRESETS:
        raise r.error("preset", f"one of {list(AIRFRAME_PRESETS)} or a path to an airframe .toml")
    return preset


def _camera(path, base: Path, index: int, table, vehicles: set[str], physics_rate: float) -> CameraConfig:
    r = Table(
        path,
        f"[[camera]] #{index + 1}",
        table,
        {
            "vehicle",
            "name",
            "calibration",
            "calibration_camera",
            "width",
            "height",
            "vfov_deg",
            "lens",
            "fov_deg",
            "intrinsics",
            "distortion",
            "position",
            "rpy_deg",
            "baseline",
            "rate",
            "outputs",
            "min_depth",
            "max_depth",
            "depth_model",
            "noise_model",
            "exposure_s",
            "blur_subframes",
            "readout_s",
            "contrast_threshold",
            "threshold_sigma",
            "refractory_s",
            "noise_rate_hz",
            "min_rate",
        },
    )
    vehicle = r.text("vehicle", required=True)
    if vehicle not in vehicles:
        raise r.error("vehicle", f"one of the vehicles {sorted(vehicles)}")
    limits = {"min_depth": r.number("min_depth", 0.05, minimum=0.0, unit="m")}
    limits["max_depth"] = r.number("max_depth", 100.0, positive=True, unit="m")
    if limits["max_depth"] <= limits["min_depth"]:
        raise r.error("max_depth", f"greater than min_depth ({limits['min_depth']:g} m)")
    calibration = None
    if "calibration" in r.table:
        inline = [k for k in ("width", "height", "vfov_deg", "lens", "intrinsics", "distortion") if k in r.table]
        if inline:
            raise ConfigError(f"{path}: {r.where}: give 'calibration' or {inline[0]!r}, not both")
        calibration = load_calibration(
            base / r.text("calibration"),
            r.text("calibration_camera") if "calibration_camera" in r.table else None,
            **limits,
        )
        if "fov_deg" in r.table:  # a lens's field of view, which calibration files do not hold
            fov = r.number("fov_deg", positive=True)
            if not fov <= 360.0:
                raise r.error("fov_deg", "a field of view in (0, 360] degrees")
            try:
                right = None if calibration.right is None else replace(calibration.right, fov_deg=fov)
                calibration = replace(calibration, model=replace(calibration.model, fov_deg=fov), right=right)
            except ConfigError as exc:
                raise ConfigError(f"{path}: {r.where}: {exc}") from exc
        model = calibration.model
    else:
        if "calibration_camera" in r.table:
            raise r.error("calibration_camera", "given with a calibration (a Kalibr camchain's cam0, cam1, ...)")
        model = _inline_camera(r, limits)
    source = f" ({r.text('calibration')})" if calibration is not None else ""
    for eye, lens in (("", model), ("its right eye: ", calibration.right if calibration is not None else None)):
        blind = None if lens is None else blindness(lens)
        if blind is not None:
            raise ConfigError(f"{path}: {r.where}{source}: {eye}{blind}")
    outputs = r.get("outputs", ["depth"])
    if not isinstance(outputs, list) or not outputs or any(o not in CAMERA_OUTPUTS for o in outputs):
        raise r.error("outputs", f"a list drawn from {list(CAMERA_OUTPUTS)}")
    from goggles.frames import R_BODY_OPTICAL

    T_BC = np.eye(4)
    roll, pitch, yaw = np.radians(r.vector("rpy_deg", 3, [0.0, 0.0, 0.0]))
    T_BC[:3, :3] = quat_to_matrix(quat_from_euler(roll, pitch, yaw)) @ R_BODY_OPTICAL
    T_BC[:3, 3] = r.vector("position", 3, [0.0, 0.0, 0.0])
    if calibration is not None and calibration.T_IC is not None and not {"position", "rpy_deg"} & set(r.table):
        T_BC = calibration.T_IC  # Kalibr's T_cam_imu: the vehicle's body frame is its IMU's
    baseline = r.get("baseline")
    stereo = {}
    if calibration is not None and calibration.right is not None:
        if baseline is not None:
            raise r.error("baseline", f"left out: {r.text('calibration')} is a stereo pair and gives its own")
        baseline = float(np.linalg.norm(calibration.T_LR[:3, 3]))
        stereo = {"right_model": calibration.right, "T_LR": calibration.T_LR}
    if baseline is not None and not (is_number(baseline) and 0.0 < float(baseline) <= MAX_BASELINE):
        raise ConfigError(
            f"{path}: {r.where}{source}: stereo baseline {baseline!r} m: a distance in (0, {MAX_BASELINE:g}] m"
        )
    events = _event_camera(r, outputs, physics_rate)
    if events is None:
        rate = _divides(r, "rate", r.number("rate", 30.0, positive=True), physics_rate)
    else:
        events, rate, min_rate = events
        if stereo or baseline is not None:
            raise ConfigError(f"{path}: {r.where}: an event camera is one camera: leave out baseline")
        stereo = {"events": events, "min_rate": min_rate}
    # A sensor exposes a row at most once per frame and reads one frame at a time: neither time can
    # exceed the frame period (and the poses between are extrapolated along the motion, sound over a frame).
    timing = {}
    for key in ("exposure_s", "readout_s"):
        timing[key] = r.number(key, 0.0, minimum=0.0, unit="s")
        if timing[key] > 1.0 / rate:
            raise r.error(key, f"at most the frame period, 1 / rate = {1.0 / rate:.6g} s")
    return CameraConfig(
        vehicle=vehicle,
        name=_name(r),
        model=model,
        T_BC=T_BC,
        baseline=baseline if baseline is None or "T_LR" in stereo else r.number("baseline", positive=True),
        rate=rate,
        outputs=tuple(outputs),
        depth_model=_depth_model(r, model, bool(stereo)),
        noise_model=_noise_model(r),
        blur_subframes=r.integer("blur_subframes", 8, low=1, high=256),
        **timing,
        **stereo,
    )


def _event_camera(r: Table, outputs: list, physics_rate: float) -> tuple[EventCameraModel, float, float] | None:
    """An event camera's pixels and render rates (fastest, slowest), when ``outputs`` is ["events"]."""
    keys = ("contrast_threshold", "threshold_sigma", "refractory_s", "noise_rate_hz", "min_rate")
    if "events" not in outputs:
        given = [k for k in keys if k in r.table]
        if given:
            raise r.error(given[0], 'left out: it is an event camera\'s (outputs = ["events"])')
        return None
    if len(outputs) > 1:
        why = '["events"] alone: an event camera renders when its events say; its frames go on another [[camera]]'
        raise r.error("outputs", why)
    threshold = r.get("contrast_threshold", 0.2)
    pair = (
        r.vector("contrast_threshold", 2) if isinstance(threshold, list) else [r.number("contrast_threshold", 0.2)] * 2
    )
    try:
        model = EventCameraModel(
            float(pair[0]),
            float(pair[1]),
            threshold_sigma=r.number("threshold_sigma", 0.0, minimum=0.0),
            refractory_s=r.number("refractory_s", 0.0, minimum=0.0, unit="s"),
            noise_rate_hz=r.number("noise_rate_hz", 0.0, minimum=0.0, unit="Hz"),
        )
    except ConfigError as exc:
        raise ConfigError(f"{r.path}: {r.where}: {exc}") from exc
    fastest = r.number("rate", min(1000.0, physics_rate), positive=True, unit="Hz")
    if fastest > physics_rate:
        raise r.error("rate", f"at most the physics rate, {physics_rate:g} Hz: an event camera renders between steps")
    slowest = r.number("min_rate", min(50.0, fastest), positive=True, unit="Hz")
    if not 0.5 <= slowest <= fastest:
        raise r.error("min_rate", f"from 0.5 Hz (a packet spans at most 2 s) to its rate, {fastest:g} Hz")
    return model, fastest, slowest


def _splats(path, base: Path, entries) -> tuple[AssetSpec, ...]:
    """A run file's ``[[splat]]`` tables: captures it adds to its scene, keyed as a scene file's."""
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: [[splat]] must be a list of tables")
    anchor = path if path is not None else base / "run.toml"
    try:
        return tuple(asset_spec(anchor, i, entry, "splat") for i, entry in enumerate(entries))
    except SceneError as exc:
        raise ConfigError(str(exc)) from None


def _inline_camera(r: Table, limits: dict) -> CameraModel:
    """A camera written in the run file: width and height, and vfov_deg (a pinhole), fov_deg (an
    equidistant fisheye filling the shorter side), or intrinsics [fx, fy, cx, cy] with any lens and
    its distortion coefficients (``goggles.render.lenses.LENSES``)."""
    width = r.integer("width", 320, low=1, high=MAX_IMAGE_SIDE, meaning="pixels")
    height = r.integer("height", 240, low=1, high=MAX_IMAGE_SIDE, meaning="pixels")
    lens = r.choice("lens", LENSES, "pinhole")
    names = LENSES[lens]
    distortion = tuple(r.vector("distortion", len(names), [0.0] * len(names)))
    fov = r.number("fov_deg", None, positive=True) if "fov_deg" in r.table else None
    if fov is not None and not fov <= 360.0:
        raise r.error("fov_deg", "a field of view in (0, 360] degrees")
    if "intrinsics" in r.table:
        if "vfov_deg" in r.table:
            raise ConfigError(f"{r.path}: {r.where}: give 'intrinsics' or 'vfov_deg', not both")
        fx, fy, cx, cy = r.vector("intrinsics", 4)
        try:
            return CameraModel(width, height, fx, fy, cx, cy, distortion, lens=lens, fov_deg=fov, **limits)
        except ConfigError as exc:
            raise ConfigError(f"{r.path}: {r.where}: {exc}") from exc
    if lens == "fisheye":
        if "vfov_deg" in r.table:
            raise r.error("vfov_deg", "left out for a fisheye: its fov_deg circle fills the image's shorter side")
        return CameraModel.fisheye(width, height, fov if fov is not None else 180.0, distortion=distortion, **limits)
    if lens != "pinhole":
        raise r.error("intrinsics", f"[fx, fy, cx, cy] in pixels: a {lens} lens has no field-of-view default")
    if fov is not None:
        raise r.error("fov_deg", "left out for a pinhole: its field of view is vfov_deg")
    vfov = r.number("vfov_deg", 60.0, positive=True)
    if vfov >= 180.0:
        raise r.error("vfov_deg", "a vertical field of view in (0, 180) degrees")
    return CameraModel.from_fov(width, height, vfov, distortion=distortion, **limits)


def _noise_model(r: Table) -> CameraNoiseModel | None:
    name = r.choice("noise_model", CAMERA_NOISE_MODELS, None)
    return None if name is None else CAMERA_NOISE_MODELS[name]


def _depth_model(r: Table, model: CameraModel, calibrated_pair: bool) -> StereoDepthModel | None:
    """A stereo depth model measures a rectified pinhole pair's disparity: a wide lens's depth (a range)
    or a calibrated pair's raw images have none to measure."""
    name = r.choice("depth_model", STEREO_DEPTH_MODELS, None)
    if name is not None and name != "ideal" and (model.lens != "pinhole" or calibrated_pair):
        what = f"a {model.lens} lens" if model.lens != "pinhole" else "a calibrated pair's unrectified images"
        raise r.error(
            "depth_model", f"'ideal' or left out: a stereo depth model works on rectified pinhole images, not {what}"
        )
    return None if name is None else STEREO_DEPTH_MODELS[name]


def _range_sensor(path, index: int, table, vehicles: set[str], physics_rate: float) -> RangeSensorConfig:
    r = Table(
        path, f"[[range_sensor]] #{index + 1}", table, {"vehicle", "name", "preset", "position", "rpy_deg", "rate"}
    )
    vehicle = r.text("vehicle", required=True)
    if vehicle not in vehicles:
        raise r.error("vehicle", f"one of the vehicles {sorted(vehicles)}")
    preset = r.text("preset", "flightgoggles-altimeter")
    if preset not in RANGE_PRESETS:
        raise r.error("preset", f"one of {sorted(RANGE_PRESETS)}")
    # Default mount: at the body origin, beam pointing down (sensor x forward, y right, z down).
    roll, pitch, yaw = np.radians(r.vector("rpy_deg", 3, [180.0, 0.0, 0.0]))
    T_BS = np.eye(4)
    T_BS[:3, :3] = quat_to_matrix(quat_from_euler(roll, pitch, yaw))
    T_BS[:3, 3] = r.vector("position", 3, [0.0, 0.0, 0.0])
    return RangeSensorConfig(
        vehicle=vehicle,
        name=_name(r),
        model=RANGE_PRESETS[preset],
        T_BS=T_BS,
        rate=_divides(r, "rate", r.number("rate", 60.0, positive=True), physics_rate),
    )


def _lidar(path, index: int, table, vehicles: set[str], physics_rate: float) -> LidarConfig:
    r = Table(path, f"[[lidar]] #{index + 1}", table, {"vehicle", "name", "preset", "position", "rpy_deg"})
    vehicle = r.text("vehicle", required=True)
    if vehicle not in vehicles:
        raise r.error("vehicle", f"one of the vehicles {sorted(vehicles)}")
    preset = r.text("preset", "os1-64")
    if preset not in LIDAR_PRESETS:
        raise r.error("preset", f"one of {sorted(LIDAR_PRESETS)}")
    model = LIDAR_PRESETS[preset]
    _divides(r, "preset", model.rate_hz, physics_rate)
    roll, pitch, yaw = np.radians(r.vector("rpy_deg", 3, [0.0, 0.0, 0.0]))
    T_BS = np.eye(4)
    T_BS[:3, :3] = quat_to_matrix(quat_from_euler(roll, pitch, yaw))
    T_BS[:3, 3] = r.vector("position", 3, [0.0, 0.0, 0.1])
    return LidarConfig(vehicle=vehicle, name=_name(r), model=model, T_BS=T_BS)


def _avatar(path, base: Path, index: int, table) -> AvatarConfig:
    r = Table(path, f"[[avatar]] #{index + 1}", table, {"name", "bvh", "units", "up", "position", "yaw_deg", "speed"})
    units, up = r.choice("units", UNITS_M), r.choice("up", UP_AXES)  # required: a BVH file says neither
    T_WR = np.eye(4)
    T_WR[:3, :3] = quat_to_matrix(quat_from_euler(0.0, 0.0, np.radians(r.number("yaw_deg", 0.0))))
    T_WR[:3, 3] = r.vector("position", 3, [0.0, 0.0, 0.0])
    return AvatarConfig(
        name=_name(r),
        bvh=(base / r.text("bvh", required=True)).resolve(),
        units=units,
        up=up,
        T_WR=T_WR,
        speed=r.number("speed", 1.0, positive=True),
    )


def _props(path, base: Path, tables) -> tuple[PropSpec, ...]:
    if not isinstance(tables, list):
        raise ConfigError(f"{path}: [[prop]] must be an array of tables")
    props = tuple(_prop(path, base, i, t) for i, t in enumerate(tables))
    names = [p.name for p in props]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: [[prop]] names must be unique, got {names}")
    bodies = [body for p in props for body in p.tracked]
    twice = sorted({body for body in bodies if bodies.count(body) > 1})
    if twice:
        raise ConfigError(f"{path}: [[prop]] tracked: bodies {twice} are tracked as two props; give each one prop")
    from goggles.world.props import MAX_PROPS

    if len(bodies) > MAX_PROPS:
        raise ConfigError(f"{path}: [[prop]] tracked: {len(bodies)} bodies; at most {MAX_PROPS} props are placed")
    return props


def _prop(path, base: Path, index: int, table) -> PropSpec:
    keys = {"name", "box", "rgb", "mesh", "splat", "filter", "instances", "units", "up", "segmentation", "tracked"}
    r = Table(path, f"[[prop]] #{index + 1}", table, keys)
    name = r.text("name", required=True)
    if len(name) > MAX_EDIT_NAME:
        raise r.error("name", f"at most {MAX_EDIT_NAME} characters (a scene edit names it)")
    segmentation = r.integer("segmentation", 1, low=1, high=2**31 - 1, meaning="a class id")
    tracked = r.get("tracked", [])
    if not isinstance(tracked, list) or not all(
        isinstance(b, str) and _NAME.fullmatch(b) and len(b) <= MAX_EDIT_NAME for b in tracked
    ):
        raise r.error("tracked", f"a list of mocap body names (pose/<body>), {MAX_EDIT_NAME} characters at most")
    if sum(k in r.table for k in ("box", "mesh", "splat")) != 1:
        raise ConfigError(
            f"{path}: {r.where}: give 'box' (extents, m), 'mesh' (a file) or 'splat' (a capture), one of them"
        )
    if "splat" not in r.table and ("filter" in r.table or "instances" in r.table):
        raise ConfigError(f"{path}: {r.where}: 'filter' and 'instances' are for a splat")
    if "box" in r.table:
        if "units" in r.table or "up" in r.table:
            raise ConfigError(f"{path}: {r.where}: 'units' and 'up' are for a mesh, not a box")
        extents = r.vector("box", 3, unit="m")
        if np.any(extents <= 0.0):
            raise r.error("box", "three extents > 0 (m)")
        rgb = r.vector("rgb", 3, [0.8, 0.8, 0.8])
        if np.any((rgb < 0.0) | (rgb > 1.0)):
            raise r.error("rgb", "three numbers in [0, 1]")
        box = (float(extents[0]), float(extents[1]), float(extents[2]))
        rgb = (float(rgb[0]), float(rgb[1]), float(rgb[2]))
        return PropSpec(name, segmentation, box=box, rgb=rgb, tracked=tuple(tracked))
    if "rgb" in r.table:
        raise ConfigError(f"{path}: {r.where}: 'rgb' is for a box; a mesh or a capture brings its own colours")
    if "splat" in r.table:
        from goggles.scene.splats import FILTERS, SPLAT_SUFFIXES

        splat = (base / r.text("splat")).resolve()
        if splat.suffix.lower() not in SPLAT_SUFFIXES:
            raise r.error("splat", f"a capture file ({', '.join(SPLAT_SUFFIXES)})")
        if not splat.is_file():
            raise r.error("splat", f"a capture file; {splat} is not one")
        units, up = r.choice("units", UNITS_M), r.choice("up", UP_AXES)
        from goggles.world.props import MAX_PROPS

        instances = r.integer("instances", max(1, len(tracked)), low=1, high=MAX_PROPS, meaning="placed at once")
        if instances < len(tracked):
            raise r.error("instances", f"at least its {len(tracked)} tracked bodies")
        screen_filter = r.choice("filter", FILTERS, "3dgs")
        return PropSpec(
            name,
            segmentation,
            splat=splat,
            filter=screen_filter,
            instances=instances,
            units=units,
            up=up,
            tracked=tuple(tracked),
        )
    mesh = (base / r.text("mesh")).resolve()
    units, up = r.choice("units", UNITS_M), r.choice("up", UP_AXES)  # required: never guessed, as in a scene file
    return PropSpec(name, segmentation, mesh=mesh, units=units, up=up, tracked=tuple(tracked))
