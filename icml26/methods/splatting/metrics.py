"""Image metrics of the HDR-NeRF protocol (docs/hdr-gs.md, "Evaluation protocol").

- PSNR on images in [0, 1]: 10 log10(1 / MSE).
- SSIM (Wang et al. 2004): 11x11 Gaussian window, sigma 1.5, K1 = 0.01, K2 = 0.03, data range 1,
  population (not sample) covariances, 'valid' window positions, averaged over channels and
  positions (skimage's ``gaussian_weights=True`` convention).
- HDR: mu-law T(x) = log(1 + mu x) / log(1 + mu), mu = 5000, after dividing by a maximum:
  the ground truth's (HDR-NeRF's eval_hdr.py, floats) -> ``psnr_hdr``; each image's own
  (HDR-GS's code) -> ``psnr_hdr_predmax``. HDR-GS also quantises the ground truth to 8 bits;
  not done here.
- LPIPS is not computed: its AlexNet weights do not ship offline.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

MU = 5000.0


def psnr(pred: np.ndarray, gt: np.ndarray) -> float:
    """PSNR (dB) of two float arrays in [0, 1] of equal shape; inf when equal."""
    mse = float(np.mean((np.asarray(pred, np.float64) - np.asarray(gt, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * math.log10(1.0 / mse)


def _gauss_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    x = np.arange(size) - (size - 1) / 2
    g = np.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def _filt(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Separable 'valid' correlation of (H, W) ``a`` with the 1D window ``g``."""
    a = sliding_window_view(a, len(g), axis=0) @ g
    return sliding_window_view(a, len(g), axis=1) @ g


def ssim(pred: np.ndarray, gt: np.ndarray) -> float:
    """Mean SSIM of (H, W) or (H, W, C) float images in [0, 1] (module docstring); H, W >= 11."""
    p, t = np.asarray(pred, np.float64), np.asarray(gt, np.float64)
    if p.ndim == 2:
        p, t = p[..., None], t[..., None]
    g = _gauss_window()
    c1, c2 = 0.01**2, 0.03**2
    vals = []
    for ch in range(p.shape[2]):
        x, y = p[..., ch], t[..., ch]
        mx, my = _filt(x, g), _filt(y, g)
        sxx = _filt(x * x, g) - mx * mx
        syy = _filt(y * y, g) - my * my
        sxy = _filt(x * y, g) - mx * my
        s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
        vals.append(s.mean())
    return float(np.mean(vals))


def mu_law(x: np.ndarray, mu: float = MU) -> np.ndarray:
    """T(x) = log(1 + mu x) / log(1 + mu) for x >= 0 (negative values clipped to 0)."""
    return np.log1p(mu * np.clip(np.asarray(x, np.float64), 0.0, None)) / math.log1p(mu)


def hdr_metrics(pred: np.ndarray, gt: np.ndarray) -> dict:
    """{psnr_hdr, psnr_hdr_predmax, ssim_hdr} of linear HDR images (H, W, 3) (module docstring)."""
    gm = float(np.max(gt))
    pm = float(np.max(pred))
    if gm <= 0:
        raise ValueError("hdr_metrics: ground truth is all zero")
    tg = mu_law(gt / gm)
    tp = mu_law(pred / gm)
    tpp = mu_law(pred / pm) if pm > 0 else np.zeros_like(tg)
    return {
        "psnr_hdr": psnr(np.clip(tp, 0, None), tg),
        "psnr_hdr_predmax": psnr(tpp, tg),
        "ssim_hdr": ssim(np.clip(tp, 0, 1), tg),
    }
