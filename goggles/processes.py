"""Worker processes on this machine for batch work (a folder of replays, a dataset) that a Ctrl-C stops.

A terminal's Ctrl-C reaches every process of the group. Left to themselves, pool workers would take
it as an exception of the task they were running and go on with the next one, while the parent
waited for the whole queue. Here workers ignore SIGINT: the parent, on KeyboardInterrupt, cancels the
tasks not started and sends the workers SIGTERM, which a task meets as ``Stopped`` (its ``finally``
clauses run: a half-written output is removed or closed), and a worker given SIGTERM starts no
other task.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

#: How often ``run_in_processes`` yields while no task finishes, s (for a progress line).
TICK_S = 1.0


class Stopped(BaseException):
    """Raised in a worker's task when the parent stops the pool (a BaseException, like the
    KeyboardInterrupt it stands for: ``except Exception`` must not swallow it)."""


_stopping = False
_in_task = False


def _on_terminate(signum, frame) -> None:
    """In a worker: stop the task it runs (between tasks, the next one is not started)."""
    global _stopping
    _stopping = True
    if _in_task:
        raise Stopped


def _start_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_terminate)


def _call(fn: Callable[[Any], Any], task: Any) -> Any:
    global _in_task
    _in_task = True
    try:
        if _stopping:  # a task queued before the parent stopped the pool: not started
            raise Stopped
        return fn(task)
    finally:
        _in_task = False


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
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_start_worker)
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
