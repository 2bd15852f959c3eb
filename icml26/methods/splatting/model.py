"""Irradiance Gaussians, the global tone mapper, Expo-SDF reliability and the pseudo-SDF
(Expo-GS, ICML 2026, PMLR 306; no code; docs/hdr-gs.md).

- Each Gaussian carries a log radiance l (3,) (view-independent: SH degree 0, RECON; HDR-GS
  uses SH of degree 3); HDR colour = exp(l).
- Tone mapper (HDR-GS, Cai et al. 2024): LDR_c = M_c(l_c + log t), one network per colour
  channel shared by all cameras, applied per Gaussian before rasterising. RECON: M_c is a
  monotone network, sigmoid(sum_k softplus(v_k) relu(softplus(w_k) x + b_k) + c) (non-negative
  weights: a camera response cannot decrease), where HDR-GS uses an unconstrained 1-128-1 MLP.
- Reliability (Expo-SDF's exposure-reliability estimate, RECON): the well-exposedness of the
  LDR pixel, r = exp(-(m - 1/2)^2 / (2 * 0.2^2)) with m = max_c LDR_c in [0, 1] (Mertens et al.
  2007), low where a pixel is saturated or black. The wiki summary's 1/(E + eps) with
  E = t max_c I raises black pixels instead (a reviewer's objection); the issue asks for the
  weight to be low at both ends, so this is the form used.
- Pseudo-SDF (SuGaR's "ideal SDF", the paper's Eq. 9): d(p) = sum_j alpha_j exp(-1/2 (p -
  mu_j)^T Sigma_j^-1 (p - mu_j)) over the 16 nearest centres, f(p) = s_g* sqrt(-2 log d(p)),
  g* the dominant Gaussian and s_g* its smallest scale (unsigned).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from icml26.ops.splat import quat_to_rotmat


class ToneMapper(torch.nn.Module):
    """Per-channel monotone camera response: (..., 3) log exposure-scaled radiance -> LDR in (0, 1)."""

    def __init__(self, hidden: int = 32, x_min: float = -8.0, x_max: float = 4.0):
        super().__init__()
        self.hidden = hidden
        self.w = torch.nn.Parameter(torch.full((3, hidden), math.log(math.expm1(1.0))))
        self.b = torch.nn.Parameter(-torch.linspace(x_min, x_max, hidden).repeat(3, 1))
        self.v = torch.nn.Parameter(torch.full((3, hidden), math.log(math.expm1(0.6 / hidden * 4))))
        self.c = torch.nn.Parameter(torch.full((3,), -3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x[..., :, None] * F.softplus(self.w) + self.b)  # (..., 3, hidden)
        return torch.sigmoid((h * F.softplus(self.v)).sum(-1) + self.c)

    @torch.no_grad()
    def inverse(self, y: torch.Tensor, lo: float = -20.0, hi: float = 20.0, iters: int = 60) -> torch.Tensor:
        """x with M(x) = y by bisection (M is non-decreasing); exact where M is strictly increasing."""
        a = torch.full_like(y, lo)
        b = torch.full_like(y, hi)
        for _ in range(iters):
            m = 0.5 * (a + b)
            up = self.forward(m) < y
            a = torch.where(up, m, a)
            b = torch.where(up, b, m)
        return 0.5 * (a + b)


def reliability(ldr: torch.Tensor, sigma: float = 0.2) -> torch.Tensor:
    """Exposure reliability (H, W) of an LDR image (H, W, 3) in [0, 1] (module docstring)."""
    m = ldr.max(-1).values
    return torch.exp(-((m - 0.5) ** 2) / (2 * sigma * sigma))


def pseudo_sdf(
    points: torch.Tensor,
    means: torch.Tensor,
    scales: torch.Tensor,
    quats: torch.Tensor,
    opac: torch.Tensor,
    k: int = 16,
) -> torch.Tensor:
    """Unsigned pseudo-SDF f (P,) at world points (P, 3) (module docstring); differentiable in
    every Gaussian parameter through d (not through the argmax)."""
    k = min(k, means.shape[0])
    with torch.no_grad():
        idx = torch.cdist(points.detach(), means.detach()).topk(k, largest=False).indices  # (P, k)
    mu, s, q, a = means[idx], scales[idx], quats[idx], opac[idx]
    Rm = quat_to_rotmat(q.reshape(-1, 4)).reshape(idx.shape + (3, 3))
    loc = ((points[:, None, :] - mu)[..., None, :] @ Rm).squeeze(-2) / s  # coordinates in the Gaussian's frame
    terms = a * torch.exp(-0.5 * (loc * loc).sum(-1))
    d = terms.sum(-1).clamp(1e-8, 1.0)
    with torch.no_grad():
        g = terms.argmax(-1)
    smin = s.min(-1).values.gather(1, g[:, None]).squeeze(1)
    return smin * torch.sqrt(-2.0 * torch.log(d) + 1e-12)
