"""The ``goggles`` command: a Ctrl-C from its first instant ends it with exit code 130, not with a
traceback from whichever import it landed in (``goggles.cli`` takes 0.1 s to import, before its own
handlers are in place)."""

from __future__ import annotations


def main() -> int:
    try:
        from goggles.cli import main as command
    except KeyboardInterrupt:
        return 130
    from goggles.cli.common import leave

    return leave(command())
