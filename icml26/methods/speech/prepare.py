"""Data of ``icml26 mamoe prepare``: real sentences spoken by Debian espeak-ng with several voices,
speeds and pitches, disjoint train / test sentences, held-out test voices, the LibriVox clips of the
pocketsphinx sdist as real test speech, and k-means units fitted on the training frames only (a
RECON CPU plan for MoST's data, arXiv 2601.10272; docs/mamoe.md)."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import numpy as np

from icml26.core.data import cache_root
from icml26.core.data import speech as S
from icml26.core.data.text import require_corpus
from icml26.core.errors import InputError
from icml26.core.output import atomic_dir, atomic_write_text
from icml26.methods.speech.config import Config
from icml26.methods.speech.units import UnitCodec

PREP_FIELDS = (
    "corpus",
    "max_words",
    "vocab_words",
    "train_sentences",
    "test_sentences",
    "train_voices",
    "test_voices",
    "speeds_wpm",
    "pitches",
    "num_units",
    "unit_features",
    "librivox",
)


# ----------------------------------------------------------------------------- prepare
def prep_settings(cfg: Config) -> dict:
    d = {k: getattr(cfg, k) for k in PREP_FIELDS}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def default_data_dir(cfg: Config, seed: int, out: str | None = None) -> Path:
    """Where ``data: ""`` prepares (and finds again): the cache, keyed by the prepare settings and seed."""
    h = hashlib.sha256(json.dumps({**prep_settings(cfg), "seed": seed}, sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / "mamoe" / f"speech-{h}"


def validate_prepare(cfg: Config) -> None:
    """Input checks before the config record: espeak-ng, the voices, the corpus, the LibriVox clips."""
    S.require_espeak()
    have = set(S.espeak_voices("en"))
    for v in (*cfg.train_voices, *cfg.test_voices):
        if v not in have:
            raise InputError(f"voice {v!r} is not an installed espeak-ng voice; installed: {', '.join(sorted(have))}")
    for s in cfg.speeds_wpm:
        if not 80 <= s <= 450:
            raise InputError(f"speeds_wpm: {s} is outside [80, 450]")
    for p in cfg.pitches:
        if not 0 <= p <= 99:
            raise InputError(f"pitches: {p} is outside [0, 99]")
    require_corpus(cfg.corpus)
    if cfg.librivox:
        S.librivox_clips()


def read_prepared(path: str | Path) -> dict:
    """A prepared folder: ``prepare.json`` (settings), ``utterances.jsonl``, ``codec.npz``. InputError if not one."""
    p = Path(path)
    meta_f, utt_f = p / "prepare.json", p / "utterances.jsonl"
    if not meta_f.is_file() or not utt_f.is_file() or not (p / "codec.npz").is_file():
        raise InputError(
            f"data {str(p)!r} is not a `icml26 mamoe prepare` folder (needs prepare.json, utterances.jsonl, codec.npz)"
        )
    try:
        meta = json.loads(meta_f.read_text())
        utts = [json.loads(line) for line in utt_f.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise InputError(f"data {str(p)!r}: cannot read it ({e})") from None
    codec = UnitCodec.load(p / "codec.npz")
    for u in utts:
        if (
            not isinstance(u, dict)
            or not {"split", "text", "units"} <= set(u)
            or any((not isinstance(x, int)) or x < 0 or x >= codec.num_units for x in u["units"])
        ):
            raise InputError(f"data {str(p)!r}: utterances.jsonl holds a malformed utterance")
    return {"meta": meta, "utterances": utts, "codec": codec, "path": p}


def closed_vocabulary(sents: list[str], vocab_words: int) -> list[str]:
    """The sentences (order kept) whose every word is among the ``vocab_words`` most frequent words of ``sents``
    (ties broken by first appearance); ``vocab_words`` 0: all of them."""
    if vocab_words <= 0:
        return list(sents)

    top = {w for w, _ in Counter(w for x in sents for w in x.split()).most_common(vocab_words)}
    return [x for x in sents if all(w in top for w in x.split())]


def prepare(cfg: Config, *, seed: int, data_dir: Path) -> Iterator[dict]:
    """Synthesize the corpus, fit the units, write ``data_dir``. Yields step records then one result record."""
    t0 = time.perf_counter()
    sents = closed_vocabulary(S.spoken_sentences(cfg.corpus, max_words=cfg.max_words, seed=seed), cfg.vocab_words)
    need = cfg.train_sentences + cfg.test_sentences
    if len(sents) < need:
        raise InputError(f"corpus {cfg.corpus!r} has {len(sents)} usable sentences, {need} asked")
    rng = np.random.default_rng(seed)
    plan = []
    for i, s in enumerate(sents[: cfg.train_sentences]):
        plan.append(("train", s, cfg.train_voices[i % len(cfg.train_voices)]))
    for i, s in enumerate(sents[cfg.train_sentences : need]):
        plan.append(("test", s, cfg.test_voices[i % len(cfg.test_voices)]))
    waves, rows = [], []
    for j, (split, s, voice) in enumerate(plan):
        sp, pi = int(rng.choice(cfg.speeds_wpm)), int(rng.choice(cfg.pitches))
        variant = None if rng.random() < 0.5 else str(rng.choice(S.ESPEAK_VARIANTS))
        x = S.synthesize(s, voice=voice, variant=variant, speed_wpm=sp, pitch=pi)
        waves.append(x)
        rows.append(
            {
                "split": split,
                "id": f"{split}-{j:05d}",
                "text": s,
                "voice": voice + (f"+{variant}" if variant else ""),
                "speed_wpm": sp,
                "pitch": pi,
                "seconds": round(len(x) / S.SAMPLE_RATE, 3),
            }
        )
        if (j + 1) % 50 == 0 or j + 1 == len(plan):
            yield {
                "kind": "step",
                "phase": "synthesize",
                "utterances": j + 1,
                "of": len(plan),
                "seconds": round(time.perf_counter() - t0, 1),
            }
    train_waves = [w for w, r in zip(waves, rows) if r["split"] == "train"]
    codec = UnitCodec.fit(train_waves, cfg.num_units, features=cfg.unit_features, seed=seed)
    for w, r in zip(waves, rows):
        r["units"] = codec.encode(w).tolist()
    if cfg.librivox:
        for c in S.librivox_clips():
            rows.append(
                {
                    "split": "librivox",
                    "id": c.id,
                    "text": c.transcript,
                    "voice": "librivox",
                    "speed_wpm": 0,
                    "pitch": 0,
                    "seconds": round(len(c.audio) / c.sample_rate, 3),
                    "units": codec.encode(c.audio).tolist(),
                }
            )
    meta = {**prep_settings(cfg), "seed": seed, "frame_rate_hz": 25}
    with atomic_dir(data_dir) as tmp:
        codec.save(tmp / "codec.npz")
        atomic_write_text(tmp / "utterances.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        atomic_write_text(tmp / "prepare.json", json.dumps(meta, indent=1))
    n = {s: sum(r["split"] == s for r in rows) for s in ("train", "test", "librivox")}
    yield {
        "kind": "result",
        "task": "prepare",
        "data": str(data_dir),
        "train_utterances": n["train"],
        "test_utterances": n["test"],
        "librivox_clips": n["librivox"],
        "num_units": cfg.num_units,
        "train_hours": round(sum(r["seconds"] for r in rows if r["split"] == "train") / 3600, 4),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def ensure_data(cfg: Config, *, seed: int, out: str | None) -> tuple[Path, bool]:
    """(data folder, whether it must still be prepared). A given ``data`` must be a prepared folder."""
    if cfg.data:
        read_prepared(cfg.data)
        return Path(cfg.data), False
    d = default_data_dir(cfg, seed, out)
    if (d / "prepare.json").is_file():
        try:
            meta = json.loads((d / "prepare.json").read_text())
        except ValueError:
            meta = {}
        if {k: meta.get(k) for k in PREP_FIELDS} == prep_settings(cfg):
            return d, False
    return d, True
