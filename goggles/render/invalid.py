"""REP 118 invalid values from the status mask, in a module compiled with IEEE semantics.

+inf: nothing within max range; -inf: closer than min range; NaN: invalid (stereo shadow, outside the lens).
Kept apart from ``goggles.render.kernels``, which is compiled assuming no NaNs.
"""

import warp as wp

from goggles.render.kernels import STATUS_HIT, STATUS_NO_HIT, STATUS_TOO_CLOSE
from goggles.runtime.kernel_options import FORWARD_ONLY

#: Forward kernels only: no autodiff, a tenth of the compile time (CUDA 82 s -> 8 s).
wp.set_module_options(FORWARD_ONLY)


@wp.kernel
def write_invalid_kernel(
    status: wp.array3d(dtype=wp.int8),
    row_stride: int,
    row_offset: int,
    span: int,
    out_depth: wp.array3d(dtype=float),
    out_range: wp.array3d(dtype=float),
    write_range: bool,
):
    """REP 118 values where the status says so; rows as in ``kernels.render_kernel``."""
    c, k, block = wp.tid()
    y = row_offset + k * row_stride
    for column in range(span):
        x = block * span + column
        code = int(status[c, y, x])
        if code != STATUS_HIT:
            value = wp.nan
            if code == STATUS_NO_HIT:
                value = wp.inf
            elif code == STATUS_TOO_CLOSE:
                value = -wp.inf
            out_depth[c, y, x] = value
            if write_range:
                out_range[c, y, x] = value
