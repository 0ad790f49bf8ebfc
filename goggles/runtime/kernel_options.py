"""How goggles' Warp modules compile: one place for the options every module shares.

Every kernel is forward only (no autodiff: a tenth of the compile time). The ray-tracing modules
(render kernels, the splats' pass and traversal, the BVH benchmark) are also compiled for this CPU's
own instructions and without NaN handling (their BVH traversal is ~1.8x faster; nothing there makes
or reads a NaN), unless ``wp.config.cpu_compiler_flags`` says otherwise.
"""

from __future__ import annotations

import warp as wp

#: Every module's options.
FORWARD_ONLY = {"enable_backward": False}

_CPU_FLAGS = wp.config.cpu_compiler_flags if wp.config.cpu_compiler_flags is not None else "-march=native"
#: The ray tracers' options.
TRACING = {**FORWARD_ONLY, "cpu_compiler_flags": _CPU_FLAGS + " -menable-no-nans -Wno-nan-infinity-disabled"}
