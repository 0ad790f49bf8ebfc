"""The ``goggles`` command: a Ctrl-C from its first instant ends it with exit code 130, not with a
traceback from whichever import it landed in (``goggles.cli`` takes 0.1 s to import, before its own
handlers are in place)."""

from __future__ import annotations

import os
import sys
import threading


def main() -> int:
    try:
        from goggles.cli import main as command
    except KeyboardInterrupt:
        return 130
    code = command()
    if code in (130, 143) and _busy_workers():
        # Interrupted with a worker still inside a kernel, which nothing can stop: the command has
        # cleaned up (recordings closed, buses shut); exit now rather than wait the kernel out.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _busy_workers() -> bool:
    return any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread())
