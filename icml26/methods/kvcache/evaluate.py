"""``icml26 evict-kv``: needle retrieval and fidelity of KV-cache eviction policies on a real LM.

For every sample (context length L x needle depth), one prefill of the real text with the
needle inserted is captured (the prefill is identical for every policy: a layer's cache is
compressed only after that layer has attended), then every (method, compression_ratio):

1. compresses the captured cache exactly as the hooks of ``KVPress`` would (tested equal);
2. fidelity: feeds the real continuation of the text (teacher forcing, positions after L) and
   compares next-token distributions with the full cache: mean per-token KL(full || evicted),
   top-1 agreement, and the continuation's perplexity;
3. needle: asks the question after the compressed context (the question is NOT seen at
   compression time, as in kvpress' question-agnostic setting) and decodes greedily;
   correct iff the first number in the answer is the inserted code;
4. memory: bytes of keys+values kept; overhead: scoring+selection time / full prefill time.

Records: one ``sample`` record per (method, ratio, length, depth); one ``result`` record per
(method, ratio) (the contract: method, compression_ratio, needle_accuracy, kl,
top1_agreement, kept_bytes, overhead_ratio, + perplexity, needle accuracy by depth/length);
last a ``summary``.
"""

from __future__ import annotations

import functools
import math
import re
import time
from dataclasses import dataclass, fields
from typing import Iterator

from icml26.core.stats import bootstrap_mean_ci, wilson_interval  # noqa: F401  (shared; benchmarks read them from here)
from icml26.methods.kvcache.scoring import METHODS, PressOptions

DEFAULT_METHODS = ("capkv", "streaming", "snapkv", "h2o", "tova", "knorm", "random", "expected-attention")
PRESS_FIELDS = tuple(f.name for f in fields(PressOptions))  # the press options a run passes to every policy
_KEYS = (
    "blue door",
    "old lighthouse",
    "north gate",
    "red boat",
    "iron chest",
    "glass tower",
    "silver key",
    "green lamp",
)


@dataclass
class _RunOptions:
    model: str = "llama"  # built-in (llama = SmolLM2-135M) or a local HF folder / .gguf
    methods: tuple[str, ...] = DEFAULT_METHODS  # `full` (no eviction) is always added
    compression_ratios: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)
    context_tokens: tuple[int, ...] = (1024,)  # haystack lengths (tokens)
    needle_depths: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    samples: int = 1  # haystacks per (length, depth), from different offsets
    corpus: str = "python-docs"  # python-docs | kjv | gcide | fortunes | wordnet
    haystack: str | None = None  # a user's own UTF-8 text file instead of the corpus
    continuation_tokens: int = 64  # real continuation scored for KL / top-1 / perplexity
    answer_tokens: int = 8  # greedy tokens decoded for the needle answer
    question_aware: bool = True  # the question is in the compressed prompt (SnapKV/LongBench setting);
    # False: compress the context alone, ask afterwards (kvpress' default)
    threads: int = 0  # torch CPU threads (0 = torch's default)
    mode: str = (
        "prefill"  # prefill (compress the prompt) | decode (keep the cache at a budget while generating; decode.py)
    )
    decoding_budgets: tuple[int, ...] = (256, 512)  # mode decode: cache budgets (tokens per KV head)
    decoding_interval_tokens: int = 16  # mode decode: re-compress every this many generated tokens
    new_tokens: int = 512  # mode decode: tokens generated (greedy, full cache) and teacher-forced per policy
    timed_tokens: int = 32  # mode decode: greedy steps decoded with the compressed cache (answer span, ms/token)


@dataclass
class Config(PressOptions, _RunOptions):
    """An ``evict-kv`` run: the model, the policies and ratios, the samples and the evaluation
    (``_RunOptions``, listed first), and the press options every policy uses
    (``scoring.PressOptions``: sinks, window, CapKV's settings, ...)."""

    def __post_init__(self) -> None:
        # a policy, ratio or length named twice runs once (repeats would count the same samples twice)
        self.methods, self.compression_ratios, self.context_tokens = (
            tuple(dict.fromkeys(v)) for v in (self.methods, self.compression_ratios, self.context_tokens)
        )
        bad = [m for m in self.methods if m not in METHODS and m != "full" and not m.startswith("kvpress:")]
        if bad or not self.methods:
            raise ValueError(
                f"methods: unknown {bad[0]!r}; valid: full, {', '.join(METHODS)}, kvpress:<PressClass>"
                if bad
                else "methods: give at least one"
            )
        for r in self.compression_ratios:
            if not (isinstance(r, (int, float)) and 0.0 < r < 1.0):
                raise ValueError(f"compression_ratio must be in (0, 1), got {r!r}")
        if not self.compression_ratios:
            raise ValueError("compression_ratios: give at least one")
        for n in self.context_tokens:
            if n < 128:
                raise ValueError(f"context_tokens must be >= 128, got {n}")
        if not self.context_tokens:
            raise ValueError("context_tokens: give at least one")
        for d in self.needle_depths:
            if not 0.0 <= d <= 1.0:
                raise ValueError(f"needle depth must be in [0, 1], got {d}")
        if not self.needle_depths:
            raise ValueError("needle_depths: give at least one")
        if self.samples < 1 or self.continuation_tokens < 1 or self.answer_tokens < 1:
            raise ValueError("samples, continuation_tokens and answer_tokens must be >= 1")
        if self.haystack is not None:
            haystack_text(self.haystack)  # a directory, a missing, empty or non-UTF-8 file fails here
        else:
            from icml26.core.data.text import CORPORA

            if self.corpus not in CORPORA:
                raise ValueError(
                    f"corpus: unknown {self.corpus!r}; built-ins: {', '.join(CORPORA)} (or --haystack FILE)"
                )
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, got {self.threads}")
        if self.mode not in ("prefill", "decode"):
            raise ValueError(f"mode must be prefill or decode, got {self.mode!r}")
        if self.mode == "decode":
            from icml26.methods.kvcache.decode import DECODE_METHODS, check_decode_methods

            if self.methods == DEFAULT_METHODS:
                self.methods = DECODE_METHODS
            check_decode_methods(self.methods)
            self.decoding_budgets = tuple(dict.fromkeys(self.decoding_budgets))
            if not self.decoding_budgets:
                raise ValueError("decoding_budgets: give at least one")
            for b in self.decoding_budgets:
                if not (isinstance(b, int) and b >= max(8, self.sink_tokens + self.window_tokens)):
                    raise ValueError(
                        f"decoding budget must be an integer >= max(8, sink_tokens + window_tokens) = "
                        f"{max(8, self.sink_tokens + self.window_tokens)}, got {b!r}"
                    )
            if self.decoding_interval_tokens < 1:
                raise ValueError(f"decoding_interval_tokens must be >= 1, got {self.decoding_interval_tokens}")
            if self.new_tokens < 1 or not 1 <= self.timed_tokens <= self.new_tokens:
                raise ValueError(
                    f"new_tokens must be >= 1 and timed_tokens in [1, new_tokens], got {self.new_tokens}, {self.timed_tokens}"
                )
            if self.head_budget == "adaptive":
                raise ValueError(
                    "head_budget=adaptive applies to mode prefill (decoding-time compression keeps uniform budgets)"
                )
        from icml26.methods.kvcache.press import KVPress

        KVPress(**self.press_kwargs())  # validates the press fields

    def press_kwargs(self) -> dict:
        return {k: getattr(self, k) for k in PRESS_FIELDS}


# ----------------------------------------------------------------------------- data


def haystack_text(path: str) -> str:
    """A ``--haystack`` file's text (InputError for a folder, a missing, empty or non-UTF-8
    file), read once per process while the file is unchanged: the config check, the preflight
    and the samples share the read."""
    import os

    from icml26.core.data.text import read_text_file

    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return read_text_file(path)  # raises the InputError naming what is wrong
    return _read_cached(path, stamp)


@functools.lru_cache(maxsize=4)
def _read_cached(path: str, stamp: int) -> str:
    from icml26.core.data.text import read_text_file

    return read_text_file(path)


def _source_text(cfg: Config) -> str:
    from icml26.core.data.text import load_corpus

    if cfg.haystack:
        return haystack_text(cfg.haystack)
    return "\n\n".join(load_corpus(cfg.corpus))


def make_samples(cfg: Config, tok, seed: int) -> list[dict]:
    """Needle samples: context ids (haystack with the needle sentence), question ids, answer,
    and the real continuation ids that follow the haystack in the source text."""
    import random

    text = _source_text(cfg)
    rng = random.Random(seed)
    out = []
    for length in cfg.context_tokens:
        need = length + cfg.continuation_tokens + 16
        for depth in cfg.needle_depths:
            for s in range(cfg.samples):
                key = _KEYS[rng.randrange(len(_KEYS))]
                code = str(rng.randrange(10000, 100000))
                needle = f" The secret code of the {key} is {code}. "
                question = (
                    f"\n\nQuestion: What is the secret code of the {key}?\nAnswer: The secret code of the {key} is"
                )
                needle_ids = tok(needle, add_special_tokens=False).input_ids
                ids = _token_window(text, tok, need, rng)
                n_hay = length - len(needle_ids)
                hay = ids[:n_hay]
                cont = ids[n_hay : n_hay + cfg.continuation_tokens]
                cut = int(round(depth * n_hay))
                ctx = hay[:cut] + needle_ids + hay[cut:]
                out.append(
                    {
                        "length": length,
                        "depth": depth,
                        "sample": s,
                        "context": ctx,
                        "continuation": cont,
                        "plain": ids[:length],
                        "plain_continuation": ids[length : length + cfg.continuation_tokens],
                        "question": tok(question, add_special_tokens=False).input_ids,
                        "answer": code,
                    }
                )
    return out


def _token_window(text: str, tok, need: int, rng) -> list[int]:
    """``need`` consecutive tokens of ``text`` from a random paragraph start (tokenizes a slice only)."""
    from icml26.core.errors import InputError

    span = need * 6
    for _ in range(8):
        if len(text) <= span:
            start = 0
        else:
            start = rng.randrange(0, len(text) - span)
            nl = text.find("\n\n", start, start + span // 4)
            start = nl + 2 if nl >= 0 else start
        ids = tok(text[start : start + span], add_special_tokens=False).input_ids
        if len(ids) >= need:
            return ids[:need]
        span *= 2
    _too_short(need, len(tok(text, add_special_tokens=False).input_ids) if len(text) <= span else None)


# ----------------------------------------------------------------------------- evaluation helpers


def _truncate(cache, n: int) -> None:
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, :n]
        layer.values = layer.values[:, :, :n]


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
    n0 = cache.layers[0].keys.shape[2]
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
    _truncate(cache, n0)
    return tok.decode(out)


def _number_closed(text: str) -> bool:
    """True once ``text`` has a digit run followed by a non-digit (its first number is final)."""
    return re.search(r"\d\D", text) is not None


def needle_correct(answer_text: str, code: str) -> bool:
    m = re.search(r"\d+", answer_text)
    return bool(m) and m.group(0) == code


def _fidelity(model, cache, cont, pos0: int, ref_logp):
    """Mean KL(full || evicted), top-1 agreement, continuation NLL, and the log-probs."""
    import torch

    n0 = cache.layers[0].keys.shape[2]
    logits = _forward(model, cont, cache, pos0)
    _truncate(cache, n0)
    logp = torch.log_softmax(logits, -1)  # row i predicts cont[i+1]
    nll = -logp[:-1].gather(1, torch.tensor(cont[1:], device=logp.device)[:, None]).mean()
    if ref_logp is None:
        return 0.0, 1.0, float(nll), logp
    kl = (ref_logp.exp() * (ref_logp - logp)).sum(-1).mean()
    top1 = (ref_logp.argmax(-1) == logp.argmax(-1)).float().mean()
    return float(kl), float(top1), float(nll), logp


# ----------------------------------------------------------------------------- run


def check_positions(cfg: Config, limit: int | None) -> None:
    """InputError when the longest sample (context + question + answer + continuation) does not
    fit in the model's ``max_position_embeddings`` (``limit``; None = unknown, no check)."""
    extra = cfg.new_tokens if cfg.mode == "decode" else cfg.continuation_tokens + cfg.answer_tokens
    longest = max(cfg.context_tokens) + extra + 64  # + question and needle slack
    if limit and longest > limit:
        from icml26.core.errors import InputError

        what = "new_tokens" if cfg.mode == "decode" else "continuation and answer"
        room = limit - longest + max(cfg.context_tokens)
        fix = (
            f"use context_tokens <= {room}"
            if room >= 1
            else f"{what} ({extra}) alone leave no room for a context: use {'new_tokens' if cfg.mode == 'decode' else 'continuation_tokens + answer_tokens'} "
            f"<= {limit - 64 - 1}"
        )
        raise InputError(
            f"context_tokens {max(cfg.context_tokens)} + {what} need about {longest} positions, "
            f"more than the model's max_position_embeddings {limit}: {fix}"
        )


def preflight(cfg: Config) -> None:
    """What can be checked before a run writes anything (the command calls it before the config
    record): the model resolves (a missing or corrupt one raises InputError), the contexts fit
    its positions, every ``kvpress:<Press>`` names a press of an installed kvpress, the built-in
    corpus is installed, or a ``--haystack`` file has enough tokens for the longest context."""
    import json

    from icml26.core.data.lm import model_path

    folder = model_path(cfg.model)
    try:
        mcfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        mcfg = {}
    check_positions(cfg, mcfg.get("max_position_embeddings") if isinstance(mcfg, dict) else None)
    for m in cfg.methods:
        if m.startswith("kvpress:"):
            from icml26.methods.kvcache.kvpress_adapter import press_class

            for name in m.split(":", 1)[1].split("/"):  # kvpress:DecodingPress/KnormPress names both presses
                press_class(name)
    if cfg.haystack is None:  # the built-in corpus: its package is installed (else the install command)
        from icml26.core.data.text import require_corpus

        require_corpus(cfg.corpus)
    else:
        from transformers import AutoTokenizer

        text = haystack_text(cfg.haystack)
        need = max(cfg.context_tokens) + cfg.continuation_tokens + 16
        if len(text) < 10 * need:  # a text this short may lack the tokens: count them (a longer one has them)
            n = len(AutoTokenizer.from_pretrained(folder).encode(text, add_special_tokens=False))
            if n < need:
                _too_short(need, n)


def _too_short(need: int, have: int | None = None) -> None:
    from icml26.core.errors import InputError

    has = f"it has {have}" if have is not None else "the text has fewer"
    raise InputError(
        f"haystack text is too short: need {need} tokens (longest context + continuation + needle), {has}; "
        f"use a longer text or smaller --context-tokens"
    )


def run(cfg: Config, *, seed: int = 0, device: str = "cpu") -> Iterator[dict]:
    """Yield ``sample`` records, one ``result`` per (method, ratio), then a ``summary``
    (mode decode: per (method, decoding budget), ``decode.run_decode``)."""
    if cfg.mode == "decode":
        from icml26.methods.kvcache.decode import run_decode

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
    samples = make_samples(cfg, tok, seed)
    methods = ["full"] + [m for m in cfg.methods if m != "full"]
    combos = [("full", 0.0)] + [(m, r) for m in methods[1:] for r in cfg.compression_ratios]
    acc: dict = {c: [] for c in combos}

    def prefill(ids):
        t0 = time.perf_counter()
        with capture_layers(model) as cap:
            out = model(torch.tensor([ids], device=model.device), use_cache=True, logits_to_keep=1)
        return cap, out.logits[0, -1].float(), time.perf_counter() - t0

    def make_press(method, ratio):
        if method.startswith("kvpress:"):
            from icml26.methods.kvcache.kvpress_adapter import KvpressRunner, kvpress_press

            return KvpressRunner(kvpress_press(method.split(":", 1)[1], ratio), model)
        return KVPress(
            method="streaming" if method == "full" else method, compression_ratio=ratio, seed=seed, **cfg.press_kwargs()
        )

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
                if method not in warm:  # first call pays lazy initialisation: keep it out of the timing
                    make_press(method, ratio).compress(cap_n[0], max(1, len(ctx) // 2))
                    warm.add(method)
                press = make_press(method, ratio)
                cache = compress_captured(press, cap_n, model.config)
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
                    cache = compress_captured(press, cap_f, model.config)
                else:
                    answer = _greedy_answer(model, tok, cache, q, len(ctx), cfg.answer_tokens)
                kl, top1, nll, logp = _fidelity(model, cache, cont, L_f, ref_logp)
                if method == "full":
                    ref_logp = logp
                ok = needle_correct(answer, smp["answer"])
                rec = {
                    "kind": "sample",
                    "method": method,
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
        "seconds": time.perf_counter() - t_start,
    }
    for ratio in cfg.compression_ratios:
        rs = [r for r in results if r["compression_ratio"] == ratio]
        if rs:
            summary[f"best_kl_at_{ratio}"] = min(rs, key=lambda r: r["kl"])["method"]
            summary[f"best_needle_at_{ratio}"] = max(rs, key=lambda r: (r["needle_accuracy"], -r["kl"]))["method"]
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
        "compression_ratio": ratio,
        "needle_accuracy": hits / len(recs),
        "needle_hits": hits,
        "needle_accuracy_ci": list(wilson_interval(hits, len(recs))) if recs else [float("nan"), float("nan")],
        "kl": _mean(r["kl"] for r in recs),
        "kl_ci": list(bootstrap_mean_ci([r["kl"] for r in recs], seed=seed)),
        "top1_agreement": _mean(r["top1_agreement"] for r in recs),
        "perplexity": _mean(r["perplexity"] for r in recs),
        "kept_bytes": _mean(r["kept_bytes"] for r in recs),
        "held_bytes": _mean(r["held_bytes"] for r in recs),
        "overhead_ratio": _mean(r["overhead_ratio"] for r in recs),
        "n_samples": len(recs),
        "needle_accuracy_by_depth": {k: sum(v) / len(v) for k, v in by_depth.items()},
        "needle_accuracy_by_length": {k: sum(v) / len(v) for k, v in by_len.items()},
    }


def head_budget_summary(recs: list[dict]) -> dict:
    """Summary of the per-head budgets (``kept_per_head``, layers x KV heads) of sample records:
    ``kept_per_head_min`` / ``_max`` (over every layer, head and sample) and ``kept_per_head_gini``
    (the Gini coefficient of a sample's layers x heads counts, averaged over the samples; 0 for
    uniform budgets). Empty when the records carry none (e.g. saved by an older version)."""
    from icml26.methods.kvcache.press import gini

    mats = [r["kept_per_head"] for r in recs if r.get("kept_per_head")]
    if not mats:
        return {}
    flat = [[c for row in m for c in row] for m in mats]
    return {
        "kept_per_head_min": min(min(f) for f in flat),
        "kept_per_head_max": max(max(f) for f in flat),
        "kept_per_head_gini": sum(gini(f) for f in flat) / len(flat),
    }


def mean_kept_per_head(recs: list[dict]) -> list[list[float]]:
    """The (layers x KV heads) mean over sample records of their ``kept_per_head``."""
    mats = [r["kept_per_head"] for r in recs if r.get("kept_per_head")]
    if not mats:
        return []
    return [[sum(m[i][j] for m in mats) / len(mats) for j in range(len(mats[0][0]))] for i in range(len(mats[0]))]


def write_head_budgets(records: list[dict], out_dir) -> None:
    """``kept_per_head.json`` (per method and ratio: the mean layers x KV heads counts over the
    samples, and each sample's) and ``kept_per_head.png`` (one heat map per method and ratio)
    under ``out_dir``, from a run's records (the ``plot`` hook of ``icml26 evict-kv --out``)."""
    import json
    from pathlib import Path

    from icml26.core.output import atomic_path, atomic_write_text

    groups: dict = {}
    for r in records:
        if r.get("kind") == "sample" and r.get("kept_per_head"):
            groups.setdefault((r["method"], r.get("compression_ratio", r.get("decoding_budget_tokens"))), []).append(r)
    if not groups:
        return
    out = Path(out_dir)
    doc = {
        "layout": "kept_per_head[layer][kv_head]: cache entries kept (batch element 0)",
        "runs": [
            {
                "method": m,
                "compression_ratio" if isinstance(k, float) else "decoding_budget_tokens": k,
                **head_budget_summary(rs),
                "mean": mean_kept_per_head(rs),
                "samples": [
                    {
                        "context_tokens": r.get("context_tokens"),
                        "needle_depth": r.get("needle_depth"),
                        "sample": r.get("sample"),
                        "kept_per_head": r["kept_per_head"],
                    }
                    for r in rs
                ],
            }
            for (m, k), rs in groups.items()
        ],
    }
    atomic_write_text(out / "kept_per_head.json", json.dumps(doc))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(groups)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.6 * rows), squeeze=False)
    for ax, ((m, k), rs) in zip(axes.flat, groups.items()):
        mat = mean_kept_per_head(rs)
        im = ax.imshow(mat, aspect="auto", cmap="viridis", interpolation="nearest")
        hs = head_budget_summary(rs)
        ax.set_title(f"{m} @ {k}\ngini {hs['kept_per_head_gini']:.3f}", fontsize=8)
        ax.set_xlabel("KV head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
        ax.tick_params(labelsize=6)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("entries kept per (layer, KV head), mean over samples", fontsize=9)
    fig.tight_layout()
    with atomic_path(out / "kept_per_head.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def config_fields() -> list[str]:
    return [f.name for f in fields(Config)]
