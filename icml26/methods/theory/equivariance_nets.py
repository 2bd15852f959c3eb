"""Group actions on flat inputs and the layerwise MLPs of ``equivariance``: the flips and user
permutations g, the depth-4 MLP whose hidden representations f_i are measured, and its ``tied``
control, layerwise equivariant by construction (Shahverdi et al., arXiv 2601.21645; the
architecture is RECON, docs/theory.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from icml26.core.errors import InputError
from icml26.methods.theory.equivariance_config import GROUPS


# ----------------------------------------------------------------------------- group actions
@dataclass(frozen=True)
class Action:
    """A group element acting on flat inputs: ``perm`` (D,) with (g x)[j] = x[perm[j]];
    ``involution``: g^2 = id."""

    name: str
    perm: np.ndarray
    involution: bool

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., torch.as_tensor(self.perm)]


def image_action(name: str, side: int) -> Action:
    """hflip / vflip / rot90 / rot180 on side x side images (flattened row-major)."""
    idx = np.arange(side * side).reshape(side, side)
    if name == "hflip":
        p = idx[:, ::-1]
    elif name == "vflip":
        p = idx[::-1, :]
    elif name == "rot90":
        p = np.rot90(idx)
    elif name == "rot180":
        p = idx[::-1, ::-1]
    else:
        raise ValueError(f"group must be one of {', '.join(GROUPS)} or perm:FILE, got {name!r}")
    return Action(name, np.ascontiguousarray(p).reshape(-1), name != "rot90")


def perm_action(path: str, dim: int) -> Action:
    """A permutation of the input coordinates from a .npy file or a text file of integers.
    Raises InputError when it is not a permutation of 0..dim-1."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError(f"group perm:{path}: no such file")
    try:
        arr = np.load(p, allow_pickle=False) if p.suffix == ".npy" else np.loadtxt(p, dtype=np.int64, ndmin=1)
    except (ValueError, OSError) as e:
        raise InputError(f"group perm:{path}: not a readable .npy or text file of integers ({e})") from None
    arr = np.asarray(arr).reshape(-1)
    if (
        arr.shape[0] != dim
        or not np.issubdtype(arr.dtype, np.integer)
        or not np.array_equal(np.sort(arr), np.arange(dim))
    ):
        raise InputError(
            f"group perm:{path}: expected a permutation of 0..{dim - 1} ({dim} integers), got {arr.shape[0]} values"
        )
    arr = arr.astype(np.int64)
    return Action(f"perm:{p.name}", arr, bool(np.array_equal(arr[arr], np.arange(dim))))


def parse_group(name: str, dim: int) -> Action:
    if name.startswith("perm:"):
        return perm_action(name[5:], dim)
    side = int(round(math.sqrt(dim)))
    if name not in GROUPS:
        raise InputError(f"group {name!r}: expected one of {', '.join(GROUPS)} or perm:FILE")
    if side * side != dim:
        raise InputError(
            f"group {name!r} acts on square one-channel images; the input has {dim} values (use perm:FILE)"
        )
    return image_action(name, side)


# ----------------------------------------------------------------------------- networks
def _act(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    return {"tanh": torch.tanh, "gelu": F.gelu, "relu": F.relu}[name]


class LayerMLP(nn.Module):
    """Linear layers with an activation after every hidden one; ``features(x)`` returns the
    hidden representations [f_1(x), ..., f_{L-1}(x)] and the output. Shapes: x (B, D)."""

    def __init__(self, dims: list[int], acts: list[str]):
        super().__init__()
        if len(acts) != len(dims) - 2:
            raise ValueError(f"{len(dims) - 1} linear layers need {len(dims) - 2} activations, got {len(acts)}")
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.acts = list(acts)
        self.n, self.in_dim = len(dims) - 1, dims[0]

    def weights(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.layers[i].weight, self.layers[i].bias

    def features(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        hs = []
        h = x
        for i in range(self.n):
            w, b = self.weights(i)
            h = F.linear(h, w, b)
            if i < self.n - 1:
                h = _act(self.acts[i])(h)
                hs.append(h)
        return hs, h

    def forward(self, x):
        return self.features(x)[1]


class TiedMLP(LayerMLP):
    """Exactly layerwise equivariant under an involution M of the input (RECON construction):
    W_1 = [U; U M], hidden W = [[V, V'], [V', V]], biases [c; c] (so f_i(M x) = P f_i(x), P the
    swap of the two halves); output W = [Z, Z] (classifier: invariant) or [Z, M Z] with bias
    (b + M b)/2 (autoencoder: f(M x) = M f(x)). Hidden widths must be even."""

    def __init__(self, dims: list[int], acts: list[str], action: Action, task: str):
        nn.Module.__init__(self)
        if any(d % 2 for d in dims[1:-1]):
            raise ValueError(f"tied: hidden widths must be even, got {dims[1:-1]}")
        if not action.involution:
            raise ValueError(f"tied: the action {action.name} is not an involution")
        self.acts, self.task = list(acts), task
        self.register_buffer("perm", torch.as_tensor(action.perm))
        self.register_buffer("inv", torch.as_tensor(np.argsort(action.perm)))
        h = [d // 2 for d in dims[1:-1]]
        self.u = nn.Parameter(torch.randn(h[0], dims[0]) / math.sqrt(dims[0]))
        self.c = nn.ParameterList([nn.Parameter(torch.zeros(x)) for x in h])
        self.v = nn.ParameterList(
            [nn.Parameter(torch.randn(h[i + 1], dims[i + 1]) / math.sqrt(dims[i + 1])) for i in range(len(h) - 1)]
        )
        self.z = nn.Parameter(torch.randn(dims[-1], h[-1]) / math.sqrt(dims[-2]))
        self.b_out = nn.Parameter(torch.zeros(dims[-1]))
        self.n, self.in_dim = len(dims) - 1, dims[0]

    def weights(self, i: int):
        if i == 0:  # rows of U M: (U M) x = U (M x), M x = x[perm]  ->  (U M)[:, perm[j]] = U[:, j]
            um = self.u[:, self.inv]
            return torch.cat([self.u, um], 0), torch.cat([self.c[0], self.c[0]])
        if i < self.n - 1:
            v = self.v[i - 1]
            half = v.shape[1] // 2
            va, vb = v[:, :half], v[:, half:]
            w = torch.cat([torch.cat([va, vb], 1), torch.cat([vb, va], 1)], 0)
            return w, torch.cat([self.c[i], self.c[i]])
        if self.task == "classifier":
            return torch.cat([self.z, self.z], 1), self.b_out
        mz = self.z[self.perm]  # (M Z): rows permuted
        return torch.cat([self.z, mz], 1), 0.5 * (self.b_out + self.b_out[self.perm])


def build_net(
    task: str, act: str, in_dim: int, widths: tuple[int, ...], model: str, action: Action, seed: int
) -> LayerMLP:
    out = in_dim if task == "autoencoder" else 10
    dims = [in_dim, *widths, out]
    acts = [act] + ["gelu"] * (len(widths) - 1)
    torch.manual_seed(seed)
    if model == "tied":
        return TiedMLP(dims, acts, action, task)
    return LayerMLP(dims, acts)
