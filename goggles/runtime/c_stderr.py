"""What C libraries print on the process's stderr (file descriptor 2, which Python's ``sys.stderr``
does not see): captured, so that a command can keep it out of a person's way (Warp's CUDA-driver
warning on a machine without a GPU) or put it into its own one-line error (LCM's reason for
refusing a URL)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


class Captured:
    text = ""
    """What was printed, once the ``with`` block has ended."""


@contextmanager
def captured_c_stderr() -> Iterator[Captured]:
    """Capture file descriptor 2 for the block (the whole process's: keep the block short)."""
    captured = Captured()
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield captured
            finally:
                os.dup2(saved, 2)
                sink.seek(0)
                captured.text = sink.read().decode(errors="replace").strip()
    finally:
        os.close(saved)
