"""The allocator tuning of goggles' processes: carrying frames reuses warm pages instead of faulting
fresh ones in for every frame (counted by the kernel, not timed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
FAULTS_PER_PAIR = """
import resource, sys
sys.path.insert(0, sys.argv[2])
if sys.argv[1] == "tuned":
    from goggles.runtime.host_memory import keep_large_allocations
    assert keep_large_allocations()
import bench_frames  # a stereo depth pair through Outputs, ZmqBus and Client, as tools/bench_frames.py times it
bench_frames.goggles_path(640, 480, 10)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
bench_frames.goggles_path(640, 480, 40)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 40)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and Linux's fault counters")
def test_carrying_frames_reuses_warm_pages_once_tuned():
    def faults(mode: str) -> float:
        command = [sys.executable, "-c", FAULTS_PER_PAIR, mode, str(TOOLS)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return float(result.stdout.splitlines()[-1])

    pages = 2 * 640 * 480 * 4 / 4096  # one stereo depth pair: 600 pages
    untuned, tuned = faults("as-it-comes"), faults("tuned")
    assert tuned < 0.1 * pages  # warm heap pages: next to none
    # As it comes, each copy faults pages in: 760 a pair here (glibc 2.36), 138 on an H100 machine's
    # Python 3.12 (whose allocator already keeps some); tuned, at most half as many anywhere.
    assert untuned >= 2.0 * tuned
