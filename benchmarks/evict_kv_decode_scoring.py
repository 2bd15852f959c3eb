"""Benchmark: the cost of one decoding-time re-compression (all 30 layers of SmolLM2-135M), per policy.

What ``icml26 evict-kv --mode decode`` pays every ``decoding_interval_tokens`` steps: each layer's
cache (budget + interval entries of a real 1049-token python-docs prompt's cache) scored with the
last ``window_tokens`` queries and cut back to the budget. Timed for CapKV as it is, CapKV in its
previous formulation (the window Gaussian's quadratic terms through its (D x D) covariance and the
two channels' leverages in two separate calls; the same selections, tests/methods/test_kv_decode_scoring.py),
SnapKV and StreamingLLM, and a full-cache decoding step (1049 entries) as the scale: the
repetitions are interleaved (A, B, C, D, step, A, B, ...) so load drift hits all alike; best and
median of ``--reps``. ``per_token_share``: re-compression ms / interval / full-cache step ms, the
share of a decoding step the scoring adds per token.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/evict_kv_decode_scoring.py --reps 7
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results" / "evict_kv_decode_scoring.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--interval", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=1049)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default=str(RESULTS), help="where the rows are written")
    args = ap.parse_args()

    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.data.text import load_corpus
    from icml26.core.lm_cache import forward, new_cache
    from icml26.core.output import atomic_write_text
    from icml26.methods.kvcache import KVPress, capture_layers
    from icml26.methods.kvcache import scoring as S

    model, tok = load_causal_lm("llama")
    text = "\n\n".join(load_corpus("python-docs")[200:300])
    ids = tok(text[: args.prompt_tokens * 8], add_special_tokens=False).input_ids[: args.prompt_tokens]
    n = len(ids)
    with torch.no_grad(), capture_layers(model) as cap:
        cache = new_cache(model)
        forward(model, torch.tensor([ids]), cache, logits_to_keep=1)
    from icml26.methods.kvcache import capkv as C  # where the window count is read

    current = (C._window_count, S.score_capkv_channels)
    previous = (lambda x, p: 10**9, lambda x, p: (S.score_capkv(x, p), S.score_capkv_question(x, p)))

    def recompress(method, layers, budget, path=current):
        C._window_count, S.score_capkv_channels = path
        try:
            press = KVPress(
                method=method,
                compression_ratio=0.0,
                decoding_budget_tokens=budget,
                decoding_interval_tokens=args.interval,
            )
            t0 = time.perf_counter()
            for x in layers:
                press.compress(x, budget)
            return 1000 * (time.perf_counter() - t0)
        finally:
            C._window_count, S.score_capkv_channels = current

    def full_step():
        t0 = time.perf_counter()
        with torch.no_grad():
            forward(model, torch.tensor([[ids[-1]]]), cache, position_ids=torch.tensor([[n]]))
        dt = 1000 * (time.perf_counter() - t0)
        for layer in cache.layers:  # back to the prompt's n entries
            layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]
        return dt

    runs = {
        "capkv": lambda L, b: recompress("capkv-qa", L, b),  # the two-channel method (named capkv when measured)
        "capkv_previous": lambda L, b: recompress("capkv-qa", L, b, previous),
        "snapkv": lambda L, b: recompress("snapkv", L, b),
        "streaming": lambda L, b: recompress("streaming", L, b),
    }
    rows = []
    for budget in args.budgets:
        t = budget + args.interval
        layers = [
            S.LayerInputs(
                keys=x.keys[:, :, -t:],
                values=x.values[:, :, -t:],
                module=x.module,
                queries=S.window_queries(x, 64).detach(),
                layer_idx=x.layer_idx,
            )
            for x in cap
        ]
        for f in runs.values():  # warm-up
            f(layers, budget)
        times = {k: [] for k in (*runs, "full_step")}
        for _ in range(args.reps):
            for k, f in runs.items():
                times[k].append(f(layers, budget))
            times["full_step"].append(full_step())
        best = {k: min(v) for k, v in times.items()}
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        row = {
            "budget": budget,
            "entries_scored": t,
            "reps": args.reps,
            **{f"{k}_best_ms": v for k, v in best.items()},
            **{f"{k}_median_ms": v for k, v in med.items()},
            **{f"{k}_per_token_share": best[k] / args.interval / best["full_step"] for k in runs},
            "capkv_vs_previous": best["capkv"] / best["capkv_previous"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    doc = {
        "prompt_tokens": n,
        "interval": args.interval,
        "threads": torch.get_num_threads(),
        "load_average_1min": load,
        "rows": rows,
    }
    atomic_write_text(Path(args.json), json.dumps(doc, indent=1))
    print(
        "\n| budget | CapKV ms (30 layers) | previous CapKV ms | SnapKV ms | StreamingLLM ms | full-cache step ms | "
        "CapKV / previous | per-token share: CapKV / previous / SnapKV / StreamingLLM "
        "|\n|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['budget']} | {r['capkv_best_ms']:.1f} | {r['capkv_previous_best_ms']:.1f} | "
            f"{r['snapkv_best_ms']:.1f} | "
            f"{r['streaming_best_ms']:.1f} | {r['full_step_best_ms']:.1f} | {r['capkv_vs_previous']:.3f} | "
            f"{r['capkv_per_token_share']:.3f} / {r['capkv_previous_per_token_share']:.3f} / "
            f"{r['snapkv_per_token_share']:.3f} / "
            f"{r['streaming_per_token_share']:.3f} |"
        )
    print(f"\n(best of {args.reps} interleaved repetitions, 1-minute load average {load})")


if __name__ == "__main__":
    main()
