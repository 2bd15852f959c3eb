"""Fixed-confidence BAI engine: stopping times and error rates on Garivier & Kaufmann's (2016)
Bernoulli instances and a heteroscedastic Gaussian instance, plus kernel speed.

    .venv/bin/python benchmarks/bai_fc.py [--seeds 200] [--quick]

Prints markdown tables (the ones in docs/bai-fc-engine.md): for every instance, delta and
algorithm, the mean and 90% quantile of the stopping time, the empirical error rate with its
Wilson 95% interval, the fraction of runs that stopped before max_pulls, and wall seconds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from icml26.methods.exploration.bandit_env import make_env
from icml26.ops import bai_fc as F
from icml26.core.stats import wilson_interval as wilson

INSTANCES = {
    "GK mu1 (Bernoulli)": [{"dist": "bernoulli", "p": p} for p in [0.5, 0.45, 0.43, 0.4]],
    "GK mu2 (Bernoulli)": [{"dist": "bernoulli", "p": p} for p in [0.3, 0.21, 0.2, 0.19, 0.18]],
    "hetero Gaussian std=mean": [{"dist": "gaussian", "mean": m, "std": m} for m in [0.5, 0.45, 0.43, 0.4]],
}


def table(settings, seeds: np.ndarray, max_pulls: int) -> None:
    print(
        "| instance | delta | threshold | algorithm | stopping time mean | q90 | error rate [95% CI] | stopped | wall "
        "s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for inst, delta, thr, algos in settings:
        env = make_env(inst, INSTANCES[inst])
        best = int(np.argmax(env.means))
        for algo in algos:
            t0 = time.perf_counter()
            r = F.run_fixed_confidence(env, algo, seeds, {"threshold": thr}, delta=delta, max_pulls=max_pulls)
            wall = time.perf_counter() - t0
            p = r["pulls"]
            k = int(np.sum(r["recommendation"] != best))
            lo, hi = wilson(k, len(seeds))
            print(
                f"| {inst} | {delta} | {thr} | {algo} | {p.mean():.0f} | {np.quantile(p, 0.9):.0f} | "
                f"{k / len(seeds):.3f} [{lo:.3f}, {hi:.3f}] | {r['stopped'].mean():.2f} | {wall:.1f} |",
                flush=True,
            )


def speed() -> None:
    env = make_env("mu1", INSTANCES["GK mu1 (Bernoulli)"])
    print("\n| algorithm | C++ us/pull | NumPy twin us/pull | ratio |")
    print("|---|---|---|---|")
    for algo in F.ALGOS:
        out = []
        for be, S, B in (("ext", 64, 4000), ("ref", 64, 300 if algo in ("track-and-stop", "top-two-ts") else 2000)):
            t0 = time.perf_counter()
            F.run_fixed_confidence(env, algo, np.arange(S), budget=B, backend=be)
            out.append((time.perf_counter() - t0) / (S * B) * 1e6)
        print(f"| {algo} | {out[0]:.2f} | {out[1]:.1f} | {out[1] / out[0]:.0f}x |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--max-pulls", type=int, default=200_000)
    ap.add_argument("--quick", action="store_true", help="mu1 at delta 0.1 only")
    args = ap.parse_args()
    print(f"backend: {F.backend()}, seeds: {args.seeds}, max_pulls: {args.max_pulls}\n")
    A = F.ALGOS
    settings = [("GK mu1 (Bernoulli)", 0.1, "heuristic", A)]
    if not args.quick:
        settings += [
            ("GK mu1 (Bernoulli)", 0.01, "heuristic", A),
            ("GK mu2 (Bernoulli)", 0.1, "heuristic", A),
            ("GK mu2 (Bernoulli)", 0.01, "heuristic", A),
            ("GK mu1 (Bernoulli)", 0.1, "theory", ("uniform", "lucb", "kl-lucb", "track-and-stop")),
            ("hetero Gaussian std=mean", 0.1, "heuristic", A),
            # the default for gaussian arms; top-two TS left out: with this threshold it keeps
            # sampling long after its posterior has concentrated, and each pull then needs up to
            # tts_max_resample redraws (did not finish 40 runs in 7 minutes)
            ("hetero Gaussian std=mean", 0.1, "theory", ("varde", "uniform", "lucb", "kl-lucb", "track-and-stop")),
        ]
    table(settings, np.arange(args.seeds), args.max_pulls)
    speed()


if __name__ == "__main__":
    main()
