"""The optimizers a PINN user tries first, built on the same flat parameter vector.

- ``adam``: torch.optim.Adam on mini-batches (the same batch size as SNG), learning rate
  decayed exponentially from ``adam_lr`` to ``adam_lr_final`` over ``adam_decay_steps``
  steps, then held (a standard PINN schedule; the values are ours).
- ``sgd``: torch.optim.SGD with heavy-ball momentum on mini-batches.
- ``lbfgs``: torch.optim.LBFGS on the whole pool, strong-Wolfe line search, history 100
  (5 L-BFGS iterations per ``step`` call; ``iteration`` counts L-BFGS iterations).
- ``engd``: energy natural gradient (Mueller & Zeinhofer 2023): the Gauss-Newton solve on every
  collocation point of the pool, in Woodbury form, with the grid line search
  (``optim.SNG`` with the full pool as its batch).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def adam(theta: Tensor, lr: float, lr_final: float, decay_steps: int):
    """(optimizer, scheduler) for Adam on [theta] with the exponential decay lr -> lr_final."""
    opt = torch.optim.Adam([theta], lr=lr)
    gamma = (lr_final / lr) ** (1.0 / max(1, decay_steps)) if lr > 0 else 1.0
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: gamma ** min(t, decay_steps))
    return opt, sched


def sgd(theta: Tensor, lr: float, momentum: float):
    return torch.optim.SGD([theta], lr=lr, momentum=momentum)


def lbfgs(theta: Tensor, history_size: int = 100, inner_iterations: int = 5):
    """torch L-BFGS, strong Wolfe; ``inner_iterations`` L-BFGS iterations per ``step`` call.

    (With max_iter=1 per call, torch's L-BFGS stalled on Poisson 2D after 5 iterations: the
    line search returned t = 0 from then on; 5 per call does not.)"""
    return torch.optim.LBFGS(
        [theta],
        lr=1.0,
        max_iter=inner_iterations,
        history_size=history_size,
        line_search_fn="strong_wolfe",
        tolerance_grad=0.0,
        tolerance_change=0.0,
    )


def lbfgs_iterations(opt) -> int:
    """L-BFGS iterations done so far (torch keeps the count in the parameter's state)."""
    st = next(iter(opt.state.values()), {})
    return int(st.get("n_iter", 0))


def spectral_decay(J: Tensor, rel_floor: float = 1e-10) -> float:
    """Fitted exponent a of s_i ~ C i^-a for the sorted singular values of J (n, P).

    Least squares of log s_i on log i over the values above rel_floor * s_1. NaN if < 3 remain."""
    s = torch.linalg.svdvals(J.to(torch.float64))
    s = s[s > s[0] * rel_floor] if len(s) else s
    if len(s) < 3:
        return float("nan")
    x = torch.log(torch.arange(1, len(s) + 1, dtype=torch.float64))
    y = torch.log(s)
    xm, ym = x.mean(), y.mean()
    slope = float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())
    return -slope if math.isfinite(slope) else float("nan")
