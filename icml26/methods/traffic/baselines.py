"""Forecasting baselines of the field, in one harness with MiniTraffic.

Every model maps a batch of windows x (B, L, N) (scaled values, L = input steps, N = sensors)
plus the time-of-day slot and weekday of the last input step (B,), (B,) to forecasts
(B, H, N) of the next H steps (scaled). Sources:

- ``ha``: historical average per sensor and time-of-day slot of the training days.
- ``persistence``: the last observed value for every step ahead.
- ``ridge``: one ridge regression on the L lags, shared by all sensors (closed form).
- ``dlinear``: DLinear (Zeng et al., AAAI 2023, arXiv 2205.13504): moving-average trend +
  remainder, one linear map L -> H each, shared across channels.
- ``patchtst``: PatchTST (Nie et al., ICLR 2023, arXiv 2211.14730), supervised, channel
  independent, RevIN, patches + Transformer encoder + flatten head.
- ``stid``: STID (Shao et al., CIKM 2022, arXiv 2208.05233): input MLP embedding + node,
  time-of-day and day-of-week embeddings, residual MLP encoder.
- ``graph``: Graph WaveNet-style (Wu et al., IJCAI 2019, arXiv 1906.00121): adaptive adjacency
  softmax(relu(E1 E2^T)), gated dilated temporal convolutions and graph convolutions over
  (I, A, A^2), skip connections. Sizes are reduced to the small data here (RECON).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class HistoricalAverage:
    """Mean of each (sensor, time-of-day slot) over the training windows' targets.

    fit(y (W, H, N) scaled, tod (W,) slot of the last input step, slots); a slot never seen
    falls back to the sensor's mean over the training targets. ``mask`` (W, H, N), True where a
    target is scored (not a null reading): the means are over those entries only."""

    def __init__(self, slots: int):
        self.slots = slots
        self.table = None

    def fit(self, y: np.ndarray, tod: np.ndarray, mask: np.ndarray | None = None) -> "HistoricalAverage":
        W, H, N = y.shape
        m = np.ones(y.shape) if mask is None else np.asarray(mask, dtype=float)
        y = np.where(m > 0, y, 0.0)
        s = np.zeros((self.slots, N))
        c = np.zeros((self.slots, N))
        for h in range(H):
            slot = (tod + 1 + h) % self.slots
            np.add.at(s, slot, y[:, h])
            np.add.at(c, slot, m[:, h])
        tot = m.reshape(-1, N).sum(0)
        fallback = np.where(tot > 0, y.reshape(-1, N).sum(0) / np.maximum(tot, 1), 0.0)
        self.table = np.where(c > 0, s / np.maximum(c, 1), fallback[None])
        return self

    def predict(self, x: np.ndarray, tod: np.ndarray, horizon: int) -> np.ndarray:
        slots = (tod[:, None] + 1 + np.arange(horizon)[None]) % self.slots  # (W, H)
        return self.table[slots]

    @property
    def params(self) -> int:
        return int(self.table.size)


class Persistence:
    """y_hat(t + h) = x(t) for every h."""

    params = 0

    def predict(self, x: np.ndarray, tod: np.ndarray, horizon: int) -> np.ndarray:
        return np.repeat(x[:, -1:, :], horizon, axis=1)


class RidgeLags:
    """Ridge regression of each of the H targets on the L lags and an intercept, one model
    pooled over sensors: w = (X^T X + alpha I)^-1 X^T y (the intercept is not penalised). With
    ``mask`` (W, H, N) (False = a null target), each horizon's regression uses only the rows
    whose target at that horizon is scored."""

    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha
        self.w = None

    def fit(self, x: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None) -> "RidgeLags":
        W, L, N = x.shape
        X = np.concatenate([x.transpose(0, 2, 1).reshape(-1, L), np.ones((W * N, 1))], 1)  # (W*N, L+1)
        Y = y.transpose(0, 2, 1).reshape(W * N, -1)  # (W*N, H)
        reg = self.alpha * np.eye(L + 1)
        reg[-1, -1] = 0.0
        if mask is None:
            self.w = np.linalg.solve(X.T @ X + reg, X.T @ Y)  # (L+1, H)
            return self
        M = np.asarray(mask, dtype=float).transpose(0, 2, 1).reshape(W * N, -1)  # (W*N, H)
        cols = []
        for h in range(Y.shape[1]):
            Xh = X * M[:, h : h + 1]
            cols.append(np.linalg.solve(Xh.T @ X + reg, Xh.T @ np.where(M[:, h] > 0, Y[:, h], 0.0)))
        self.w = np.stack(cols, 1)
        return self

    def predict(self, x: np.ndarray, tod: np.ndarray, horizon: int) -> np.ndarray:
        W, L, N = x.shape
        X = np.concatenate([x.transpose(0, 2, 1).reshape(-1, L), np.ones((W * N, 1))], 1)
        return (X @ self.w).reshape(W, N, -1).transpose(0, 2, 1)[:, :horizon]

    @property
    def params(self) -> int:
        return int(self.w.size)


class RevIN(nn.Module):
    """Instance normalisation over time per (window, sensor) (Kim et al., ICLR 2022), without
    learned affine terms; ``norm`` returns the statistics for ``denorm``."""

    def norm(self, x):  # x (B, L, N)
        mu = x.mean(1, keepdim=True)
        sd = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5)
        return (x - mu) / sd, (mu, sd)

    def denorm(self, y, stats):  # y (B, H, N)
        mu, sd = stats
        return y * sd + mu


class DLinear(nn.Module):
    def __init__(self, input_steps: int, horizon: int, kernel: int = 5):
        super().__init__()
        self.kernel = kernel
        self.trend = nn.Linear(input_steps, horizon)
        self.season = nn.Linear(input_steps, horizon)

    def forward(self, x, tod=None, dow=None):  # x (B, L, N)
        pad = (self.kernel - 1) // 2
        xp = torch.cat([x[:, :1].expand(-1, pad, -1), x, x[:, -1:].expand(-1, self.kernel - 1 - pad, -1)], 1)
        trend = xp.unfold(1, self.kernel, 1).mean(-1)  # (B, L, N)
        season = x - trend
        out = self.trend(trend.transpose(1, 2)) + self.season(season.transpose(1, 2))  # (B, N, H)
        return out.transpose(1, 2)


def patchify(x, patch_len: int, stride: int):
    """x (B, L, N) -> (B, N, P, patch_len), P = (L - patch_len) // stride + 1."""
    return x.transpose(1, 2).unfold(2, patch_len, stride)


def n_patches(input_steps: int, patch_len: int, stride: int) -> int:
    return (input_steps - patch_len) // stride + 1


class PatchTST(nn.Module):
    def __init__(
        self,
        input_steps: int,
        horizon: int,
        patch_len: int = 4,
        stride: int = 2,
        d_model: int = 32,
        n_layers: int = 2,
        n_heads: int = 4,
        d_ff: int = 64,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.patch_len, self.stride = patch_len, stride
        P = n_patches(input_steps, patch_len, stride)
        self.revin = RevIN()
        self.embed = nn.Linear(patch_len, d_model)
        self.pos = nn.Parameter(torch.randn(P, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(P * d_model, horizon)

    def forward(self, x, tod=None, dow=None):
        B, L, N = x.shape
        xn, st = self.revin.norm(x)
        z = self.embed(patchify(xn, self.patch_len, self.stride)) + self.pos  # (B, N, P, d)
        z = self.encoder(z.reshape(B * N, *z.shape[2:]))  # (B*N, P, d)
        y = self.head(z.reshape(B, N, -1)).transpose(1, 2)  # (B, H, N)
        return self.revin.denorm(y, st)


class STID(nn.Module):
    def __init__(
        self,
        input_steps: int,
        horizon: int,
        n_nodes: int,
        slots: int,
        d: int = 32,
        hidden: int = 128,
        n_layers: int = 3,
        dropout: float = 0.15,
    ):
        super().__init__()
        self.inp = nn.Linear(input_steps, d)
        self.node = nn.Parameter(torch.empty(n_nodes, d))
        self.tod = nn.Parameter(torch.empty(slots, d))
        self.dow = nn.Parameter(torch.empty(7, d))
        for p in (self.node, self.tod, self.dow):
            nn.init.xavier_uniform_(p)
        width = 4 * d
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, width))
            for _ in range(n_layers)
        )
        self.out = nn.Linear(width, horizon)

    def forward(self, x, tod, dow):
        B, L, N = x.shape
        h = torch.cat(
            [
                self.inp(x.transpose(1, 2)),  # (B, N, d)
                self.node[None].expand(B, -1, -1),
                self.tod[tod][:, None].expand(-1, N, -1),
                self.dow[dow][:, None].expand(-1, N, -1),
            ],
            -1,
        )  # (B, N, 4d)
        for f in self.layers:
            h = h + f(h)
        return self.out(h).transpose(1, 2)


class GraphWaveNet(nn.Module):
    def __init__(
        self,
        input_steps: int,
        horizon: int,
        n_nodes: int,
        channels: int = 16,
        skip: int = 32,
        end: int = 64,
        emb: int = 10,
        dilations: tuple[int, ...] = (1, 2, 4, 8),
        dropout: float = 0.1,
    ):
        super().__init__()
        self.e1 = nn.Parameter(torch.randn(n_nodes, emb) * 0.1)
        self.e2 = nn.Parameter(torch.randn(emb, n_nodes) * 0.1)
        self.start = nn.Conv2d(1, channels, 1)
        self.dilations = dilations
        self.filt = nn.ModuleList(nn.Conv2d(channels, channels, (1, 2), dilation=(1, d)) for d in dilations)
        self.gate = nn.ModuleList(nn.Conv2d(channels, channels, (1, 2), dilation=(1, d)) for d in dilations)
        self.gconv = nn.ModuleList(nn.Conv2d(3 * channels, channels, 1) for _ in dilations)
        self.skip = nn.ModuleList(nn.Conv2d(channels, skip, 1) for _ in dilations)
        self.bn = nn.ModuleList(nn.BatchNorm2d(channels) for _ in dilations)
        self.end1 = nn.Conv2d(skip, end, 1)
        self.end2 = nn.Conv2d(end, horizon, 1)
        self.drop = nn.Dropout(dropout)
        self.receptive = 1 + sum(dilations)

    def forward(self, x, tod=None, dow=None):
        B, L, N = x.shape
        h = x.transpose(1, 2)[:, None]  # (B, 1, N, L)
        if L < self.receptive:
            h = nn.functional.pad(h, (self.receptive - L, 0))
        h = self.start(h)
        adj = torch.softmax(torch.relu(self.e1 @ self.e2), dim=1)  # (N, N) row-stochastic
        skip = 0
        for i, _ in enumerate(self.dilations):
            res = h
            h = torch.tanh(self.filt[i](h)) * torch.sigmoid(self.gate[i](h))  # (B, C, N, L')
            s = self.skip[i](h[..., -1:])
            skip = s if isinstance(skip, int) else skip + s
            a1 = torch.einsum("bcnl,mn->bcml", h, adj)
            a2 = torch.einsum("bcnl,mn->bcml", a1, adj)
            h = self.gconv[i](self.drop(torch.cat([h, a1, a2], 1)))
            h = self.bn[i](h + res[..., -h.shape[-1] :])
        y = self.end2(torch.relu(self.end1(torch.relu(skip))))  # (B, H, N, 1)
        return y[..., 0]
