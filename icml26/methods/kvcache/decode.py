"""``icml26 evict-kv --mode decode``: decoding-time KV-cache compression during long generation.

For every sample (a real haystack with a needle, then the question; ``samples.make_samples``):

1. full cache: one prefill (captured), then greedy decoding of ``new_tokens`` tokens; the
   generated tokens are the sequence every policy is teacher-forced on, the full cache
   teacher-forced on them gives the reference distributions;
2. every (policy, budget B): ``KVPress(method, decoding_budget_tokens=B,
   decoding_interval_tokens=I)`` on the same prefill (``start_decoding``), then
   - fidelity: the generation fed back in chunks that end where a re-compression happens (the
     same computation as one token per step, tested): mean KL(full || compressed), top-1;
   - answer: greedy decoding for ``timed_tokens`` steps, one per step, timed against the full
     cache on the same steps: ``answer_match``, ``needle_match``, ``decode_ms_per_token``;
   - ``peak_cache_bytes``: the most keys + values the layers hold while a step attends;
3. kvpress' ``DecodingPress`` (``kvpress:DecodingPress/<ScorerPress>``) on the same prefill
   and tokens (it keeps the prompt until its first interval: its own rule).

Records: ``sample`` per (method, budget, sample); ``result`` per (method, budget) (fields in
docs/evict-kv.md); a ``summary`` with interval verdicts (``icml26.core.verdict``).
"""

from __future__ import annotations

import re
import time
from typing import Iterator

from icml26.core.verdict import verdict
from icml26.methods.kvcache import spec as _spec
from icml26.methods.kvcache.spec import DECODE_METHODS, NOT_DECODING, check_decode_methods  # noqa: F401


def kvpress_decoding(name: str, budget: int, interval: int):
    """kvpress' ``DecodingPress`` around the scorer press named in ``DecodingPress/<Scorer>``
    (default KnormPress), keeping ``budget`` tokens, re-compressing every ``interval`` steps."""
    from icml26.methods.kvcache.kvpress_adapter import press_class

    base = name.split("/", 1)[1] if "/" in name else "KnormPress"
    dp = press_class("DecodingPress")
    return dp(base_press=press_class(base)(), compression_interval=interval, target_size=budget)


def answer_span(text: str) -> str:
    """The answer: ``text`` up to its first newline or full stop (not included), stripped."""
    m = re.search(r"[\n.]", text)
    return (text[: m.start()] if m else text).strip()


def _layer_entry_bytes(cache) -> list[int]:
    """Bytes of one cached position (all KV heads, keys + values) per layer."""
    return [
        l.keys.shape[0]
        * l.keys.shape[1]
        * (l.keys.shape[-1] * l.keys.element_size() + l.values.shape[-1] * l.values.element_size())
        for l in cache.layers
    ]


def _step(model, ids, cache, pos0: int):
    """Logits (n, V) float32 of feeding ``ids`` at positions pos0.. onto ``cache``."""
    import torch

    from icml26.core.lm_cache import forward

    t = torch.tensor([ids], dtype=torch.long, device=model.device)
    pos = torch.arange(pos0, pos0 + len(ids), device=model.device)[None]
    return forward(model, t, cache, position_ids=pos).logits[0].float()


def teacher_forced(model, cache, tokens: list[int], pos0: int, chunks) -> tuple[object, int]:
    """Log-probs (len(tokens), V) of feeding ``tokens`` onto ``cache`` from position ``pos0``,
    in chunks of the sizes ``chunks(current cache length)`` returns, and the peak cache bytes
    (the largest, over the chunks, of the cache before the chunk + the chunk's entries)."""
    import torch

    per = _layer_entry_bytes(cache)
    out, fed, peak = [], 0, 0
    while fed < len(tokens):
        n = max(1, min(chunks(cache.layers[0].keys.shape[2]), len(tokens) - fed))
        peak = max(peak, sum((l.keys.shape[2] + n) * b for l, b in zip(cache.layers, per)))
        out.append(torch.log_softmax(_step(model, tokens[fed : fed + n], cache, pos0 + fed), -1))
        fed += n
    return torch.cat(out, 0), peak


def greedy(model, cache, first: int, pos0: int, n: int) -> tuple[list[int], list[float], int, object]:
    """Greedy decoding, one token per step: feed ``first`` (at ``pos0``), then each argmax, for
    ``n`` steps. Returns (the tokens fed, seconds of each step, peak cache bytes while a step
    attends, log-probs (n, V) of the steps' next-token distributions)."""
    import torch

    per = _layer_entry_bytes(cache)
    toks, rows, secs, peak = [first], [], [], 0
    for i in range(n):
        peak = max(peak, sum((l.keys.shape[2] + 1) * b for l, b in zip(cache.layers, per)))
        t0 = time.perf_counter()
        logp = torch.log_softmax(_step(model, [toks[-1]], cache, pos0 + i)[-1], -1)
        nxt = int(logp.argmax())
        secs.append(time.perf_counter() - t0)
        rows.append(logp)
        if i + 1 < n:
            toks.append(nxt)
    return toks, secs, peak, torch.stack(rows)


def run_decode(cfg, *, seed: int = 0, device: str = "cpu", skip=None, done=None, references=None) -> Iterator[dict]:
    """Yield ``sample`` records, one ``result`` per (method, budget), then a ``summary``.

    Resuming (the benchmark): ``skip`` is a set of sample indices not to run; ``done`` a set of
    (sample index, method, budget) already measured (``full`` has budget 0), not run again;
    ``references`` a dict sample index -> the full cache's greedy generation (``new_tokens``
    token ids): read when there (the full cache's greedy decoding is then not repeated unless its
    own record is missing) and filled for every sample that generates. The reference
    distributions are always the full cache teacher-forced on that generation (one forward), so
    a resumed run computes exactly what an uninterrupted one does."""
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.progress import progress
    from icml26.core.seed import seed_everything
    from icml26.methods.kvcache import config as C
    from icml26.methods.kvcache import samples as E
    from icml26.methods.kvcache.press import KVPress, capture_layers, kept_per_head

    seed_everything(seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    model, tok = load_causal_lm(cfg.model, device=device)
    C.check_positions(cfg, getattr(model.config, "max_position_embeddings", None))
    C.check_model_attention(cfg, model.config)
    samples = E.make_samples(cfg, tok, seed)
    methods = [m for m in cfg.methods if m != "full"]
    combos = [("full", 0)] + [(m, b) for m in methods for b in cfg.decoding_budgets]
    acc: dict = {c: [] for c in combos}
    interval = cfg.decoding_interval_tokens
    n_new, n_ans = cfg.new_tokens, cfg.timed_tokens

    def make(method, budget, kvpress_interval):
        base, kw = _spec.press_kwargs(method, cfg.press_kwargs())
        if base.startswith("kvpress:"):
            return kvpress_decoding(base.split(":", 1)[1], budget, kvpress_interval)
        return KVPress(
            method=base,
            compression_ratio=0.0,
            seed=seed,
            decoding_budget_tokens=budget,
            decoding_interval_tokens=interval,
            **kw,
        )

    settings = {m: _spec.method_settings(m, cfg.press_kwargs()) for m in ["full"] + methods}

    warm, entry_bytes = False, None
    with progress(len(samples) * len(combos), "evict-kv decode") as bar, torch.no_grad():
        for si, smp in enumerate(samples):
            todo = [c for c in combos if done is None or (si, c[0], c[1]) not in done]
            if (skip is not None and si in skip) or not todo:
                bar.advance(len(combos))
                continue
            prompt = smp["context"] + smp["question"]
            t0 = len(prompt)
            with capture_layers(model) as cap:
                from icml26.core.lm_cache import forward, new_cache

                full_cache = new_cache(model)
                last = (
                    forward(model, torch.tensor([prompt], device=model.device), full_cache, logits_to_keep=1)
                    .logits[0, -1]
                    .float()
                )
            first = int(last.argmax())
            prompt_kv = [(x.keys.clone(), x.values.clone()) for x in cap]  # the prompt's cache, before any policy

            def fresh():
                from transformers import DynamicCache

                c = DynamicCache(config=model.config)
                for li, (k, v) in enumerate(prompt_kv):
                    c.update(k.clone(), v.clone(), li)
                    if hasattr(c.layers[li], "cumulative_length"):  # a sliding-window layer: every position seen
                        c.layers[li].cumulative_length = t0
                return c

            if not warm:  # the process' first decoding steps pay lazy initialisation: keep them out of the timing
                greedy(model, fresh(), first, t0, 4)
                warm = True
            # 1. the full cache: greedy generation (unless saved), the sequence every policy is teacher-forced on;
            # the reference distributions: the full cache teacher-forced on it (one forward)
            gen = None if references is None else references.get(si)
            entry_bytes = sum(_layer_entry_bytes(full_cache))  # keys + values of one position, all layers
            full_peak = (t0 + n_new) * entry_bytes  # the last step attends t0 + n_new entries
            if gen is None or ("full", 0) in todo:
                gen, full_secs, _, _ = greedy(model, fresh(), first, t0, n_new)
                if references is not None:
                    references[si] = list(gen)
            ref, _ = teacher_forced(model, fresh(), list(gen), t0, lambda n: n_new)
            full_text = tok.decode(gen[:n_ans])
            full_span = answer_span(full_text)
            for method, budget in combos:
                if (method, budget) not in todo:
                    bar.advance()
                    continue
                if method == "full":
                    full_ms = 1000 * sum(full_secs[:n_ans]) / len(full_secs[:n_ans])
                    kl, top1, peak, ms, span, score_s, score_ms = 0.0, 1.0, full_peak, full_ms, full_span, 0.0, 0.0
                    per_head = [[t0 + n_new] * int(k.shape[1]) for k, _ in prompt_kv]
                else:
                    kvp = method.startswith("kvpress:")
                    # 2a. fidelity, teacher-forced on the full-cache generation
                    press = make(method, budget, 1 if kvp else interval)
                    with press(model):
                        if kvp:
                            cache = (
                                fresh()
                            )  # DecodingPress keeps the prompt; one call of `interval` tokens = its interval steps
                            chunks = lambda n: interval
                        else:
                            cache = press.start_decoding(cap, model.config, C.longest_sequence(cfg))
                            chunks = lambda n, b=budget: (b + interval - n) if n < b + interval else interval
                        logp, peak = teacher_forced(model, cache, gen, t0, chunks)
                    per_head = kept_per_head(cache)  # (layers x KV heads) at the end of the generation
                    del cache
                    kl = max(0.0, float((ref.exp() * (ref - logp)).sum(-1).mean()))  # >= 0; float rounding gave -1e-8
                    top1 = float((ref.argmax(-1) == logp.argmax(-1)).float().mean())
                    # 2b. answer: free greedy decoding with the compressed cache, one token per step, timed
                    # (the prompt's compression by start_decoding counts in the scoring time, not per token);
                    # the full cache's ms/token is timed right before, on the same steps, so load drift
                    # over the haystack's run does not enter the ratio
                    _, fsecs, _, _ = greedy(model, fresh(), first, t0, n_ans)
                    full_ms = 1000 * sum(fsecs) / n_ans
                    press = make(method, budget, interval)
                    with press(model):
                        cache = fresh() if kvp else press.start_decoding(cap, model.config, C.longest_sequence(cfg))
                        s0 = float("nan") if kvp else float(press.stats["score_s"])
                        toks, secs, _, _ = greedy(model, cache, first, t0, n_ans)
                    del cache
                    score_s = float("nan") if kvp else float(press.stats["score_s"])
                    score_ms = 1000 * (score_s - s0) / n_ans  # re-compression scoring during the timed steps, per token
                    ms = 1000 * sum(secs) / n_ans
                    span = answer_span(tok.decode(toks))
                rec = {
                    "kind": "sample",
                    "mode": "decode",
                    "method": method,
                    "method_settings": settings[method],
                    "decoding_budget_tokens": budget,
                    "decoding_interval_tokens": interval,
                    "new_tokens": n_new,
                    "context_tokens": smp["length"],
                    "prompt_tokens": t0,
                    "needle_depth": smp["depth"],
                    "sample": smp["sample"],
                    "sample_index": si,
                    "kl": kl,
                    "top1_agreement": top1,
                    "answer_match": span == full_span,
                    "needle_match": smp["answer"] in span,
                    "answer": span,
                    "peak_cache_bytes": int(peak),
                    "decode_ms_per_token": ms,
                    "full_ms_per_token": full_ms,
                    "decode_overhead_ratio": ms / full_ms - 1.0,
                    "score_s": score_s,
                    "score_ms_per_token": score_ms,
                    "kept_per_head": per_head,
                }
                acc[(method, budget)].append(rec)
                yield rec
                bar.advance()
            del cap, full_cache, ref
            prompt_kv = None  # the prompt's cache is freed before the next haystack
    results = [decode_result(m, b, recs, seed=seed) for (m, b), recs in acc.items() if recs]
    if entry_bytes:
        mark_over_budget(results, entry_bytes)
    yield from results
    summary = {
        "kind": "summary",
        "mode": "decode",
        "model": cfg.model,
        "samples": len(samples),
        "new_tokens": n_new,
        "seconds": time.perf_counter() - t_start,
        **C.window_note(cfg, model.config),  # sliding-window layers left to the model's window
    }
    summary.update(budget_verdicts(results, cfg.decoding_budgets))
    yield summary


def mark_over_budget(results: list[dict], entry_bytes: int) -> None:
    """Set ``budget_peak_bytes`` and ``over_budget`` on each compressed ``result``: a budget B
    re-compressed every I tokens holds at most B + I positions while a step attends (the
    policies here: ``peak_cache_bytes`` = (B + I) x ``entry_bytes``, the bytes of one position
    over all layers); a row above that (kvpress' ``DecodingPress`` keeps the whole prompt until
    its first interval) does not keep the budget, and the verdicts leave it out."""
    for r in results:
        b = r.get("decoding_budget_tokens") or 0
        if r["method"] == "full" or b <= 0:
            continue
        r["budget_peak_bytes"] = (b + int(r["decoding_interval_tokens"])) * int(entry_bytes)
        r["over_budget"] = int(r["peak_cache_bytes"]) > r["budget_peak_bytes"]


def budget_verdicts(results: list[dict], budgets) -> dict:
    """The summary's verdicts per budget (KL, needle; ``icml26.core.verdict``) over the rows that
    keep the budget (``over_budget`` rows left out, listed under ``over_budget_at_<B>``)."""
    out: dict = {}
    for b in budgets:
        rs = [r for r in results if r["decoding_budget_tokens"] == b and r["method"] != "full"]
        over = [r["method"] for r in rs if r.get("over_budget")]
        rs = [r for r in rs if not r.get("over_budget")]
        out.update(verdict(rs, "kl", "method", lower=True, ci_key="kl_ci", metric=f"kl_at_{b}"))
        out.update(
            verdict(rs, "needle_match", "method", lower=False, ci_key="needle_match_ci", metric=f"needle_at_{b}")
        )
        out[f"over_budget_at_{b}"] = over
    return out


def decode_result(method: str, budget: int, recs: list[dict], *, seed: int = 0) -> dict:
    """The ``result`` record of one (method, budget) from its ``sample`` records: means over
    samples, KL with a 95% bootstrap interval over samples (haystacks)."""
    from icml26.core.stats import wilson_interval

    from icml26.methods.kvcache.samples import haystack_interval, head_budget_summary

    n = len(recs)
    mean = lambda k: sum(float(r[k]) for r in recs) / n
    hits = sum(r["needle_match"] for r in recs)
    return {
        "kind": "result",
        "mode": "decode",
        "method": method,
        "method_settings": recs[0].get("method_settings"),
        "seeds": [seed],
        "decoding_budget_tokens": budget,
        "decoding_interval_tokens": recs[0]["decoding_interval_tokens"],
        "new_tokens": recs[0]["new_tokens"],
        "kl": mean("kl"),
        "kl_ci": haystack_interval([r["kl"] for r in recs], seed=seed),
        "top1_agreement": mean("top1_agreement"),
        "answer_match": mean("answer_match"),
        "needle_match": hits / n,
        "needle_match_ci": list(wilson_interval(hits, n)),
        "peak_cache_bytes": max(int(r["peak_cache_bytes"]) for r in recs),
        "decode_ms_per_token": mean("decode_ms_per_token"),
        "decode_overhead_ratio": mean("decode_overhead_ratio"),
        "full_ms_per_token": mean("full_ms_per_token") if all("full_ms_per_token" in r for r in recs) else None,
        "score_ms_per_token": mean("score_ms_per_token") if all("score_ms_per_token" in r for r in recs) else None,
        "n_samples": n,
        **head_budget_summary(recs),
    }
