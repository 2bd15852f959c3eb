"""Word error rate and the reference recognizer (pocketsphinx 5.1.1, its bundled US-English model).

WER = (substitutions + deletions + insertions) / reference words, from the Levenshtein alignment over words
(the usual definition, as jiwer). Text is normalized before scoring: lowercase, apostrophes kept,
other punctuation removed, whitespace collapsed (MoST's evaluate_TTS.py removes all whitespace, which
turns WER into a sentence error rate; not copied).
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache

import numpy as np

from icml26.core.errors import MissingDataError

PSPHINX_INSTALL = ".venv/bin/pip install 'pocketsphinx==5.1.1'"


def normalize_text(s: str) -> str:
    """Lowercase, keep letters / digits / apostrophes, collapse whitespace."""
    s = re.sub(r"[^a-z0-9' ]+", " ", str(s).lower())
    return " ".join(s.split())


def edit_distance(ref, hyp) -> int:
    """Levenshtein distance between two sequences (unit costs)."""
    ref, hyp = list(ref), list(hyp)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def wer(refs, hyps) -> float:
    """Corpus WER: total word edit distance / total reference words. refs, hyps: lists of strings.
    Raises ValueError for lists of different lengths or no reference words."""
    if len(refs) != len(hyps):
        raise ValueError(f"wer: {len(refs)} references, {len(hyps)} hypotheses")
    errs = words = 0
    for r, h in zip(refs, hyps):
        rw, hw = normalize_text(r).split(), normalize_text(h).split()
        errs += edit_distance(rw, hw)
        words += len(rw)
    if words == 0:
        raise ValueError("wer: the references hold no words")
    return errs / words


def unit_error_rate(refs, hyps) -> float:
    """Edit distance over unit sequences / reference length (the TTS unit error rate)."""
    errs = sum(edit_distance(r, h) for r, h in zip(refs, hyps))
    n = sum(len(r) for r in refs)
    return errs / max(n, 1)


def pocketsphinx_available() -> bool:
    return importlib.util.find_spec("pocketsphinx") is not None


def require_pocketsphinx() -> None:
    if not pocketsphinx_available():
        raise MissingDataError(f"the reference recognizer pocketsphinx is not installed: run `{PSPHINX_INSTALL}`")


@lru_cache(maxsize=1)
def _decoder():
    require_pocketsphinx()
    from pocketsphinx import Decoder

    return Decoder(samprate=16000, loglevel="FATAL")


def recognize(x: np.ndarray) -> str:
    """pocketsphinx transcript of a 16 kHz waveform (T,) in [-1, 1] (its default US-English model)."""
    d = _decoder()
    pcm = (np.clip(np.asarray(x, dtype=np.float64), -1, 1) * 32767).astype("<i2").tobytes()
    d.start_utt()
    d.process_raw(pcm, full_utt=True)
    d.end_utt()
    h = d.hyp()
    return h.hypstr if h is not None else ""
