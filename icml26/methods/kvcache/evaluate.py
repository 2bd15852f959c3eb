"""``icml26 evict-kv`` (prefill): needle retrieval and fidelity of KV-cache eviction on a real LM.

For every sample (context length x needle depth) one prefill is captured (identical for every
policy: a layer's cache is compressed only after that layer has attended), then every (method,
compression_ratio) compresses the captured cache as ``KVPress``' hooks would (tested equal) and
is measured: KL(full || evicted), top-1 agreement and perplexity over the real continuation
(teacher forcing), the needle answered by greedy decoding, bytes kept, and scoring time over the
prefill's. Records: ``sample`` per (method, ratio, length, depth), ``result`` per (method, ratio),
a ``summary`` whose verdicts come from the intervals (``icml26.core.verdict``). ``--mode decode``
runs ``decode.run_decode``.
"""

from __future__ import annotations

import math
import time
from typing import Iterator

from icml26.core.stats import bootstrap_mean_ci, wilson_interval  # noqa: F401  (benchmarks read them from here)
from icml26.core.verdict import verdict
from icml26.methods.kvcache import spec as _spec
from icml26.methods.kvcache.config import (  # noqa: F401  (the command and benchmarks read them from here)
    DEFAULT_METHODS,
    PRESS_FIELDS,
    Config,
    check_model_attention,
    check_positions,
    config_fields,
    haystack_text,
    longest_sequence,
    preflight,
    window_note,
)
from icml26.methods.kvcache.decode import run_decode
from icml26.methods.kvcache.samples import (  # noqa: F401
    _mean,
    haystack_interval,
    head_budget_summary,
    make_samples,
    mean_kept_per_head,
    needle_correct,
    write_head_budgets,
)
from icml26.methods.kvcache.samples import _number_closed


# ----------------------------------------------------------------------------- evaluation helpers


def _snapshot(cache) -> list:
    """What each layer holds (its tensors are replaced, not written, by later steps)."""
    return [(layer.keys, layer.values, getattr(layer, "cumulative_length", None)) for layer in cache.layers]


def _restore(cache, state: list) -> None:
    """Put back a ``_snapshot``: a sliding-window layer's cache rolls, so cutting it is not enough."""
    for layer, (k, v, n) in zip(cache.layers, state):
        layer.keys, layer.values = k, v
        if n is not None:
            layer.cumulative_length = n


def _forward(model, ids, cache, pos0: int):
    import torch

    from icml26.core.lm_cache import forward as lm_forward
    from icml26.methods.kvcache.headmask import cache_masks

    t = torch.tensor([ids], dtype=torch.long, device=model.device)
    pos = torch.arange(pos0, pos0 + t.shape[1], device=model.device)[None]
    with cache_masks(model, cache):  # head-adaptive padding slots are never attended
        return lm_forward(model, t, cache, position_ids=pos).logits[0].float()


def _greedy_answer(model, tok, cache, question, pos0: int, n: int, first_logits=None) -> str:
    """Greedy decode of n tokens after the question (or after the prompt whose last logits are
    ``first_logits`` when the question was part of it); restores the cache afterwards."""
    state = _snapshot(cache)
    if first_logits is not None:
        logits, pos = first_logits, pos0
    else:
        logits = _forward(model, question, cache, pos0)[-1]
        pos = pos0 + len(question)
    out = []
    for _ in range(n):
        nxt = int(logits.argmax())
        if nxt == tok.eos_token_id:
            break
        out.append(nxt)
        if _number_closed(tok.decode(out)):  # the first number is complete: the verdict cannot change
            break
        logits = _forward(model, [nxt], cache, pos)[-1]
        pos += 1
    _restore(cache, state)
    return tok.decode(out)


def _fidelity(model, cache, cont, pos0: int, ref_logp):
    """Mean KL(full || evicted), top-1 agreement, continuation NLL, and the log-probs."""
    import torch

    state = _snapshot(cache)
    logits = _forward(model, cont, cache, pos0)
    _restore(cache, state)
    logp = torch.log_softmax(logits, -1)  # row i predicts cont[i+1]
    nll = -logp[:-1].gather(1, torch.tensor(cont[1:], device=logp.device)[:, None]).mean()
    if ref_logp is None:
        return 0.0, 1.0, float(nll), logp
    kl = (ref_logp.exp() * (ref_logp - logp)).sum(-1).mean()
    top1 = (ref_logp.argmax(-1) == logp.argmax(-1)).float().mean()
    return float(kl), float(top1), float(nll), logp


# ----------------------------------------------------------------------------- run


def run(cfg: Config, *, seed: int = 0, device: str = "cpu") -> Iterator[dict]:
    """Yield ``sample`` records, one ``result`` per (method, ratio), then a ``summary``
    (mode decode: per (method, decoding budget), ``decode.run_decode``)."""
    if cfg.mode == "decode":
        yield from run_decode(cfg, seed=seed, device=device)
        return
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.progress import progress
    from icml26.core.seed import seed_everything
    from icml26.methods.kvcache.press import KVPress, cache_bytes, capture_layers, compress_captured, kept_per_head

    seed_everything(seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    model, tok = load_causal_lm(cfg.model, device=device)
    check_positions(cfg, getattr(model.config, "max_position_embeddings", None))
    check_model_attention(cfg, model.config)
    longest = longest_sequence(cfg)  # sliding-window layers active at this length keep the model's window
    samples = make_samples(cfg, tok, seed)
    # measured in rounds over the depths (sample 0 at every depth, then sample 1, ...): a run stopped
    # early holds whole rounds; the samples themselves do not depend on the order
    samples.sort(key=lambda x: (x["length"], x["sample"]))
    methods = ["full"] + [m for m in cfg.methods if m != "full"]
    combos = [("full", 0.0)] + [(m, r) for m in methods[1:] for r in cfg.compression_ratios]
    acc: dict = {c: [] for c in combos}

    def prefill(ids):
        t0 = time.perf_counter()
        with capture_layers(model) as cap:
            out = model(torch.tensor([ids], device=model.device), use_cache=True, logits_to_keep=1)
        return cap, out.logits[0, -1].float(), time.perf_counter() - t0

    def make_press(method, ratio, question_tokens=0):
        base, kw = _spec.press_kwargs(method, cfg.press_kwargs())
        if base.startswith("kvpress:"):
            from icml26.methods.kvcache.kvpress_adapter import KvpressRunner, kvpress_press

            over = _spec.parse_method(method)[1]
            return KvpressRunner(kvpress_press(base.split(":", 1)[1], ratio, **over), model, question_tokens)
        return KVPress(method="streaming" if base == "full" else base, compression_ratio=ratio, seed=seed, **kw)

    settings = {m: _spec.method_settings(m, cfg.press_kwargs()) for m in methods}

    warm: set = set()
    with progress(len(samples) * len(combos), "evict-kv") as bar, torch.no_grad():
        for smp in samples:
            ctx, q = smp["context"], smp["question"]
            if cfg.question_aware:  # needle prompt = context + question; fidelity on the plain text
                cap_n, last_n, prefill_s = prefill(ctx + q)
                cap_f, _, _ = prefill(smp["plain"])
                cont, L_f = smp["plain_continuation"], len(smp["plain"])
            else:  # one prefill of the context serves both
                cap_n, last_n, prefill_s = prefill(ctx)
                cap_f, cont, L_f = cap_n, smp["continuation"], len(ctx)
            ref_logp = None
            for method, ratio in combos:
                nq = len(q) if cfg.question_aware else 0  # a question-aware kvpress press reads the question's span
                if method not in warm:  # first call pays lazy initialisation: keep it out of the timing
                    make_press(method, ratio, nq).compress(cap_n[0], max(1, len(ctx) // 2))
                    warm.add(method)
                press = make_press(method, ratio, nq)
                if method.startswith("kvpress:") and "press" not in settings[method]:
                    settings[method] = _spec.method_settings(method, cfg.press_kwargs(), press.press)
                cache = compress_captured(press, cap_n, model.config, longest)
                kept = cache_bytes(cache, kept_only=True)
                held = cache_bytes(cache)
                kept_tokens = cache.layers[0].keys.shape[2]
                per_head = kept_per_head(cache)  # (layers x KV heads) entries kept
                score_s = press.stats["score_s"]
                if cfg.question_aware:
                    answer = _greedy_answer(
                        model, tok, cache, q, len(ctx) + len(q), cfg.answer_tokens, first_logits=last_n
                    )
                    del cache
                    cache = compress_captured(press, cap_f, model.config, longest)
                else:
                    answer = _greedy_answer(model, tok, cache, q, len(ctx), cfg.answer_tokens)
                kl, top1, nll, logp = _fidelity(model, cache, cont, L_f, ref_logp)
                if method == "full":
                    ref_logp = logp
                ok = needle_correct(answer, smp["answer"])
                rec = {
                    "kind": "sample",
                    "method": method,
                    "method_settings": settings[method],
                    "compression_ratio": ratio,
                    "context_tokens": smp["length"],
                    "needle_depth": smp["depth"],
                    "sample": smp["sample"],
                    "needle_correct": ok,
                    "answer": answer.strip(),
                    "kl": kl,
                    "top1_agreement": top1,
                    "perplexity": math.exp(nll),
                    "kept_bytes": kept,
                    "held_bytes": held,
                    "kept_tokens": kept_tokens,
                    "kept_per_head": per_head,
                    "score_s": score_s,
                    "prefill_s": prefill_s,
                    "overhead_ratio": score_s / prefill_s,
                }
                acc[(method, ratio)].append(rec)
                yield rec
                bar.advance()
            del cap_n, cap_f
    results = []
    for (method, ratio), recs in acc.items():
        res = result_record(method, ratio, recs, seed=seed)
        results.append(res)
        yield res
    full = results[0]
    summary = {
        "kind": "summary",
        "model": cfg.model,
        "samples": len(samples),
        "full_needle_accuracy": full["needle_accuracy"],
        "full_kept_bytes": full["kept_bytes"],
        **window_note(cfg, model.config),  # sliding-window layers left to the model's window
        "seconds": time.perf_counter() - t_start,
    }
    for ratio in cfg.compression_ratios:
        summary.update(prefill_verdicts([r for r in results if r["compression_ratio"] == ratio], ratio))
    yield summary


def result_record(method: str, ratio: float, recs: list[dict], *, seed: int = 0) -> dict:
    """The ``result`` record (the contract fields and their intervals) of one (method, ratio) from
    its ``sample`` records: needle hits with a 95% Wilson interval, mean KL with a 95% bootstrap
    interval over the samples (haystacks), means of the other per-sample figures."""
    by_depth: dict = {}
    by_len: dict = {}
    for r in recs:
        by_depth.setdefault(str(r["needle_depth"]), []).append(r["needle_correct"])
        by_len.setdefault(str(r["context_tokens"]), []).append(r["needle_correct"])
    hits = sum(r["needle_correct"] for r in recs)
    heads = head_budget_summary(recs)
    return {
        **heads,
        "kind": "result",
        "method": method,
        "method_settings": recs[0].get("method_settings") if recs else None,
        "seeds": [seed],
        "compression_ratio": ratio,
        "needle_accuracy": hits / len(recs),
        "needle_hits": hits,
        "needle_accuracy_ci": list(wilson_interval(hits, len(recs))) if recs else [float("nan"), float("nan")],
        "kl": _mean(r["kl"] for r in recs),
        "kl_ci": haystack_interval([r["kl"] for r in recs], seed=seed),
        "top1_agreement": _mean(r["top1_agreement"] for r in recs),
        "perplexity": _mean(r["perplexity"] for r in recs),
        "kept_bytes": _mean(r["kept_bytes"] for r in recs),
        "held_bytes": _mean(r["held_bytes"] for r in recs),
        "overhead_ratio": _mean(r["overhead_ratio"] for r in recs),
        "n_samples": len(recs),
        "needle_accuracy_by_depth": {k: sum(v) / len(v) for k, v in by_depth.items()},
        "needle_accuracy_by_length": {k: sum(v) / len(v) for k, v in by_len.items()},
    }


def prefill_verdicts(results: list[dict], ratio: float) -> dict:
    """The summary's verdicts at one ratio over the compressed methods (``full`` left out):
    ``best_kl_at_<r>`` / ``tied_with_best_kl_at_<r>`` from the KL bootstrap intervals and
    ``best_needle_at_<r>`` / ``tied_with_best_needle_at_<r>`` from the Wilson intervals; a method
    is named only when its interval separates it from every other, none when all score the same
    (e.g. 0 needles everywhere)."""
    rows = [r for r in results if r["method"] != "full"]
    out = verdict(rows, "kl", "method", lower=True, ci_key="kl_ci", metric=f"kl_at_{ratio}")
    out.update(
        verdict(
            rows, "needle_accuracy", "method", lower=False, ci_key="needle_accuracy_ci", metric=f"needle_at_{ratio}"
        )
    )
    return out
