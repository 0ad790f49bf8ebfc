"""A reference rasteriser of the published 3D Gaussian splatting method (Kerbl et al. 2023), for tests:
gsplat's pure-PyTorch projection (EWA, J W Sigma W^T J^T + 0.3 px^2, its pixel centres at +0.5) and
its spherical harmonics, composited front to back in depth order per the paper (alpha = min(0.99,
o exp(-d^T conic d / 2)), under 1/255 skipped, a pixel done before its transmittance would fall
under 1e-4). Independent of goggles' ray tracer: nothing here is shared with it."""

from __future__ import annotations

import numpy as np


def rasterise(
    cloud, K: np.ndarray, T_WC: np.ndarray, width: int, height: int, eps2d: float = 0.3, antialiased: bool = False
):
    """(colour (H, W, 3) in [0, ...), alpha (H, W), median depth (H, W), NaN where the alpha never
    passed one half) of ``cloud`` seen by a pinhole of OpenCV matrix ``K`` (pixel centres at
    integers) posed at ``T_WC`` (optical frame); ``antialiased``: gsplat's mode of that name (each
    opacity scaled by its compensation, sqrt(det Sigma2D / det(Sigma2D + eps2d I)))."""
    import torch
    from gsplat.cuda import _torch_impl as gsplat

    means = torch.tensor(cloud.positions, dtype=torch.float32)
    covars, _ = gsplat._quat_scale_to_covar_preci(
        torch.tensor(cloud.rotations, dtype=torch.float32),
        torch.tensor(cloud.scales, dtype=torch.float32),
        compute_preci=False,
    )
    K = np.array(K, np.float64)
    K[:2, 2] += 0.5  # gsplat's pixel centres lie at +0.5
    viewmat = torch.tensor(np.linalg.inv(T_WC), dtype=torch.float32)[None]
    radii, means2d, depths, conics, compensations = gsplat._fully_fused_projection(
        means,
        covars,
        viewmat,
        torch.tensor(K, dtype=torch.float32)[None],
        width,
        height,
        eps2d=eps2d,
        calc_compensations=antialiased,
    )
    radii, means2d, depths, conics = (x[0].numpy() for x in (radii, means2d, depths, conics))
    opacity = cloud.opacity * (compensations[0].numpy() if antialiased else 1.0)
    visible = (radii > 0).all(axis=-1) if radii.ndim == 2 else radii > 0
    directions = torch.tensor(cloud.positions - T_WC[:3, 3], dtype=torch.float32)
    sh = torch.tensor(cloud.sh, dtype=torch.float32)
    colours = np.maximum(gsplat._spherical_harmonics(cloud.degree, directions, sh).numpy() + 0.5, 0.0)
    colour = np.zeros((height, width, 3))
    transmittance = np.ones((height, width))
    done = np.zeros((height, width), bool)
    depth = np.full((height, width), np.nan)
    for i in np.argsort(depths):
        a, b, c = conics[i]
        det = a * c - b * b
        k2 = 2.0 * np.log(max(255.0 * opacity[i], 1.0))
        if not visible[i] or det <= 0.0 or k2 <= 0.0:
            continue
        half_x, half_y = np.sqrt(k2 * c / det), np.sqrt(k2 * a / det)  # where alpha reaches 1/255
        mx, my = means2d[i] - 0.5  # in pixel indices
        x0, x1 = max(int(np.floor(mx - half_x)), 0), min(int(np.ceil(mx + half_x)), width - 1)
        y0, y1 = max(int(np.floor(my - half_y)), 0), min(int(np.ceil(my + half_y)), height - 1)
        if x0 > x1 or y0 > y1:
            continue
        dx, dy = np.meshgrid(np.arange(x0, x1 + 1) - mx, np.arange(y0, y1 + 1) - my)
        power = -0.5 * (a * dx * dx + c * dy * dy) - b * dx * dy
        alpha = np.minimum(0.99, opacity[i] * np.exp(power))
        alpha[(power > 0.0) | (alpha < 1.0 / 255.0)] = 0.0
        patch = (slice(y0, y1 + 1), slice(x0, x1 + 1))
        t, finished = transmittance[patch], done[patch]
        stop = (t * (1.0 - alpha) < 1e-4) & (alpha > 0.0) & ~finished
        alpha = np.where(finished | stop, 0.0, alpha)
        colour[patch] += colours[i] * (alpha * t)[..., None]
        crossed = (t > 0.5) & (t * (1.0 - alpha) <= 0.5)
        depth[patch] = np.where(crossed, depths[i], depth[patch])
        transmittance[patch] = t * (1.0 - alpha)
        done[patch] = finished | stop
    return colour, 1.0 - transmittance, depth
