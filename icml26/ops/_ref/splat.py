"""Pure torch twin of the tile-based Gaussian rasterizer (``icml26/csrc/cpu/splat_cpu.cpp``).

Same tiling (16x16 tiles, the point list and tile offsets of :func:`icml26.ops.splat.bin_gaussians`),
same per-tile culling, same per-pixel rules (3DGS, Kerbl et al. 2023, Eq. 3; see the C++ file):
alpha = min(0.99, o exp(power)), skipped when power > 0 or alpha < 1/255, a pixel stops before the
first Gaussian that would bring its transmittance below 1e-4. Differentiable by torch autograd
(``cumprod`` over each tile's list), so it is the gradient oracle of the kernel and its fallback.
Memory: (256 x L_t) per tile t for a tile list of L_t Gaussians, one tile at a time (a dense
all-pairs twin at 256x256 x 50k Gaussians would need ~13 GB per tensor).
"""

from __future__ import annotations

import torch

TILE = 16
ALPHA_MAX = 0.99
ALPHA_MIN = 1.0 / 255.0
T_MIN = 1e-4


def rasterize_tiles(
    mean2d: torch.Tensor,
    conic: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    point_list: torch.Tensor,
    tile_offsets: torch.Tensor,
    width: int,
    height: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Composite 2D Gaussians front to back, tile by tile.

    mean2d (N, 2) pixels (centre of column u at u + 0.5); conic (N, 3) = (a, b, c) of the inverse
    2D covariance [[a, b], [b, c]] (1/pixels^2); colors (N, C); opacities (N,) in [0, 1];
    point_list (M,) int Gaussian ids, tile by tile, each tile's run front to back; tile_offsets
    (tiles + 1,) int64 run starts (row-major tiles). Returns image (H, W, C) and alpha (H, W)."""
    tx, ty = (width + TILE - 1) // TILE, (height + TILE - 1) // TILE
    dev, dt = colors.device, colors.dtype
    C = colors.shape[1]
    lv, lu = torch.meshgrid(
        torch.arange(TILE, device=dev, dtype=dt), torch.arange(TILE, device=dev, dtype=dt), indexing="ij"
    )
    local = torch.stack([lu.reshape(-1), lv.reshape(-1)], 1) + 0.5  # (256, 2)
    offs = tile_offsets.tolist()
    pl = point_list.long()
    tiles_img, tiles_a = [], []
    zero_img = colors.new_zeros(TILE * TILE, C)
    zero_a = colors.new_zeros(TILE * TILE)
    for t in range(tx * ty):
        s, e = offs[t], offs[t + 1]
        if e == s:
            tiles_img.append(zero_img)
            tiles_a.append(zero_a)
            continue
        idx = pl[s:e]
        pix = local + local.new_tensor([(t % tx) * TILE, (t // tx) * TILE])
        d = pix[:, None, :] - mean2d[idx][None, :, :]  # (256, L, 2)
        dx, dy = d[..., 0], d[..., 1]
        cn = conic[idx]
        power = -0.5 * (cn[:, 0] * dx * dx + cn[:, 2] * dy * dy) - cn[:, 1] * dx * dy
        al = torch.clamp(opacities[idx] * torch.exp(torch.clamp(power, max=0.0)), max=ALPHA_MAX)
        ok = (power <= 0) & (al >= ALPHA_MIN)
        al = torch.where(ok, al, torch.zeros_like(al))
        with torch.no_grad():
            keep = torch.cumprod(1.0 - al, dim=1) >= T_MIN  # a prefix per pixel (T only decreases)
        al = torch.where(keep, al, torch.zeros_like(al))
        trans = torch.cumprod(1.0 - al, dim=1)
        trans = torch.cat([trans.new_ones(trans.shape[0], 1), trans[:, :-1]], 1)
        w = al * trans
        tiles_img.append(w @ colors[idx])
        tiles_a.append(w.sum(1))
    img = torch.stack(tiles_img).reshape(ty, tx, TILE, TILE, C).permute(0, 2, 1, 3, 4).reshape(ty * TILE, tx * TILE, C)
    alpha = torch.stack(tiles_a).reshape(ty, tx, TILE, TILE).permute(0, 2, 1, 3).reshape(ty * TILE, tx * TILE)
    return img[:height, :width], alpha[:height, :width]


def rasterize_brute_force(mean2d, conic, colors, opacities, depth, valid, width: int, height: int):
    """Per-pixel evaluation of every valid Gaussian (no tiles, no culling; float64 numpy loops):
    the oracle of the forward on small images. Same per-pixel rules; depth order with ties by
    index. Returns image (H, W, C) and alpha (H, W) as float64 numpy arrays."""
    import numpy as np

    m = mean2d.detach().double().cpu().numpy()
    cn = conic.detach().double().cpu().numpy()
    col = colors.detach().double().cpu().numpy()
    op = opacities.detach().double().cpu().numpy()
    z = depth.detach().double().cpu().numpy()
    ids = [i for i in np.argsort(z, kind="stable") if bool(valid[i])]
    img = np.zeros((height, width, col.shape[1]))
    alpha = np.zeros((height, width))
    for v in range(height):
        for u in range(width):
            T = 1.0
            for g in ids:
                dx, dy = u + 0.5 - m[g, 0], v + 0.5 - m[g, 1]
                power = -0.5 * (cn[g, 0] * dx * dx + cn[g, 2] * dy * dy) - cn[g, 1] * dx * dy
                if power > 0:
                    continue
                a = min(ALPHA_MAX, op[g] * np.exp(power))
                if a < ALPHA_MIN:
                    continue
                if T * (1 - a) < T_MIN:
                    break
                img[v, u] += col[g] * a * T
                T *= 1 - a
            alpha[v, u] = 1 - T
    return img, alpha
