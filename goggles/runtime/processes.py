"""Worker processes on this machine for batch work (a folder of replays, a dataset) that a Ctrl-C stops.

A terminal's Ctrl-C reaches every process of the group. Left to themselves, pool workers would take
it as an exception of the task they were running and go on with the next one, while the parent
waited for the whole queue. Here workers ignore SIGINT: the parent, on KeyboardInterrupt (or the CLI's
``Terminated``, a SIGTERM), cancels the tasks not started and sends the workers SIGTERM, which a
running task meets as ``Stopped`` (its ``finally`` clauses run: a half-written output is removed or
closed); a worker given SIGTERM then exits, and never starts another task. On Linux a worker is also
sent SIGTERM when its parent dies (killed outright), so none is left behind holding its memory.

Workers are spawned (a fresh interpreter each), not forked: a child forked after its parent set up
CUDA cannot use CUDA (every goggles command starts Warp, which sets up the CUDA driver where there is
one), and forking a process that runs threads (the slow-step teller's) may copy a lock held mid-use.
The price is a second or two per worker to import goggles, once per pool.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

#: How often ``run_in_processes`` yields while no task finishes, s (for a progress line).
TICK_S = 1.0


class Stopped(BaseException):
    """Raised in a worker's task when the parent stops the pool (a BaseException, like the
    KeyboardInterrupt it stands for: ``except Exception`` must not swallow it)."""


#: A worker's exit status once stopped (128 + SIGTERM, as a shell reports a process SIGTERM ended).
STOPPED_STATUS = 143

_in_task = False
_stopping = False

PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when the thread that forked it exits."""


def _on_terminate(signum, frame) -> None:
    """In a worker: stop the task it runs (its cleanup runs, then ``_call`` exits), or exit now."""
    global _stopping
    _stopping = True
    if _in_task:
        raise Stopped
    os._exit(STOPPED_STATUS)


def die_with_parent() -> None:
    """In a child process: be sent SIGTERM when the parent dies, even killed outright (Linux; elsewhere
    nothing). Call it first thing in the child; the thread that started the child must outlive it
    (the kernel ties the signal to that thread)."""
    if sys.platform.startswith("linux"):
        parent = os.getppid()
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # it died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)


def _start_worker(warp_log_level: int | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_terminate)
    die_with_parent()  # the pool's processes start from the caller's thread, which outlives them
    if warp_log_level is not None:  # as quiet (or not) as the parent: a spawned Warp starts at its default
        import warp as wp

        from goggles.runtime.c_stderr import captured_c_stderr

        wp.config.log_level = warp_log_level
        if warp_log_level > wp.LOG_INFO:
            with captured_c_stderr():  # Warp's CUDA-driver warning on a machine without a GPU
                wp.init()


def _warp_log_level() -> int | None:
    """The parent's Warp log level, if it has Warp (a worker then starts Warp at it)."""
    warp = sys.modules.get("warp")
    return None if warp is None else warp.config.log_level


def _call(fn: Callable[[Any], Any], task: Any) -> Any:
    global _in_task
    _in_task = True
    try:
        result = fn(task)
    except Stopped:  # its cleanup ran: this worker starts no other task
        os._exit(STOPPED_STATUS)
    finally:
        _in_task = False
    if _stopping:  # a library swallowed the Stopped (trimesh's imports catch BaseException)
        os._exit(STOPPED_STATUS)
    return result


def run_in_processes(fn: Callable[[Any], Any], tasks: Iterable[Any], workers: int) -> Iterator[tuple[int, Any] | None]:
    """Run ``fn(task)`` for each task in ``workers`` processes; yield (index, result) as tasks finish,
    and None each ``TICK_S`` in which none did. ``fn`` must be picklable (a module-level function).
    Iterate it inside ``contextlib.closing`` so that leaving the loop early stops the pool at once.

    A KeyboardInterrupt (raised while waiting, or in the caller's loop, which closes this generator)
    stops the workers before it goes on: queued tasks are not started, running ones are
    stopped (``Stopped``), and it returns once every worker has exited.
    """
    tasks = list(tasks)
    if not tasks:
        return
    before = set(multiprocessing.active_children())
    spawn = multiprocessing.get_context("spawn")  # see the module's docstring
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(tasks)),
        mp_context=spawn,
        initializer=_start_worker,
        initargs=(_warp_log_level(),),
    )
    futures: dict[Future, int] = {}
    try:
        futures = {pool.submit(_call, fn, task): i for i, task in enumerate(tasks)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=TICK_S, return_when=FIRST_COMPLETED)
            if not done:
                yield None
            for future in sorted(done, key=futures.get):
                yield futures[future], future.result()
    except BaseException:
        for future in futures:
            future.cancel()
        for worker in set(multiprocessing.active_children()) - before:
            worker.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
