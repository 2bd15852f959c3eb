"""Stochastic modality pairing (DML) as a ``Dataset`` wrapper, for N modalities.

Source: "Understanding Multimodal Learning: A Loss Landscape Smoothness Perspective" (Lee & Yoon,
ICML 2026; no arXiv id found), official code johnjaejunlee95/multimodal-flatness-perspective
(``main.py --shuffling``; the rule lives in dataloader/*_loader.py ``__getitem__``); notes in
docs/modality-pairing.md.

The official rule (training split only; validation and test keep the true pairs): every time
sample n is loaded, its anchor modality is kept and the partner modality is taken from a training
sample m drawn uniformly among the samples with n's label. ``m = n`` may be drawn (as the official
AVMNIST / Kinetics-Sounds loaders do; CREMA-D / Food101 exclude it: ``allow_self=False``). No
extra loss, no new hyper-parameter.

Generalisation here (RECON): N modalities; ``resample`` names the re-drawn modalities (default all
but the first, the anchor), each drawn independently (its own m) with probability ``p`` (default 1,
the official rule). Draws are a deterministic function of (seed, epoch, modality, n), so a run is
reproducible whatever the DataLoader's worker layout; ``set_epoch(e)`` (as DistributedSampler) gives
fresh pairs per epoch, and in the main process an index loaded twice in one epoch advances the
epoch by itself, so each load is a fresh draw as in the official code.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

try:  # a torch Dataset when torch is there (it always is for training)
    from torch.utils.data import Dataset as _Base
except ImportError:  # pragma: no cover
    _Base = object


class StochasticPairing(_Base):
    """Re-pair modalities within each class.

    modalities: {name: array-like indexable by sample (N, ...)} (torch tensors or numpy arrays), all
      of length N and aligned (sample i of each is the same sample); the first is the anchor.
    labels: (N,) integer class labels.
    resample: names of the modalities re-drawn (default: all but the first).
    p: probability that a re-drawn modality is replaced on a given load (1 = the official rule).
    allow_self: whether the drawn partner may be the sample itself (official AVMNIST: True).
    enabled: False gives the fixed pairing (the identity; use it for validation / test).
    seed: seeds every draw.

    ``ds[n]`` returns ``(dict {name: sample}, label)``; :func:`collate` stacks a list of them.
    Raises ValueError for misaligned inputs, an unknown modality, p outside [0, 1], or
    ``allow_self=False`` with a class of one sample."""

    def __init__(
        self,
        modalities: Mapping[str, Sequence],
        labels,
        *,
        resample: Sequence[str] | None = None,
        p: float = 1.0,
        allow_self: bool = True,
        enabled: bool = True,
        seed: int = 0,
    ):
        if len(modalities) < 1:
            raise ValueError("StochasticPairing needs at least one modality")
        self.names = tuple(modalities)
        self.data = dict(modalities)
        self.labels = np.asarray(labels).reshape(-1).astype(np.int64)
        n = self.labels.shape[0]
        for k, v in self.data.items():
            if len(v) != n:
                raise ValueError(f"modality {k!r} has {len(v)} samples, labels have {n}")
        self.resample = tuple(self.names[1:] if resample is None else resample)
        for k in self.resample:
            if k not in self.data:
                raise ValueError(f"resample: unknown modality {k!r} (modalities: {', '.join(self.names)})")
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p, self.allow_self, self.enabled, self.seed = float(p), bool(allow_self), bool(enabled), int(seed)
        # 1. label_to_indices over the training split
        self.classes = np.unique(self.labels)
        order = np.argsort(self.labels, kind="stable")
        counts = np.bincount(self.labels)
        self._start = np.concatenate([[0], np.cumsum(counts)])[:-1]  # start of each class in `order`
        self._order, self._count = order, counts
        self._rank = np.empty(n, dtype=np.int64)  # position of sample i within its class
        self._rank[order] = np.arange(n) - self._start[self.labels[order]]
        if not self.allow_self and self.enabled and self.resample and (counts[self.classes] < 2).any():
            raise ValueError("allow_self=False needs at least 2 samples in every class")
        self.epoch = 0
        self._table: dict[int, np.ndarray] = {}
        self._seen = np.zeros(n, dtype=bool)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def set_epoch(self, epoch: int) -> None:
        """Select the pairs of ``epoch`` (call it every epoch, as with DistributedSampler)."""
        self.epoch = int(epoch)
        self._seen[:] = False

    def sources(self, epoch: int | None = None) -> np.ndarray:
        """The source sample of every modality for every sample in ``epoch`` (default: current):
        int64 (N, n_modalities); column j is the index whose modality j is used. Fixed pairing and
        modalities not re-drawn give the identity column."""
        e = self.epoch if epoch is None else int(epoch)
        if e in self._table:
            return self._table[e]
        n = len(self)
        src = np.tile(np.arange(n, dtype=np.int64)[:, None], (1, len(self.names)))
        if self.enabled:
            y, cnt = self.labels, self._count[self.labels]
            for j, name in enumerate(self.names):
                if name not in self.resample:
                    continue
                rng = np.random.default_rng([self.seed, e, j, 24])
                u = rng.random(n)
                # 2. uniform same-label index m (self allowed: cnt choices; else cnt - 1, skipping self)
                if self.allow_self:
                    r = np.minimum((u * cnt).astype(np.int64), cnt - 1)
                else:
                    r = np.minimum((u * (cnt - 1)).astype(np.int64), cnt - 2)
                    r = r + (r >= self._rank)
                m = self._order[self._start[y] + r]
                if self.p < 1.0:
                    m = np.where(rng.random(n) < self.p, m, np.arange(n))
                src[:, j] = m
        if len(self._table) > 4:
            self._table.pop(min(self._table))
        self._table[e] = src
        return src

    def __getitem__(self, n: int):
        n = int(n)
        if self._seen[n]:  # a second load in the same epoch: a fresh draw, as the official code
            self.set_epoch(self.epoch + 1)
        self._seen[n] = True
        src = self.sources()[n]
        return {k: self.data[k][int(src[j])] for j, k in enumerate(self.names)}, int(self.labels[n])

    def batch(self, indices, epoch: int | None = None) -> dict:
        """Vectorised loading of a batch of sample ``indices`` for ``epoch``: {name: data[k][sources]}
        plus ``"label"``; the same pairs as ``__getitem__`` gives in that epoch."""
        idx = np.asarray(indices, dtype=np.int64)
        src = self.sources(epoch)[idx]
        out = {}
        for j, k in enumerate(self.names):
            v = self.data[k]
            out[k] = v[src[:, j]] if isinstance(v, np.ndarray) else v[_as_index(src[:, j], v)]
        out["label"] = self.labels[idx]
        return out


def _as_index(idx: np.ndarray, like):
    return torch.as_tensor(idx, device=like.device) if isinstance(like, torch.Tensor) else list(idx)


def collate(batch):
    """collate_fn for :class:`StochasticPairing`: a list of ``({name: sample}, label)`` ->
    ``({name: stacked tensor (B, ...)}, labels int64 (B,))`` for any number of modalities."""
    if not batch:
        raise ValueError("collate: empty batch")
    names = tuple(batch[0][0])
    out = {}
    for k in names:
        items = [b[0][k] for b in batch]
        out[k] = torch.stack([torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x for x in items])
    return out, torch.as_tensor([b[1] for b in batch], dtype=torch.int64)
