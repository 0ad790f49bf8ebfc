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
    "goggles.sensors.events",
    "goggles.render.splats",
    "goggles.render.splat_raster",
    "goggles.world.splats",
    "goggles.world.box_tree",
    "goggles.sensors.lidar",
    "goggles.sensors.draws",
    "goggles.scene.avatar",
    "goggles.bench.bvh",
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


#: The render kernel's variants that CUDA can run (Embree's ``rows`` are CPU-only): tracer, actors, shading,
#: shadows, looks (each camera's own: with shading only; the fullest for each tracer, and one without shadows).
RENDER_VARIANTS = (
    [
        (t, a, s, d, False)
        for t in ("warp", "bvh", "wide")
        for a in (False, True)
        for s in (False, True)
        for d in (False, True)
    ]
    + [(t, True, True, True, True) for t in ("warp", "bvh", "wide")]
    + [("bvh", False, True, False, True)]
)


@pytest.mark.parametrize("tracer, actors, shading, shadows, looks", RENDER_VARIANTS)
def test_render_kernel_variants_compile_for_cuda(tracer, actors, shading, shadows, looks):
    from goggles.render.kernels import render_kernel

    kernel = render_kernel(tracer, actors, shading, shadows, looks)
    assert kernel.module.options["enable_backward"] is False
    name = f"render_kernel({tracer}, actors={actors}, shading={shading}, shadows={shadows}, looks={looks})"
    _compile(kernel.module, name, 90)


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


def _calls_without_a_device(source: str, path: str) -> list[str]:
    """Warp calls in ``source`` that would fall to Warp's default device: launches, and allocations
    with a size or data (a bare ``wp.array(dtype=...)`` is a type annotation)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source, path)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "wp"):
            continue
        keywords = {k.arg for k in node.keywords}
        allocates = node.func.attr in ("zeros", "empty", "full", "ones") or (
            node.func.attr == "array" and (node.args or keywords & {"data", "ptr", "shape"})
        )
        if (node.func.attr == "launch" or allocates) and "device" not in keywords:
            found.append(f"{path}:{node.lineno}: wp.{node.func.attr}(...) names no device")
    return found


def test_every_launch_and_allocation_names_its_device():
    """On a machine with a GPU, Warp's default device is CUDA: a launch or an allocation that names no
    device lands there while the rest of a CPU world stays on the CPU. The H100 run found one (the
    rosette LiDAR's kernel, launched on CUDA with a CPU table: an illegal address that broke every CUDA
    test after it in that process); on a machine without a GPU nothing else would."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "goggles"
    found = [f for p in sorted(root.rglob("*.py")) for f in _calls_without_a_device(p.read_text(), str(p))]
    assert found == []
    assert _calls_without_a_device("wp.launch(k, dim=1)\nwp.zeros(3)\nwp.array(dtype=float)\n", "x.py") == [
        "x.py:1: wp.launch(...) names no device",
        "x.py:2: wp.zeros(...) names no device",
    ]
