"""Batch work in worker processes (a folder of replays, a dataset): results come back as tasks end,
with a tick each second between, and a Ctrl-C stops the batch at once (queued tasks never start,
running ones run their cleanup) instead of waiting for the whole queue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from goggles.runtime.processes import run_in_processes
from tests.logs.test_dataset import flights, write_spec  # noqa: F401  (a fixture)
from tests.support import group_gone

WAIT_S = 120.0
"""A task that is never stopped gives up after this long (so that a failing test fails, not hangs)."""


def _square(task):
    x, pause = task
    time.sleep(pause)
    return x * x


def _started_and_waiting(folder: Path, i: int) -> None:
    """Say the task started, then wait until stopped (or ``WAIT_S``, writing ``never-stopped-<i>``)."""
    (folder / f"started-{i}").touch()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.01)
    (folder / f"never-stopped-{i}").touch()


def _run_until_stopped(task):
    """Wait to be stopped; its ``finally`` says it cleaned up."""
    try:
        _started_and_waiting(*task)
    finally:
        (task[0] / f"cleaned-{task[1]}").touch()


def _swallow_the_stop(task):
    """As a library that catches BaseException would (trimesh's optional imports): the task goes on."""
    try:
        _started_and_waiting(*task)
    except BaseException:
        pass
    (task[0] / f"returned-{task[1]}").touch()


def _start_warp(_):
    import warp as wp

    wp.init()
    return wp.config.log_level


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [False, True])
def test_workers_start_warp_as_quiet_as_their_parent(capfd, verbose):
    """A folder replay's workers printed Warp's banner and every module load (a spawned interpreter
    starts Warp at its default level), although the command was quiet; with -v they still show them."""
    import warp as wp

    before = wp.config.log_level
    wp.config.log_level = wp.LOG_INFO if verbose else wp.LOG_ERROR
    capfd.readouterr()
    try:
        results = [r for r in run_in_processes(_start_warp, [0], 1) if r is not None]
    finally:
        wp.config.log_level = before
    said = capfd.readouterr()
    assert results == [(0, wp.LOG_INFO if verbose else wp.LOG_ERROR)]
    assert ("Warp " in said.out + said.err) == verbose


@pytest.mark.slow
def test_results_come_back_with_their_index_and_a_tick_while_none_ends():
    items = list(run_in_processes(_square, [(3, 0.0), (4, 2.5), (5, 0.0)], workers=2))
    results = dict(item for item in items if item is not None)
    assert results == {0: 9, 1: 16, 2: 25}
    assert None in items  # 2.5 s without a result: at least one tick


@pytest.mark.slow
def test_a_ctrl_c_in_the_loop_stops_running_tasks_and_starts_no_queued_one(tmp_path):
    with (
        pytest.raises(KeyboardInterrupt),
        closing(run_in_processes(_run_until_stopped, [(tmp_path, i) for i in range(6)], workers=2)) as results,
    ):
        for _ in results:  # a tick each second; both workers busy, then Ctrl-C
            if len(list(tmp_path.glob("started-*"))) == 2:
                raise KeyboardInterrupt
    started = sorted(p.name for p in tmp_path.glob("started-*"))
    assert len(started) == 2, started
    assert sorted(p.name for p in tmp_path.glob("cleaned-*")) == [s.replace("started", "cleaned") for s in started]
    assert not list(tmp_path.glob("never-stopped-*"))


@pytest.mark.slow
def test_a_worker_whose_task_swallowed_the_stop_starts_no_other_task(tmp_path):
    with (
        pytest.raises(KeyboardInterrupt),
        closing(run_in_processes(_swallow_the_stop, [(tmp_path, i) for i in range(6)], workers=2)) as results,
    ):
        for _ in results:
            if len(list(tmp_path.glob("started-*"))) == 2:
                raise KeyboardInterrupt
    assert len(list(tmp_path.glob("started-*"))) == 2
    assert len(list(tmp_path.glob("returned-*"))) == 2  # they went on to their end, and no further


@pytest.mark.parametrize(
    "signal_to, on_ray, exit_code",
    [
        ("group", False, 130),
        ("parent", False, 130),
        ("term", False, 143),
        ("kill", False, -signal.SIGKILL),
        ("group", True, 130),
    ],
)
@pytest.mark.slow
def test_a_stopped_dataset_keeps_the_finished_jobs_and_leaves_no_half_written_one_nor_a_worker(
    flights,  # noqa: F811  (a fixture)
    tmp_path,
    signal_to,
    on_ray,
    exit_code,
):
    """``group``: a terminal's Ctrl-C (SIGINT to every process of the group); ``parent``: SIGINT to the
    command's process alone (as when a library swallowed it while the command started); ``term``:
    ``kill``, a job scheduler; ``kill``: SIGKILL, the parent dies at once and its workers must follow.
    ``on_ray``: the jobs run on a local Ray cluster the command starts (its actors are killed)."""
    if on_ray:
        pytest.importorskip("ray")
    rig = flights / "slow.toml"  # slow jobs: each runs for seconds
    text = (flights / "rig.toml").read_text()
    rig.write_text(text.replace("width = 64", "width = 320").replace("height = 48", "height = 240"))
    spec = write_spec(
        flights,
        f'[dataset]\noutput = "{tmp_path / "out"}"\n[jobs]\nlogs = ["a.mcap", "b.mcap"]\nrigs = ["{rig}"]\n'
        "seeds = [1, 2, 3]\n",
        f"stop-{signal_to}-{on_ray}.toml",
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "goggles.cli", "dataset", str(spec), "--workers", "2"]
        + (["--ray", "local"] if on_ray else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives a command
    )
    deadline = time.monotonic() + WAIT_S
    while run.poll() is None and time.monotonic() < deadline and not list((tmp_path / "out").glob("*.partial.mcap")):
        time.sleep(0.01)  # until a job is writing its output
    assert run.poll() is None, run.communicate()[1][-2000:]
    if signal_to == "group":
        os.killpg(run.pid, signal.SIGINT)
    else:
        os.kill(run.pid, {"parent": signal.SIGINT, "term": signal.SIGTERM, "kill": signal.SIGKILL}[signal_to])
    assert run.wait(timeout=60) == exit_code, run.stderr.read()[-2000:]
    assert group_gone(run.pid), "a worker outlived the command"
    run.communicate()
    out = tmp_path / "out"
    assert not list(out.glob("*.partial.mcap"))
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted(r["output"] for r in rows) == sorted(p.name for p in out.glob("*.mcap"))
    assert all(r["status"] == "done" for r in rows) and len(rows) < 6
    if signal_to != "group" or on_ray:
        return
    # A second run does the rest, and only the rest.
    again = subprocess.run(
        [sys.executable, "-m", "goggles.cli", "dataset", str(spec), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{6 - len(rows)} job(s) done, 0 failed, {len(rows)} already in the manifest" in again.stdout
    assert Path(out / "manifest.jsonl").read_text().count("\n") == 6
