"""The learning example learns: PPO (skrl) on DroneVectorEnv beats the do-nothing policy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("skrl", reason="skrl is in the train extra")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_ppo_learns_to_reach_targets_and_draws_its_curve_and_films_it(tmp_path):
    """~640k environment steps (about half a minute here): the evaluated policy's return beats holding
    still (exit 0), the learning curve is written, and the film of four environments is a video
    OpenCV reads back: 2 x 2 views of 240 x 180 at 60 frames/s, one episode long (5 s) at most."""
    import cv2

    curve, video = tmp_path / "curve.png", tmp_path / "hover.mp4"
    command = [sys.executable, "tools/train_hover.py", "--envs", "256", "--timesteps", "2500", "--plot", str(curve)]
    done = subprocess.run(command + ["--video", str(video)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    summary = [line for line in done.stdout.splitlines() if line.startswith("trained")]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert summary and "final distance to target" in summary[0]
    assert curve.stat().st_size > 10_000
    film = cv2.VideoCapture(str(video))
    size = (film.get(cv2.CAP_PROP_FRAME_WIDTH), film.get(cv2.CAP_PROP_FRAME_HEIGHT))
    assert size == (480, 360) and film.get(cv2.CAP_PROP_FPS) == 60.0
    frames = 0
    while film.read()[0]:
        frames += 1
    assert 10 <= frames <= 300 and f"video: {video} ({frames} frames" in done.stdout
