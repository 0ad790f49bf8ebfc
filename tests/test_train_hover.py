"""The learning example learns: PPO (skrl) on DroneVectorEnv beats the do-nothing policy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("skrl", reason="skrl is in the train extra")
ROOT = Path(__file__).resolve().parents[1]


def test_ppo_learns_to_reach_targets_and_draws_its_curve(tmp_path):
    """~640k environment steps (about half a minute here): the evaluated policy's return beats holding
    still (exit 0), and the learning curve is written."""
    curve = tmp_path / "curve.png"
    command = [sys.executable, "tools/train_hover.py", "--envs", "256", "--timesteps", "2500", "--plot", str(curve)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    summary = [line for line in done.stdout.splitlines() if line.startswith("trained")]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert summary and "final distance to target" in summary[0]
    assert curve.stat().st_size > 10_000
