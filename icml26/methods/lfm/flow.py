"""Flow matching on the linear (rectified-flow / conditional-OT) path, and ODE samplers.

Convention (as in the paper's SiT-style transport): t = 0 is noise, t = 1 is data.

  x_t = t * x1 + (1 - t) * x0,   x0 ~ N(0, I),  x1 ~ data          (path)
  u_t = d x_t / dt = x1 - x0                                        (target velocity)
  L(theta) = E_{t, x0, x1} || v_theta(x_t, t) - u_t ||^2            (velocity-prediction MSE)

Samplers integrate dx/dt = v(x, t) from t = 0 to 1: fixed-step Euler, Heun (2nd order),
and adaptive Dormand-Prince (scipy ``solve_ivp`` RK45). Every sampler returns the number of
network evaluations (NFE). :func:`coarse_to_fine` routes each sample to a light model while
its time is below ``t_split`` and to a heavy one after (paper's two-model inference).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

Velocity = Callable[[Tensor, Tensor], Tensor]  # v(x (B, ...), t (B,)) -> (B, ...)


def fm_path(x0: Tensor, x1: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    """The linear path and its target velocity.

    x0, x1: (B, ...) noise and data; t: (B,) in [0, 1].  Returns (x_t, u_t), both (B, ...)."""
    if x0.shape != x1.shape:
        raise ValueError(f"x0 and x1 must have the same shape, got {tuple(x0.shape)} and {tuple(x1.shape)}")
    if t.shape != x1.shape[:1]:
        raise ValueError(f"t must have shape ({x1.shape[0]},), got {tuple(t.shape)}")
    tb = t.reshape(-1, *([1] * (x1.dim() - 1))).to(x1.dtype)
    return tb * x1 + (1.0 - tb) * x0, x1 - x0


def fm_loss_per_sample(
    model: Callable[..., Tensor], x1: Tensor, t: Tensor, x0: Tensor, y: Tensor | None = None
) -> Tensor:
    """Per-sample flow-matching loss: mean over the non-batch dims of (v(x_t, t, y) - u_t)^2.

    model(x_t, t, y) -> velocity (B, ...).  Returns (B,)."""
    xt, ut = fm_path(x0, x1, t)
    v = model(xt, t, y)
    return (v - ut).pow(2).flatten(1).mean(1)


def sample_t(
    n: int, generator: torch.Generator | None = None, *, t_min: float = 0.0, t_max: float = 1.0, device="cpu"
) -> Tensor:
    """t ~ U(t_min, t_max), shape (n,)."""
    return t_min + (t_max - t_min) * torch.rand(n, generator=generator, device=device)


# ----------------------------------------------------------------------------- samplers
def _time_grid(steps: int, t0: float, t1: float) -> list[float]:
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [t0 + (t1 - t0) * i / steps for i in range(steps + 1)]


@torch.no_grad()
def euler(v: Velocity, x: Tensor, steps: int, t0: float = 0.0, t1: float = 1.0) -> tuple[Tensor, int]:
    """x_{i+1} = x_i + h v(x_i, t_i). Returns (x(t1), nfe = steps)."""
    ts = _time_grid(steps, t0, t1)
    for a, b in zip(ts[:-1], ts[1:]):
        x = x + (b - a) * v(x, torch.full((x.shape[0],), a, dtype=x.dtype, device=x.device))
    return x, steps


@torch.no_grad()
def heun(v: Velocity, x: Tensor, steps: int, t0: float = 0.0, t1: float = 1.0) -> tuple[Tensor, int]:
    """Heun's method (explicit trapezoid): k1 = v(x, t), k2 = v(x + h k1, t + h),
    x <- x + h/2 (k1 + k2). Returns (x(t1), nfe = 2 * steps)."""
    ts = _time_grid(steps, t0, t1)
    for a, b in zip(ts[:-1], ts[1:]):
        h = b - a
        k1 = v(x, torch.full((x.shape[0],), a, dtype=x.dtype, device=x.device))
        k2 = v(x + h * k1, torch.full((x.shape[0],), b, dtype=x.dtype, device=x.device))
        x = x + 0.5 * h * (k1 + k2)
    return x, 2 * steps


@torch.no_grad()
def adaptive(
    v: Velocity, x: Tensor, t0: float = 0.0, t1: float = 1.0, *, rtol: float = 1e-3, atol: float = 1e-3
) -> tuple[Tensor, int]:
    """Adaptive Dormand-Prince RK45 (scipy ``solve_ivp``) on the flattened batch.

    Returns (x(t1), nfe = number of velocity evaluations)."""
    import numpy as np
    from scipy.integrate import solve_ivp

    shape, dtype, device = x.shape, x.dtype, x.device

    def f(t, y):
        xt = torch.from_numpy(y).to(device=device, dtype=dtype).reshape(shape)
        out = v(xt, torch.full((shape[0],), float(t), dtype=dtype, device=device))
        return out.reshape(-1).double().cpu().numpy()

    sol = solve_ivp(f, (t0, t1), x.reshape(-1).double().cpu().numpy(), method="RK45", rtol=rtol, atol=atol, t_eval=[t1])
    if not sol.success:
        raise RuntimeError(f"adaptive ODE solver failed: {sol.message}")
    y = np.asarray(sol.y[:, -1])
    return torch.from_numpy(y).to(device=device, dtype=dtype).reshape(shape), int(sol.nfev)


def integrate(
    v: Velocity,
    x0: Tensor,
    *,
    method: str = "euler",
    steps: int = 60,
    t0: float = 0.0,
    t1: float = 1.0,
    rtol: float = 1e-3,
    atol: float = 1e-3,
) -> tuple[Tensor, int]:
    """Integrate dx/dt = v(x, t) from t0 to t1 with ``euler`` | ``heun`` | ``adaptive``. Returns (x, nfe)."""
    if method == "euler":
        return euler(v, x0, steps, t0, t1)
    if method == "heun":
        return heun(v, x0, steps, t0, t1)
    if method == "adaptive":
        return adaptive(v, x0, t0, t1, rtol=rtol, atol=atol)
    raise ValueError(f"sampler must be euler, heun or adaptive, got {method!r}")


class CountingVelocity:
    """Wrap a velocity function and count evaluations (per-sample rows seen / batch size)."""

    def __init__(self, v: Velocity):
        self.v = v
        self.calls = 0
        self.rows = 0

    def __call__(self, x: Tensor, t: Tensor) -> Tensor:
        self.calls += 1
        self.rows += int(x.shape[0])
        return self.v(x, t)


class CoarseToFine:
    """Two-model velocity: v(x, t) = v_coarse(x, t) where t < t_split, else v_fine(x, t).

    Routing is per sample (each row of the batch by its own t), as the paper's wrapper routes
    each step by t. Mixed batches (rows at different t) evaluate both models and select. ``nfe_coarse`` / ``nfe_fine``
    count per-sample evaluations / batch size."""

    def __init__(self, coarse: Velocity, fine: Velocity, t_split: float):
        if not 0.0 <= t_split <= 1.0:
            raise ValueError(f"t_split must be in [0, 1], got {t_split}")
        self.coarse, self.fine, self.t_split = coarse, fine, float(t_split)
        self.rows_coarse = 0
        self.rows_fine = 0
        self.batch = 0

    def __call__(self, x: Tensor, t: Tensor) -> Tensor:
        self.batch = max(self.batch, int(x.shape[0]))
        use_coarse = t < self.t_split - 1e-9  # (B,)
        nc = int(use_coarse.sum())
        if nc == x.shape[0]:
            self.rows_coarse += nc
            return self.coarse(x, t)
        if nc == 0:
            self.rows_fine += int(x.shape[0])
            return self.fine(x, t)
        # rows at different times (not produced by the shared-grid solvers): evaluate both
        # models on the whole batch (velocity functions may close over per-row labels) and pick
        self.rows_coarse += nc
        self.rows_fine += int(x.shape[0]) - nc
        m = use_coarse.reshape(-1, *([1] * (x.dim() - 1)))
        out = torch.where(m, self.coarse(x, t), self.fine(x, t))
        return out

    @property
    def nfe_coarse(self) -> float:
        return self.rows_coarse / max(self.batch, 1)

    @property
    def nfe_fine(self) -> float:
        return self.rows_fine / max(self.batch, 1)


def gaussian_optimal_velocity(mean: float, std: float) -> Velocity:
    """Closed-form marginal velocity E[x1 - x0 | x_t = x] for x1 ~ N(mean, std^2) (per coordinate),
    x0 ~ N(0, 1): v*(x, t) = mean + (t std^2 - (1 - t)) / (t^2 std^2 + (1 - t)^2) * (x - t mean).

    The FM loss minimiser for Gaussian data; its ODE maps N(0, 1) at t = 0 onto N(mean, std^2) at t = 1.
    Used as an oracle in tests."""
    s2 = std * std

    def v(x: Tensor, t: Tensor) -> Tensor:
        tb = t.reshape(-1, *([1] * (x.dim() - 1))).to(x.dtype)
        var = tb * tb * s2 + (1 - tb) ** 2
        cov = tb * s2 - (1 - tb)
        return mean + cov / var * (x - tb * mean)

    return v
