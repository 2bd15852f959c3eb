"""MoST-style speech-text training and evaluation with MAMoE and its ablations (``icml26 mamoe``).

Pipeline (arXiv 2601.10272, code NUS-HPC-AI-Lab/MoST; the CPU plan is RECON):
  prepare: real sentences (WordNet glosses by default) spoken by Debian espeak-ng with several voices, speeds and
      pitches; disjoint train / test sentences, held-out test voices; the 5 LibriVox clips of the pocketsphinx sdist
      as real test speech (never trained on); k-means units (``units.py``) fitted on the training frames only.
  train: a dense LLaMA (SmolLM2-135M; ``tiny-random`` for tests) with the unit vocabulary and begin/end-of-speech
      markers added to the tokenizer, upcycled per variant (``mamoe.upcycle_llama``), trained on the MoST sample
      format (ASR: "Transcribe the following speech into text." + units + " Output:" -> transcript; TTS: the mirror,
      "Convert the following text into speech." -> run-length units; loss on the response only) mixed with text-LM
      samples (``text_lm_ratio``), AdamW (0.9, 0.95), weight decay 0, linear decay, aux loss alpha 1e-3.
      Trained here: the MoE / widened MLP layers and the new embedding rows; attention, norms, the other MLPs and
      the old embedding rows stay frozen (RECON, the notes' CPU plan).
  eval: ASR WER (greedy, text tokens only) on held-out sentences x held-out voices and on LibriVox; TTS: greedy units
      -> Griffin-Lim -> pocketsphinx WER, and the unit error rate against espeak-ng's reference units; text perplexity
      on held-out sentences; routing fractions; active / total parameters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from icml26.core import diverge
from icml26.core.errors import InputError
from icml26.core.progress import progress
from icml26.methods.speech.config import STAGES, VARIANTS, Config  # noqa: F401

ASR_PROMPT = "Transcribe the following speech into text."
TTS_PROMPT = "Convert the following text into speech."
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
    from icml26.core.data import cache_root

    h = hashlib.sha256(json.dumps({**prep_settings(cfg), "seed": seed}, sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / "mamoe" / f"speech-{h}"


def validate_prepare(cfg: Config) -> None:
    """Input checks before the config record: espeak-ng, the voices, the corpus, the LibriVox clips."""
    from icml26.core.data import speech as S
    from icml26.core.data.text import require_corpus

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
    from icml26.methods.speech.units import UnitCodec

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
    from collections import Counter

    top = {w for w, _ in Counter(w for x in sents for w in x.split()).most_common(vocab_words)}
    return [x for x in sents if all(w in top for w in x.split())]


def prepare(cfg: Config, *, seed: int, data_dir: Path) -> Iterator[dict]:
    """Synthesize the corpus, fit the units, write ``data_dir``. Yields step records then one result record."""
    from icml26.core.data import speech as S
    from icml26.core.output import atomic_dir, atomic_write_text
    from icml26.methods.speech.units import UnitCodec

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


# ----------------------------------------------------------------------------- model
@dataclass
class SpeechLM:
    model: object
    tok: object
    base: int  # first unit id
    num_units: int
    bos_speech: int
    eos_speech: int
    eos: int
    moe_layers: list = field(default_factory=list)

    @property
    def speech_range(self) -> tuple[int, int]:
        return (self.base, self.base + self.num_units + 2)

    def marks(self, ids):
        from icml26.methods.speech.mamoe import modality_marks

        return modality_marks(ids, self.speech_range)


def validate_model(cfg: Config) -> None:
    from icml26.core.data.lm import model_path

    model_path("smollm2-135m" if cfg.model == "tiny-random" else cfg.model)


def build_model(
    cfg: Config, variant: str | None, num_units: int, *, seed: int, upcycle_init: str | None = None
) -> SpeechLM:
    """The dense LM with the unit vocabulary, upcycled as ``variant`` (None: left dense, as loaded)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from icml26.core.data.lm import load_causal_lm, model_path
    from icml26.methods.speech import mamoe as M

    torch.manual_seed(seed)
    if cfg.model == "tiny-random":
        tok = AutoTokenizer.from_pretrained(str(model_path("smollm2-135m")), local_files_only=True)
        h = cfg.tiny_hidden
        lc = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=h,
            intermediate_size=2 * h,
            num_hidden_layers=cfg.tiny_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
        model = LlamaForCausalLM(lc).eval()
    else:
        model, tok = load_causal_lm(cfg.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    base = len(tok)
    tok.add_tokens(
        [f"<|unit_{i}|>" for i in range(num_units)] + ["<|begin_of_speech|>", "<|end_of_speech|>"], special_tokens=True
    )
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        mean, std = emb.mean(0), emb.std(0)
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        new = model.get_input_embeddings().weight
        g = torch.Generator().manual_seed(seed + 1)
        new[base:] = mean + 0.5 * std * torch.randn(len(tok) - base, new.shape[1], generator=g)
    layers = []
    if variant is not None:
        layers = M.upcycle_llama(
            model,
            variant=variant,
            layers=M.moe_layers(len(model.model.layers), cfg.moe_every),
            num_text_experts=cfg.num_text_experts,
            num_speech_experts=cfg.num_speech_experts,
            top_k=cfg.top_k,
            upcycle_init=upcycle_init or cfg.upcycle_init,
            noise_std=cfg.noise_std,
            aux_alpha=cfg.aux_alpha,
            seed=seed,
        )
    model.eval()
    eos = tok.eos_token_id
    return SpeechLM(model, tok, base, num_units, base + num_units, base + num_units + 1, eos, layers)


# ----------------------------------------------------------------------------- samples
def _enc(tok, s: str) -> list[int]:
    return tok(s, add_special_tokens=False)["input_ids"]


def asr_sample(lm: SpeechLM, units, text: str | None) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids). ASR input units are de-duplicated."""
    from icml26.methods.speech.units import dedup

    prompt = (
        _enc(lm.tok, ASR_PROMPT)
        + [lm.bos_speech]
        + [lm.base + u for u in dedup(units)]
        + [lm.eos_speech]
        + _enc(lm.tok, " Output:")
    )
    resp = (_enc(lm.tok, " " + text) + [lm.eos]) if text is not None else []
    return prompt, resp


def tts_sample(lm: SpeechLM, text: str, units) -> tuple[list[int], list[int]]:
    prompt = _enc(lm.tok, TTS_PROMPT + " " + text + " Output:") + [lm.bos_speech]
    resp = ([lm.base + u for u in units] + [lm.eos_speech]) if units is not None else []
    return prompt, resp


def text_sample(lm: SpeechLM, text: str) -> tuple[list[int], list[int]]:
    return [lm.tok.bos_token_id if lm.tok.bos_token_id is not None else lm.eos], _enc(lm.tok, text) + [lm.eos]


def collate(samples, pad_id: int):
    """[(prompt, response)] -> input_ids (B, L), labels (B, L; -100 on prompt and padding), attention_mask."""
    from icml26.core.data.lm import collate_prompt_response

    return collate_prompt_response(samples, pad_id)


def lm_loss(lm: SpeechLM, ids, lab, att, vocab: int | None = None, modality_softmax: bool = False):
    """Mean next-token cross-entropy on the labelled positions; the LM head runs on those positions only.
    ``vocab``: the softmax over the first ``vocab`` ids only (the text vocabulary, for text perplexity).
    ``modality_softmax``: each position's softmax runs over its target's modality only: a speech target (a unit or
    a speech marker, ids in ``lm.speech_range``) over the speech ids, a text target over the text ids (below
    ``lm.base``); the same restriction greedy decoding applies (``greedy``), and it spares the full-vocabulary head
    on the run-length unit targets of TTS (RECON, a cost measure). Returns (loss, token count)."""
    import torch.nn.functional as F

    from icml26.methods.speech.mamoe import modality_context

    with modality_context(lm.model, lm.marks(ids)):
        hid = lm.model.model(input_ids=ids, attention_mask=att).last_hidden_state  # (B, L, d)
    tgt = lab[:, 1:]
    sel = tgt != -100
    n = int(sel.sum())
    h, t = hid[:, :-1][sel], tgt[sel]  # (n, d), (n,)
    if modality_softmax:
        lo, hi = lm.speech_range
        sp = (t >= lo) & (t < hi)
        w = lm.model.lm_head.weight  # (V, d)
        b = getattr(lm.model.lm_head, "bias", None)
        loss = h.new_zeros(())
        for m, a, z in ((sp, lo, hi), (~sp, 0, lm.base)):
            if m.any():
                lg = h[m] @ w[a:z].T + (b[a:z] if b is not None else 0)
                loss = loss + F.cross_entropy(lg.float(), t[m] - a, reduction="sum")
        return loss / max(n, 1), n
    logits = lm.model.lm_head(h)  # (n, V)
    if vocab is not None:
        logits = logits[:, :vocab]
    loss = F.cross_entropy(logits.float(), t, reduction="sum")
    return loss / max(n, 1), n


# ----------------------------------------------------------------------------- training
def trainable(lm: SpeechLM, train_all: bool = False):
    """Freeze all but the MoE / widened-MLP layers and the new embedding rows (``train_all``: nothing frozen).
    Returns the trainable params."""
    import torch

    m = lm.model
    if train_all:
        for p in m.parameters():
            p.requires_grad_(True)
        return [p for p in m.parameters()]
    for p in m.parameters():
        p.requires_grad_(False)
    params = []
    for li in lm.moe_layers:
        for p in m.model.layers[li].mlp.parameters():
            p.requires_grad_(True)
            params.append(p)
    emb = m.get_input_embeddings().weight
    emb.requires_grad_(True)
    keep = torch.zeros(emb.shape[0], 1)
    keep[lm.base :] = 1.0
    emb.register_hook(lambda g: g * keep.to(g.dtype))
    params.append(emb)
    return params


def _samples(lm: SpeechLM, data: dict, cfg: Config):
    tr = [u for u in data["utterances"] if u["split"] == "train" and len(u["units"]) <= cfg.max_units]
    if not tr:
        raise InputError(f"no training utterance has <= max_units={cfg.max_units} units")
    pools = {
        "asr": [asr_sample(lm, u["units"], u["text"]) for u in tr],
        "tts": [tts_sample(lm, u["text"], u["units"]) for u in tr],
        "text": [text_sample(lm, u["text"]) for u in tr],
    }
    return pools


def train_variant(cfg: Config, lm: SpeechLM, data: dict, variant: str, *, seed: int) -> Iterator[dict]:
    import torch

    pools = _samples(lm, data, cfg)
    tasks = list(cfg.stages)
    probs = [(1 - cfg.text_lm_ratio) / len(tasks)] * len(tasks) + [cfg.text_lm_ratio]
    kinds = tasks + ["text"]
    params = trainable(lm, cfg.train_all)
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / cfg.steps)
    rng = np.random.default_rng(seed + 17)
    lm.model.train()
    with progress(cfg.steps, f"mamoe train {variant} (steps)") as bar:
        yield from _train_steps(cfg, lm, variant, seed, pools, kinds, probs, params, opt, sched, rng, bar)
    lm.model.eval()


def _train_steps(cfg, lm, variant, seed, pools, kinds, probs, params, opt, sched, rng, bar) -> Iterator[dict]:
    """The optimizer steps of train_variant; a non-finite loss raises ``diverge.Diverged``."""
    import torch

    from icml26.methods.speech.mamoe import aux_loss

    t0 = time.perf_counter()
    run_loss = run_aux = 0.0
    for step in range(1, cfg.steps + 1):
        batch = []
        for _ in range(cfg.batch_size):
            k = kinds[int(rng.choice(len(kinds), p=probs))]
            pool = pools[k]
            batch.append(pool[int(rng.integers(len(pool)))])
        ids, lab, att = collate(batch, lm.tok.pad_token_id)
        loss, _ = lm_loss(lm, ids, lab, att, modality_softmax=cfg.modality_softmax)
        aux = aux_loss(lm.model)
        opt.zero_grad(set_to_none=True)
        (loss + aux).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        run_loss += loss.item()
        run_aux += float(torch.as_tensor(aux).detach())
        diverge.check(step, loss=loss.item(), aux_loss=run_aux)
        bar.advance(1, loss=loss.item())
        if step % cfg.log_every == 0 or step == cfg.steps:
            n = cfg.log_every if step % cfg.log_every == 0 else step % cfg.log_every
            yield {
                "kind": "step",
                "variant": variant,
                "seed": seed,
                "step": step,
                "loss": run_loss / n,
                "aux_loss": run_aux / n,
                "lr": sched.get_last_lr()[0],
                "seconds": round(time.perf_counter() - t0, 2),
            }
            run_loss = run_aux = 0.0


# ----------------------------------------------------------------------------- evaluation
def greedy(lm: SpeechLM, prompt: list[int], *, allowed: tuple[int, int], stop: int, max_new: int) -> list[int]:
    """Greedy decoding restricted to ids in [allowed[0], allowed[1]) plus ``stop``; stops at ``stop``."""
    import torch

    from icml26.core import lm_cache
    from icml26.methods.speech.mamoe import modality_context

    m = lm.model
    cache = lm_cache.new_cache(m)
    ids = torch.tensor([prompt])
    out: list[int] = []
    bias = torch.full((m.get_input_embeddings().weight.shape[0],), float("-inf"))
    bias[allowed[0] : allowed[1]] = 0.0
    bias[stop] = 0.0
    with torch.no_grad():
        for _ in range(max_new):
            with modality_context(m, lm.marks(ids)):
                logits = lm_cache.forward(m, ids, cache).logits[0, -1]
            nxt = int(torch.argmax(logits.float() + bias))
            if nxt == stop:
                break
            out.append(nxt)
            ids = torch.tensor([[nxt]])
    return out


def text_perplexity(lm: SpeechLM, texts: list[str], batch: int = 8) -> float:
    """exp(mean token NLL) of plain text (all tokens text), the softmax over the text vocabulary (ids below
    ``lm.base``): the unit tokens added for speech take no probability mass, so before any training the
    dense model scores exactly what the original LM does."""
    import torch

    tot, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            ids, lab, att = collate([text_sample(lm, t) for t in texts[i : i + batch]], lm.tok.pad_token_id)
            loss, k = lm_loss(lm, ids, lab, att, vocab=lm.base)
            tot += float(loss) * k
            n += k
    return math.exp(tot / max(n, 1))


def teacher_forced_nll(lm: SpeechLM, samples, batch: int = 8) -> float:
    """Mean per-token NLL (nats) of the responses given their prompts, each target's softmax over its modality's ids
    (``modality_softmax``, the restriction greedy decoding applies): for ASR samples the transcript given the
    speech, for TTS samples the units given the text. A graded score where greedy decoding's WER saturates."""
    import torch

    tot, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(samples), batch):
            ids, lab, att = collate(samples[i : i + batch], lm.tok.pad_token_id)
            loss, k = lm_loss(lm, ids, lab, att, modality_softmax=True)
            tot += float(loss) * k
            n += k
    return tot / max(n, 1)


def routing_readout(lm: SpeechLM, samples) -> tuple[float | None, float | None]:
    """Mean over MoE blocks of (text tokens' chosen-expert mass in the speech group, speech tokens' in the text
    group), teacher-forced on ``samples``. (None, None) for a model without MoE blocks."""
    import torch

    from icml26.methods.speech.mamoe import mamoe_blocks

    blocks = mamoe_blocks(lm.model)
    if not blocks:
        return None, None
    ts, st = [], []
    with torch.no_grad():
        for i in range(0, len(samples), 8):
            ids, lab, att = collate(samples[i : i + 8], lm.tok.pad_token_id)
            lm_loss(lm, ids, lab, att)
            ts.append(np.mean([b.stats.text_to_speech for b in blocks]))
            st.append(np.mean([b.stats.speech_to_text for b in blocks]))
    return float(np.mean(ts)), float(np.mean(st))


def evaluate(
    cfg: Config, lm: SpeechLM, data: dict, variant: str, *, seed: int, extra: dict | None = None
) -> Iterator[dict]:
    """One result per task in ``cfg.stages`` (the record contract)."""
    from icml26.methods.speech import vocoder
    from icml26.methods.speech import wer as W
    from icml26.methods.speech.mamoe import param_counts

    test = [u for u in data["utterances"] if u["split"] == "test"]
    lib = [u for u in data["utterances"] if u["split"] == "librivox"]
    ppl = text_perplexity(lm, [u["text"] for u in test])
    active, total = param_counts(lm.model)
    text_ids = (0, lm.base)
    common = {
        "kind": "result",
        "variant": variant,
        "seed": seed,
        "text_perplexity": ppl,
        "active_params": active,
        "total_params": total,
    }
    for task in cfg.stages:
        t0 = time.perf_counter()
        if task == "asr":
            us = test[: cfg.eval_utterances]
            samples = [asr_sample(lm, u["units"], u["text"]) for u in us]
            hyps = [
                lm.tok.decode(greedy(lm, p, allowed=text_ids, stop=lm.eos, max_new=2 * len(r) + 8)) for p, r in samples
            ]
            w = W.wer([u["text"] for u in us], hyps)
            wl = None
            if lib:
                lh = [
                    lm.tok.decode(
                        greedy(lm, asr_sample(lm, u["units"], None)[0], allowed=text_ids, stop=lm.eos, max_new=64)
                    )
                    for u in lib
                ]
                wl = W.wer([u["text"] for u in lib], lh)
            ts, st = routing_readout(lm, samples)
            rec = {
                **common,
                "task": "asr",
                "wer": w,
                "wer_librivox": wl,
                "unit_error_rate": None,
                "examples": len(us),
                "example_hypothesis": hyps[0] if hyps else None,
                "empty_hypotheses": sum(not W.normalize_text(h) for h in hyps) / max(len(hyps), 1),
            }
        else:
            us = test[: cfg.tts_eval_utterances] if cfg.tts_eval_utterances else test[:0]
            samples = [tts_sample(lm, u["text"], u["units"]) for u in us]
            caps = [int(len(u["units"]) * 1.5) + 10 for u in us]
            gen = [
                greedy(lm, p, allowed=(lm.base, lm.base + lm.num_units), stop=lm.eos_speech, max_new=c)
                for (p, _), c in zip(samples, caps)
            ]
            units = [[g - lm.base for g in x] for x in gen]
            uer = W.unit_error_rate([u["units"] for u in us], units) if us else None
            w = None
            if us:
                W.require_pocketsphinx()
                hyps = [W.recognize(vocoder.units_to_wave(x, data["codec"].mel_centroids, seed=seed)) for x in units]
                w = W.wer([u["text"] for u in us], hyps)
            ts, st = routing_readout(lm, samples or [tts_sample(lm, u["text"], u["units"]) for u in test[:8]])
            rec = {
                **common,
                "task": "tts",
                "wer": w,
                "wer_librivox": None,
                "unit_error_rate": uer,
                "examples": len(us),
                "example_hypothesis": hyps[0] if us else None,
                "stopped": sum(len(g) < c for g, c in zip(gen, caps)) / len(us)
                if us
                else None,  # ended by end-of-speech
                "length_ratio": sum(len(g) for g in gen) / max(sum(len(u["units"]) for u in us), 1) if us else None,
            }
        rec["response_nll"] = teacher_forced_nll(lm, samples) if samples else None
        rec.update(
            {
                "routing_text_to_speech_experts": ts,
                "routing_speech_to_text_experts": st,
                "eval_seconds": round(time.perf_counter() - t0, 2),
            }
        )
        rec.update(extra or {})
        yield rec


def tts_ceiling(data: dict, n: int, seed: int = 0) -> dict:
    """pocketsphinx WER of Griffin-Lim from the reference units (the vocoder's ceiling), and of the espeak-ng audio
    itself cannot be recomputed here (audio not stored): the units' ceiling only."""
    from icml26.methods.speech import vocoder
    from icml26.methods.speech import wer as W

    test = [u for u in data["utterances"] if u["split"] == "test"][:n]
    hyps = [W.recognize(vocoder.units_to_wave(u["units"], data["codec"].mel_centroids, seed=seed)) for u in test]
    return {"wer_reference_units": W.wer([u["text"] for u in test], hyps), "examples": len(test)}


# ----------------------------------------------------------------------------- entry points
def validate(cfg: Config, *, seed: int, out: str | None, need_recognizer: bool = True) -> dict:
    """Every input check before the config record. Returns what run() needs."""
    from icml26.methods.speech import wer as W

    data_dir, must_prepare = ensure_data(cfg, seed=seed, out=out)
    if must_prepare:
        validate_prepare(cfg)
    if need_recognizer and "tts" in cfg.stages and cfg.tts_eval_utterances > 0:
        W.require_pocketsphinx()
    validate_model(cfg)
    return {"data_dir": data_dir, "prepare": must_prepare}


def save_checkpoint(lm: SpeechLM, path: Path) -> None:
    from safetensors.torch import save_file

    from icml26.core.output import atomic_path

    sd = {k: v.detach().contiguous() for k, v in lm.model.state_dict().items()}
    # tied weights: keep one copy
    if (
        "lm_head.weight" in sd
        and "model.embed_tokens.weight" in sd
        and sd["lm_head.weight"].data_ptr() == lm.model.get_input_embeddings().weight.data_ptr()
    ):
        sd.pop("lm_head.weight")
    with atomic_path(path) as tmp:
        save_file(sd, str(tmp))


def load_checkpoint(lm: SpeechLM, path: Path) -> None:
    from safetensors.torch import load_file

    try:
        sd = load_file(str(path))
    except Exception as e:  # noqa: BLE001 - a corrupt file is bad input
        raise InputError(f"checkpoint {str(path)!r}: cannot read it ({type(e).__name__})") from None
    missing, unexpected = lm.model.load_state_dict(sd, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise InputError(
            f"checkpoint {str(path)!r} does not match this model ({len(missing)} missing, {len(unexpected)} unexpected tensors)"
        )


def run(
    cfg: Config, *, inputs: dict, seed: int, out: str | None = None, train: bool = True, checkpoints: dict | None = None
) -> Iterator[dict]:
    """prepare (if needed) -> per variant: build, upcycle, (train), evaluate -> summary."""
    import torch

    from icml26.core.seed import seed_everything

    torch.set_num_threads(max(1, torch.get_num_threads()))
    if inputs["prepare"]:
        yield from prepare(cfg, seed=seed, data_dir=inputs["data_dir"])
    data = read_prepared(inputs["data_dir"])
    test_texts = [u["text"] for u in data["utterances"] if u["split"] == "test"]
    seed_everything(seed)
    base = build_model(cfg, None, data["codec"].num_units, seed=seed)
    ppl_base = text_perplexity(base, test_texts)
    del base
    results = []
    for variant in cfg.variants:
        seed_everything(seed)
        lm = build_model(cfg, variant, data["codec"].num_units, seed=seed)
        ppl_init = text_perplexity(lm, test_texts)
        t0 = time.perf_counter()
        if train:
            try:
                yield from train_variant(cfg, lm, data, variant, seed=seed)
            except diverge.Diverged as exc:  # this variant stops; its results say so, without figures
                diverge.warn(exc, f"mamoe {variant}")
                for task in cfg.stages:
                    rec = {"kind": "result", "variant": variant, "task": task, "wer": None}
                    rec.update(diverge.diverged_fields(exc))
                    results.append(rec)
                    yield rec
                del lm
                continue
            if out is not None:
                save_checkpoint(lm, Path(out) / "checkpoints" / f"{variant}.safetensors")
        elif checkpoints is not None:
            load_checkpoint(lm, checkpoints[variant])
        extra = {
            "text_perplexity_dense": ppl_base,
            "text_perplexity_init": ppl_init,
            "steps": cfg.steps if train or checkpoints else 0,
            "train_seconds": round(time.perf_counter() - t0, 2),
        }
        for rec in evaluate(cfg, lm, data, variant, seed=seed, extra=extra):
            rec.setdefault("diverged", False)
            results.append(rec)
            yield rec
        del lm
    summ = {"kind": "summary", "results": len(results), "data": str(inputs["data_dir"])}
    for task in cfg.stages:
        rs = [r for r in results if r["task"] == task and r.get("wer") is not None]
        if rs:
            from icml26.core.verdict import verdict

            # a best variant only when an interval separates it: one run has none, so it is null
            # (several seeds: compare them in docs/mamoe.md's table), tied_with_best_* lists them
            summ.update(verdict(rs, "wer", "variant", ci_key="wer_ci", metric=f"{task}_variant"))
            summ[f"best_{task}_wer"] = min(r["wer"] for r in rs)
    summ["diverged"] = sorted({r["variant"] for r in results if r.get("diverged")})
    yield summ


def config_from_run(run_dir: str | Path) -> tuple[Config, int]:
    """The Config and seed a `mamoe train --out RUN` was run with (its config.yaml)."""
    from icml26.core.recipe import build_config, read_yaml

    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        raise InputError(f"run {str(run_dir)!r} has no config.yaml (not a `icml26 mamoe train --out` folder)")
    y = read_yaml(p, "run config")
    if not isinstance(y, dict) or not isinstance(y.get("config"), dict):
        raise InputError(f"{str(p)!r} is not a run config")
    fields = {f.name for f in dataclasses.fields(Config)}
    vals = {k: v for k, v in y["config"].items() if k in fields}
    return build_config(Config, vals, source=str(p)), int(y.get("seed") or 0)
