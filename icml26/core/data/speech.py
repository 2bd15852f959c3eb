"""Speech data offline: espeak-ng synthesis, resampling, log-mel / MFCC features, real LibriVox clips.

Shared by ``icml26 modality-pairing`` (spoken digits of ``av-digits``) and ``icml26 mamoe``
(synthesized sentences, real test speech). Nothing here is digit-specific.

- :func:`synthesize` speaks any text with Debian ``espeak-ng`` (voice, variant, speed in words per
  minute, pitch 0-99) and returns a float32 waveform at 16 kHz. espeak-ng missing -> MissingDataError
  naming ``apt-get install espeak-ng``. :func:`espeak_voices` lists the installed voices.
- :func:`resample` (band-limited polyphase resampling, scipy's ``resample_poly``; or ``sox`` when asked),
  :func:`read_wav` / :func:`write_wav` (16-bit PCM RIFF, mono), :func:`add_noise` (at an SNR in dB).
- :func:`log_mel` (power spectrogram by ``torch.stft``, HTK mel filter bank built in numpy, log) and
  :func:`mfcc` (DCT-II of the log-mel). torchaudio is not used: its wheels pin another torch (DATA.md).
- :func:`librivox_clips`: the 5 LibriVox clips (16 kHz, 3-7 s, with transcripts) of the pocketsphinx
  5.1.1 source distribution (``test/data/librivox``), read from the sdist tarball in
  ``$ICML26_CACHE/pocketsphinx/`` (``pip download --no-binary pocketsphinx --no-deps pocketsphinx==5.1.1
  -d ~/.cache/icml26/pocketsphinx`` puts it there). Test data only: never train on it.

Sources: espeak-ng manual (``-v voice+variant -s wpm -p pitch --stdout``); HTK book (mel scale
2595 log10(1 + f/700)); Davis & Mermelstein 1980 (MFCC).
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import wave
from dataclasses import dataclass
from functools import lru_cache
from math import gcd
from pathlib import Path

import numpy as np

from icml26.core.data import cache_root
from icml26.core.errors import InputError, MissingDataError

SAMPLE_RATE = 16000  # Hz, the rate every helper here returns
ESPEAK_INSTALL = "apt-get install -y espeak-ng"
ESPEAK_VARIANTS = tuple([f"m{i}" for i in range(1, 8)] + [f"f{i}" for i in range(1, 6)])
PSPHINX_VERSION = "5.1.1"


# ----------------------------------------------------------------------------- espeak-ng
def espeak_binary() -> str | None:
    """Path of ``espeak-ng`` (or ``espeak``) on PATH, or None."""
    return shutil.which("espeak-ng") or shutil.which("espeak")


def espeak_missing_message() -> str:
    return f"espeak-ng (Debian package espeak-ng) is not installed: run `{ESPEAK_INSTALL}` (or `make data` as root)"


def require_espeak() -> str:
    """The espeak-ng binary, else MissingDataError naming the install command."""
    b = espeak_binary()
    if b is None:
        raise MissingDataError(espeak_missing_message())
    return b


@lru_cache(maxsize=4)
def espeak_voices(language: str = "en") -> tuple[str, ...]:
    """Installed espeak-ng voice names for ``language`` (e.g. ``en-us``, ``en-gb-scotland``);
    mbrola voices (which need extra Debian packages) and the ``!v`` variant files are left out."""
    b = require_espeak()
    out = subprocess.run([b, f"--voices={language}"], capture_output=True, text=True, check=True).stdout
    names = []
    for line in out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 5 and not cols[4].startswith(("mb/", "!v")):
            names.append(cols[1])
    return tuple(dict.fromkeys(names))


def synthesize(
    text: str,
    *,
    voice: str = "en-us",
    variant: str | None = None,
    speed_wpm: int = 160,
    pitch: int = 50,
    sample_rate: int = SAMPLE_RATE,
) -> np.ndarray:
    """Speak ``text`` with espeak-ng.

    voice: an espeak-ng voice (``espeak_voices()``); variant: ``m1..m7`` / ``f1..f5`` or None;
    speed_wpm: words per minute (80-450); pitch: 0-99. Returns float32 (T,) in [-1, 1] at
    ``sample_rate`` Hz (espeak-ng writes 22.05 kHz; resampled here).
    Raises MissingDataError without espeak-ng, InputError for a bad voice/speed/pitch or empty text."""
    if not str(text).strip():
        raise InputError("synthesize: empty text")
    if not 80 <= int(speed_wpm) <= 450:
        raise InputError(f"synthesize: speed_wpm must be in [80, 450], got {speed_wpm}")
    if not 0 <= int(pitch) <= 99:
        raise InputError(f"synthesize: pitch must be in [0, 99], got {pitch}")
    if variant is not None and variant not in ESPEAK_VARIANTS:
        raise InputError(f"synthesize: variant must be one of {', '.join(ESPEAK_VARIANTS)}, got {variant!r}")
    b = require_espeak()
    v = voice + (f"+{variant}" if variant else "")
    r = subprocess.run(
        [b, "-v", v, "-s", str(int(speed_wpm)), "-p", str(int(pitch)), "--stdout", str(text)],
        capture_output=True,
        check=False,
    )
    if r.returncode != 0 or len(r.stdout) < 44:
        msg = r.stderr.decode(errors="replace").strip().splitlines()
        raise InputError(f"espeak-ng voice {v!r}: {msg[0] if msg else 'no audio produced'}")
    x, sr = _decode_wav(r.stdout, f"espeak-ng output ({v})")
    return resample(x, sr, sample_rate)


# ----------------------------------------------------------------------------- wav / resampling
def _decode_wav(data: bytes, what: str) -> tuple[np.ndarray, int]:
    # espeak-ng --stdout writes a RIFF header whose sizes are 0x7fffffff (streamed): parse by hand
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise InputError(f"{what}: not a RIFF/WAVE file")
    pos, fmt, pcm = 12, None, None
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        body = data[pos + 8 : pos + 8 + size] if size < 0x7FFFFFF0 else data[pos + 8 :]
        if cid == b"fmt ":
            fmt = body
        elif cid == b"data":
            pcm = body
            break
        pos += 8 + size + (size & 1)
    if fmt is None or pcm is None or len(fmt) < 16:
        raise InputError(f"{what}: no fmt/data chunk")
    tag, channels, sr = (
        int.from_bytes(fmt[0:2], "little"),
        int.from_bytes(fmt[2:4], "little"),
        int.from_bytes(fmt[4:8], "little"),
    )
    bits = int.from_bytes(fmt[14:16], "little")
    if tag != 1 or bits != 16 or channels < 1:
        raise InputError(f"{what}: only 16-bit PCM is read (format tag {tag}, {bits} bits)")
    n = len(pcm) // (2 * channels) * channels
    x = np.frombuffer(pcm[: 2 * n], dtype="<i2").astype(np.float32).reshape(-1, channels).mean(1) / 32768.0
    return x, sr


def read_wav(path_or_bytes: str | Path | bytes) -> tuple[np.ndarray, int]:
    """Read a 16-bit PCM WAV (mono or mixed down). Returns (float32 (T,) in [-1, 1], rate in Hz)."""
    if isinstance(path_or_bytes, (bytes, bytearray)):
        return _decode_wav(bytes(path_or_bytes), "WAV data")
    p = Path(path_or_bytes)
    if not p.is_file():
        raise InputError(f"WAV file {str(p)!r} does not exist")
    return _decode_wav(p.read_bytes(), f"WAV file {str(p)!r}")


def write_wav(path: str | Path, x: np.ndarray, sample_rate: int = SAMPLE_RATE) -> Path:
    """Write float (T,) in [-1, 1] as 16-bit PCM mono WAV, atomically."""
    from icml26.core.output import atomic_path

    pcm = (np.clip(np.asarray(x, dtype=np.float64), -1, 1) * 32767).round().astype("<i2")
    with atomic_path(path) as tmp:
        with wave.open(str(tmp), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(int(sample_rate))
            w.writeframes(pcm.tobytes())
    return Path(path)


def resample(x: np.ndarray, rate_in: int, rate_out: int = SAMPLE_RATE, *, backend: str = "numpy") -> np.ndarray:
    """Resample a waveform (T,) from ``rate_in`` to ``rate_out`` Hz.

    backend ``numpy``: polyphase FIR (scipy.signal.resample_poly, Kaiser window), exact rational ratio;
    ``sox``: the ``sox`` binary (``apt-get install -y sox``; MissingDataError without it).
    Returns float32 (round(T * rate_out / rate_in),)."""
    x = np.asarray(x, dtype=np.float32)
    if rate_in <= 0 or rate_out <= 0:
        raise InputError(f"resample: rates must be > 0, got {rate_in} -> {rate_out}")
    if rate_in == rate_out:
        return x
    if backend == "sox":
        sox = shutil.which("sox")
        if sox is None:
            raise MissingDataError("sox is not installed: run `apt-get install -y sox`")
        r = subprocess.run(
            [sox, "-t", "f32", "-r", str(rate_in), "-c", "1", "-", "-t", "f32", "-r", str(rate_out), "-c", "1", "-"],
            input=x.astype("<f4").tobytes(),
            capture_output=True,
            check=True,
        )
        return np.frombuffer(r.stdout, dtype="<f4").copy()
    if backend != "numpy":
        raise InputError(f"resample: backend must be numpy or sox, got {backend!r}")
    from scipy.signal import resample_poly

    g = gcd(int(rate_in), int(rate_out))
    return resample_poly(x, int(rate_out) // g, int(rate_in) // g).astype(np.float32)


def add_noise(x: np.ndarray, snr_db: float, rng: np.random.Generator, noise: np.ndarray | None = None) -> np.ndarray:
    """Add noise at ``snr_db`` dB (signal power / noise power). ``noise``: a real recording to cut a
    random segment from (e.g. LibriVox babble; tiled if shorter), else white Gaussian noise."""
    x = np.asarray(x, dtype=np.float32)
    if noise is None:
        n = rng.standard_normal(x.shape[0]).astype(np.float32)
    else:
        noise = np.asarray(noise, dtype=np.float32)
        if noise.shape[0] < x.shape[0]:
            noise = np.tile(noise, x.shape[0] // noise.shape[0] + 1)
        s = int(rng.integers(0, noise.shape[0] - x.shape[0] + 1))
        n = noise[s : s + x.shape[0]].copy()
    ps = float(np.mean(x.astype(np.float64) ** 2)) + 1e-12
    pn = float(np.mean(n.astype(np.float64) ** 2)) + 1e-12
    return (x + n * np.sqrt(ps / (pn * 10 ** (snr_db / 10)))).astype(np.float32)


# ----------------------------------------------------------------------------- features
def hz_to_mel(f):
    """HTK mel scale: 2595 log10(1 + f / 700)."""
    return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def mel_to_hz(m):
    return 700.0 * (10 ** (np.asarray(m, dtype=np.float64) / 2595.0) - 1.0)


@lru_cache(maxsize=16)
def mel_filterbank(
    n_mels: int = 40, n_fft: int = 400, sample_rate: int = SAMPLE_RATE, f_min: float = 0.0, f_max: float | None = None
) -> np.ndarray:
    """Triangular HTK mel filters, (n_mels, n_fft // 2 + 1) float32, unnormalised (peak 1)."""
    f_max = sample_rate / 2 if f_max is None else f_max
    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    pts = mel_to_hz(np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2))
    lo, c, hi = pts[:-2, None], pts[1:-1, None], pts[2:, None]
    up = (freqs[None] - lo) / np.maximum(c - lo, 1e-9)
    down = (hi - freqs[None]) / np.maximum(hi - c, 1e-9)
    return np.maximum(0.0, np.minimum(up, down)).astype(np.float32)


def log_mel(
    x, *, sample_rate: int = SAMPLE_RATE, n_fft: int = 400, hop: int = 160, n_mels: int = 40, eps: float = 1e-6
):
    """Log-mel spectrogram: log(mel @ |STFT|^2 + eps), Hann window of ``n_fft`` samples, ``hop`` samples.

    x: waveform (T,) or batch (B, T), numpy or torch. Returns torch float32 (n_mels, frames) or
    (B, n_mels, frames), frames = 1 + T // hop (centered STFT, reflect padding)."""
    import torch

    t = torch.as_tensor(np.asarray(x, dtype=np.float32) if not isinstance(x, torch.Tensor) else x, dtype=torch.float32)
    if t.ndim not in (1, 2) or t.shape[-1] < 2:
        raise InputError(f"log_mel: expected a waveform (T,) or (B, T), got shape {tuple(t.shape)}")
    spec = torch.stft(
        t,
        n_fft=n_fft,
        hop_length=hop,
        window=torch.hann_window(n_fft),
        center=True,
        pad_mode="reflect" if t.shape[-1] > n_fft // 2 else "constant",
        return_complex=True,
    )
    power = spec.real**2 + spec.imag**2  # (..., n_fft//2+1, frames)
    fb = torch.from_numpy(mel_filterbank(n_mels, n_fft, sample_rate))
    return torch.log(torch.matmul(fb, power) + eps)


def mfcc(x, *, n_mfcc: int = 13, **kw):
    """MFCC: orthonormal DCT-II over the mel axis of :func:`log_mel`. Returns (n_mfcc, frames) (or batched)."""
    import torch

    lm = log_mel(x, **kw)
    m = lm.shape[-2]
    k = np.arange(n_mfcc)[:, None]
    n = np.arange(m)[None]
    dct = np.cos(np.pi / m * (n + 0.5) * k) * np.sqrt(2.0 / m)
    dct[0] /= np.sqrt(2.0)
    return torch.matmul(torch.from_numpy(dct.astype(np.float32)), lm)


def fix_length(x: np.ndarray, length: int, *, offset: int = 0) -> np.ndarray:
    """Crop or zero-pad (T,) to ``length`` samples; the signal starts at ``offset`` (>= 0) in the output."""
    out = np.zeros(length, dtype=np.float32)
    seg = np.asarray(x, dtype=np.float32)[: max(0, length - offset)]
    out[offset : offset + seg.shape[0]] = seg
    return out


# ----------------------------------------------------------------------------- LibriVox (pocketsphinx sdist)
@dataclass(frozen=True)
class Clip:
    """A recorded utterance: ``audio`` float32 (T,) at ``sample_rate`` Hz, its transcript, an id."""

    id: str
    audio: np.ndarray
    sample_rate: int
    transcript: str


def pocketsphinx_sdist() -> Path | None:
    d = cache_root() / "pocketsphinx"
    hits = sorted(d.glob("pocketsphinx-*.tar.gz")) if d.is_dir() else []
    return hits[-1] if hits else None


def librivox_missing_message() -> str:
    d = cache_root() / "pocketsphinx"
    return (
        f"the LibriVox test clips (pocketsphinx {PSPHINX_VERSION} source distribution) are not in the cache: run "
        f"`pip download --no-binary pocketsphinx --no-deps pocketsphinx=={PSPHINX_VERSION} -d {d}`"
    )


@lru_cache(maxsize=2)
def _librivox(path: str) -> tuple[Clip, ...]:
    clips = []
    try:
        with tarfile.open(path, "r:gz") as tf:
            members = {m.name.split("/", 1)[1]: m for m in tf.getmembers() if "/" in m.name}
            ids = sorted(
                n[len("test/data/librivox/") : -4]
                for n in members
                if n.startswith("test/data/librivox/") and n.endswith(".wav")
            )
            for i in ids:
                base = f"test/data/librivox/{i}"
                wav = tf.extractfile(members[base + ".wav"]).read()
                txt = tf.extractfile(members[base + ".txt"]).read().decode().strip() if base + ".txt" in members else ""
                x, sr = _decode_wav(wav, f"{path}:{base}.wav")
                clips.append(Clip(i, resample(x, sr, SAMPLE_RATE), SAMPLE_RATE, txt))
    except (tarfile.TarError, OSError, KeyError) as e:
        raise InputError(f"{path}: cannot read the LibriVox clips ({e})") from None
    if not clips:
        raise InputError(f"{path}: no test/data/librivox/*.wav inside (not the pocketsphinx source distribution?)")
    return tuple(clips)


def librivox_clips(sdist: str | Path | None = None) -> tuple[Clip, ...]:
    """The real LibriVox clips with transcripts (5 clips, 24.7 s in all, 16 kHz) from the pocketsphinx
    sdist tarball (``sdist``, default the one in the cache). MissingDataError naming the pip command
    when absent. Use as test speech or additive real-noise backgrounds only."""
    p = Path(sdist) if sdist is not None else pocketsphinx_sdist()
    if p is None:
        raise MissingDataError(librivox_missing_message())
    if not p.is_file():
        raise InputError(f"pocketsphinx sdist {str(p)!r} does not exist")
    return _librivox(str(p))


def babble(clips=None) -> np.ndarray:
    """All LibriVox clips concatenated (float32, 16 kHz): a real-speech noise background."""
    clips = librivox_clips() if clips is None else clips
    return np.concatenate([c.audio for c in clips]).astype(np.float32)


# ----------------------------------------------------------------------------- sentences to speak
def spoken_sentences(corpus: str = "wordnet", *, min_words: int = 3, max_words: int = 10, seed: int = 0) -> list[str]:
    """Real sentences for synthesis from a built-in text corpus (``icml26.core.data.text``: wordnet glosses,
    kjv verses, python-docs, fortunes), cleaned to lowercase words (letters and apostrophes; no digits, which
    espeak-ng and recognizers spell differently), ``min_words``..``max_words`` words, deduplicated, in a seeded
    random order (so that any prefix / suffix split is a disjoint split). MissingDataError without the corpus."""
    import re

    from icml26.core.data.text import load_corpus

    if not 1 <= min_words <= max_words:
        raise InputError(f"spoken_sentences: need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    out: dict[str, None] = {}
    for doc in load_corpus(corpus, max_chars=400):
        for part in re.split(r"[;.!?:\n]|\s\(|\)\s", doc):
            if re.search(r"[0-9_\\/<>=@#{}\[\]|*`~^$%&+]", part):
                continue
            s = " ".join(re.sub(r"[^a-z' ]+", " ", part.lower().replace("-", " ")).split()).strip("' ")
            if min_words <= len(s.split()) <= max_words:
                out.setdefault(s, None)
    sents = sorted(out)
    rng = np.random.default_rng(seed)
    return [sents[i] for i in rng.permutation(len(sents))]
