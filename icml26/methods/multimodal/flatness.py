"""Flatness and robustness measurements of a trained classifier.

As the official analysis (analysis/src of johnjaejunlee95/multimodal-flatness-perspective) and the libraries it follows:
- :func:`hessian_top_eig`: the top Hessian eigenvalue of the mean training loss by power iteration
  with Hessian-vector products (Pearlmutter's double backward), as PyHessian's ``eigenvalues``
  (Yao et al. 2020): normalise v, Hv summed over batches weighted by batch size, Rayleigh quotient,
  stop at relative change < tol. Returns the eigenvalue of largest magnitude (power iteration's).
- :func:`hutchinson_trace`: tr(H) ~ mean_k v_k^T H v_k, Rademacher v_k (Hutchinson 1989; PyHessian ``trace``).
- :func:`random_direction_curve`: mean loss at theta + r u, u uniform on the unit sphere of all
  parameters (the official MC flatness, radii 0..30, 150 directions).
- :func:`weight_noise_gap`: E[L(theta + N(0, sigma^2 I))] - L(theta) (the official LPF gap, sigma 0.004).
- :func:`pgd_accuracy`: L-inf PGD (Madry et al. 2018) on one modality, the others clean. The official
  attack starts at x + eps*randn with step 0.001 x 10 (which cannot reach eps = 0.1); here: random
  start in the ball, step 2.5 eps / steps, projection to the ball (RECON, the standard form).
- :func:`landscape_2d`: loss on a plane through theta spanned by two filter-normalised random
  directions (Li et al. 2018: each filter/row of a direction rescaled to the norm of the same filter
  of theta; 1-D parameters (biases) get direction 0).
All losses are mean cross-entropy; models in eval mode.
"""

from __future__ import annotations

import io
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from icml26.core.output import atomic_write_bytes

Batches = Callable[[], Iterable[tuple[dict, torch.Tensor]]]  # yields ({modality: x}, y)


def _params(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _dot(a, b) -> torch.Tensor:
    return sum((x * y).sum() for x, y in zip(a, b))


def _normalize(v):
    n = torch.sqrt(_dot(v, v)) + 1e-12
    return [x / n for x in v]


def hvp(model: nn.Module, batches: Batches, v: list[torch.Tensor], loss_fn=None) -> list[torch.Tensor]:
    """H v of the mean loss over all batches (Hessian w.r.t. the trainable parameters), batch-size weighted."""
    loss_fn = loss_fn or F.cross_entropy
    params = _params(model)
    out = [torch.zeros_like(p) for p in params]
    total = 0
    for xs, y in batches():
        loss = loss_fn(model(xs), y)
        g = torch.autograd.grad(loss, params, create_graph=True)
        hv = torch.autograd.grad(g, params, grad_outputs=v, retain_graph=False)
        b = int(y.shape[0])
        for o, h in zip(out, hv):
            o.add_(h.detach(), alpha=b)
        total += b
    return [o / max(total, 1) for o in out]


def hessian_top_eig(
    model: nn.Module, batches: Batches, *, iters: int = 20, tol: float = 1e-3, seed: int = 0, loss_fn=None
) -> float:
    """Top Hessian eigenvalue (largest magnitude) of the mean loss by power iteration (PyHessian)."""
    was = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    params = _params(model)
    v = _normalize([torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device) for p in params])
    eig = None
    for _ in range(max(1, iters)):
        hv = hvp(model, batches, v, loss_fn)
        new = float(_dot(hv, v))
        v = _normalize(hv)
        if eig is not None and abs(new - eig) / (abs(eig) + 1e-6) < tol:
            eig = new
            break
        eig = new
    model.train(was)
    return float(eig)


def hutchinson_trace(model: nn.Module, batches: Batches, *, samples: int = 20, seed: int = 0, loss_fn=None) -> float:
    """Hutchinson estimate of tr(H): mean over ``samples`` Rademacher vectors of v^T H v."""
    was = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    params = _params(model)
    acc = 0.0
    for _ in range(max(1, samples)):
        v = [(torch.randint(0, 2, p.shape, generator=g) * 2 - 1).to(p.dtype).to(p.device) for p in params]
        acc += float(_dot(hvp(model, batches, v, loss_fn), v))
    model.train(was)
    return acc / max(1, samples)


@torch.no_grad()
def mean_loss(model: nn.Module, batches: Batches) -> float:
    tot, n = 0.0, 0
    for xs, y in batches():
        tot += float(F.cross_entropy(model(xs), y, reduction="sum"))
        n += int(y.shape[0])
    return tot / max(n, 1)


@torch.no_grad()
def accuracy(model: nn.Module, batches: Batches) -> float:
    hit, n = 0, 0
    for xs, y in batches():
        hit += int((model(xs).argmax(1) == y).sum())
        n += int(y.shape[0])
    return hit / max(n, 1)


class _Perturbed:
    """Context: add ``delta`` (list like the trainable parameters) to the weights; on exit the original
    weights are copied back (exactly, not by subtraction)."""

    def __init__(self, model, delta):
        self.params, self.delta = _params(model), delta

    def __enter__(self):
        self.saved = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, d in zip(self.params, self.delta):
                p.add_(d)

    def __exit__(self, *exc):
        with torch.no_grad():
            for p, s in zip(self.params, self.saved):
                p.copy_(s)


def random_direction_curve(
    model: nn.Module, batches: Batches, radii, *, directions: int = 10, seed: int = 0
) -> list[float]:
    """Mean loss at theta + r u over ``directions`` random unit directions u (all parameters), per radius."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    params = _params(model)
    dirs = [_normalize([torch.randn(p.shape, generator=g) for p in params]) for _ in range(directions)]
    out = []
    for r in radii:
        if float(r) == 0.0:
            out.append(mean_loss(model, batches))
            continue
        vals = []
        for u in dirs:
            with _Perturbed(model, [float(r) * x for x in u]):
                vals.append(mean_loss(model, batches))
        out.append(sum(vals) / len(vals))
    return out


def weight_noise_gap(
    model: nn.Module, batches: Batches, *, sigma: float = 0.004, draws: int = 20, seed: int = 0
) -> float:
    """E[L(theta + N(0, sigma^2))] - L(theta) over ``draws`` Gaussian weight perturbations."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    base = mean_loss(model, batches)
    vals = []
    for _ in range(max(1, draws)):
        with _Perturbed(model, [sigma * torch.randn(p.shape, generator=g) for p in _params(model)]):
            vals.append(mean_loss(model, batches))
    return sum(vals) / len(vals) - base


def pgd_accuracy(
    model: nn.Module,
    batches: Batches,
    modality: str,
    *,
    eps: float,
    steps: int = 10,
    step_size: float | None = None,
    seed: int = 0,
) -> float:
    """Accuracy under an L-inf PGD attack of radius ``eps`` on ``modality`` only (others clean)."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    alpha = step_size if step_size is not None else 2.5 * eps / max(1, steps)
    hit, n = 0, 0
    for xs, y in batches():
        x0 = xs[modality]
        delta = (torch.rand(x0.shape, generator=g) * 2 - 1) * eps
        for _ in range(steps):
            delta.requires_grad_(True)
            loss = F.cross_entropy(model({**xs, modality: x0 + delta}), y)
            (grad,) = torch.autograd.grad(loss, delta)
            delta = (delta.detach() + alpha * grad.sign()).clamp(-eps, eps)
        with torch.no_grad():
            hit += int((model({**xs, modality: x0 + delta}).argmax(1) == y).sum())
        n += int(y.shape[0])
    return hit / max(n, 1)


def filter_normalized_direction(model: nn.Module, g: torch.Generator) -> list[torch.Tensor]:
    """A random direction with each filter (slice along dim 0) scaled to the norm of theta's filter;
    0 for 1-D parameters (Li et al. 2018, 'filter normalization', biases ignored)."""
    out = []
    for p in _params(model):
        if p.ndim <= 1:
            out.append(torch.zeros_like(p))
            continue
        d = torch.randn(p.shape, generator=g)
        dn = d.flatten(1).norm(dim=1).clamp_min(1e-12)
        pn = p.detach().flatten(1).norm(dim=1)
        out.append(d * (pn / dn).view(-1, *([1] * (p.ndim - 1))))
    return out


def landscape_2d(model: nn.Module, batches: Batches, *, points: int = 11, span: float = 1.0, seed: int = 0):
    """Loss on the grid alpha, beta in [-span, span]^2 (``points`` per axis) of theta + alpha d1 + beta d2.
    Returns (coords (points,), losses (points, points) with [i, j] at alpha_i, beta_j)."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    d1, d2 = filter_normalized_direction(model, g), filter_normalized_direction(model, g)
    coords = torch.linspace(-span, span, points)
    z = torch.zeros(points, points)
    for i, a in enumerate(coords):
        for j, b in enumerate(coords):
            with _Perturbed(model, [float(a) * x + float(b) * y for x, y in zip(d1, d2)]):
                z[i, j] = mean_loss(model, batches)
    return coords.numpy(), z.numpy()


def plot_landscapes(panels: list[tuple[str, object, object]], path) -> None:
    """Contour plots side by side: panels of (title, coords, losses); written atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 1.0, 3.8), squeeze=False)
    vmax = max(float(np.percentile(z, 95)) for _, _, z in panels)
    levels = np.linspace(min(float(z.min()) for _, _, z in panels), vmax, 15)
    for ax, (title, c, z) in zip(axes[0], panels):
        cs = ax.contourf(c, c, np.asarray(z).T, levels=levels, cmap="viridis", extend="max")
        ax.contour(c, c, np.asarray(z).T, levels=levels, colors="k", linewidths=0.3)
        ax.plot([0], [0], "r+")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("filter-normalised direction 1")
        ax.set_ylabel("direction 2")
    fig.subplots_adjust(wspace=0.35, right=0.8)
    fig.colorbar(cs, ax=axes[0].tolist(), label="train loss")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
