"""MiniTraffic: a mini-sized pre-trained model for fine-grained (lane-level) traffic forecasting
(Li et al., ICML 2026, PMLR 306; OpenReview ZMQAGxMmE2; no arXiv id; official code
ShuhaoLii/Mini-Traffic, a PatchTST fork). What is the paper's, the code's or RECON (our
reconstruction from the abstract, a summary and the overview figure): docs/traffic.md.

1. Frequency-domain stability augmentation ``fda`` (the paper's module, absent from the code):
   Gaussian amplitude / phase noise on the dominant DFT bins A(f)^2 > tau max A^2 only,
   |dA| <= lambda max A; each road becomes ``pseudo_lanes`` copies; training batches only.
2. Adaptive Head (patch embedding + positions, RECON) and Reduction Head (flatten -> Linear ->
   horizon, as the code) around RevIN + patching (default 4 / 2; the code 3 / 1).
3. Contrastive clustering: InfoNCE (temperature 0.5) between unmasked and 40%-masked views;
   ``cluster_graph`` (k-means into small groups, cosine kNN inside each) once per fit, graph
   attention on those edges (the code re-fits KMeans in every forward).
4. Pre-training on road pseudo-lanes: masked-patch reconstruction + InfoNCE + a forecasting term
   (RECON); fine-tuning on lanes with the backbone frozen (the paper's figure), optionally then
   the whole model at a lower rate (``ft_full_epochs``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from icml26.methods.traffic.baselines import RevIN, n_patches, patchify

# every call of cluster_graph adds one (tests check it runs once per fit)
GRAPH_BUILDS = {"count": 0}


def fda(
    x: torch.Tensor, *, sigma: float, lam: float, tau: float, phase_sigma: float, generator: torch.Generator
) -> torch.Tensor:
    """Frequency-domain stability augmentation of windows x (B, T, N) along T.

    A(f), phi(f) = |X(f)|, arg X(f) of the real DFT; on the dominant bins
    Gamma(f) = 1[A(f)^2 > tau * max_f A(f)^2] (per window and series): A += clip(sigma * max A * eps,
    -lam * max A, lam * max A), phi += phase_sigma * eps'. Returns the real inverse DFT, (B, T, N).
    Raises ValueError for lam outside (0, 1) or tau outside [0, 1]."""
    if not 0.0 < lam < 1.0:
        raise ValueError(f"lam must be in (0, 1), got {lam}")
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    T = x.shape[1]
    X = torch.fft.rfft(x, dim=1)  # (B, F, N)
    A, phi = X.abs(), X.angle()
    amax = A.amax(1, keepdim=True)  # (B, 1, N)
    gamma = (A**2 > tau * amax**2).to(x.dtype)
    eps = torch.randn(A.shape, generator=generator, device="cpu").to(x.device, x.dtype)
    eps_p = torch.randn(A.shape, generator=generator, device="cpu").to(x.device, x.dtype)
    dA = torch.clamp(sigma * amax * eps, -lam * amax, lam * amax) * gamma
    A2 = torch.clamp(A + dA, min=0.0)
    phi2 = phi + phase_sigma * eps_p * gamma
    return torch.fft.irfft(torch.polar(A2, phi2), n=T, dim=1)


def info_nce(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5) -> torch.Tensor:
    """InfoNCE between two views: z1, z2 (M, d); row i of z1 and z2 are positives, the other
    M - 1 rows of z2 negatives (cosine similarity / temperature, symmetric)."""
    a = nn.functional.normalize(z1, dim=-1)
    b = nn.functional.normalize(z2, dim=-1)
    logits = a @ b.T / temperature
    target = torch.arange(a.shape[0], device=a.device)
    return 0.5 * (nn.functional.cross_entropy(logits, target) + nn.functional.cross_entropy(logits.T, target))


def kmeans(x: np.ndarray, k: int, seed: int, iters: int = 50) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding; x (N, d) -> labels (N,)."""
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    cent = [x[rng.integers(n)]]
    for _ in range(1, k):
        d2 = np.min(((x[:, None] - np.asarray(cent)[None]) ** 2).sum(-1), 1)
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(n, 1.0 / n)
        cent.append(x[rng.choice(n, p=p)])
    c = np.asarray(cent)
    lab = np.zeros(n, dtype=int)
    for _ in range(iters):
        lab = ((x[:, None] - c[None]) ** 2).sum(-1).argmin(1)
        new = np.array([x[lab == j].mean(0) if (lab == j).any() else c[j] for j in range(k)])
        if np.allclose(new, c):
            break
        c = new
    return lab


def cluster_graph(reps: np.ndarray, *, k: int, cluster_size: int, seed: int) -> np.ndarray:
    """Small graphs from entity representations reps (N, d): k-means into ceil(N / cluster_size)
    clusters, then each entity's k most cosine-similar entities of its own cluster (and itself).
    Returns a boolean adjacency (N, N), row i = the entities i attends to."""
    GRAPH_BUILDS["count"] += 1
    n = reps.shape[0]
    z = reps / np.maximum(np.linalg.norm(reps, axis=1, keepdims=True), 1e-8)
    lab = kmeans(z, max(1, math.ceil(n / cluster_size)), seed) if n > cluster_size else np.zeros(n, dtype=int)
    sim = z @ z.T
    adj = np.eye(n, dtype=bool)
    for i in range(n):
        same = np.flatnonzero((lab == lab[i]) & (np.arange(n) != i))
        if same.size:
            adj[i, same[np.argsort(-sim[i, same])[:k]]] = True
    return adj


class GraphAttention(nn.Module):
    """Single-head attention across entities at each patch, restricted to the adjacency
    (O(k N) useful edges; computed densely with a mask, N is small here)."""

    def __init__(self, d: int):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, z, adj):  # z (B, N, P, d), adj (N, N) bool
        q, k, v = self.qkv(self.norm(z)).transpose(1, 2).chunk(3, -1)  # (B, P, N, d) each
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, P, N, N)
        att = att.masked_fill(~adj, float("-inf")).softmax(-1)
        return z + self.out(att @ v).transpose(1, 2)


class MiniTraffic(nn.Module):
    """x (B, L, N) -> forecasts (B, H, N), the same weights for any number of entities N."""

    def __init__(
        self,
        input_steps: int,
        horizon: int,
        *,
        patch_len: int = 3,
        stride: int = 1,
        d_model: int = 32,
        n_layers: int = 2,
        n_heads: int = 4,
        d_ff: int = 64,
        dropout: float = 0.1,
        use_graph: bool = True,
    ):
        super().__init__()
        self.patch_len, self.stride, self.use_graph = patch_len, stride, use_graph
        P = n_patches(input_steps, patch_len, stride)
        self.revin = RevIN()
        # Adaptive Head (trained at fine-tuning)
        self.embed = nn.Linear(patch_len, d_model)
        self.pos = nn.Parameter(torch.randn(P, d_model) * 0.02)
        # backbone (frozen at fine-tuning)
        self.mask_token = nn.Parameter(torch.zeros(d_model))
        self.graph = GraphAttention(d_model) if use_graph else None
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.proj = nn.Linear(d_model, d_model)  # InfoNCE projection
        self.recon = nn.Linear(d_model, patch_len)  # pre-training head
        # Reduction Head (trained at fine-tuning)
        self.head = nn.Linear(P * d_model, horizon)
        self.register_buffer("adj", torch.zeros(0, 0, dtype=torch.bool), persistent=False)

    def backbone_parameters(self):
        mods = [self.encoder, self.proj, self.recon] + ([self.graph] if self.graph is not None else [])
        return [self.mask_token] + [p for m in mods for p in m.parameters()]

    def head_parameters(self):
        return [self.pos, *self.embed.parameters(), *self.head.parameters()]

    def set_graph(self, adj: np.ndarray | None) -> None:
        self.adj = torch.zeros(0, 0, dtype=torch.bool) if adj is None else torch.as_tensor(adj, dtype=torch.bool)
        self.adj = self.adj.to(self.pos.device)

    def encode(self, x, mask=None):
        """x (B, L, N) -> tokens (B, N, P, d), RevIN stats; mask (B, N, P) bool replaces tokens."""
        B, L, N = x.shape
        xn, st = self.revin.norm(x)
        patches = patchify(xn, self.patch_len, self.stride)  # (B, N, P, patch_len)
        z = self.embed(patches) + self.pos
        if mask is not None:
            z = torch.where(mask[..., None], self.mask_token.expand_as(z), z)
        if self.graph is not None and self.adj.shape[0] == N:
            z = self.graph(z, self.adj)
        z = self.encoder(z.reshape(B * N, *z.shape[2:])).reshape(B, N, *z.shape[2:])
        return z, st, patches

    def forward(self, x, tod=None, dow=None):
        z, st, _ = self.encode(x)
        B, N = z.shape[:2]
        y = self.head(z.reshape(B, N, -1)).transpose(1, 2)  # (B, H, N)
        return self.revin.denorm(y, st)

    def representations(self, x, mask=None):
        """Pooled, projected entity representations (B, N, d) for InfoNCE and the graph."""
        z, _, _ = self.encode(x, mask)
        return self.proj(z.mean(2))

    def pretrain_losses(self, x, y, mask_ratio: float, generator: torch.Generator, contrastive: bool):
        """Masked-patch reconstruction (MSE on the masked patches of the RevIN-normalised input),
        InfoNCE between the unmasked and masked views, and the forecast L1 on y (B, H, N)."""
        B, L, N = x.shape
        z, st, patches = self.encode(x)
        fc = self.revin.denorm(self.head(z.reshape(B, N, -1)).transpose(1, 2), st)
        P = patches.shape[2]
        mask = (torch.rand((B, N, P), generator=generator) < mask_ratio).to(x.device)
        zm, _, _ = self.encode(x, mask)
        rec = self.recon(zm)  # (B, N, P, patch_len)
        m = mask[..., None].expand_as(rec)
        rec_loss = ((rec - patches) ** 2)[m].mean() if m.any() else rec.sum() * 0
        nce = (
            info_nce(self.proj(z.mean(2)).reshape(B * N, -1), self.proj(zm.mean(2)).reshape(B * N, -1))
            if contrastive
            else rec.sum() * 0
        )
        return (fc - y).abs().mean(), rec_loss, nce
