"""CPU-time parts of an ``icml26 quantize`` run, behind its run-time estimate (estimate.COST).

Runs the command's own pipeline (``fptquant.run``) on one configuration with one thread and
times every part with ``time.process_time`` (CPU time, so the figures hold on a loaded
machine): the FP evaluation, greedy continuations, each method's ``prepare`` (rotations, merges,
the local stage), the per-setting copies, GPTQ, the end-to-end stage, static calibration and the
quantized evaluations. Every part is also written in units of the FP evaluation's CPU time per
token (the unit of estimate.COST), beside the run's total CPU time and the estimate the run
printed (``ratio`` = measured / estimated CPU time). Resumable: a configuration whose name is
already in --out is skipped.

    OMP_NUM_THREADS=1 python benchmarks/quantize_cost.py --name tiny -r icml26/recipes/quantize/tiny.yaml \
        --out benchmarks/results/quantize_cost.jsonl
    OMP_NUM_THREADS=1 python benchmarks/quantize_cost.py --name parts512 --set local_steps=20 --set e2e_steps=2 \
        --method all --setting W4A16,W4A8 --set eval_tokens=1024 --set calib_tokens=1024 --out ...
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", default="benchmarks/results/quantize_cost.jsonl")
    ap.add_argument("-r", "--recipe", default=None)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--method", default=None)
    ap.add_argument("--setting", default=None)
    a = ap.parse_args()
    out = Path(a.out)
    if out.exists() and any(json.loads(x).get("name") == a.name for x in out.read_text().splitlines() if x.strip()):
        print(f"{a.name}: already in {out}")
        return
    import torch

    torch.set_num_threads(1)
    from icml26.core.recipe import load_recipe, resolve
    from icml26.methods.quantization import estimate as S
    from icml26.methods.quantization import evaluate as E
    from icml26.methods.quantization import fptquant as m
    from icml26.methods.quantization import gptq as GQ
    from icml26.methods.quantization import qmodel as QM
    from icml26.methods.quantization import train as TR
    from icml26.methods.quantization import transforms as T

    typed = {}
    if a.method:
        typed["methods"] = tuple(a.method.split(","))
    if a.setting:
        typed["settings"] = tuple(a.setting.split(","))
    cfg = resolve(m.Config, "quantize", a.recipe, a.set, **typed)
    seed = (load_recipe(a.recipe, "quantize")[1] if a.recipe else None) or 0
    ct = time.process_time
    parts: dict = collections.defaultdict(float)
    counts: dict = collections.Counter()
    state = {"method": "fp"}

    def wrap(mod, name, key):
        fn = getattr(mod, name)

        def inner(*args, **kw):
            if state.get("inside"):  # a call made inside a timed part (merge_into in prepare): counted there
                return fn(*args, **kw)
            if name == "prepare":
                state["method"] = args[0]
            k = key(args, kw) if callable(key) else key
            t = ct()
            state["inside"] = True
            try:
                return fn(*args, **kw)
            finally:
                state["inside"] = False
                parts[f"{k}:{state['method']}"] += ct() - t
                counts[f"{k}:{state['method']}"] += 1

        setattr(mod, name, inner)

    wrap(m, "prepare", "prepare")
    wrap(E, "perplexity", lambda args, kw: "drift" if len(args[1]) == 1 and cfg.eval_tokens > cfg.seq_len else "eval")
    wrap(E, "greedy", "greedy")
    wrap(TR, "train_e2e", "e2e")
    wrap(GQ, "quantize_model_gptq", "gptq")
    wrap(QM, "calibrate_static", "calibrate_static")
    wrap(QM, "quantize_model", "wrap")
    wrap(QM, "quantize_embeddings", "wrap")
    wrap(T, "merge_into", "merge_after_e2e")

    class _Copy:
        @staticmethod
        def deepcopy(x):
            t = ct()
            try:
                return __import__("copy").deepcopy(x)
            finally:
                parts[f"copy:{state['method']}"] += ct() - t

    m.copy = _Copy
    t0 = ct()
    w0 = time.time()
    est = summ = None
    for r in m.run(cfg, seed=seed):
        if r.get("stage") == "estimate":
            est = r
        if r.get("kind") == "summary":
            summ = r
        if r.get("kind") == "result":
            print(r["method"], r["setting"], round(r["perplexity"], 3), round(ct() - t0, 1), flush=True)
    total = ct() - t0
    fp_eval = parts["eval:fp"] / counts["eval:fp"]
    per_tok = fp_eval / cfg.eval_tokens
    row = {
        "name": a.name,
        "recipe": a.recipe,
        "sets": a.set,
        "methods": list(cfg.methods),
        "settings": cfg.active_settings(),
        "seq_len": cfg.seq_len,
        "eval_tokens": cfg.eval_tokens,
        "calib_tokens": cfg.calib_tokens,
        "threads": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "cpu_s": round(total, 2),
        "wall_s": round(time.time() - w0, 2),
        "fp_cpu_per_token_s": per_tok,
        "parts_cpu_s": {k: round(v, 3) for k, v in sorted(parts.items())},
        "parts_units": {k: round(v / per_tok, 1) for k, v in sorted(parts.items())},
        "counts": dict(counts),
        "estimated_cpu_s": est.get("estimated_cpu_s") if est else None,
        "estimated_s": est.get("estimated_s") if est else None,
        "ratio_measured_over_estimated_cpu": (
            round(total / est["estimated_cpu_s"], 3) if est and est.get("estimated_cpu_s") else None
        ),
        "summary_cpu_s": summ.get("cpu_s") if summ else None,
        "cost_model": S.COST,
        "loadavg": os.getloadavg(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
