"""Subsampled natural gradient (SNG) and SPRING as torch optimizers (kernel / Woodbury form).

Source: Goldshlager, Hu & Lin, "A sketch-and-project analysis of subsampled natural gradient
algorithms" (arXiv 2508.21022, ICML 2026); SPRING: Goldshlager, Abrahamsen & Lin (arXiv
2401.10190, Sec. 3, Alg. 1). Update formulas as in the public SPRING codes: NetKet's VMC_SR with
momentum and the ENGD-Woodbury PINN code jefferyren/rla-pinns (``optim/spring.py``,
``optim/line_search.py``).

Loss 1/2 ||r||^2 with the residual r (b,) of a mini-batch and its Jacobian J = dr/dtheta (b, P):

1. SNG (= MinSR):   d = J^T (J J^T + lam I_b)^-1 r     (Cholesky of a b x b system)
   which equals the damped Gauss-Newton / natural-gradient step (J^T J + lam I_P)^-1 J^T r
   (Woodbury); on every collocation point at once it is ENGD's step (Mueller & Zeinhofer 2023).
2. SPRING:  phi_t = mu phi_{t-1} + J^T (J J^T + lam I)^-1 (r - mu J phi_{t-1}),
   i.e. phi_t = argmin ||J phi - r||^2 + lam ||phi - mu phi_{t-1}||^2; mu = 0 is SNG.
3. theta <- theta - eta phi_t, with eta from a grid line search on the batch loss (eta in
   2^-30 .. 2^0, rla-pinns; ours: the scan stops once the loss rises again after a decrease)
   or a fixed ``lr`` with SPRING's norm constraint eta = min(lr, sqrt(C) / ||phi||) (C > 0).
   With the line search the momentum state is the step taken, phi_t <- eta_t phi_t (ours).

Defaults: lam = 1e-3, mu = 0.99, C = 1e-3 (SPRING paper, Sec. 4, rla-pinns' defaults); the
PINN runs use ENGD-Woodbury's small damping (arXiv 2505.12149). The damping schedule is ours.
Why each deviation was taken (measured): docs/sng.md, "Specification"."""

from __future__ import annotations

import math
from typing import Callable, Iterable, Optional

import torch
from torch import Tensor

LINE_SEARCH_GRID = tuple(2.0**-i for i in range(31))  # 2^0 .. 2^-30 (rla-pinns' default grid)


def kernel_step(J: Tensor, r: Tensor, damping: float) -> Tensor:
    """d = J^T (J J^T + damping I)^-1 r.  J (b, P), r (b,) -> (P,).

    Cholesky of the b x b kernel; when it is not positive definite (damping 0 and J rank
    deficient) the pseudo-inverse is used (damping 0: the minimum-norm solution J^+ r)."""
    K = J @ J.T
    K.diagonal().add_(damping)
    L, info = torch.linalg.cholesky_ex(K)
    if int(info) == 0:
        return J.T @ torch.cholesky_solve(r.unsqueeze(-1), L).squeeze(-1)
    return J.T @ (torch.linalg.pinv(K, hermitian=True) @ r)


def primal_step(J: Tensor, r: Tensor, damping: float) -> Tensor:
    """d = (J^T J + damping I_P)^-1 J^T r (the P x P form; a test oracle). J (b, P), r (b,) -> (P,)."""
    G = J.T @ J
    G.diagonal().add_(damping)
    return torch.linalg.solve(G, J.T @ r)


def spring_direction(J: Tensor, r: Tensor, phi_prev: Tensor, damping: float, momentum: float) -> Tensor:
    """phi = mu phi_prev + J^T (J J^T + lam I)^-1 (r - mu J phi_prev).  J (b, P), r (b,), phi_prev (P,)."""
    if momentum == 0.0:
        return kernel_step(J, r, damping)
    return momentum * phi_prev + kernel_step(J, r - momentum * (J @ phi_prev), damping)


def _check_nonneg(name: str, v: float) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


class SNG(torch.optim.Optimizer):
    """Subsampled natural gradient in kernel form, with SPRING's momentum when ``momentum`` > 0.

    params: the parameters; the Jacobian's columns follow their order, each flattened.
    lr: None = grid line search on the batch loss (needs ``residual_fn`` in ``step``), else a
        fixed step size (with the norm constraint when ``norm_constraint`` > 0).
    damping: lam >= 0 (float64 recommended: the kernel's condition number is ~1/lam).
    damping_schedule: "constant" or "exponential" (lam_t = max(damping_min, damping * damping_decay^t)).
    line_search_early_stop: stop the grid scan past its first minimum (False: all grid points).

    ``step(closure, residual_fn=None)``: closure() -> (r (b,), J (b, P)) at the current
    parameters; residual_fn() -> r at the current parameters (no Jacobian; for the line
    search). Returns the batch loss 1/2 ||r||^2 before the step (a float).
    Raises ValueError on bad hyper-parameters or a Jacobian of the wrong shape."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: Optional[float] = None,
        damping: float = 1e-3,
        momentum: float = 0.0,
        norm_constraint: float = 0.0,
        damping_schedule: str = "constant",
        damping_decay: float = 1.0,
        damping_min: float = 0.0,
        line_search_grid: tuple[float, ...] = LINE_SEARCH_GRID,
        line_search_early_stop: bool = True,
    ):
        _check_nonneg("damping", damping)
        _check_nonneg("norm_constraint", norm_constraint)
        _check_nonneg("damping_min", damping_min)
        if lr is not None:
            _check_nonneg("lr", lr)
        if not (isinstance(momentum, (int, float)) and 0.0 <= momentum < 1.0):
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        if damping_schedule not in ("constant", "exponential"):
            raise ValueError(f"damping_schedule must be constant or exponential, got {damping_schedule!r}")
        if not (isinstance(damping_decay, (int, float)) and 0.0 < damping_decay <= 1.0):
            raise ValueError(f"damping_decay must be in (0, 1], got {damping_decay!r}")
        if not line_search_grid or any(not (g > 0 and math.isfinite(g)) for g in line_search_grid):
            raise ValueError("line_search_grid must be a non-empty list of positive step sizes")
        defaults = dict(
            lr=lr,
            damping=float(damping),
            momentum=float(momentum),
            norm_constraint=float(norm_constraint),
            damping_schedule=damping_schedule,
            damping_decay=float(damping_decay),
            damping_min=float(damping_min),
        )
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("SNG does not support per-parameter options (one parameter group)")
        self.line_search_grid = tuple(sorted((float(g) for g in line_search_grid), reverse=True))
        self.line_search_early_stop = bool(line_search_early_stop)
        self.steps = 0
        self.last_eta = float("nan")

    # -- flat views of the parameters
    def _params(self) -> list[Tensor]:
        return self.param_groups[0]["params"]

    def _flat(self) -> Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self._params()])

    def _set_flat(self, theta: Tensor) -> None:
        i = 0
        with torch.no_grad():
            for p in self._params():
                n = p.numel()
                p.copy_(theta[i : i + n].view_as(p))
                i += n

    def current_damping(self) -> float:
        g = self.param_groups[0]
        if g["damping_schedule"] == "constant":
            return g["damping"]
        return max(g["damping_min"], g["damping"] * g["damping_decay"] ** self.steps)

    @torch.no_grad()
    def step(
        self, closure: Callable[[], tuple[Tensor, Tensor]], residual_fn: Optional[Callable[[], Tensor]] = None
    ) -> float:  # type: ignore[override]
        g = self.param_groups[0]
        with torch.enable_grad():
            r, J = closure()
        r, J = r.detach(), J.detach()
        P = sum(p.numel() for p in self._params())
        if J.ndim != 2 or J.shape != (r.shape[0], P):
            raise ValueError(f"closure must return r (b,) and J (b, {P}); got r {tuple(r.shape)}, J {tuple(J.shape)}")
        loss0 = 0.5 * float(r @ r)
        state = self.state[self._params()[0]]
        phi_prev = state.get("phi")
        if phi_prev is None:
            phi_prev = torch.zeros(P, dtype=J.dtype, device=J.device)
        # 1-2. SNG / SPRING direction (kernel form)
        phi = spring_direction(J, r, phi_prev, self.current_damping(), g["momentum"])
        state["phi"] = phi
        theta0 = self._flat()
        # 3. step size
        if g["lr"] is None:
            if residual_fn is None:
                raise ValueError("line search (lr=None) needs residual_fn in step()")
            best, best_eta = loss0, 0.0
            for eta in self.line_search_grid:  # largest first
                self._set_flat(theta0 - eta * phi)
                rt = residual_fn().detach()
                lt = 0.5 * float(rt @ rt)
                if lt < best:
                    best, best_eta = lt, eta
                elif self.line_search_early_stop and best < loss0:
                    break  # past the minimum along the grid (the loss rises again towards loss0)
            eta = best_eta
        else:
            eta = g["lr"]
            if g["norm_constraint"] > 0:
                nrm = float(torch.linalg.vector_norm(phi))
                if nrm > 0:
                    eta = min(eta, math.sqrt(g["norm_constraint"]) / nrm)
        self._set_flat(theta0 - eta * phi)
        if g["lr"] is None:
            state["phi"] = eta * phi  # with a line search the momentum carries the step taken
        self.last_eta = eta
        self.steps += 1
        return loss0


class SPRING(SNG):
    """SNG with SPRING's structured momentum (default mu = 0.99, SPRING paper Sec. 4)."""

    def __init__(
        self, params: Iterable[Tensor], lr: Optional[float] = None, damping: float = 1e-3, momentum: float = 0.99, **kw
    ):
        super().__init__(params, lr=lr, damping=damping, momentum=momentum, **kw)


def engd_step(J: Tensor, r: Tensor, damping: float) -> Tensor:
    """ENGD's direction on all collocation points, Woodbury form when rows < columns."""
    if J.shape[0] <= J.shape[1]:
        return kernel_step(J, r, damping)
    return primal_step(J, r, damping)
