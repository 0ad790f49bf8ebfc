"""Every Warp kernel module compiles for CUDA (sm_80 A100, sm_89 L4/L40/RTX 40, sm_90 H100/H200), checked
ahead of time through NVRTC on machines without a GPU, so a CUDA-only compile error cannot wait for the
first GPU run. Each compile's time is printed (``pytest -s``): cold, all modules take about 8 s per
architecture since every module skips the backward kernels (82 s with them)."""

from __future__ import annotations

import importlib
import time

import pytest
import warp as wp

MODULES = [
    "goggles.dynamics.kernels",
    "goggles.envs.kernels",
    "goggles.render.kernels",
    "goggles.render.invalid",
    "goggles.render.shading",
    "goggles.render.sunlit",
    "goggles.sensors.beacons",
    "goggles.sensors.ranges",
    "goggles.sensors.stereo_depth",
    "goggles.sensors.camera_noise",
    "goggles.sensors.lidar",
    "goggles.sensors.draws",
    "goggles.scene.avatar",
]


def _compile(module, name: str, arch: int) -> None:
    if not hasattr(wp, "compile_aot_module"):
        pytest.skip("this Warp has no ahead-of-time compiler")
    start = time.perf_counter()
    try:
        wp.compile_aot_module(module, arch=arch)
    except RuntimeError as exc:
        if "nvrtc" in str(exc).lower() and "not" in str(exc).lower():
            pytest.skip(f"NVRTC is not available here: {exc}")
        raise
    print(f"{name} for sm_{arch}: {time.perf_counter() - start:.2f} s (0 when cached)")


@pytest.mark.parametrize("arch", [80, 89, 90])
@pytest.mark.parametrize("name", MODULES)
def test_kernels_compile_for_cuda(name, arch):
    _compile(importlib.import_module(name), name, arch)


#: The render kernel's variants that CUDA can run (Embree's ``rows`` are CPU-only): tracer, actors, shading, shadows.
RENDER_VARIANTS = [
    (t, a, s, d) for t in ("warp", "bvh") for a in (False, True) for s in (False, True) for d in (False, True)
]


@pytest.mark.parametrize("tracer, actors, shading, shadows", RENDER_VARIANTS)
def test_render_kernel_variants_compile_for_cuda(tracer, actors, shading, shadows):
    from goggles.render.kernels import render_kernel

    kernel = render_kernel(tracer, actors, shading, shadows)
    assert kernel.module.options["enable_backward"] is False
    _compile(kernel.module, f"render_kernel({tracer}, actors={actors}, shading={shading}, shadows={shadows})", 90)


def test_every_kernel_module_is_checked():
    """A new kernel module must join MODULES (and skip its backward kernels)."""
    import pathlib

    root = pathlib.Path(importlib.import_module("goggles").__file__).parent
    found = {
        ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for path in root.rglob("*.py")
        if "@wp.kernel" in path.read_text()
    }
    assert found == set(MODULES)
    for name in MODULES:
        importlib.import_module(name)
        assert wp.get_module(name).options["enable_backward"] is False, name
