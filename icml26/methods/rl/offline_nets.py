"""Batched networks of the offline-RL methods (``icml26 bfq``), each as its official code builds it.

One ``MLP`` holds ``G`` independent members (seeds x critics) along a leading weight dimension; a
forward pass is one ``torch.baddbmm`` per layer. Per hidden layer: Linear -> activation ->
[LayerNorm] (FQL's order: seohongpark/fql utils/networks.py ``MLP``). Activations: ``relu``,
``mish`` (Diffusion-QL), ``gelu`` (tanh approximation, flax's ``nn.gelu`` default: FQL), ``tanh``.
Initialisation: ``torch`` (nn.Linear's U(+-1/sqrt(fan_in)) for weights and biases: Diffusion-QL,
TD3+BC), ``xavier`` (variance_scaling(1, fan_avg, uniform), zero bias: FQL's ``default_init``),
``orthogonal`` (gain sqrt 2, zero bias: implicit_q_learning common.py ``default_init``).

Time features: ``dql_time_features`` is Diffusion-QL's ``SinusoidalPosEmb`` (agents/helpers.py,
frequencies log(10000) / (half - 1)) of the integer step, followed by its ``time_mlp``
(Linear(16, 32) -> Mish -> Linear(32, 16), agents/model.py); ``time_embedding`` is BFQ's
sinusoidal embedding of continuous times (frequencies log(10000) / half of ``scale`` t).
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

ACTIVATIONS = ("relu", "mish", "gelu", "tanh")
INITS = ("torch", "xavier", "orthogonal")


def activate(name: str, x: Tensor) -> Tensor:
    if name == "relu":
        return torch.relu(x)
    if name == "mish":
        return F.mish(x)
    if name == "gelu":
        return F.gelu(x, approximate="tanh")
    if name == "tanh":
        return torch.tanh(x)
    raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {name!r}")


class Linear(nn.Module):
    """``G`` linear layers: weight (G, in, out), bias (G, 1, out); x (G, B, in) -> (G, B, out)."""

    def __init__(self, G: int, n_in: int, n_out: int, init: str = "torch", generator=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(G, n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(G, 1, n_out))
        with torch.no_grad():
            if init == "torch":
                bound = 1.0 / math.sqrt(n_in)
                self.weight.uniform_(-bound, bound, generator=generator)
                self.bias.uniform_(-bound, bound, generator=generator)
            elif init == "xavier":
                bound = math.sqrt(6.0 / (n_in + n_out))
                self.weight.uniform_(-bound, bound, generator=generator)
            elif init == "orthogonal":
                for g in range(G):
                    w = torch.empty(n_out, n_in)
                    nn.init.orthogonal_(w, gain=math.sqrt(2.0), generator=generator)
                    self.weight[g].copy_(w.T)
            else:
                raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")

    def forward(self, x: Tensor, detach: bool = False) -> Tensor:
        w, b = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
        return torch.baddbmm(b, x, w)


class MLP(nn.Module):
    """``G`` MLPs in -> hidden... -> out; each hidden layer Linear -> activation -> [LayerNorm].

    ``detach=True``: the weights without gradient (a critic seen by an actor's loss)."""

    def __init__(
        self,
        G: int,
        n_in: int,
        hidden: tuple[int, ...],
        n_out: int,
        *,
        activation: str = "relu",
        layer_norm: bool = False,
        init: str = "torch",
        generator=None,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
        self.activation, self.layer_norm = activation, layer_norm
        sizes = (n_in, *hidden)
        self.layers = nn.ModuleList(Linear(G, a, b, init, generator) for a, b in itertools.pairwise(sizes))
        self.out = Linear(G, sizes[-1], n_out, init, generator)
        if layer_norm:  # flax nn.LayerNorm: eps 1e-6, scale 1, bias 0
            self.ln_w = nn.ParameterList(nn.Parameter(torch.ones(G, 1, h)) for h in hidden)
            self.ln_b = nn.ParameterList(nn.Parameter(torch.zeros(G, 1, h)) for h in hidden)

    def forward(self, x: Tensor, detach: bool = False) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = activate(self.activation, layer(x, detach))
            if self.layer_norm:
                w, b = self.ln_w[i], self.ln_b[i]
                if detach:
                    w, b = w.detach(), b.detach()
                x = torch.addcmul(b, F.layer_norm(x, x.shape[-1:], eps=1e-6), w)
        return self.out(x, detach)


def time_embedding(t: Tensor, dim: int, scale: float = 1000.0) -> Tensor:
    """BFQ's sinusoidal embedding: t (..., 1) -> (..., dim), frequencies 10000^(-i/(dim/2)) of
    ``scale`` t, [sin | cos]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=t.dtype) / max(half, 1))
    x = scale * t * freqs
    return torch.cat([torch.sin(x), torch.cos(x)], -1)


def dql_sinusoidal(i: Tensor, dim: int = 16) -> Tensor:
    """Diffusion-QL's ``SinusoidalPosEmb(dim)`` of integer steps: i (...,) -> (..., dim)."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=i.device, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    x = i.float()[..., None] * freqs
    return torch.cat([x.sin(), x.cos()], -1)


class DQLTimeMLP(nn.Module):
    """Diffusion-QL's ``time_mlp`` for ``G`` members: SinusoidalPosEmb(t_dim) -> Linear(t_dim,
    2 t_dim) -> Mish -> Linear(2 t_dim, t_dim). i: (G, B) integer steps -> (G, B, t_dim)."""

    def __init__(self, G: int, t_dim: int = 16, generator=None):
        super().__init__()
        self.t_dim = t_dim
        self.mlp = MLP(G, t_dim, (2 * t_dim,), t_dim, activation="mish", init="torch", generator=generator)

    def forward(self, i: Tensor) -> Tensor:
        return self.mlp(dql_sinusoidal(i, self.t_dim))
