"""Discrete speech units: k-means over frame features (log-mel or MFCC), the unit vocabulary.

MoST uses SpiritLM-base units (mHuBERT 25 Hz, layer 11, 500-way k-means; NUS-HPC-AI-Lab/MoST). HuBERT
weights are not available offline, so the units here are RECON (the notes' CPU plan): 25 Hz frames (64 ms
Hann window, 40 ms hop) of a 64-bin log-mel spectrogram (or its MFCC), per-utterance mean normalization
of nothing (the absolute spectrum is kept so a unit's centroid can be turned back into a mel frame),
k-means with k-means++ seeding (Arthur & Vassilvitskii 2007) and Lloyd iterations, deterministic for a seed.
ASR input uses de-duplicated unit strings; TTS targets keep the run-length (one unit per frame).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml26.core.data.speech import log_mel, mfcc
from icml26.core.errors import InputError
from icml26.core.output import atomic_path

FRAME_RATE_HZ = 25
N_FFT = 1024  # 64 ms at 16 kHz
HOP = 640  # 40 ms
N_MELS = 64
FEATURES = ("log-mel", "mfcc")


def frame_features(x: np.ndarray, kind: str = "log-mel") -> np.ndarray:
    """Frame features of a 16 kHz waveform (T,): (frames, 64) log-mel, or (frames, 20) MFCC. float32."""
    if kind == "log-mel":
        f = log_mel(x, n_fft=N_FFT, hop=HOP, n_mels=N_MELS)
    elif kind == "mfcc":
        f = mfcc(x, n_mfcc=20, n_fft=N_FFT, hop=HOP, n_mels=N_MELS)
    else:
        raise InputError(f"unit_features must be one of {', '.join(FEATURES)}, got {kind!r}")
    return f.T.contiguous().numpy().astype(np.float32)


def kmeans(x: np.ndarray, k: int, *, seed: int = 0, iters: int = 30) -> np.ndarray:
    """k-means++ seeding then Lloyd iterations. x: (N, D) float; returns centroids (k, D) float32.

    Deterministic for a seed (numpy Generator). Raises ValueError when N < k."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n < k or k < 1:
        raise ValueError(f"k-means: need at least k={k} frames, got {n}")
    rng = np.random.default_rng(seed)
    c = np.empty((k, x.shape[1]))
    c[0] = x[rng.integers(n)]
    d2 = ((x - c[0]) ** 2).sum(1)
    for j in range(1, k):  # 1. k-means++: sample proportional to the squared distance to the nearest centroid
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(n, 1.0 / n)
        c[j] = x[rng.choice(n, p=p)]
        d2 = np.minimum(d2, ((x - c[j]) ** 2).sum(1))
    for _ in range(iters):  # 2. Lloyd
        a = assign(x, c)
        new = np.zeros_like(c)
        cnt = np.bincount(a, minlength=k)
        np.add.at(new, a, x)
        empty = cnt == 0
        new[~empty] /= cnt[~empty, None]
        new[empty] = c[empty]  # an empty cluster keeps its centroid
        if np.allclose(new, c):
            c = new
            break
        c = new
    return c.astype(np.float32)


def assign(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Nearest centroid (squared Euclidean) of each row. x: (N, D); returns (N,) int64."""
    x = np.asarray(x, dtype=np.float64)
    c = np.asarray(centroids, dtype=np.float64)
    d = (x**2).sum(1)[:, None] - 2 * x @ c.T + (c**2).sum(1)[None]
    return d.argmin(1).astype(np.int64)


def dedup(units) -> list[int]:
    """Collapse runs of the same unit: [3, 3, 5, 5, 5, 3] -> [3, 5, 3]."""
    out: list[int] = []
    for u in units:
        if not out or out[-1] != int(u):
            out.append(int(u))
    return out


@dataclass(frozen=True)
class UnitCodec:
    """Waveform <-> units. centroids: (K, D) over ``features``; ``mel_centroids`` (K, 64): each unit's mean
    log-mel frame (the decoder's target; equal to ``centroids`` for log-mel units)."""

    centroids: np.ndarray
    mel_centroids: np.ndarray
    features: str = "log-mel"

    @property
    def num_units(self) -> int:
        return int(self.centroids.shape[0])

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Units (frames,) int64 of a 16 kHz waveform, one per 40 ms frame."""
        return assign(frame_features(x, self.features), self.centroids)

    @classmethod
    def fit(
        cls, waves, num_units: int, *, features: str = "log-mel", seed: int = 0, max_frames: int = 40000
    ) -> "UnitCodec":
        """Fit k-means on the frames of ``waves`` (a list of 16 kHz waveforms); at most ``max_frames`` frames
        (a seeded subsample)."""
        feats = [frame_features(w, features) for w in waves]
        allf = np.concatenate(feats)
        rng = np.random.default_rng(seed)
        sel = (
            np.sort(rng.choice(allf.shape[0], max_frames, replace=False))
            if allf.shape[0] > max_frames
            else np.arange(allf.shape[0])
        )
        c = kmeans(allf[sel], num_units, seed=seed)
        if features == "log-mel":
            mel = c.copy()
        else:
            mels = np.concatenate([frame_features(w, "log-mel") for w in waves])
            a = assign(allf, c)
            mel = np.stack([mels[a == j].mean(0) if (a == j).any() else mels.mean(0) for j in range(num_units)]).astype(
                np.float32
            )
        return cls(c, mel, features)

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(
                    f, centroids=self.centroids, mel_centroids=self.mel_centroids, features=np.array(self.features)
                )

    @classmethod
    def load(cls, path: str | Path) -> "UnitCodec":
        p = Path(path)
        if not p.is_file():
            raise InputError(f"unit codec {str(p)!r} does not exist")
        try:
            with np.load(p, allow_pickle=False) as z:
                return cls(z["centroids"].astype(np.float32), z["mel_centroids"].astype(np.float32), str(z["features"]))
        except (OSError, ValueError, KeyError) as e:
            raise InputError(f"unit codec {str(p)!r}: cannot read it ({e})") from None
