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
      the old embedding rows stay frozen (RECON, a CPU plan).
  eval: ASR WER (greedy, text tokens only) on held-out sentences x held-out voices and on LibriVox; TTS: greedy units
      -> Griffin-Lim -> pocketsphinx WER, and the unit error rate against espeak-ng's reference units; text perplexity
      on held-out sentences; routing fractions; active / total parameters.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from icml26.core import diverge, lm_cache
from icml26.core.errors import InputError
from icml26.core.output import atomic_path
from icml26.core.progress import progress
from icml26.core.recipe import build_config, read_yaml
from icml26.core.seed import seed_everything
from icml26.core.verdict import verdict
from icml26.methods.speech import vocoder
from icml26.methods.speech import wer as W
from icml26.methods.speech.config import STAGES, VARIANTS, Config  # noqa: F401
from icml26.methods.speech.mamoe import aux_loss, mamoe_blocks, modality_context, param_counts
from icml26.methods.speech.model import (  # noqa: F401  (re-exported)
    ASR_PROMPT,
    TTS_PROMPT,
    SpeechLM,
    _enc,
    asr_sample,
    build_model,
    collate,
    lm_loss,
    text_sample,
    trainable,
    tts_sample,
    validate_model,
)
from icml26.methods.speech.prepare import (  # noqa: F401  (re-exported)
    PREP_FIELDS,
    closed_vocabulary,
    default_data_dir,
    ensure_data,
    prep_settings,
    prepare,
    read_prepared,
    validate_prepare,
)


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
    test = [u for u in data["utterances"] if u["split"] == "test"][:n]
    hyps = [W.recognize(vocoder.units_to_wave(u["units"], data["codec"].mel_centroids, seed=seed)) for u in test]
    return {"wer_reference_units": W.wer([u["text"] for u in test], hyps), "examples": len(test)}


# ----------------------------------------------------------------------------- entry points
def validate(cfg: Config, *, seed: int, out: str | None, need_recognizer: bool = True) -> dict:
    """Every input check before the config record. Returns what run() needs."""
    data_dir, must_prepare = ensure_data(cfg, seed=seed, out=out)
    if must_prepare:
        validate_prepare(cfg)
    if need_recognizer and "tts" in cfg.stages and cfg.tts_eval_utterances > 0:
        W.require_pocketsphinx()
    validate_model(cfg)
    return {"data_dir": data_dir, "prepare": must_prepare}


def save_checkpoint(lm: SpeechLM, path: Path) -> None:
    from safetensors.torch import save_file

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
            f"checkpoint {str(path)!r} does not match this model "
            f"({len(missing)} missing, {len(unexpected)} unexpected tensors)"
        )


def run(
    cfg: Config, *, inputs: dict, seed: int, out: str | None = None, train: bool = True, checkpoints: dict | None = None
) -> Iterator[dict]:
    """prepare (if needed) -> per variant: build, upcycle, (train), evaluate -> summary."""
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
            # a best variant only when an interval separates it: one run has none, so it is null
            # (several seeds: compare them in docs/mamoe.md's table), tied_with_best_* lists them
            summ.update(verdict(rs, "wer", "variant", ci_key="wer_ci", metric=f"{task}_variant"))
            summ[f"best_{task}_wer"] = min(r["wer"] for r in rs)
    summ["diverged"] = sorted({r["variant"] for r in results if r.get("diverged")})
    yield summ


def config_from_run(run_dir: str | Path) -> tuple[Config, int]:
    """The Config and seed a `mamoe train --out RUN` was run with (its config.yaml)."""
    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        raise InputError(f"run {str(run_dir)!r} has no config.yaml (not a `icml26 mamoe train --out` folder)")
    y = read_yaml(p, "run config")
    if not isinstance(y, dict) or not isinstance(y.get("config"), dict):
        raise InputError(f"{str(p)!r} is not a run config")
    fields = {f.name for f in dataclasses.fields(Config)}
    vals = {k: v for k, v in y["config"].items() if k in fields}
    return build_config(Config, vals, source=str(p)), int(y.get("seed") or 0)
