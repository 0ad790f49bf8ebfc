"""A Gymnasium vector environment of N multirotors in one simulator, with torch tensors on its device.

Every environment's physics advances in one launch, every camera renders in one batch over one
shared static scene (one BVH; one launch on CUDA, Embree's threads on the CPU), and observations,
rewards and the done flags are Warp arrays that torch sees without a copy (``wp.to_torch``): the
same tensors every step, rewritten in place, so a caller keeping an observation past the next
``step`` clones it. An environment that ended is reset on the device, the others go on: at the
following ``step`` (Gymnasium's next-step autoreset, the default: that step's action is ignored and
its reward 0) or within the same ``step`` (same-step, as Isaac Lab and most GPU RL libraries expect:
the final observation is in ``info["final_obs"]``), or when the caller says (disabled: ``reset`` with
``options={"reset_mask": ...}``, Gymnasium's way). A caller on a torch stream of its own is waited
on, and waits, where data changes hands (``StreamOrder``). Nothing crosses to the host per step, except one
flag checking the actions are finite, and the done mask when domain randomisation draws new
airframes. On CUDA each step replays recordings of its device work (``goggles.runtime.recorded_work``: CUDA
graphs of the physics steps, the resets, the scoring and the observation) instead of launching
each kernel from Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium
import numpy as np
import torch
import warp as wp
from gymnasium.vector import AutoresetMode, VectorEnv

from goggles.checks import INT32_MAX, MAX_SEED, is_whole, warp_device
from goggles.dynamics import SimulatorSettings
from goggles.dynamics.airframe import load_airframe
from goggles.dynamics.control import ControlMode
from goggles.dynamics.model import vec8
from goggles.dynamics.simulator import GRAVITY
from goggles.envs import kernels
from goggles.envs.chase import ChaseView
from goggles.envs.firmware import FirmwareFleet
from goggles.envs.randomization import DEFAULTS, Randomization, randomized_airframe
from goggles.envs.streams import StreamOrder
from goggles.envs.tasks import Episodes, HoverTask
from goggles.errors import ConfigError
from goggles.firmware.betaflight import BetaflightSettings, diff_settings
from goggles.frames import R_BODY_OPTICAL, transform
from goggles.render import CameraModel, RenderSettings, Shading
from goggles.render.projection import lens_coefficients
from goggles.rig import parts
from goggles.runtime.progress import load_kernels
from goggles.runtime.recorded_work import RecordedWork, struct_key
from goggles.sensors.draws import NoiseDraws
from goggles.sensors.events import EventCameraModel, EventSensor
from goggles.sensors.ranges import measure_ranges_kernel, range_sensor_model
from goggles.sensors.stereo_depth import StereoDepth, StereoDepthModel, stereo_depth_model
from goggles.world import DeviceScene
from goggles.world.queries import no_actors


@dataclass(frozen=True)
class Control:
    """How a normalised action in [-1, 1] becomes the simulator's command: offset + scale * action per
    column; the columns in ``unit_columns`` are in units of each vehicle's own ``unit`` (``thrust``:
    its hover thrust, ``speed``: its hover rotor speed). ``None`` columns: one per rotor."""

    mode: ControlMode
    scale: tuple[float, ...] | None
    offset: tuple[float, ...] | None
    unit: str = ""
    unit_columns: tuple[int, ...] = ()


#: The action spaces: rotor speeds (0..2x hover speed each), rates (collective thrust 0..2x hover,
#: body rates +-6 rad/s), velocity (+-3 m/s, yaw +-pi), position (+-5 m around the origin, yaw +-pi),
#: betaflight (a firmware per environment: roll, pitch, throttle, yaw sticks, 1000-2000 us, angle mode).
CONTROLS = {
    "rotors": Control(ControlMode.ROTOR_SPEEDS, None, None, unit="speed"),
    "rates": Control(ControlMode.RATES, (1.0, 6.0, 6.0, 6.0), (1.0, 0.0, 0.0, 0.0), "thrust", (0,)),
    "velocity": Control(ControlMode.VELOCITY, (3.0, 3.0, 3.0, np.pi), (0.0, 0.0, 0.0, 0.0)),
    "position": Control(ControlMode.POSITION, (5.0, 5.0, 5.0, np.pi), (0.0, 0.0, 0.0, 0.0)),
    "betaflight": Control(ControlMode.RC, (500.0,) * 4, (1500.0,) * 4),
}
#: What a camera can observe.
IMAGES = ("depth", "segmentation", "rgb", "events")


class DroneVectorEnv(VectorEnv):
    """N multirotors of one airframe learning a task, as a Gymnasium 1.x vector environment.

    Observations are a dict of torch tensors on the simulator's device: ``state`` (N, 24) float32
    (target - position, velocity, the body-to-world rotation matrix row-major, body rates, IMU
    specific force and rates) and, with a camera, its ``camera_outputs`` (``depth``,
    ``segmentation``, ``rgb``). Actions are (N, A) float32 tensors (A = 4, or one per rotor for ``rotors``)
    in [-1, 1] (see ``CONTROLS``), or NumPy arrays (``action_space.sample()``), copied to the device;
    rewards (N,) float32, terminated and truncated (N,) bool tensors.

    Args:
        num_envs: environments (vehicles).
        task: what is rewarded: ``HoverTask`` (default), ``DepthFlightTask``, ``RaceTask`` (see
            ``goggles.envs.tasks``).
        airframe: preset name or TOML path.
        control: ``rotors``, ``rates``, ``velocity``, ``position`` (``CONTROLS``), or ``betaflight``:
            Betaflight's SITL flies each environment, the actions its sticks in angle mode
            (``goggles.envs.firmware``: each episode armed first; small batches; ``pip install -e ".[fc]"``).
        betaflight: with ``control="betaflight"``, the firmware's settings: the path of a CLI script (a
            ``diff all``) or a ``goggles.firmware.betaflight.BetaflightSettings``; None: its defaults.
        camera: a camera on each vehicle (looking along body +x), or None.
        camera_outputs: what the camera observes (names, or one name), one render for all: ``depth`` (N, H, W) float32
            metres, 0 where nothing was measured; ``segmentation`` (N, H, W) int32 class ids (0:
            nothing hit); ``rgb`` (N, H, W, 3) uint8, lit by the sun; ``events`` (N, 2, H, W) float32,
            the event frame: the ON and OFF events each pixel fired since the last step
            (``goggles.sensors.events``; an episode's first observation has none). With events the
            observation's device work runs eagerly (not recorded).
        event_camera: the event camera's pixels (``goggles.sensors.events.EventCameraModel``; None:
            its defaults), with ``events`` in ``camera_outputs``.
        depth_model: how the depth camera measures (``goggles.sensors.stereo_depth``: a preset name such
            as ``d435`` or a ``StereoDepthModel``): noise and quantisation in the disparity domain,
            out-of-range pixels 0; None: exact depth. No stereo occlusion (one eye is rendered).
        range_sensor: a ``goggles.sensors.ranges.RangeSensorModel`` (or its preset's name:
            ``flightgoggles-altimeter``, ``vl53l5cx``) looking down from each vehicle
            (``FLIGHTGOGGLES_ALTIMETER``, a multizone ToF): observation ``ranges`` (N, zones) float32
            metres with the model's noise, no return reading its maximum range. It sees the static
            scene (not the environments' actors).
        beacons: with a camera and a task that has beacons (``RaceTask``'s gates), observe them as the
            camera detects them: ``beacons`` (N, B, 3) float32 (u, v pixels, range m; zeros where not
            seen) and ``beacon_mask`` (N, B) bool, beacon b always in slot b (padded, fixed order).
        scene: the static world the cameras see and the vehicles collide with (a
            ``goggles.world.DeviceScene`` on ``device``); None: the floor plane only.
        physics_per_action: 960 Hz physics steps per action (8: a 120 Hz policy).
        wind: the air every environment's vehicle flies through (``goggles.dynamics.wind.WindSettings``:
            steady wind, Dryden turbulence, gusts, a gridded field), each environment's turbulence its
            own; not observed (``sim.states().wind`` has it); None: still air.
        randomization: what each episode draws (``Randomization``, or the path of its TOML file), or None.
        autoreset: ``AutoresetMode.NEXT_STEP`` (default), ``AutoresetMode.SAME_STEP`` (the reset
            observation returned with the done flags; the ended episodes' last observations in
            ``info["final_obs"]``, a dict like the observation, and which in ``info["_final_obs"]``;
            their info (the ended episodes' randomisation) in ``info["final_info"]``, as Gymnasium's
            own vector environments give it; with a camera, that step renders twice) or
            ``AutoresetMode.DISABLED`` (an ended episode goes on until ``reset(options={"reset_mask": mask})``
            starts it anew).
        seed: default seed (``reset(seed=)`` replaces it).
        first_env: index of the first environment in the random streams: a slice of a larger batch
            (another process, another machine) replays exactly that slice.
        device: Warp device ("cpu", "cuda:0").
        backend: the cameras' primary-ray tracer (``goggles.render.BACKENDS``; ``auto``: Embree on
            the CPU, goggles' ``bvh`` on CUDA).
        recorded: replay recordings of each step's device work (``goggles.runtime.recorded_work``); None: on
            CUDA. The same observations either way; on the CPU the rendering is recorded only with
            the ``warp`` backend (Embree is called from Python) and a recording runs on one thread.
        render_mode: ``"rgb_array"``: ``render()`` returns one (H, W, 3) uint8 NumPy frame per
            environment, each vehicle seen from behind and above with its target and its own actors
            (``goggles.envs.chase``; for Gymnasium's ``RecordVideo``); None: no frames.
        render_size: (width, height) of those frames, pixels.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int,
        *,
        task=None,
        airframe: str = "fg-quad",
        control: str = "rates",
        betaflight=None,
        camera: CameraModel | None = None,
        camera_outputs: tuple[str, ...] = ("depth",),
        depth_model=None,
        event_camera=None,
        range_sensor=None,
        beacons: bool = False,
        scene=None,
        physics_per_action: int = 8,
        wind=None,
        randomization: Randomization | None = None,
        autoreset: AutoresetMode = AutoresetMode.NEXT_STEP,
        seed: int = 0,
        first_env: int = 0,
        device: str | None = None,
        backend: str = "auto",
        recorded: bool | None = None,
        render_mode: str | None = None,
        render_size: tuple[int, int] = (320, 240),
    ):
        if render_mode not in RENDER_MODES:
            raise ConfigError(
                f"render_mode {render_mode!r}: use 'rgb_array' (Gymnasium's HumanRendering wrapper shows its "
                "frames in a window) or None"
            )
        if (
            not isinstance(render_size, (tuple, list))
            or len(render_size) != 2
            or not all(is_whole(v, 8, MAX_RENDER_SIZE) for v in render_size)
        ):
            raise ConfigError(
                f"render_size must be (width, height), 8 to {MAX_RENDER_SIZE} pixels each, got {render_size!r}"
            )
        if not is_whole(num_envs, 1, INT32_MAX):
            raise ConfigError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        if control not in CONTROLS:
            raise ConfigError(f"control {control!r}: use one of {', '.join(CONTROLS)}")
        if betaflight is not None and control != "betaflight":
            raise ConfigError(f'betaflight= is for control="betaflight", not control={control!r}')
        if not is_whole(physics_per_action, 1, INT32_MAX):  # a kernel's int32 loop count
            raise ConfigError(f"physics_per_action must be an integer >= 1, got {physics_per_action!r}")
        if autoreset not in tuple(AutoresetMode):
            raise ConfigError(f"autoreset {autoreset!r}: use one of {[str(m) for m in AutoresetMode]}")
        if recorded not in (None, True, False):
            raise ConfigError(f"recorded must be True, False or None (None: on CUDA), got {recorded!r}")
        if not is_whole(seed, 0, MAX_SEED):  # beyond 32 bits, seeds would alias
            raise ConfigError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed!r}")
        last_first = INT32_MAX - int(num_envs) + 1  # the streams' index is int32
        if not is_whole(first_env, 0, last_first):
            raise ConfigError(f"first_env must be an integer from 0 to {last_first}, got {first_env!r}")
        self.num_envs = n = int(num_envs)
        self.task = HoverTask() if task is None else _checked_task(task)
        self.control = CONTROLS[control]
        self.physics_per_action = int(physics_per_action)
        self.randomization = _randomization(randomization)
        self.seed, self.first_env = int(seed), int(first_env)
        self.device = d = warp_device(device)
        if scene is not None and not isinstance(scene, DeviceScene):
            raise ConfigError(f"scene must be a goggles.world.DeviceScene, got {type(scene).__name__}")
        if scene is not None and scene.device != d:
            raise ConfigError(f"the scene is on {scene.device}, the environments on {d}: use one device")
        self.nominal = load_airframe(airframe)
        load_kernels(kernels, d)  # here, not in the renderer's threads (launch_rows)
        # The vehicles collide with the static scene; actors belong to one environment each (tasks).
        self.sim = parts.simulator(
            self.nominal, n, SimulatorSettings(seed=self.seed, actors=False, wind=wind), device=d, world=scene
        )
        self._firmware = None
        if control == "betaflight":  # the firmwares last: a part that fails above starts none
            try:
                self._firmware = FirmwareFleet(self.sim, _betaflight_settings(betaflight))
            except BaseException:
                self.sim.close()
                raise
        self.scene = scene
        self.episodes = Episodes.zeros(n, d)  # every environment starts by a reset (mask 1)
        self.actors_per_camera: np.ndarray | None = None
        """(N, k) the scene's actor instances each environment's camera sees (a task sets it)."""
        self._hover_speed = wp.full(n, self.nominal.hover_speed, dtype=float, device=d)
        self._hover_thrust = wp.full(n, self.nominal.mass * GRAVITY, dtype=float, device=d)
        self._R_BC = wp.array(np.tile(R_BODY_OPTICAL, (n, 1, 1)).astype(np.float32), dtype=wp.mat33, device=d)
        self._state = wp.zeros((n, kernels.STATE_SIZE), dtype=wp.float32, device=d)
        self._drawn: dict[str, np.ndarray] = {}
        self._episode_host = np.zeros(n, np.int64)  # episodes drawn per environment (randomisation)

        spaces = {"state": gymnasium.spaces.Box(-np.inf, np.inf, (kernels.STATE_SIZE,), np.float32)}
        spaces |= self._set_up_camera(camera, camera_outputs, depth_model, backend, event_camera)
        self._prepared = self.task.prepare(self)
        self.max_steps = max(1, int(round(self.task.time_limit(self._prepared) / (self.sim.dt * physics_per_action))))
        spaces |= self._set_up_ranges(range_sensor)
        spaces |= self._set_up_beacons(beacons)
        self.single_observation_space = gymnasium.spaces.Dict(spaces)
        self._set_up_actions()
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (self.action_size,), np.float32)
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space, n)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, n)
        self.torch_device = torch.device(wp.device_to_torch(d))
        self._streams = StreamOrder(d, self.torch_device)
        self._observations = {"state": wp.to_torch(self._state)}
        if "depth" in spaces:
            self._observations["depth"] = wp.to_torch(self._depth)
        if self.range_sensor is not None:
            self._observations["ranges"] = wp.to_torch(self._ranges)
        if self._beacons_W is not None:
            self._observations["beacons"] = wp.to_torch(self._beacon_out)
            self._observations["beacon_mask"] = wp.to_torch(self._beacon_mask)
        for name in ("segmentation", "rgb"):  # the renderer's own buffers, rewritten by each render
            if name in spaces:
                self._observations[name] = wp.to_torch(getattr(self.renderer.buffers, name))
        if self._events is not None:
            self._observations["events"] = wp.to_torch(self._events.frame)
        e = self.episodes
        self._outputs = (wp.to_torch(e.reward), wp.to_torch(e.terminated), wp.to_torch(e.truncated))
        self._final = None
        if autoreset == AutoresetMode.SAME_STEP:  # the ended episodes' last observations, kept apart
            self._final = {k: torch.empty_like(v) for k, v in self._observations.items()}
        self._actions = wp.zeros((n, self.action_size), dtype=wp.float32, device=d)
        self._set_up_recordings(recorded)
        self.render_mode, self.render_size, self._chase = render_mode, tuple(render_size), None
        self.metadata = {
            "autoreset_mode": autoreset,
            "render_modes": [mode for mode in RENDER_MODES if mode],
            "render_fps": 1.0 / (self.sim.dt * self.physics_per_action),
        }

    # ------------------------------------------------------------------ Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new episode in every environment, or in those of ``options["reset_mask"]`` (an (N,)
        bool NumPy array or tensor; the others keep their episode and observation). ``seed`` (one
        integer: each environment's streams derive from it and the environment's index) makes every
        episode after it reproducible; it restarts every environment, so not with a mask."""
        only = self._reset_mask(seed, options)
        if seed is not None:
            self.seed = int(seed)
            self.sim.seed = self.seed
            self.episodes.episode.zero_()
            if self._stereo is not None:
                self._stereo.reseed(self.seed)
            if self._events is not None:
                self._events.reseed(self.seed)
            if self.range_sensor is not None:
                self._range_draws.reseed(self.seed)
            self._episode_host[:] = 0
            for recorded in self._recordings:
                recorded.forget()  # the seed is passed by value
        self._streams.warp_waits_for_caller()  # the caller may still be reading the last observations
        with self._streams.on_warp():  # the mask's torch work between Warp's kernels, in their order
            mask = wp.to_torch(self.episodes.mask)
            if only is None:
                mask.fill_(1)
            else:
                chosen = torch.as_tensor(only, device=self.torch_device)
                pending = mask.clone()  # next-step autoresets due in the others stay due
                mask.copy_(chosen.to(mask.dtype))
                kept = {name: value.clone() for name, value in self._observations.items()}
            self._start_episodes(np.ones(self.num_envs, bool) if only is None else only)
            if self._events is not None:  # their pixels' levels start anew
                self._events.reset(None if only is None else np.flatnonzero(np.asarray(only)))
            if only is None:
                mask.zero_()
            else:
                mask.copy_(pending * ~chosen)
            self._observe_recorded(key=self._scene_key)
            if only is not None:  # the others return what they last observed, not a new draw of its noise
                for name, value in self._observations.items():
                    value[~chosen] = kept[name][~chosen]
        self._streams.caller_waits_for_warp()
        return self._observations, self._info()

    def step(self, actions: torch.Tensor):
        """Apply (N, A) actions for ``physics_per_action`` physics steps. Next-step autoreset: the
        environments that ended at the previous step are reset instead (their action ignored, their
        reward 0, their observation the new episode's first). Same-step: those that end now are reset
        before returning."""
        wp.to_torch(self._actions).copy_(self._checked(actions))  # kept where the recordings read them
        self._streams.warp_waits_for_caller()  # for the actions, and for reads of the last observations
        if self._firmware is not None:
            self._fly_firmware()
        else:
            self._physics_recorded()
            self.sim.stepped(self.physics_per_action)
        disabled = self.metadata["autoreset_mode"] == AutoresetMode.DISABLED
        if self._final is None and not disabled:
            # The environments that ended last step start anew after the physics, so what they
            # return is exactly their first observation.
            self._start_episodes(self._resetting())
        self._score_recorded(key=self._scene_key)
        if disabled:  # nothing resets unless the caller asks
            self.episodes.mask.zero_()
        info = self._info()
        reward, terminated, truncated = self._outputs
        if self._final is not None:  # same-step: keep the last observations, then start anew now
            final_info = info
            self._streams.caller_waits_for_warp()
            ended = terminated | truncated
            for name, value in self._observations.items():
                self._final[name].copy_(value)
            self._streams.warp_waits_for_caller()
            self._start_episodes(self._resetting())
            if self._events is not None:
                self._events.reset(np.flatnonzero(ended.cpu().numpy()))
            self.episodes.mask.zero_()
            self._observe_recorded(key=self._scene_key)
            info = self._info() | {
                "final_obs": self._final,
                "_final_obs": ended,
                "final_info": final_info,
                "_final_info": ended,
            }
        self._streams.caller_waits_for_warp()
        return self._observations, reward, terminated, truncated, info

    def render(self) -> tuple[np.ndarray, ...] | None:
        """With ``render_mode="rgb_array"``, one (H, W, 3) uint8 frame per environment (a chase view of
        its vehicle, ``goggles.envs.chase``); None otherwise, as Gymnasium's environments do. Its first
        call builds the view's world (seconds, for a large scene)."""
        if self.render_mode is None:
            gymnasium.logger.warn(
                "render() without a render_mode gives nothing: make the environment with render_mode='rgb_array'"
            )
            return None
        shown = self.task.shown(self, self._prepared) if hasattr(self.task, "shown") else None
        if self._chase is None:
            width, height = self.render_size
            self._chase = ChaseView(self.scene, self.nominal, self.num_envs, width, height, self.device, shown)
        states = self.sim.states()
        targets = self.episodes.target.numpy()
        T_WB = np.stack([transform(p, q) for p, q in zip(states.position, states.attitude)])
        return self._chase.frames(T_WB, targets, self.scene, self.actors_per_camera, shown)

    def close(self, **kwargs) -> None:
        if self._firmware is not None:
            self._firmware.close()
        self.sim.close()
        if self.renderer is not None:
            self.renderer.close()
        if self._chase is not None:
            self._chase.close()

    # ------------------------------------------------------------------ set-up

    def _set_up_recordings(self, enabled: bool | None) -> None:
        """A step's device work in four parts, each recorded (or run eagerly): what lies between them
        runs on the host (drawing new airframes, keeping the same-step final observations)."""
        d = self.device
        recordable = self.renderer is None or (self.renderer.recordable and self._events is None)
        observable = enabled if recordable else False
        self._physics_recorded = RecordedWork(self._advance, d, enabled=enabled)
        self._restart_recorded = RecordedWork(self._restart, d, enabled=enabled)
        self._score_recorded = RecordedWork(self._score, d, enabled=observable)
        self._observe_recorded = RecordedWork(self._observe, d, enabled=observable)
        self._recordings = (
            self._physics_recorded,
            self._restart_recorded,
            self._score_recorded,
            self._observe_recorded,
        )

    def _scene_key(self):
        """What the observation's recordings pass by value from the scene: its placed actors, and with a
        camera everything the render passes (appearance, lighting)."""
        if self.renderer is not None:
            return self.renderer.trace_key()
        return struct_key(self.scene.actors) if self.scene is not None else None

    def _set_up_actions(self) -> None:
        """The action columns: scale, offset, and which are in per-vehicle units (``Control``)."""
        c, rotors = self.control, self.nominal.num_rotors
        self.action_size = rotors if c.scale is None else len(c.scale)
        self._scale = vec8(*_padded(c.scale or [1.0] * rotors))
        self._offset = vec8(*_padded(c.offset or [1.0] * rotors))
        in_units = range(rotors) if c.scale is None else c.unit_columns
        self._in_units = vec8(*_padded([1.0 if j in in_units else 0.0 for j in range(self.action_size)]))
        # The per-vehicle unit of the columns in units (none in velocity and position: never read).
        self._unit = {"thrust": self._hover_thrust, "speed": self._hover_speed}.get(c.unit, self._hover_speed)
        # The mode is set once here (at action 0); each step writes only the commands.
        if c.mode == ControlMode.RC:  # the firmwares spin the rotors: stopped until they say
            self.sim.set_command(ControlMode.ROTOR_SPEEDS, np.zeros(rotors))
            return
        units = self._unit.numpy()[:, None] if c.unit else np.ones((self.num_envs, 1))
        at_zero = np.array([self._offset[j] for j in range(self.action_size)])
        flagged = np.array([self._in_units[j] for j in range(self.action_size)]) != 0
        self.sim.set_command(c.mode, np.where(flagged, at_zero * units, at_zero))

    def _set_up_camera(self, camera, outputs, depth_model, backend, event_camera=None) -> dict:
        """One camera per vehicle in one renderer; its observation spaces."""
        self.renderer, self.camera_outputs, self._stereo, self._events = None, (), None, None
        self._looks = False
        if camera is None:
            return {}
        if not isinstance(camera, CameraModel):
            raise ConfigError(f"camera must be a goggles.render.CameraModel, got {type(camera).__name__}")
        if self.scene is None:
            raise ConfigError("a camera needs a scene to see: pass scene=DeviceScene(...)")
        outputs = (outputs,) if isinstance(outputs, str) else outputs
        if not isinstance(outputs, (tuple, list, set, frozenset)) or not outputs or not set(outputs) <= set(IMAGES):
            raise ConfigError(f"camera_outputs {outputs!r}: one or more of {', '.join(IMAGES)}")
        if not (depth_model is None or isinstance(depth_model, (str, StereoDepthModel))):
            raise ConfigError(f"depth_model must be a preset name or a StereoDepthModel, got {depth_model!r}")
        n, d = self.num_envs, self.device
        self.camera_outputs, self._camera = tuple(outputs), camera
        if not (event_camera is None or isinstance(event_camera, EventCameraModel)):
            raise ConfigError(f"event_camera must be a goggles.sensors.events.EventCameraModel, got {event_camera!r}")
        rendered = set(outputs) - {"events"} | ({"rgb", "range"} if "events" in outputs else set())
        shading = Shading.SUN if "rgb" in rendered else Shading.NONE
        drawn = self.randomization is not None and self.randomization.looks is not None
        looks = drawn and shading == Shading.SUN  # colour only: else nothing to see
        self.renderer = parts.renderer(
            self.scene, [camera] * n, RenderSettings(outputs=rendered, shading=shading, backend=backend, looks=looks)
        )
        self._looks = looks
        """Does each environment's camera draw its own look (``_draw_looks``)?"""
        if "events" in outputs:
            model = event_camera or EventCameraModel()
            streams = range(self.first_env, self.first_env + n)
            self._events = EventSensor([model] * n, self.renderer, self.seed, streams, frame=True)
            self._event_clock = 0
        if isinstance(depth_model, str):
            depth_model = stereo_depth_model(depth_model)
        if depth_model is not None:
            self._stereo = StereoDepth([depth_model] * n, self.renderer, [None] * n, self.seed, self.first_env)
        image, spaces = (camera.height, camera.width), {}
        if "depth" in outputs:
            self._depth = wp.zeros((n, *image), dtype=wp.float32, device=d)
            spaces["depth"] = gymnasium.spaces.Box(0.0, camera.max_depth, image, np.float32)
        if "segmentation" in outputs:
            spaces["segmentation"] = gymnasium.spaces.Box(0, np.iinfo(np.int32).max, image, np.int32)
        if "rgb" in outputs:
            spaces["rgb"] = gymnasium.spaces.Box(0, 255, (*image, 3), np.uint8)
        if "events" in outputs:
            spaces["events"] = gymnasium.spaces.Box(0.0, np.inf, (2, *image), np.float32)
        return spaces

    def _set_up_ranges(self, model) -> dict:
        """A range sensor looking down from each vehicle; its observation space."""
        self.range_sensor = model = None if model is None else range_sensor_model(model, "range_sensor")
        if model is None:
            return {}
        if self.scene is None:
            raise ConfigError("a range sensor needs a scene to measure: pass scene=DeviceScene(...)")
        n, d, zones = self.num_envs, self.device, model.rows * model.cols
        self._range_rays = wp.array(model.directions().reshape(-1, 3), dtype=wp.vec3, device=d)
        self._range_pose = (wp.zeros(n, dtype=wp.mat33, device=d), wp.zeros(n, dtype=wp.vec3, device=d))
        self._range_raw = wp.zeros((n, zones), dtype=float, device=d)
        self._ranges = wp.zeros((n, zones), dtype=wp.float32, device=d)
        self._range_actors, self._range_draws = no_actors(d), NoiseDraws(self.seed, d)
        self._range_carriers = wp.full(n, -1, dtype=wp.int32, device=d)  # (no actors: nothing to skip)
        return {"ranges": gymnasium.spaces.Box(model.min_range, model.max_range, (zones,), np.float32)}

    def _set_up_beacons(self, beacons: bool) -> dict:
        """The task's beacons as each camera detects them, in fixed slots; their observation spaces."""
        self._beacons_W = None
        if not beacons:
            return {}
        if self.renderer is None or not hasattr(self.task, "beacons"):
            raise ConfigError("beacons need a camera and a task with beacons (RaceTask)")
        n, d = self.num_envs, self.device
        self._beacons_W = self.task.beacons(self._prepared)
        count = self._beacons_W.shape[1]
        self._beacon_out = wp.zeros((n, count, 3), dtype=wp.float32, device=d)
        self._beacon_mask = wp.zeros((n, count), dtype=wp.bool, device=d)
        own = self.actors_per_camera if self.actors_per_camera is not None else np.zeros((n, 0), np.int32)
        self._candidates = wp.array(own, dtype=wp.int32, device=d)
        c = self._camera
        self._beacon_camera = (
            wp.vec4(c.fx, c.fy, c.cx, c.cy),
            c.lens_id,
            lens_coefficients(*c.kernel_coefficients()),
            wp.vec2i(c.width, c.height),
        )
        low = np.tile(np.float32([-0.5, -0.5, 0.0]), (count, 1))
        high = np.tile(np.float32([c.width - 0.5, c.height - 0.5, np.inf]), (count, 1))
        return {
            "beacons": gymnasium.spaces.Box(low, high, (count, 3), np.float32),
            "beacon_mask": gymnasium.spaces.MultiBinary(count),
        }

    # ------------------------------------------------------------------ internals

    def _checked(self, actions) -> torch.Tensor:
        """The actions as a contiguous float32 tensor on the device; a clear error before any kernel runs.
        A NumPy array (what ``action_space.sample()`` gives) is copied there."""
        if isinstance(actions, np.ndarray):
            if actions.dtype.kind != "f":
                raise ConfigError(f"actions must be floating point, got {actions.dtype}")
            actions = torch.from_numpy(np.ascontiguousarray(actions, dtype=np.float32)).to(self.torch_device)
        if not isinstance(actions, torch.Tensor):
            raise ConfigError(
                f"actions must be a torch.Tensor on {self.torch_device} or a NumPy array, got {type(actions).__name__}"
            )
        if actions.device != self.torch_device:
            raise ConfigError(f"actions are on {actions.device}, the environments on {self.torch_device}")
        if tuple(actions.shape) != (self.num_envs, self.action_size):
            raise ConfigError(
                f"actions must have shape ({self.num_envs}, {self.action_size}), got {tuple(actions.shape)}"
            )
        if not actions.is_floating_point():
            raise ConfigError(f"actions must be floating point, got {actions.dtype}")
        actions = actions.to(torch.float32).contiguous()
        if not bool(torch.isfinite(actions).all()):
            raise ConfigError("actions must be finite (NaN or inf found); nothing was stepped")
        return actions

    def _reset_mask(self, seed, options) -> np.ndarray | None:
        """``options["reset_mask"]`` as an (N,) host bool array (None: reset all), checked."""
        if seed is not None and not is_whole(seed, 0, MAX_SEED):
            raise ConfigError(
                f"seed must be one integer from 0 to {MAX_SEED} (each environment's streams derive from it and its "
                f"index), got {seed!r}"
            )
        if options is not None and not isinstance(options, dict):
            raise ConfigError(f"reset options must be a dict (the one option is 'reset_mask'), got {options!r}")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ConfigError(f"reset options {sorted(options)} unknown: the one option is 'reset_mask'")
        if mask is None:
            return None
        if isinstance(mask, torch.Tensor):
            mask = mask.detach().cpu().numpy()
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
            got = f"{mask.dtype} of shape {mask.shape}" if isinstance(mask, np.ndarray) else type(mask).__name__
            raise ConfigError(f"options['reset_mask'] must be a ({self.num_envs},) bool array or tensor, got {got}")
        if not mask.any():
            raise ConfigError("options['reset_mask'] resets nothing: give at least one True")
        if seed is not None:
            raise ConfigError("a seed restarts every environment's streams: give it without a reset_mask")
        return mask

    def _resetting(self) -> np.ndarray | None:
        """The reset mask on the host, when new airframes are to be drawn or firmwares armed there (else
        None: no copy)."""
        on_host = self.randomization is not None or self._firmware is not None
        return self.episodes.mask.numpy().astype(bool) if on_host else None

    def _start_episodes(self, resetting: np.ndarray | None) -> None:
        """Reset the environments in ``episodes.mask`` on the device (``resetting``: the same on the host,
        needed only to draw new airframes)."""
        if self.randomization is not None and resetting is not None and resetting.any():
            self._randomize(np.flatnonzero(resetting))
        self._restart_recorded()
        self.sim.changed()
        if self._firmware is not None and resetting is not None and resetting.any():
            self._firmware.arm(np.flatnonzero(resetting))

    # ------------------------------------------------------------------ device work (recordable)

    def _advance(self) -> None:
        """The actions become commands; the physics steps."""
        wp.launch(
            kernels.commands_kernel,
            dim=self.num_envs,
            inputs=[self._actions, self._scale, self._offset, self._unit, self._in_units, self.episodes.mask],
            outputs=[self.sim.state_arrays],
            device=self.device,
        )
        self.sim.launch_steps(self.physics_per_action)

    def _fly_firmware(self) -> None:
        """The actions become each firmware's sticks; the physics steps in lockstep with them (on the
        host: not recorded). Environments about to reset fly on, ignored, as elsewhere."""
        c = self.control
        sticks = np.asarray(c.offset) + np.asarray(c.scale) * wp.to_torch(self._actions).cpu().numpy()
        self._firmware.fly(sticks, self.physics_per_action)

    def _restart(self) -> None:
        """The environments in ``episodes.mask`` draw a new episode and their vehicles start it."""
        e = self.episodes
        self.task.begin(self, self._prepared)
        self.sim.reset_where(
            e.mask, e.start_position, e.start_attitude, self._hover_speed, e.episode, first_index=self.first_env
        )

    def _score(self) -> None:
        """Rewards and done flags, the observation, and the mask of the environments to reset next."""
        self.task.score(self, self._prepared)
        self._observe()
        wp.launch(
            kernels.mask_from_done_kernel,
            dim=self.num_envs,
            inputs=[self.episodes.terminated, self.episodes.truncated],
            outputs=[self.episodes.mask],
            device=self.device,
        )

    def _randomize(self, envs: np.ndarray) -> None:
        values = [self.randomization.draw(self.seed, self.first_env + int(i), int(self._episode_host[i])) for i in envs]
        if self._looks:
            self._draw_looks(envs, values)
        self._episode_host[envs] += 1
        airframes = [randomized_airframe(self.nominal, v) for v in values]
        self.sim.set_airframes(airframes, envs)
        columns = ("wind.speed", "wind.from_deg", "wind.turbulence")
        drawn_wind = any(name in columns for name in self.randomization.distributions)
        drawn_gusts = any(name.startswith("wind.gust_") for name in self.randomization.distributions)
        if drawn_wind:  # each environment's own air; else the env's wind= for all
            self.sim.set_wind(envs, *([v[name] for v in values] for name in columns))
        if drawn_gusts:
            self._draw_gusts(envs, values)
        hover_speed, hover_thrust = self._hover_speed.numpy(), self._hover_thrust.numpy()
        R_BC, perturbation = self._R_BC.numpy(), self.episodes.perturbation.numpy()
        for i, af, v in zip(envs, airframes, values):
            hover_speed[i], hover_thrust[i] = af.hover_speed, af.mass * GRAVITY
            pitch = np.radians(v["camera.pitch_deg"])
            R_up = np.array([[np.cos(pitch), 0, -np.sin(pitch)], [0, 1, 0], [np.sin(pitch), 0, np.cos(pitch)]])
            R_BC[i] = R_up.T @ R_BODY_OPTICAL  # nose up by pitch: a rotation of -pitch about body y
            perturbation[i] = v["gates.perturbation"]
            for name, value in v.items():
                if name in columns and not drawn_wind or name.startswith("wind.gust_") and not drawn_gusts:
                    continue  # the env's wind= blows, not these defaults
                self._drawn.setdefault(name, np.full(self.num_envs, DEFAULTS.get(name, np.nan)))
                self._drawn[name][i] = value
        self._hover_speed.assign(hover_speed)
        self._hover_thrust.assign(hover_thrust)
        self._R_BC.assign(R_BC)
        self.episodes.perturbation.assign(perturbation)

    def _draw_gusts(self, envs: np.ndarray, values: list[dict[str, float]]) -> None:
        """One 1-cosine gust per restarting environment, timed from its episode's start (the device's
        clock: recorded steps do not advance the host's count)."""
        now = float(self.sim.state_arrays.clock.numpy()[0]) * self.sim.dt
        start = [now + v["wind.gust_in_s"] for v in values]
        bearing = np.radians([v["wind.gust_from_deg"] for v in values])
        speed = np.array([v["wind.gust_speed"] for v in values])
        peak = -speed[:, None] * np.stack([np.sin(bearing), np.cos(bearing), np.zeros_like(bearing)], axis=1)
        self.sim.set_gusts(envs, start, [v["wind.gust_duration_s"] for v in values], peak)

    def _draw_looks(self, envs: np.ndarray, values: list[dict[str, float]]) -> None:
        """Each restarting environment's camera draws its look for the episode (the scene stays as it
        was uploaded: the renderer's per-camera arrays change); what was drawn joins ``values``."""
        spec, materials = self.randomization.looks, self.renderer.look_materials
        sun = self.renderer.settings.sun_W
        looks = []
        for i, v in zip(envs, values):
            looks.append(spec.draw(self.seed, self.first_env + int(i), int(self._episode_host[i]), materials, sun))
            v.update(looks[-1].values)
        self.renderer.set_looks(looks, spec.textures, cameras=envs)  # the others keep theirs

    def _observe(self) -> None:
        d = self.device
        wp.launch(
            kernels.observe_kernel,
            dim=self.num_envs,
            inputs=[self.sim.state_arrays, self.episodes.target],
            outputs=[self._state],
            device=d,
        )
        if self.range_sensor is not None:
            self._measure_ranges()
        if self.renderer is not None:
            R_WC, p_WC = self.renderer.camera_poses
            wp.launch(
                kernels.camera_poses_kernel,
                dim=(self.num_envs, self.renderer.height),
                inputs=[self.sim.state_arrays, self._R_BC, wp.vec3(0.0)],
                outputs=[R_WC, p_WC],
                device=d,
            )
            self.renderer.render_posed(self.actors_per_camera)
            if self._events is not None:  # one step's events, its time the steps so far
                self._event_clock += 1
                step_ns = round(self._event_clock * self.sim.dt * self.physics_per_action * 1e9)
                self._events.update(step_ns, self.episodes.mask)  # a new episode's first frame sets levels
            if self._beacons_W is not None:
                self._detect_beacons(R_WC, p_WC)
            b = self.renderer.buffers
            if "depth" not in self.camera_outputs:
                return
            if self._stereo is not None:
                self._stereo.apply()
            self.renderer.launch_rows(kernels.depth_observation_kernel, [b.status, b.depth], [self._depth])

    def _detect_beacons(self, R_WC: wp.array, p_WC: wp.array) -> None:
        wp.launch(
            kernels.observe_beacons_kernel,
            dim=self._beacon_mask.shape,
            inputs=[
                self.scene.mesh.id,
                self.scene.actors,
                self.scene.splat_data,
                self._candidates,
                R_WC,
                p_WC,
                *self._beacon_camera,
                self._beacons_W,
            ],
            outputs=[self._beacon_out, self._beacon_mask],
            device=self.device,
        )

    def _measure_ranges(self) -> None:
        """Each vehicle's range sensor, looking down (sensor +z along body -z), noise per environment."""
        d, m = self.device, self.range_sensor
        R_WS, p_WS = self._range_pose
        wp.launch(
            kernels.range_poses_kernel,
            dim=self.num_envs,
            inputs=[self.sim.state_arrays, _DOWN],
            outputs=[R_WS, p_WS],
            device=d,
        )
        wp.launch(
            measure_ranges_kernel,
            dim=self._range_raw.shape,
            inputs=[
                self.scene.mesh.id,
                self._range_actors,
                self.scene.splat_data,
                R_WS,
                p_WS,
                self._range_rays,
                m.min_range,
                m.max_range,
                m.sigma,
                self._range_draws.array,
                self.first_env,
                self._range_carriers,
            ],
            outputs=[self._range_raw],
            device=d,
        )
        self._range_draws.next()
        wp.launch(
            kernels.ranges_observation_kernel,
            dim=self._range_raw.shape,
            inputs=[self._range_raw, m.min_range, m.max_range],
            outputs=[self._ranges],
            device=d,
        )

    def _info(self) -> dict:
        """The drawn randomisation values per environment (host arrays), when there is randomisation;
        the firmwares' state (armed, failsafe, stopped: (N,) bool each), when they fly."""
        info = {"randomization": {k: v.copy() for k, v in self._drawn.items()}} if self._drawn else {}
        if self._firmware is not None:
            info["firmware"] = self._firmware.reports()
        return info


#: What ``render_mode`` may be: frames as arrays (``render()``), or none.
RENDER_MODES = (None, "rgb_array")
#: Largest chase frame side, pixels.
MAX_RENDER_SIZE = 4096

#: A range sensor's mounting: its +z (the beam) along body -z.
_DOWN = wp.mat33(1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, -1.0)


def _checked_task(task):
    """A task object: it has what the environment calls (``goggles.envs.tasks``)."""
    if isinstance(task, type):
        raise ConfigError(f"task must be a task object, such as {task.__name__}(), not the class {task.__name__}")
    if not all(callable(getattr(task, name, None)) for name in ("prepare", "time_limit", "begin", "score")):
        raise ConfigError(f"task must be a task such as HoverTask(), RaceTask() or DepthFlightTask(), got {task!r}")
    return task


def _betaflight_settings(value) -> BetaflightSettings:
    """``betaflight=``: settings, the path of a CLI script, or None (the firmware's defaults)."""
    if value is None:
        return BetaflightSettings(source="betaflight=")
    if isinstance(value, BetaflightSettings):
        return value
    if isinstance(value, (str, Path)):
        return diff_settings(value, what="betaflight=")
    raise ConfigError(f"betaflight must be BetaflightSettings or the path of a CLI script, got {type(value).__name__}")


def _randomization(value) -> Randomization | None:
    """``randomization=``: a ``Randomization``, the path of its TOML file, or None."""
    if value is None or isinstance(value, Randomization):
        return value
    if isinstance(value, (str, Path)):
        return Randomization.load(value)
    raise ConfigError(f"randomization must be a Randomization or the path of its TOML file, got {type(value).__name__}")


def _padded(values) -> list[float]:
    return [float(v) for v in values] + [0.0] * (8 - len(values))
