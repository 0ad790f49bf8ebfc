"""A long silent step (a first run's kernel compile, a large import) is told to the person waiting."""

from __future__ import annotations

import re
import threading
import time

from goggles.cli.common import telling_slow_steps
from goggles.runtime.progress import busy, current, load_kernels


def _wait_for(capsys, text: str, seen: list[str]) -> None:
    deadline = time.monotonic() + 60
    while not any(text in s for s in seen) and time.monotonic() < deadline:
        seen.append(capsys.readouterr().err)
        time.sleep(0.05)


def test_a_step_that_lasts_is_told_with_its_age_and_a_quick_one_is_not(capsys):
    seen: list[str] = []
    with telling_slow_steps(after_s=1.0, again_s=3600):
        with busy("quick"):
            pass
        with busy("importing terrain.glb"):
            _wait_for(capsys, "importing terrain.glb", seen)
    seen.append(capsys.readouterr().err)
    lines = "".join(seen).splitlines()
    assert len(lines) == 1 and re.fullmatch(r"goggles: importing terrain\.glb \.\.\. \d+ s", lines[0]), lines


def test_the_innermost_step_begun_last_is_the_one_waited_for():
    assert current() is None
    with busy("loading the scene"):
        with busy("building the BVH"):
            assert current()[0] == "building the BVH"
        assert current()[0] == "loading the scene"
        other_started, release = threading.Event(), threading.Event()

        def other():
            with busy("compiling kernels"):
                other_started.set()
                release.wait(30)

        thread = threading.Thread(target=other)
        thread.start()
        other_started.wait(30)
        assert current()[0] == "compiling kernels"
        release.set()
        thread.join()
        assert current()[0] == "loading the scene"
    assert current() is None


def test_a_step_that_fails_is_no_longer_waited_for():
    try:
        with busy("importing a broken file"):
            raise ValueError("broken")
    except ValueError:
        pass
    assert current() is None


def test_loading_kernels_is_a_step_that_names_them(monkeypatch):
    import warp as wp

    from goggles.render import kernels

    named = []
    monkeypatch.setattr(wp, "load_module", lambda module, device: named.append(current()[0]))
    load_kernels(kernels, "cpu")
    load_kernels(kernels.render_kernel("rows", False, False, False).module, "cpu")
    assert named[0] == "compiling Warp kernels for cpu: goggles.render.kernels (a first run only; cached after)"
    assert named[1].startswith("compiling Warp kernels for cpu: render_cameras_kernel ")


def test_a_forked_worker_starts_with_no_step_and_a_free_lock():
    """A process pool forks while the parent's watcher may hold the lock for an instant: the child
    must neither inherit the parent's steps nor wait on that lock forever."""
    import multiprocessing
    import os

    from goggles.runtime import progress as busy_module

    if not hasattr(os, "register_at_fork"):
        return
    context = multiprocessing.get_context("fork")
    with busy("the parent's step"):
        with busy_module._lock:  # held by this thread at the fork, as the watcher might
            child = context.Process(target=_report_in_child)
            child.start()
        child.join(20)
    if child.is_alive():  # waiting on the lock forever
        child.kill()
    assert child.exitcode == 0


def _report_in_child() -> None:
    import os

    assert current() is None
    with busy("the child's own step"):
        assert current()[0] == "the child's own step"
    os._exit(0)
