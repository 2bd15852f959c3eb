"""Piecewise-linear networks as products of masked linear maps, and alignment metrics.

Haas et al., arXiv 2602.12384 (Prop 4.1, fixed-gates view; Thm 6.1, alignment); notes in
docs/theory.md.

Inside one activation region the input-output Jacobian of a bias-free ReLU network is
J = D_L W_L ... D_1 W_1 with D_l = diag(gates). Here every network exposes its *core*: the
square stack of hidden layers between an input adapter and an output head (the notes' §8
protocol: the Jacobian on the gated core, adapters removed), as a list of factors
M_l = D_l W_l (dense for MLPs, :class:`LinearOp` for convolutions):

- gates ``fixed``: D_l from the network's own pre-activations at one input (its region);
- gates ``free``: D_l redrawn per layer, iid Bernoulli(p) (leaky ReLU: slope with prob 1-p),
  conditioned on at least r open gates (Def 5.2): the masked model.

Alignment (RECON, the paper's own metric was not found): the diagonality ||diag M|| / ||M||_F
of M = U_k^T A_l A_l^T U_k (left contexts A_l = M_L ... M_l) and of V_k^T B_l^T B_l V_k
(right contexts B_l = M_{l-1} ... M_1), the measure of the first author's follow-up
repository (Naloween/Operator-Level-optimization, src/olo/theory/alignment.py).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from icml26.methods.theory.lyapunov import Factor, LinearOp, _mv, _rmv

ARCHS = ("mlp", "fgln", "cnn")
INITS = ("he", "lecun", "xavier", "orthogonal")
ACTS = ("relu", "leaky_relu")
# weight variance x fan-in of each init for square layers (None: not Gaussian iid)
INIT_SIGMA2 = {"he": 2.0, "lecun": 1.0, "xavier": 1.0, "orthogonal": None}


def init_weight_(w: torch.Tensor, init: str, gen: torch.Generator) -> torch.Tensor:
    """Initialise a weight (out, in[, kh, kw]) in place: he N(0, 2/fan_in), lecun N(0, 1/fan_in),
    xavier N(0, 2/(fan_in + fan_out)), orthogonal (gain sqrt 2). Raises ValueError for another name."""
    fan_out, fan_in = w.shape[0], int(np.prod(w.shape[1:]))
    rf = int(np.prod(w.shape[2:])) if w.ndim > 2 else 1
    with torch.no_grad():
        if init == "he":
            w.copy_(torch.randn(w.shape, generator=gen) * math.sqrt(2.0 / fan_in))
        elif init == "lecun":
            w.copy_(torch.randn(w.shape, generator=gen) * math.sqrt(1.0 / fan_in))
        elif init == "xavier":
            w.copy_(torch.randn(w.shape, generator=gen) * math.sqrt(2.0 / (fan_in + fan_out * rf)))
        elif init == "orthogonal":
            a = torch.randn(max(fan_out, fan_in), min(fan_out, fan_in), generator=gen)
            q, r = torch.linalg.qr(a)
            q = q * torch.sign(torch.diagonal(r))
            q = q if fan_out >= fan_in else q.T
            w.copy_(q.reshape(w.shape) * math.sqrt(2.0))
        else:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    return w


class GatedNet(nn.Module):
    """in_dim -> adapter -> [core layer]^depth -> head, bias-free (Prop 4.1's setting).

    arch mlp: Linear layers of ``width`` units and ReLU / leaky ReLU;
    arch fgln: the same Linear layers with frozen Bernoulli(p) gates instead of an activation
      (a fixed-gates linear network, the notes' §8 model; adapters linear);
    arch cnn: input (1, 28, 28) -> 3x3 stride-2 conv to ``width`` channels (14 x 14) -> depth
      3x3 convs (padding 1) -> global mean -> Linear to ``out_dim``.
    forward(x): x (B, in_dim) or (B, 1, 28, 28) -> logits (B, out_dim)."""

    def __init__(
        self,
        arch: str,
        width: int,
        depth: int,
        *,
        in_dim: int = 784,
        out_dim: int = 10,
        init: str = "he",
        act: str = "relu",
        negative_slope: float = 0.01,
        gate_p: float = 0.5,
        seed: int = 0,
    ):
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
        if act not in ACTS:
            raise ValueError(f"act must be one of {', '.join(ACTS)}, got {act!r}")
        self.arch, self.width, self.depth, self.act, self.slope = arch, width, depth, act, negative_slope
        gen = torch.Generator().manual_seed(seed)
        if arch == "cnn":
            self.adapter = nn.Conv2d(1, width, 3, stride=2, padding=1, bias=False)
            self.core = nn.ModuleList(nn.Conv2d(width, width, 3, padding=1, bias=False) for _ in range(depth))
        else:
            self.adapter = nn.Linear(in_dim, width, bias=False)
            self.core = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(depth))
        self.head = nn.Linear(width, out_dim, bias=False)
        for m in [self.adapter, *self.core]:
            init_weight_(m.weight, init, gen)
        init_weight_(self.head.weight, "lecun", gen)
        if arch == "fgln":
            masks = (torch.rand(depth, width, generator=gen) < gate_p).float()
            for i in range(depth):  # Def 5.2-style conditioning: no layer fully closed
                while masks[i].sum() < 1:
                    masks[i] = (torch.rand(width, generator=gen) < gate_p).float()
            self.register_buffer("masks", masks)

    def phi(self, z: torch.Tensor) -> torch.Tensor:
        return F.relu(z) if self.act == "relu" else F.leaky_relu(z, self.slope)

    def gate(self, z: torch.Tensor) -> torch.Tensor:
        """phi'(z) as 0/1 (ReLU) or slope/1 (leaky ReLU)."""
        one = torch.ones((), dtype=z.dtype)
        return torch.where(z > 0, one, torch.zeros((), dtype=z.dtype) if self.act == "relu" else one * self.slope)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """The core's input h_0 (B, width) or (B, width, 14, 14)."""
        if self.arch == "cnn":
            return self.phi(self.adapter(x.reshape(-1, 1, 28, 28)))
        h = self.adapter(x.reshape(x.shape[0], -1))
        return h if self.arch == "fgln" else self.phi(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for i, layer in enumerate(self.core):
            z = layer(h)
            h = z * self.masks[i] if self.arch == "fgln" else self.phi(z)
        if self.arch == "cnn":
            h = h.mean(dim=(2, 3))
        return self.head(h)

    def core_dim(self) -> int:
        return self.width * (196 if self.arch == "cnn" else 1)


def _conv_op(weight: torch.Tensor, gate: torch.Tensor, hw: int) -> LinearOp:
    """M = D W for a 3x3 padding-1 convolution on (C, hw, hw) maps, as a LinearOp on flat
    columns (C*hw*hw, k); gate (C*hw*hw,)."""
    w = weight.detach().to(torch.float64)
    c = w.shape[0]
    n = c * hw * hw
    g = gate.reshape(-1, 1).to(torch.float64)

    def mv(x):  # (n, k) -> (n, k)
        k = x.shape[1]
        y = F.conv2d(x.T.reshape(k, c, hw, hw), w, padding=1).reshape(k, n).T
        return g * y

    def rmv(y):
        k = y.shape[1]
        z = (g * y).T.reshape(k, c, hw, hw)
        return F.conv_transpose2d(z, w, padding=1).reshape(k, n).T

    return LinearOp(mv, rmv, n, n)


def draw_gates(n: int, p: float, r: int, act: str, slope: float, gen: torch.Generator) -> torch.Tensor:
    """Bernoulli(p) gates (n,), redrawn until at least r are open (Def 5.2); leaky ReLU's
    closed gates pass ``slope``."""
    for _ in range(10000):
        open_ = torch.rand(n, generator=gen, dtype=torch.float64) < p
        if int(open_.sum()) >= r:
            closed = 0.0 if act == "relu" else slope
            return torch.where(open_, torch.ones((), dtype=torch.float64), torch.full((), closed, dtype=torch.float64))
    raise ValueError(f"gates: P(at least {r} of {n} open) is too small at p={p}")


@torch.no_grad()
def core_factors(
    net: GatedNet, x: torch.Tensor | None, gates: str, *, p: float = 0.5, r: int = 1, gen: torch.Generator | None = None
) -> list[Factor]:
    """The core Jacobian's factors M_1..M_L (applied first to last), float64.

    gates ``fixed``: the masks of input x (one sample, any shape the net takes); for arch fgln
    the net's own frozen masks; ``free``: fresh Bernoulli(p) masks per layer (r open at least)."""
    if gates not in ("fixed", "free"):
        raise ValueError(f"gates must be fixed or free, got {gates!r}")
    hw = 14
    out: list[Factor] = []
    h = net.embed(x[:1]) if (gates == "fixed" and net.arch != "fgln") else None
    for i, layer in enumerate(net.core):
        if gates == "free":
            g = draw_gates(net.core_dim(), p, r, net.act, net.slope, gen)
        elif net.arch == "fgln":
            g = net.masks[i].to(torch.float64)
        else:
            z = layer(h)
            g = net.gate(z).reshape(-1).to(torch.float64)
            h = net.phi(z)
        if net.arch == "cnn":
            out.append(_conv_op(layer.weight, g, hw))
        else:
            out.append(g[:, None] * layer.weight.detach().to(torch.float64))
    return out


# ----------------------------------------------------------------------------- user MLPs
def mlp_factors_from_weights(
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor | None],
    x: torch.Tensor | None,
    gates: str,
    *,
    act: str = "relu",
    slope: float = 0.01,
    p: float = 0.5,
    r: int = 1,
    gen: torch.Generator | None = None,
) -> list[Factor]:
    """Factors of a user's MLP's full input-output Jacobian W_L D_{L-1} ... D_1 W_1 (the last
    layer has no activation). weights[i]: (n_i, n_{i-1}); biases[i]: (n_i,) or None; x: (n_0,)."""
    out: list[Factor] = []
    h = x.reshape(-1).to(torch.float64) if x is not None else None
    L = len(weights)
    for i, w in enumerate(weights):
        w = w.detach().to(torch.float64)
        if i == L - 1:
            out.append(w)
            break
        if gates == "free":
            g = draw_gates(w.shape[0], p, r, act, slope, gen)
        else:
            z = w @ h + (biases[i].to(torch.float64) if biases[i] is not None else 0.0)
            g = torch.where(z > 0, 1.0, 0.0 if act == "relu" else slope).to(torch.float64)
            h = g * z
        out.append(g[:, None] * w)
    return out


# ----------------------------------------------------------------------------- alignment
def diagonality(m: torch.Tensor) -> float:
    """||diag M|| / ||M||_F of a square matrix (1: diagonal). NaN for M = 0."""
    f = float(torch.linalg.matrix_norm(m))
    return float(torch.linalg.vector_norm(torch.diagonal(m))) / f if f > 0 else float("nan")


def context_diagonality(factors: Sequence[Factor], u: torch.Tensor, v: torch.Tensor) -> tuple[list[float], list[float]]:
    """Diagonality of U^T A_l A_l^T U (left contexts A_l = M_L ... M_l) and V^T B_l^T B_l V
    (right contexts B_l = M_{l-1} ... M_1), for l = 2..L (l = 1 gives A_1 = J, B_1 = I: both
    trivially diagonal). u (n_L, k), v (n_0, k): top singular vectors of J. Returns two lists
    of L-1 values in [1/sqrt(k), 1]. O(L n^2 k); frames are rescaled (scale-free metric)."""
    L = len(factors)
    left = [0.0] * (L + 1)
    z = u
    for l in range(L, 1, -1):  # z = A_l^T U, A_l = M_L ... M_l
        z = _rmv(factors[l - 1], z)
        z = z / torch.linalg.matrix_norm(z).clamp_min(1e-300)
        left[l] = diagonality(z.T @ z)
    right = [0.0] * (L + 1)
    y = v
    for l in range(2, L + 1):  # y = B_l V, B_l = M_{l-1} ... M_1
        y = _mv(factors[l - 2], y)
        y = y / torch.linalg.matrix_norm(y).clamp_min(1e-300)
        right[l] = diagonality(y.T @ y)
    return left[2:], right[2:]


def row_gram_condition(b: torch.Tensor, r: int, tol: float = 1e-10) -> bool:
    """Thm 6.1's hypothesis as the proof needs it (notes: App. D.1, the review's correction):
    the leading r x r block of the row Gram B B^T is positive definite (relative tol)."""
    b = b.to(torch.float64)
    g = (b @ b.T)[:r, :r]
    ev = torch.linalg.eigvalsh(g)
    return bool(ev.min() > tol * max(float(ev.max()), 1e-300))


def column_condition(b: torch.Tensor, r: int, tol: float = 1e-10) -> bool:
    """The hypothesis as stated in v1: the first r columns of B are linearly independent."""
    s = torch.linalg.svdvals(b.to(torch.float64)[:, :r])
    return bool(s.min() > tol * max(float(s.max()), 1e-300))
