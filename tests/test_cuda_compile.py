"""Every Warp kernel module compiles for CUDA (sm_90, the H100 and H200), checked ahead of time through
NVRTC on machines without a GPU, so a CUDA-only compile error cannot wait for the first GPU run."""

from __future__ import annotations

import importlib

import pytest
import warp as wp

MODULES = [
    "goggles.dynamics.kernels",
    "goggles.render.kernels",
    "goggles.render.invalid",
    "goggles.sensors.beacons",
    "goggles.sensors.ranges",
    "goggles.scene.avatar",
]


@pytest.mark.parametrize("name", MODULES)
def test_kernels_compile_for_sm90(name):
    if not hasattr(wp, "compile_aot_module"):
        pytest.skip("this Warp has no ahead-of-time compiler")
    module = importlib.import_module(name)
    try:
        wp.compile_aot_module(module, arch=90)
    except RuntimeError as exc:
        if "nvrtc" in str(exc).lower() and "not" in str(exc).lower():
            pytest.skip(f"NVRTC is not available here: {exc}")
        raise
