"""PDE problems for physics-informed training, declared in a few lines each.

A :class:`Problem` is a domain (interior and boundary samplers), a differential operator
written against a scalar function ``u: (dim,) -> ()`` with :func:`laplacian` / :func:`gradient`
/ :func:`hessian` (``torch.func``, no hand-written derivatives), a source ``f``, boundary
data ``g`` and, when known, the exact solution for the relative L2 error.

Residuals of a network ``u_theta`` on ``n_i`` interior and ``n_b`` boundary points, as in
ENGD (Mueller & Zeinhofer 2023) and SPRING (arXiv 2508.21022)::

    r = [ (L u - f)(x_i) / sqrt(n_i) ;  (u - g)(x_b) / sqrt(n_b) ],   loss = 1/2 ||r||^2

Built-in problems (RECON, following the literature; docs/sng.md):

- ``poisson2d``: -Lap u = f on (0,1)^2, u* = sin(pi x) sin(pi y), u = 0 on the boundary.
- ``poisson5d``: -Lap u = f on (0,1)^5, u* = sum_i cos(pi x_i) (ENGD's 5-D case).
- ``heat1d``: u_t = u_xx / 4 on (0,1) x (0,1) (coordinates (x, t)),
  u* = exp(-pi^2 t / 4) sin(pi x); initial and side boundary values from u*.
- ``allencahn2d`` (nonlinear): -eps Lap u + u^3 - u = f on (0,1)^2, eps = 0.1,
  manufactured u* = sin(pi x) sin(pi y), u = 0 on the boundary.

A user's own problem::

    Problem("mine", dim=2, operator=lambda u, x: -laplacian(u, x) + u(x),
            source=lambda x: ..., boundary=lambda x: 0.0 * x[..., 0], exact=...)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch import Tensor

ScalarFn = Callable[[Tensor], Tensor]  # (dim,) -> ()


def gradient(u: ScalarFn, x: Tensor) -> Tensor:
    """du/dx at one point. x: (dim,). Returns (dim,)."""
    return torch.func.jacrev(u)(x)


def hessian(u: ScalarFn, x: Tensor) -> Tensor:
    """d2u/dx2 at one point (forward-over-reverse). x: (dim,). Returns (dim, dim)."""
    return torch.func.jacfwd(torch.func.jacrev(u))(x)


def laplacian(u: ScalarFn, x: Tensor) -> Tensor:
    """Trace of the Hessian of u at one point. x: (dim,). Returns ()."""
    return torch.diagonal(hessian(u, x)).sum()


def unit_cube_interior(dim: int) -> Callable[[int, torch.Generator], Tensor]:
    def sample(n: int, gen: torch.Generator) -> Tensor:
        return torch.rand(n, dim, generator=gen, dtype=torch.float64)

    return sample


def unit_cube_boundary(dim: int) -> Callable[[int, torch.Generator], Tensor]:
    """Uniform points on the 2*dim faces of (0,1)^dim (each face equally likely)."""

    def sample(n: int, gen: torch.Generator) -> Tensor:
        x = torch.rand(n, dim, generator=gen, dtype=torch.float64)
        face = torch.randint(0, 2 * dim, (n,), generator=gen)
        rows = torch.arange(n)
        x[rows, face // 2] = (face % 2).to(torch.float64)
        return x

    return sample


@dataclass(frozen=True)
class Problem:
    """A PDE on a domain with Dirichlet-type data.

    operator(u, x): the differential operator applied to u at one point x (dim,), -> ().
    source(x), boundary(x), exact(x): batched, x (n, dim) -> (n,); exact may be None.
    sample_interior / sample_boundary(n, generator) -> (n, dim) float64; default: unit cube.
    """

    name: str
    dim: int
    operator: Callable[[ScalarFn, Tensor], Tensor]
    source: Callable[[Tensor], Tensor]
    boundary: Callable[[Tensor], Tensor]
    exact: Optional[Callable[[Tensor], Tensor]] = None
    sample_interior: Optional[Callable[[int, torch.Generator], Tensor]] = field(default=None)
    sample_boundary: Optional[Callable[[int, torch.Generator], Tensor]] = field(default=None)
    description: str = ""

    def interior(self, n: int, gen: torch.Generator) -> Tensor:
        return (self.sample_interior or unit_cube_interior(self.dim))(n, gen)

    def on_boundary(self, n: int, gen: torch.Generator) -> Tensor:
        return (self.sample_boundary or unit_cube_boundary(self.dim))(n, gen)


PI = math.pi


def _sinsin(x: Tensor) -> Tensor:
    return torch.sin(PI * x[..., 0]) * torch.sin(PI * x[..., 1])


def _cos_sum(x: Tensor) -> Tensor:
    return torch.cos(PI * x).sum(-1)


def _heat_exact(x: Tensor) -> Tensor:
    return torch.exp(-(PI**2) * x[..., 1] / 4) * torch.sin(PI * x[..., 0])


def _heat_boundary_sampler(n: int, gen: torch.Generator) -> Tensor:
    """(x, t) on the initial line t = 0 and the sides x = 0, x = 1 (each a third)."""
    s = torch.rand(n, generator=gen, dtype=torch.float64)
    side = torch.randint(0, 3, (n,), generator=gen)
    x = torch.where(side == 0, s, (side == 2).to(torch.float64))
    t = torch.where(side == 0, torch.zeros_like(s), s)
    return torch.stack([x, t], dim=-1)


AC_EPS = 0.1

PROBLEMS: dict[str, Problem] = {
    "poisson2d": Problem(
        "poisson2d",
        2,
        operator=lambda u, x: -laplacian(u, x),
        source=lambda x: 2 * PI**2 * _sinsin(x),
        boundary=lambda x: torch.zeros_like(x[..., 0]),
        exact=_sinsin,
        description="-Lap u = 2 pi^2 sin(pi x) sin(pi y) on (0,1)^2, u = 0 on the boundary",
    ),
    "poisson5d": Problem(
        "poisson5d",
        5,
        operator=lambda u, x: -laplacian(u, x),
        source=lambda x: PI**2 * _cos_sum(x),
        boundary=_cos_sum,
        exact=_cos_sum,
        description="-Lap u = pi^2 sum cos(pi x_i) on (0,1)^5, u = u* on the boundary",
    ),
    "heat1d": Problem(
        "heat1d",
        2,
        operator=lambda u, x: gradient(u, x)[1] - hessian(u, x)[0, 0] / 4,
        source=lambda x: torch.zeros_like(x[..., 0]),
        boundary=_heat_exact,
        exact=_heat_exact,
        sample_boundary=_heat_boundary_sampler,
        description="u_t = u_xx / 4 on (0,1) x (0,1), u* = exp(-pi^2 t / 4) sin(pi x)",
    ),
    "allencahn2d": Problem(
        "allencahn2d",
        2,
        operator=lambda u, x: -AC_EPS * laplacian(u, x) + u(x) ** 3 - u(x),
        source=lambda x: AC_EPS * 2 * PI**2 * _sinsin(x) + _sinsin(x) ** 3 - _sinsin(x),
        boundary=lambda x: torch.zeros_like(x[..., 0]),
        exact=_sinsin,
        description="-0.1 Lap u + u^3 - u = f on (0,1)^2 (manufactured u* = sin(pi x) sin(pi y)), u = 0 on the "
        "boundary",
    ),
}


def get_problem(name: str) -> Problem:
    """The built-in problem ``name``; ValueError naming the valid ones otherwise."""
    if name not in PROBLEMS:
        raise ValueError(f"problem {name!r} is not one of {', '.join(PROBLEMS)}")
    return PROBLEMS[name]


# --------------------------------------------------------------------------------------
# networks as flat parameter vectors (so that J is (n, P) directly)


def mlp(dim: int, width: int = 64, depth: int = 2, *, dtype=torch.float64) -> torch.nn.Sequential:
    """tanh MLP dim -> width x depth -> 1 (PyTorch default initialisation)."""
    layers: list[torch.nn.Module] = []
    d = dim
    for _ in range(depth):
        layers += [torch.nn.Linear(d, width, dtype=dtype), torch.nn.Tanh()]
        d = width
    layers.append(torch.nn.Linear(d, 1, dtype=dtype))
    return torch.nn.Sequential(*layers)


class FlatModel:
    """A module seen as a function of one flat parameter vector theta (P,).

    ``u(theta, x)``: x (dim,) -> () scalar output. ``theta0``: the module's parameters, flat."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.names = [n for n, _ in module.named_parameters()]
        self.shapes = [p.shape for _, p in module.named_parameters()]
        self.sizes = [p.numel() for _, p in module.named_parameters()]

    @property
    def num_params(self) -> int:
        return sum(self.sizes)

    def theta0(self) -> Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        return {n: t.view(s) for n, t, s in zip(self.names, torch.split(theta, self.sizes), self.shapes)}

    def u(self, theta: Tensor, x: Tensor) -> Tensor:
        return torch.func.functional_call(self.module, self.unflatten(theta), (x.unsqueeze(0),)).reshape(())

    def u_batch(self, theta: Tensor, X: Tensor) -> Tensor:
        """X (n, dim) -> (n,)."""
        return torch.func.functional_call(self.module, self.unflatten(theta), (X,)).reshape(-1)


class Residuals:
    """PINN residuals of ``problem`` for ``model`` and their Jacobian in theta.

    ``interior(theta, X)``: (n,) values (L u - f)(x_i), unnormalised; ``boundary`` likewise.
    ``jacobian(theta, X_i, X_b, w_i, w_b)``: (r, J) with r = [w_i * interior; w_b * boundary]
    (n_i + n_b,) and J = dr/dtheta (n_i + n_b, P), per-sample via vmap(jacrev)."""

    def __init__(self, problem: Problem, model: FlatModel):
        self.problem, self.model = problem, model

        def r_int(theta: Tensor, x: Tensor) -> Tensor:
            return problem.operator(lambda y: model.u(theta, y), x) - problem.source(x.unsqueeze(0)).reshape(())

        def r_bnd(theta: Tensor, x: Tensor) -> Tensor:
            return model.u(theta, x) - problem.boundary(x.unsqueeze(0)).reshape(())

        self._r_int, self._r_bnd = r_int, r_bnd
        self._v_int = torch.func.vmap(r_int, in_dims=(None, 0))
        self._j_int = torch.func.vmap(torch.func.jacrev(r_int), in_dims=(None, 0))
        self._j_bnd = torch.func.vmap(torch.func.jacrev(r_bnd), in_dims=(None, 0))

    def interior(self, theta: Tensor, X: Tensor) -> Tensor:
        return self._v_int(theta, X)

    def boundary(self, theta: Tensor, X: Tensor) -> Tensor:
        return self.model.u_batch(theta, X) - self.problem.boundary(X)

    def vector(self, theta: Tensor, X_i: Tensor, X_b: Tensor, w_i, w_b) -> Tensor:
        """Weighted residual vector r (n_i + n_b,); w_i / w_b: scalars or (n_i,) / (n_b,)."""
        return torch.cat([w_i * self.interior(theta, X_i), w_b * self.boundary(theta, X_b)])

    def loss(self, theta: Tensor, X_i: Tensor, X_b: Tensor) -> Tensor:
        """1/2 ||r||^2 with the ENGD normalisation 1/sqrt(n_i), 1/sqrt(n_b)."""
        r = self.vector(theta, X_i, X_b, 1.0 / math.sqrt(len(X_i)), 1.0 / math.sqrt(len(X_b)))
        return 0.5 * (r * r).sum()

    def jacobian(self, theta: Tensor, X_i: Tensor, X_b: Tensor, w_i, w_b) -> tuple[Tensor, Tensor]:
        theta = theta.detach()
        r = self.vector(theta, X_i, X_b, w_i, w_b).detach()
        w_i_ = torch.as_tensor(w_i, dtype=theta.dtype).reshape(-1, 1) if torch.is_tensor(w_i) else w_i
        w_b_ = torch.as_tensor(w_b, dtype=theta.dtype).reshape(-1, 1) if torch.is_tensor(w_b) else w_b
        parts = []
        if len(X_i):
            parts.append(w_i_ * self._j_int(theta, X_i))
        if len(X_b):
            parts.append(w_b_ * self._j_bnd(theta, X_b))
        return r, torch.cat(parts).detach()


def relative_l2(model: FlatModel, theta: Tensor, problem: Problem, X_eval: Tensor) -> float:
    """||u_theta - u*|| / ||u*|| on the evaluation points X_eval (n, dim)."""
    if problem.exact is None:
        return float("nan")
    with torch.no_grad():
        u = model.u_batch(theta, X_eval)
        ue = problem.exact(X_eval)
        return float(torch.linalg.vector_norm(u - ue) / torch.linalg.vector_norm(ue))
