"""What the learning environments reward: small task classes over ``DroneVectorEnv``.

A task is a frozen set of settings with four methods: ``prepare(env)`` allocates what it keeps per
environment (a race's perturbed gates) and returns it, ``time_limit(prepared)`` is the episode length
in seconds, and on the device ``begin(env, prepared)`` draws new episodes for the environments in
``env.episodes.mask`` (start pose, target), ``score(env, prepared)`` writes every environment's reward
and done flags after the physics. Draws come from (seed, environment, episode) streams, so an environment
replays the same whatever the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import warp as wp

from goggles.checks import Table
from goggles.envs import kernels
from goggles.errors import ConfigError
from goggles.frames import quat_from_euler, transform
from goggles.paths import default_course
from goggles.scene.gates import GATE_BAR, GATE_DEPTH, gate_shape, load_course


@dataclass
class Episodes:
    """The per-environment device arrays a task reads and writes, (N,) each."""

    mask: wp.array
    """int32: 1 for the environments starting a new episode now."""
    episode: wp.array
    """int32: episodes begun so far (the random streams' second key)."""
    steps: wp.array
    """int32: steps into the present episode."""
    start_position: wp.array
    start_attitude: wp.array
    target: wp.array
    """vec3: what the state observation's first columns point at (target - position)."""
    previous: wp.array
    """vec3: the position at the previous step (progress rewards)."""
    reward: wp.array
    terminated: wp.array
    truncated: wp.array
    perturbation: wp.array
    """float: this episode's factor on the task's random perturbations (domain randomisation; 1)."""

    @classmethod
    def zeros(cls, n: int, device) -> Episodes:
        def z(dtype):
            return wp.zeros(n, dtype=dtype, device=device)

        return cls(
            mask=wp.ones(n, dtype=wp.int32, device=device),
            episode=z(wp.int32),
            steps=z(wp.int32),
            start_position=z(wp.vec3),
            start_attitude=z(wp.quat),
            target=z(wp.vec3),
            previous=z(wp.vec3),
            reward=z(wp.float32),
            terminated=z(wp.bool),
            truncated=z(wp.bool),
            perturbation=wp.ones(n, dtype=float, device=device),
        )


def _settings(task) -> Table:
    """A task's settings, read as a file's table is: the same checks, and messages naming the task and
    the setting (a negative episode length would end every episode at its first step, silently)."""
    return Table(type(task).__name__, "settings", {f.name: getattr(task, f.name) for f in fields(task)})


class _FixedLength:
    """A task that keeps nothing of its own and whose episodes last ``episode_s``."""

    episode_s: float

    def prepare(self, env) -> None:
        return None

    def time_limit(self, prepared: None) -> float:
        return self.episode_s


@dataclass(frozen=True)
class HoverTask(_FixedLength):
    """Reach and hold a target: each episode starts within ``spawn_radius`` of ``spawn`` (box
    half-size, m) with a random heading, and its target lies within ``target_radius`` of the start.
    Reward 1 / (1 + d^2) - 0.05 |rates| per step. Straying ``max_distance`` from the target or crashing
    ends the episode; ``episode_s`` truncates it."""

    spawn: tuple[float, float, float] = (0.0, 0.0, 1.5)
    spawn_radius: float = 0.5
    target_radius: float = 1.0
    max_distance: float = 4.0
    episode_s: float = 5.0

    def __post_init__(self):
        settings = _settings(self)
        settings.vector("spawn", 3, unit="m")
        for name in ("spawn_radius", "target_radius"):
            settings.number(name, minimum=0.0, unit="m")
        settings.number("max_distance", positive=True, unit="m")
        settings.number("episode_s", positive=True, unit="s")

    def begin(self, env, prepared: None) -> None:
        e = env.episodes
        wp.launch(
            kernels.draw_starts_kernel,
            dim=env.num_envs,
            inputs=[
                e.mask,
                env.seed,
                env.first_env,
                e.episode,
                wp.vec3(*self.spawn),
                self.spawn_radius,
                self.target_radius,
            ],
            outputs=[e.start_position, e.start_attitude, e.target, e.steps],
            device=env.device,
        )

    def score(self, env, prepared: None) -> None:
        e = env.episodes
        wp.launch(
            kernels.hover_reward_kernel,
            dim=env.num_envs,
            inputs=[env.sim.state_arrays, e.target, e.steps, env.max_steps, self.max_distance, e.mask],
            outputs=[e.reward, e.terminated, e.truncated],
            device=env.device,
        )


@dataclass(frozen=True)
class DepthFlightTask(_FixedLength):
    """Fly across the arena to a goal through its obstacles (pillars, crates), seeing them in depth.
    Each episode starts within ``start_radius`` of ``start`` facing the goal (+-``heading_jitter_deg``),
    the goal within ``goal_radius`` of ``goal`` (box half-sizes, m). Reward: the distance gained
    towards the goal each step (m) times ``progress``; ``success`` on arriving within ``reach`` m, and
    ``crash`` subtracted on a collision, either ending the episode; ``episode_s`` truncates it. The
    default start and goal are on either side of the default arena's pillars: about half of the
    straight lines between them hit one."""

    start: tuple[float, float, float] = (0.0, 2.5, 1.5)
    start_radius: float = 0.5
    goal: tuple[float, float, float] = (14.5, 3.0, 1.8)
    goal_radius: float = 1.0
    heading_jitter_deg: float = 20.0
    reach: float = 1.0
    progress: float = 1.0
    success: float = 10.0
    crash: float = 10.0
    episode_s: float = 15.0

    def __post_init__(self):
        settings = _settings(self)
        for name in ("start", "goal"):
            settings.vector(name, 3, unit="m")
        for name in ("start_radius", "goal_radius"):
            settings.number(name, minimum=0.0, unit="m")
        settings.number("heading_jitter_deg", minimum=0.0, unit="degrees")
        settings.number("reach", positive=True, unit="m")
        for name in ("progress", "success", "crash"):
            settings.number(name)
        settings.number("episode_s", positive=True, unit="s")

    def begin(self, env, prepared: None) -> None:
        e = env.episodes
        wp.launch(
            kernels.draw_goal_kernel,
            dim=env.num_envs,
            inputs=[
                e.mask,
                env.seed,
                env.first_env,
                e.episode,
                wp.vec3(*self.start),
                self.start_radius,
                wp.vec3(*self.goal),
                self.goal_radius,
                np.radians(self.heading_jitter_deg),
            ],
            outputs=[e.start_position, e.start_attitude, e.target, e.steps, e.previous],
            device=env.device,
        )

    def score(self, env, prepared: None) -> None:
        e = env.episodes
        wp.launch(
            kernels.goal_reward_kernel,
            dim=env.num_envs,
            inputs=[
                env.sim.state_arrays,
                e.target,
                e.previous,
                e.steps,
                env.max_steps,
                wp.vec3(self.progress, self.success, self.crash),
                self.reach,
                e.mask,
            ],
            outputs=[e.reward, e.terminated, e.truncated],
            device=env.device,
        )


@dataclass
class RaceArrays:
    """A race's per-environment gates on the device, drawn anew each episode."""

    nominal_position: wp.array
    nominal_yaw: wp.array
    bounds: wp.array
    opening: wp.array
    gate_position: wp.array
    """(N, G) vec3: each environment's gates this episode."""
    gate_yaw: wp.array
    next_gate: wp.array
    """(N,) int32: the gate to fly through next (G: all passed)."""
    start: tuple[float, float, float]
    start_yaw: float
    timeout: float
    """s: the course's."""
    shapes: tuple | None = None
    """With cameras: (G,) shape index, and the shape's box lower and upper corners, of each gate."""
    beacons_G: wp.array | None = None
    """(G, 4) the IR beacons on each gate's front face, gate frame."""
    beacons_W: wp.array | None = None
    """(N, 4 G) each environment's beacons this episode (gate k's are 4k .. 4k + 3)."""
    shown_shapes: tuple | None = None
    """The gates' shapes for a view of the environments, made on its first frame (``RaceTask.shown``)."""


@dataclass(frozen=True)
class Shown:
    """What a view of the environments (``goggles.envs.chase``) shows of a task beyond the scene's
    actors: each environment's k things, thing j of shape ``shapes[shape_of[j]]``, at ``T_WA[i, j]``."""

    shapes: tuple
    shape_of: np.ndarray
    """(k,) int."""
    T_WA: np.ndarray
    """(N, k, 4, 4) world poses."""


@dataclass(frozen=True)
class RaceTask:
    """Race a course's gates in order (AlphaPilot). Each episode shifts every gate within its
    perturbation bounds (``perturb``; times the episode's ``gates.perturbation`` when randomised) and
    starts the vehicle within ``spawn_radius`` of the course's
    start, lifted to ``start_height``. Reward (the progress reward of Song et al., "Autonomous drone
    racing with deep reinforcement learning", 2021): the distance gained towards the next gate's
    centre each step (m) times ``progress``, ``gate`` per gate passed by the AlphaPilot rule
    (REFERENCE section 5); touching a gate's frame, a collision or straying ``max_distance`` from the
    next gate costs ``crash`` and ends the episode, as does the last gate; the course's timeout (or
    ``episode_s``) truncates it. The state observation's target is the next gate's centre. With
    cameras, each environment's gates are actors of the scene that only its camera sees (the scene
    needs ``max_actors`` >= N x gates; the race owns its actors); the vehicles do not collide with
    actors: the frames are tested in closed form."""

    course: str | Path = field(default_factory=default_course)
    perturb: bool = True
    start_height: float = 1.5
    spawn_radius: float = 0.2
    progress: float = 1.0
    gate: float = 10.0
    crash: float = 10.0
    max_distance: float = 10.0
    vehicle_radius: float = 0.25
    episode_s: float | None = None

    def __post_init__(self):
        settings = _settings(self)
        if not isinstance(self.course, (str, Path)):
            raise settings.error("course", "a course file's path")
        settings.flag("perturb", True)
        for name in ("start_height", "progress", "gate", "crash"):
            settings.number(name)
        for name in ("spawn_radius", "vehicle_radius"):
            settings.number(name, minimum=0.0, unit="m")
        settings.number("max_distance", positive=True, unit="m")
        if self.episode_s is not None:
            settings.number("episode_s", positive=True, unit="s")

    def prepare(self, env) -> RaceArrays:
        course = load_course(self.course)  # a bad file: ConfigError naming the file and key
        d, n, gates = env.device, env.num_envs, course.gates
        bounds = np.array([g.perturbation for g in gates], np.float32) * (1.0 if self.perturb else 0.0)
        x, y, z, yaw = course.start
        return RaceArrays(
            nominal_position=wp.array(np.array([g.position for g in gates], np.float32), dtype=wp.vec3, device=d),
            nominal_yaw=wp.array(np.array([g.yaw for g in gates], np.float32), dtype=float, device=d),
            bounds=wp.array(bounds, dtype=wp.vec3, device=d),
            opening=wp.array(np.array([g.opening for g in gates], np.float32), dtype=wp.vec2, device=d),
            gate_position=wp.zeros((n, len(gates)), dtype=wp.vec3, device=d),
            gate_yaw=wp.zeros((n, len(gates)), dtype=float, device=d),
            next_gate=wp.zeros(n, dtype=wp.int32, device=d),
            start=(x, y, max(z, self.start_height)),
            start_yaw=yaw,
            timeout=course.timeout,
            shapes=_gate_actors(env, gates) if env.renderer is not None else None,
            beacons_G=wp.array(
                np.stack([g.beacon_positions_G() for g in gates]).astype(np.float32), dtype=wp.vec3, device=d
            ),
            beacons_W=wp.zeros((n, 4 * len(gates)), dtype=wp.vec3, device=d),
        )

    def beacons(self, race: RaceArrays) -> wp.array:
        """(N, B) each environment's beacons in the world (for the env's ``beacons`` observation)."""
        return race.beacons_W

    def time_limit(self, race: RaceArrays) -> float:
        return self.episode_s if self.episode_s is not None else race.timeout

    def shown(self, env, race: RaceArrays) -> Shown | None:
        """Each environment's gates this episode, for a view of it; None where they are the scene's
        actors already (with cameras), which a view shows as such."""
        if race.shapes is not None:
            return None
        openings = [tuple(float(v) for v in opening) for opening in race.opening.numpy()]
        distinct = list(dict.fromkeys(openings))
        if race.shown_shapes is None:
            race.shown_shapes = tuple(gate_shape(o, f"gate-{j}") for j, o in enumerate(distinct))
        T_WA = [
            [transform(p, quat_from_euler(0.0, 0.0, float(yaw))) for p, yaw in zip(positions, yaws)]  # as Gate.T_WG
            for positions, yaws in zip(race.gate_position.numpy(), race.gate_yaw.numpy())
        ]
        return Shown(race.shown_shapes, np.array([distinct.index(o) for o in openings]), np.array(T_WA))

    def begin(self, env, race: RaceArrays) -> None:
        e = env.episodes
        wp.launch(
            kernels.draw_course_kernel,
            dim=env.num_envs,
            inputs=[
                e.mask,
                env.seed,
                env.first_env,
                e.episode,
                race.nominal_position,
                race.nominal_yaw,
                race.bounds,
                e.perturbation,
                wp.vec3(*race.start),
                race.start_yaw,
                self.spawn_radius,
            ],
            outputs=[
                race.gate_position,
                race.gate_yaw,
                race.next_gate,
                e.start_position,
                e.start_attitude,
                e.target,
                e.steps,
                e.previous,
            ],
            device=env.device,
        )

        wp.launch(
            kernels.place_beacons_kernel,
            dim=(env.num_envs, *race.beacons_G.shape),
            inputs=[e.mask, race.gate_position, race.gate_yaw, race.beacons_G],
            outputs=[race.beacons_W],
            device=env.device,
        )
        if race.shapes is not None:
            wp.launch(
                kernels.place_gates_kernel,
                dim=race.gate_position.shape,
                inputs=[e.mask, race.gate_position, race.gate_yaw, *race.shapes],
                outputs=[env.scene.actors],
                device=env.device,
            )

    def score(self, env, race: RaceArrays) -> None:
        e = env.episodes
        wp.launch(
            kernels.race_reward_kernel,
            dim=env.num_envs,
            inputs=[
                env.sim.state_arrays,
                race.gate_position,
                race.gate_yaw,
                race.opening,
                wp.vec3(GATE_BAR, GATE_DEPTH, self.vehicle_radius),
                race.next_gate,
                e.previous,
                e.steps,
                env.max_steps,
                wp.vec3(self.progress, self.gate, self.crash),
                self.max_distance,
                e.mask,
            ],
            outputs=[e.target, e.reward, e.terminated, e.truncated],
            device=env.device,
        )


def _gate_actors(env, gates) -> tuple:
    """Make every environment's gates actor instances of the env's scene, instance i * G + k for gate k
    of environment i, seen by camera i only; the gate shapes' indices and boxes for placing them."""
    scene, n, count = env.scene, env.num_envs, len(gates)
    if scene.max_actors < n * count:
        raise ConfigError(
            f"the race places {n} x {count} gates: build the DeviceScene with max_actors >= {n * count} "
            f"(it has {scene.max_actors})"
        )
    by_opening: dict[tuple, int] = {}
    for gate in gates:
        if gate.opening not in by_opening:
            by_opening[gate.opening] = scene.add_shape(gate_shape(gate.opening, f"gate-{len(by_opening)}"))
    shapes = np.array([by_opening[g.opening] for g in gates], np.int32)
    scene.set_actors(np.tile(shapes, n), np.tile(np.stack([g.T_WG for g in gates]), (n, 1, 1)))
    env.actors_per_camera = np.arange(n * count, dtype=np.int32).reshape(n, count)
    bounds = np.array([scene.shape_bounds(k) for k in shapes], np.float32)  # (G, 2, 3) in the shape frame
    d = env.device
    return (
        wp.array(shapes, dtype=wp.int32, device=d),
        wp.array(bounds[:, 0], dtype=wp.vec3, device=d),
        wp.array(bounds[:, 1], dtype=wp.vec3, device=d),
    )
