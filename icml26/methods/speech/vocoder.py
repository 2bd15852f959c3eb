"""Unit-to-waveform decoder: each unit's centroid log-mel frame -> linear magnitude -> Griffin-Lim.

MoST decodes units with SpiritLM's HiFi-GAN (NUS-HPC-AI-Lab/MoST); no vocoder weights ship offline, so
this is the notes' judge vocoder (RECON): mel -> linear magnitude by the non-negative least-squares-free
pseudo-inverse of the mel filter bank (clipped at 0), frames repeated to a 10 ms hop, Griffin-Lim
(Griffin & Lim 1984, with the fast momentum of Perraudin et al. 2013) by ``torch.stft`` / ``torch.istft``.
"""

from __future__ import annotations

import numpy as np
import torch

from icml26.core.data.speech import SAMPLE_RATE, mel_filterbank

N_FFT = 1024
HOP_OUT = 160  # synthesis hop (10 ms); unit frames are 40 ms, so each is repeated 4 times


def mel_to_magnitude(log_mel: np.ndarray, n_fft: int = N_FFT) -> np.ndarray:
    """(frames, n_mels) log power mel -> (n_fft // 2 + 1, frames) linear magnitude (pseudo-inverse, >= 0)."""
    fb = mel_filterbank(log_mel.shape[1], n_fft, SAMPLE_RATE).astype(np.float64)  # (M, F)
    power = np.exp(np.asarray(log_mel, dtype=np.float64)).T  # (M, frames)
    lin = np.linalg.pinv(fb) @ power
    return np.sqrt(np.clip(lin, 0.0, None)).astype(np.float32)


def griffin_lim(
    magnitude: np.ndarray,
    *,
    n_fft: int = N_FFT,
    hop: int = HOP_OUT,
    iters: int = 32,
    momentum: float = 0.99,
    seed: int = 0,
) -> np.ndarray:
    """Waveform (T,) float32 whose STFT magnitude approximates ``magnitude`` (F, frames), F = n_fft // 2 + 1."""
    mag = torch.as_tensor(magnitude, dtype=torch.float32)
    win = torch.hann_window(n_fft)
    g = torch.Generator().manual_seed(seed)
    angles = torch.exp(2j * np.pi * torch.rand(mag.shape, generator=g))
    prev = torch.zeros_like(angles)
    length = hop * (mag.shape[1] - 1)
    for _ in range(iters):
        x = torch.istft(mag * angles, n_fft, hop_length=hop, window=win, length=length)
        rebuilt = torch.stft(x, n_fft, hop_length=hop, window=win, return_complex=True)
        tprev = rebuilt
        rebuilt = rebuilt - momentum / (1 + momentum) * prev
        angles = rebuilt / rebuilt.abs().clamp_min(1e-8)
        prev = tprev
    x = torch.istft(mag * angles, n_fft, hop_length=hop, window=win, length=length)
    x = x / x.abs().max().clamp_min(1e-8) * 0.9
    return x.numpy().astype(np.float32)


def units_to_wave(units, mel_centroids: np.ndarray, *, repeat: int = 4, iters: int = 32, seed: int = 0) -> np.ndarray:
    """Run-length units (frames,) -> 16 kHz waveform: centroid mel frames, each repeated ``repeat`` times."""
    u = np.asarray(list(units), dtype=np.int64)
    if u.size == 0:
        return np.zeros(HOP_OUT, dtype=np.float32)
    mel = np.repeat(mel_centroids[u], repeat, axis=0)
    return griffin_lim(mel_to_magnitude(mel), iters=iters, seed=seed)
