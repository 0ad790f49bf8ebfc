"""Train a policy that flies to a target and holds it, with PPO from skrl, on goggles' batched envs.

The policy sees the state observation of ``DroneVectorEnv`` (target - position, velocity, attitude
matrix, body rates, IMU) and commands a velocity and yaw rate (``--control velocity``, the default)
or collective thrust and body rates (``--control rates``, harder: it starts from a smaller action
noise, since body rates that are a little off soon end in a crash, and beats the do-nothing policy
after about 8 M steps; 20 M, 11 minutes on this CPU, bring it 1.6 m from its targets against 2.2 m).
skrl was chosen because it speaks torch tensors and Gymnasium vector envs natively: the batch stays
a torch tensor on the simulator's device from Warp to the networks and back (no NumPy round trip per
step; the same script trains on ``--device cuda``), and a thin wrapper (``GogglesEnv`` below) is all
it needs.

    pip install -e ".[train]"
    python tools/train_hover.py --envs 256 --timesteps 4000 --plot docs/img/train_hover.png
    python tools/train_hover.py --control rates --envs 512 --timesteps 40000 --plot docs/img/train_rates.png
    python tools/train_hover.py --video hover.mp4    # then watch four evaluation episodes

Shows a progress bar, then the learned policy's return and final distance to the target against a
do-nothing policy (hover, zero command) on the same seeds; exits 1 if the policy did not beat it.
``--video`` films the learned policy's first evaluation episodes in four environments, each from
behind its vehicle (``render_mode="rgb_array"``), side by side.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch.base import Wrapper
from skrl.memories.torch import RandomMemory
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer
from torch import nn

from goggles.cli.common import check_device, positive, telling_slow_steps
from goggles.envs import DroneVectorEnv, HoverTask
from goggles.errors import ConfigError
from goggles.paths import writable_file


class GogglesEnv(Wrapper):
    """skrl's view of ``DroneVectorEnv``: the state observation, (N, 1) rewards and dones, and the
    returns of finished episodes kept for the learning curve."""

    def __init__(self, env: DroneVectorEnv):
        super().__init__(env)
        self._returns = torch.zeros(env.num_envs, device=self.device)
        self.finished: list[tuple[int, float]] = []  # (env steps so far, episode return)
        self.env_steps = 0

    @property
    def observation_space(self):
        return self._env.single_observation_space["state"]

    @property
    def action_space(self):
        return self._env.single_action_space

    def reset(self):
        observations, info = self._env.reset()
        self._returns.zero_()
        return observations["state"].clone(), info

    def step(self, actions):
        observations, reward, terminated, truncated, info = self._env.step(actions)
        self.env_steps += self._env.num_envs
        self._returns += reward
        done = terminated | truncated
        if bool(done.any()):
            for value in self._returns[done].tolist():
                self.finished.append((self.env_steps, value))
            self._returns[done] = 0.0
        # The env's buffers are rewritten in place at every step: skrl keeps the previous observation.
        return (
            observations["state"].clone(),
            reward.view(-1, 1).clone(),
            terminated.view(-1, 1).clone(),
            truncated.view(-1, 1).clone(),
            info,
        )

    def state(self):
        return None

    def render(self, *args, **kwargs):
        return None

    def close(self):
        self._env.close()


#: The policy's initial log standard deviation per control (actions in [-1, 1]): body rates explore
#: less (sigma 0.14 of +-6 rad/s), or most early episodes end in a crash before anything is learned.
INITIAL_LOG_STD = {"velocity": -1.0, "rates": -2.0}


class Policy(GaussianMixin, Model):
    def __init__(self, observation_space, action_space, device, log_std: float = -1.0):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        GaussianMixin.__init__(self, clip_actions=True)
        self.net = _mlp(self.num_observations, self.num_actions)
        self.log_std = nn.Parameter(torch.full((self.num_actions,), log_std))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {"log_std": self.log_std}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = _mlp(self.num_observations, 1)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def _mlp(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, 64), nn.ELU(), nn.Linear(64, 64), nn.ELU(), nn.Linear(64, outputs))


def make_env(args, seed: int) -> DroneVectorEnv:
    task = HoverTask(episode_s=args.episode_s)
    # Same-step autoreset: skrl, like most GPU RL libraries, takes the returned observation as the
    # next episode's first when an episode ends.
    return DroneVectorEnv(
        args.envs,
        task=task,
        control=args.control,
        autoreset=AutoresetMode.SAME_STEP,
        seed=seed,
        device=args.device,
        randomization=args.randomization,
    )


def evaluate(env: DroneVectorEnv, act, seed: int) -> tuple[float, float]:
    """Mean episode return and mean final distance to the target over one episode per environment
    (``act(state) -> actions``), from ``reset(seed=)``; ended environments stop counting."""
    observations, _ = env.reset(seed=seed)
    total = torch.zeros(env.num_envs, device=observations["state"].device)
    alive = torch.ones(env.num_envs, dtype=torch.bool, device=total.device)
    distance = torch.zeros_like(total)
    for _ in range(env.max_steps):
        with torch.no_grad():
            actions = act(observations["state"])
        observations, reward, terminated, truncated, info = env.step(actions)
        done = terminated | truncated
        last = torch.where(done[:, None], info["final_obs"]["state"], observations["state"])  # same-step autoreset
        total += torch.where(alive, reward, 0.0)
        distance = torch.where(alive, last[:, :3].norm(dim=1), distance)
        alive &= ~done
        if not bool(alive.any()):
            break
    return float(total.mean()), float(distance.mean())


def train(args) -> int:
    torch.manual_seed(args.seed)
    env = GogglesEnv(make_env(args, args.seed))
    device = env.device
    models = {
        "policy": Policy(env.observation_space, env.action_space, device, INITIAL_LOG_STD[args.control]),
        "value": Value(env.observation_space, env.action_space, device),
    }
    cfg = PPO_CFG(
        rollouts=args.rollouts,
        learning_epochs=5,
        mini_batches=4,
        discount_factor=0.99,
        gae_lambda=0.95,
        learning_rate=args.lr,
        learning_rate_scheduler=KLAdaptiveLR,
        learning_rate_scheduler_kwargs={"kl_threshold": 0.01},
        observation_preprocessor=RunningStandardScaler,
        observation_preprocessor_kwargs={"size": env.observation_space, "device": device},
        value_preprocessor=RunningStandardScaler,
        value_preprocessor_kwargs={"size": 1, "device": device},
        time_limit_bootstrap=True,
    )
    cfg.experiment.write_interval = 0  # the curve is drawn from the episodes below, not TensorBoard
    cfg.experiment.checkpoint_interval = 0
    memory = RandomMemory(memory_size=args.rollouts, num_envs=env.num_envs, device=device)
    agent = PPO(
        models=models,
        memory=memory,
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=device,
        cfg=cfg,
    )
    trainer = SequentialTrainer(cfg={"timesteps": args.timesteps, "headless": True}, env=env, agents=agent)

    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start

    steps, returns = (np.array(v) for v in zip(*env.finished)) if env.finished else (np.zeros(0), np.zeros(0))
    evaluation = make_env(args, args.seed + 1)
    policy = models["policy"]
    scaler = agent._observation_preprocessor

    def learned(state):
        return policy.act({"observations": scaler(state)}, role="policy")[1]["mean_actions"].clamp(-1.0, 1.0)

    def do_nothing(state):  # rates: hover thrust, zero rates; velocity: hold still
        return torch.zeros(state.shape[0], 4, device=state.device)

    learned_return, learned_distance = evaluate(evaluation, learned, args.seed + 1)
    hover_return, hover_distance = evaluate(evaluation, do_nothing, args.seed + 1)
    evaluation.close()
    print(
        f"trained {env.env_steps} env steps in {seconds:.0f} s ({env.env_steps / seconds:,.0f} steps/s); "
        f"evaluation over {args.envs} episodes: return {learned_return:.1f} (do-nothing {hover_return:.1f}), "
        f"final distance to target {learned_distance:.2f} m (do-nothing {hover_distance:.2f} m)"
    )
    if args.plot:
        _plot(args.plot, steps, returns, learned_return, hover_return, args, seconds)
        print(f"learning curve: {args.plot}")
    if args.save:
        torch.save({"policy": policy.state_dict(), "scaler": scaler.state_dict()}, args.save)
    if args.video:
        frames = film(args, learned, args.seed + 1)
        print(f"video: {args.video} ({frames} frames of 4 environments)")
    return 0 if learned_return > hover_return else 1


#: The film: environments side by side (2 x 2), each frame's size, and steps per frame (60 frames/s).
FILMED_ENVS, FILM_SIZE, STEPS_PER_FRAME = 4, (240, 180), 2


def film(args, act, seed: int) -> int:
    """Fly ``act`` for one episode in ``FILMED_ENVS`` environments seeded as the evaluation's first
    ones, and write their chase views side by side to ``args.video``; the number of frames."""
    import cv2

    env = DroneVectorEnv(
        FILMED_ENVS,
        task=HoverTask(episode_s=args.episode_s),
        control=args.control,
        autoreset=AutoresetMode.DISABLED,  # each ends where its episode ends
        seed=seed,
        device=args.device,
        render_mode="rgb_array",
        render_size=FILM_SIZE,
    )
    fps = env.metadata["render_fps"] / STEPS_PER_FRAME
    width, height = FILM_SIZE
    writer = cv2.VideoWriter(
        str(args.video), cv2.VideoWriter_fourcc(*_FOURCC[args.video.suffix.lower()]), fps, (2 * width, 2 * height)
    )
    if not writer.isOpened():  # (an OpenCV built without that codec): said, not an empty file
        env.close()
        raise ConfigError(f"--video {args.video}: this OpenCV cannot write {args.video.suffix} video")
    observations, _ = env.reset(seed=seed)
    alive = torch.ones(FILMED_ENVS, dtype=torch.bool, device=observations["state"].device)
    frames = 0
    for step in range(env.max_steps):
        if step % STEPS_PER_FRAME == 0:
            views = env.render()
            grid = np.vstack([np.hstack(views[:2]), np.hstack(views[2:])])
            writer.write(np.ascontiguousarray(grid[:, :, ::-1]))  # OpenCV writes BGR
            frames += 1
        with torch.no_grad():
            actions = act(observations["state"])
        observations, _, terminated, truncated, _ = env.step(torch.where(alive[:, None], actions, 0.0))
        alive &= ~(terminated | truncated)
        if not bool(alive.any()):
            break
    writer.release()
    env.close()
    return frames


#: Video containers ``--video`` writes, and the codec of each (OpenCV's own FFmpeg).
_FOURCC = {".mp4": "mp4v", ".avi": "MJPG"}


def _plot(path: Path, steps, returns, learned: float, hover: float, args, seconds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(steps, returns, ".", ms=1.5, alpha=0.15, color="tab:blue", label="episode return")
    if len(steps):
        edges = np.linspace(0, steps.max(), 41)
        index = np.digitize(steps, edges)
        centres = [steps[index == k].mean() for k in np.unique(index)]
        means = [returns[index == k].mean() for k in np.unique(index)]
        ax.plot(centres, means, color="tab:blue", lw=2, label="mean of finished episodes")
    ax.axhline(learned, color="tab:green", ls="--", label=f"learned policy, evaluated ({learned:.0f})")
    ax.axhline(hover, color="tab:red", ls=":", label=f"do-nothing policy, zero action ({hover:.0f})")
    ax.set_xlabel("environment steps")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(6, 6))
    ax.set_ylabel("episode return")
    ax.set_title(f"PPO (skrl) on DroneVectorEnv: {args.envs} envs, {args.device}, {seconds / 60:.1f} min")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _check_plot_path(path: Path) -> None:
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise ConfigError(f"--plot {path}: an image file, one of .{', .'.join(sorted(formats))}")
    writable_file(path, "--plot")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=256, help="environments stepped together (default 256)")
    parser.add_argument("--timesteps", type=int, default=2000, help="batched steps to train (default 2000)")
    parser.add_argument("--rollouts", type=int, default=32, help="steps per environment between updates")
    parser.add_argument("--episode-s", type=positive, default=5.0, help="episode length in seconds (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--control", default="velocity", choices=("velocity", "rates"), help="the action space (default velocity)"
    )
    parser.add_argument("--lr", type=positive, default=3e-4, help="learning rate (default 3e-4)")
    parser.add_argument("--device", default="cpu", help="Warp/torch device: cpu (default) or cuda")
    parser.add_argument(
        "--randomization",
        type=Path,
        help="draw each episode's airframe, noise and wind from this TOML (assets/randomization-wind.toml: wind only)",
    )
    parser.add_argument("--plot", type=Path, help="write the learning curve to this PNG")
    parser.add_argument("--save", type=Path, help="write the policy's weights to this file")
    parser.add_argument("--video", type=Path, help="film the learned policy in four environments: an .mp4 or .avi file")
    args = parser.parse_args(argv)
    if args.envs < 1 or args.timesteps < 1 or args.rollouts < 1:
        parser.error("--envs, --timesteps and --rollouts must be positive")
    try:
        check_device(args.device)
        if args.plot:  # checked before minutes of training, not after
            _check_plot_path(args.plot)
        if args.save:
            writable_file(args.save, "--save")
        if args.video:
            if args.video.suffix.lower() not in _FOURCC:
                raise ConfigError(f"--video {args.video}: a video file, one of {', '.join(_FOURCC)}")
            writable_file(args.video, "--video")
        with telling_slow_steps():  # a first run compiles Warp's kernels: say so
            return train(args)
    except ConfigError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
