"""Batched networks for off-policy actor-critic learners: a group dimension in the weights.

Every network here holds ``G`` independent members stacked along a leading dimension of its
weights, and one forward pass is one ``torch.baddbmm`` per layer (no Python loop over members):

- a critic ensemble of ``M`` critics for ``S`` seeds is one ``BatchedMLP`` with ``G = S * M``;
- an actor for ``S`` seeds is one ``BatchedMLP`` with ``G = S``.

Adam is elementwise, so one Adam over the stacked weights is exactly ``G`` separate Adams, and
a loss that is a *sum* over members gives each member the gradient it would get alone (tested
against separate ``torch.nn`` modules in tests/methods/test_rl_nets.py).

Layers follow the official DSAC-AID code's MLP (yzy-yuzhouyang/GOPS gops/apprfunc/mlp.py at
28974ab, ``RegularizedActionValueDistri`` / ``RegularizedStochaPolicy``): Linear -> [GroupNorm(16,
``affine=False`` there)] -> activation per hidden layer, linear heads. Initialisation: torch.nn.Linear's
default (uniform +-1/sqrt(fan_in)) or ``orthogonal`` as GOPS's ``orthogonal_init_``: gain sqrt(2) on
hidden layers, 1.0 on each head (the output's ``head_chunks`` equal row blocks, initialised one
by one as GOPS's separate mean / std heads are), zero biases.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

ACTIVATIONS = ("relu", "gelu", "tanh", "elu")


def _act(name: str, x: Tensor) -> Tensor:
    if name == "relu":
        return torch.relu(x)
    if name == "gelu":
        return torch.nn.functional.gelu(x)
    if name == "tanh":
        return torch.tanh(x)
    if name == "elu":
        return torch.nn.functional.elu(x)
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {name!r}")


class BatchedLinear(nn.Module):
    """``G`` linear layers in one: weight (G, in, out), bias (G, 1, out).

    forward: x (G, B, in) -> (G, B, out) with one ``baddbmm``."""

    def __init__(
        self,
        groups: int,
        in_features: int,
        out_features: int,
        *,
        init: str = "default",
        generator: torch.Generator | None = None,
        gain: float = 1.0,
        chunks: int = 1,
    ):
        super().__init__()
        if groups < 1 or in_features < 1 or out_features < 1:
            raise ValueError(
                f"groups, in_features, out_features must be >= 1, got {groups}, {in_features}, {out_features}"
            )
        self.weight = nn.Parameter(torch.empty(groups, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(groups, 1, out_features))
        with torch.no_grad():
            if init == "orthogonal":  # ``chunks`` row blocks of (out, in), each orthogonal, as nn.Linear stores it
                if out_features % chunks:
                    raise ValueError(f"{out_features} outputs do not split into {chunks} heads")
                rows = out_features // chunks
                for g in range(groups):
                    for c in range(chunks):
                        w = torch.empty(rows, in_features)
                        nn.init.orthogonal_(w, gain=gain, generator=generator)
                        self.weight[g, :, c * rows : (c + 1) * rows].copy_(w.T)
                self.bias.zero_()
            elif init == "default":  # torch.nn.Linear.reset_parameters: U(-1/sqrt(in), 1/sqrt(in))
                bound = 1.0 / math.sqrt(in_features)
                self.weight.uniform_(-bound, bound, generator=generator)
                self.bias.uniform_(-bound, bound, generator=generator)
            else:
                raise ValueError(f"init must be 'default' or 'orthogonal', got {init!r}")

    def forward(self, x: Tensor, detach: bool = False) -> Tensor:
        w, b = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
        return torch.baddbmm(b, x, w)  # (G, B, out)


class BatchedGroupNorm(nn.Module):
    """``G`` copies of ``torch.nn.GroupNorm(num_groups, C)`` on (B, C) inputs, stacked:
    x (G, B, C) -> (G, B, C); affine weight/bias (G, 1, C), or none with ``affine=False`` (GOPS)."""

    def __init__(self, groups: int, num_groups: int, channels: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        if channels % num_groups:
            raise ValueError(f"GroupNorm: {channels} channels do not split into {num_groups} groups")
        self.num_groups, self.eps = num_groups, eps
        self.weight = nn.Parameter(torch.ones(groups, 1, channels)) if affine else None
        self.bias = nn.Parameter(torch.zeros(groups, 1, channels)) if affine else None

    def forward(self, x: Tensor, detach: bool = False) -> Tensor:
        G, B, C = x.shape
        # GroupNorm on (rows, C) is LayerNorm without affine over each group's C / num_groups
        # contiguous channels (the same mean and biased variance); torch's layer_norm kernel is
        # about 2x faster than group_norm's on CPU with one position per row (forward + backward),
        # then each member's affine in one fused addcmul
        cg = C // self.num_groups
        y = torch.nn.functional.layer_norm(x.reshape(G * B * self.num_groups, cg), (cg,), eps=self.eps).view(G, B, C)
        if self.weight is None:
            return y
        w, b = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
        return torch.addcmul(b, y, w)


class BatchedMLP(nn.Module):
    """``G`` MLPs in one: in -> hidden... -> out, each hidden layer Linear -> [GroupNorm] -> act.

    forward: x (G, B, in) -> (G, B, out). ``detach=True`` uses the weights without gradient
    (the critics seen by the actor's loss: frozen, but differentiable in the input)."""

    def __init__(
        self,
        groups: int,
        in_features: int,
        hidden: tuple[int, ...],
        out_features: int,
        *,
        activation: str = "relu",
        norm_groups: int = 0,
        init: str = "default",
        generator: torch.Generator | None = None,
        norm_affine: bool = True,
        head_chunks: int = 1,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.groups, self.activation = groups, activation
        sizes = (in_features, *hidden)
        self.layers = nn.ModuleList(
            BatchedLinear(groups, a, b, init=init, generator=generator, gain=math.sqrt(2.0))
            for a, b in zip(sizes[:-1], sizes[1:])
        )
        self.norms = (
            nn.ModuleList(BatchedGroupNorm(groups, norm_groups, h, affine=norm_affine) for h in hidden)
            if norm_groups
            else None
        )
        self.out = BatchedLinear(
            groups, sizes[-1], out_features, init=init, generator=generator, gain=1.0, chunks=head_chunks
        )

    def forward(self, x: Tensor, detach: bool = False) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, detach)
            if self.norms is not None:
                x = self.norms[i](x, detach)
            x = _act(self.activation, x)
        return self.out(x, detach)


def tanh_gaussian(
    out: Tensor,
    log_std_min: float,
    log_std_max: float,
    *,
    noise: Tensor | None = None,
    deterministic: bool = False,
    eps: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Action and log-probability of a tanh-squashed Gaussian from an actor's raw output.

    out: (..., 2 * act_dim) = (mean, log_std); log_std clamped to [log_std_min, log_std_max].
    noise: standard normal (..., act_dim) for the reparameterised sample (``deterministic``:
    the action is tanh(mean), its log-density evaluated there). Returns (action in (-1, 1)
    (..., act_dim), log_prob (...)). The Jacobian term: ``eps > 0``: log(1 - tanh(u)^2 + eps), as
    SB3 (``SquashedDiagGaussianDistribution``, 1e-6), CleanRL and GOPS (``TanhGaussDistribution``,
    EPS 1e-6) compute it, so a saturated action's term is floored at log(eps); ``eps = 0``: the
    exact log|d tanh/du| = 2 (log 2 - u - softplus(-2u))."""
    mean, log_std = out.chunk(2, dim=-1)
    log_std = log_std.clamp(log_std_min, log_std_max)
    std = log_std.exp()
    u = mean if deterministic else mean + std * noise
    z = (u - mean) / std
    logp = (-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    a = torch.tanh(u)
    if eps > 0:
        return a, logp - torch.log(1.0 - a * a + eps).sum(-1)
    return a, logp - (2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))).sum(-1)


def ensemble_moments(q: Tensor, sigma: Tensor, dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """Law-of-total-variance split of an ensemble of Gaussians N(q_i, sigma_i^2) along ``dim``:
    (mean_i q_i, epistemic = Var_i q_i (unbiased, as torch.var and the official code),
    aleatoric = mean_i sigma_i^2). Shapes: the inputs with ``dim`` removed."""
    return q.mean(dim), q.var(dim), (sigma * sigma).mean(dim)


def lower_bound(q: Tensor, sigma: Tensor | None, dim: int, lam: float, beta: Tensor | float) -> Tensor:
    """DSAC-AID's critic target bound: mean_i q_i - sqrt(lam^2 Var_i q_i + beta^2 mean_i sigma_i^2)
    (official form: lam * sqrt(clip(U_epi + (beta/lam)^2 U_ale, 1e-8)) for lam > 0).
    ``beta`` a float or a tensor broadcasting to the result (one per seed)."""
    return _bound(q, sigma, dim, lam, beta, -1.0)


def upper_bound(q: Tensor, sigma: Tensor | None, dim: int, lam: float, beta: Tensor | float) -> Tensor:
    """The behaviour actor's optimistic bound: mean + sqrt(lam^2 Var q + beta^2 mean sigma^2)."""
    return _bound(q, sigma, dim, lam, beta, 1.0)


def _bound(q, sigma, dim, lam, beta, sign):
    mean, epi, ale = ensemble_moments(q, sigma if sigma is not None else torch.zeros_like(q), dim)
    if lam > 0:
        u = lam * torch.sqrt(torch.clamp(epi + (beta / lam) ** 2 * ale, min=1e-8))
    else:
        u = (
            torch.sqrt(torch.clamp(beta**2 * ale, min=1e-8))
            if not isinstance(beta, float) or beta > 0
            else torch.zeros_like(mean)
        )
    return mean + sign * u
