"""Benchmark of the fixed-budget best-arm-identification engine (icml26.ops.bai).

Prints, in one run:
  (a) pulls per second of VarDE in the C++ kernel (1 thread and all threads), in the
      NumPy ``_ref`` twin (vectorised across seeds) and in a plain per-pull Python loop
      (same rule, same sampler), with the ratios (target: kernel >= 20x the plain loop);
  (b) error probability P(recommendation != best arm) with Wilson 95% intervals of every
      fixed-budget algorithm (and of the fixed-confidence engine's sampling rules run in
      budget mode, when ``icml26.ops.bai_fc`` is importable) at 3 budgets on 3
      high-variance instances.

    .venv/bin/python benchmarks/bai.py            # full: 20,000 runs per cell (the paper's n)
    .venv/bin/python benchmarks/bai.py --quick    # 2,000 runs per cell, smaller speed test
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from icml26.methods.exploration.bandit_env import make_env  # noqa: E402
from icml26.ops import bai  # noqa: E402
from icml26.core.stats import wilson_interval as wilson  # noqa: E402


# ------------------------------------------------------------------ instances
def hetero_gaussian(name: str, means: list[float], shuffle_seed: int = 0):
    """Gaussian arms with std = mean, the std list shuffled across arms (VarDE protocol)."""
    stds = np.array(means, dtype=float)
    np.random.default_rng(shuffle_seed).shuffle(stds)
    return make_env(name, [{"dist": "gaussian", "mean": float(m), "std": float(s)} for m, s in zip(means, stds)])


def heavy_student_t(name: str, means: list[float], shuffle_seed: int = 0):
    """Student-t arms (df = 3: finite variance, infinite kurtosis), scale = mean, shuffled."""
    sc = np.array(means, dtype=float)
    np.random.default_rng(shuffle_seed).shuffle(sc)
    return make_env(name, [{"dist": "student_t", "mean": float(m), "scale": float(s), "df": 3} for m, s in zip(means, sc)])


def instances():
    return [
        # varde.md: 10 arms in 3 groups, T = 150 in the paper
        (hetero_gaussian("groups10 (std=mean)", [0.3] + [0.22] * 3 + [0.2] * 3 + [0.15] * 3), (75, 150, 300)),
        # varde.md: BAI.3 geometric, 0.4 and 0.4 - 0.9^i (i = 10..22), T = 200 in the paper
        (hetero_gaussian("bai3-geometric (std=mean)", [0.4] + [0.4 - 0.9**i for i in range(10, 23)]), (100, 200, 400)),
        # heavy-tailed: Student-t df = 3
        (heavy_student_t("student-t3 (scale=mean)", [0.5, 0.4, 0.35, 0.3, 0.25, 0.2]), (150, 300, 600)),
    ]


# ------------------------------------------------------------------ helpers
def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def speed(quick: bool) -> None:
    import torch

    t = hetero_gaussian("bai3", [0.4] + [0.4 - 0.9**i for i in range(10, 23)])
    T = 200
    S_ext = 4000 if quick else 20000
    S_ref = 1000 if quick else 4000
    n_plain = 4 if quick else 20
    bai.run_fixed_budget(t, "varde", T, np.arange(8), backend="ext")  # load / warm up
    threads = torch.get_num_threads()
    rows = []
    for nt in sorted({1, threads}):
        set_threads(nt)
        t0 = time.perf_counter()
        bai.run_fixed_budget(t, "varde", T, np.arange(S_ext), backend="ext")
        dt = time.perf_counter() - t0
        rows.append((f"C++ kernel ({nt} thread{'s' if nt > 1 else ''})", S_ext, S_ext * T / dt))
    set_threads(threads)
    t0 = time.perf_counter()
    bai.run_fixed_budget(t, "varde", T, np.arange(S_ref), backend="ref")
    dt = time.perf_counter() - t0
    rows.append(("NumPy _ref (vectorised over runs)", S_ref, S_ref * T / dt))
    t0 = time.perf_counter()
    for s in range(n_plain):
        bai.plain_python_varde(t, T, s)
    dt = time.perf_counter() - t0
    rows.append(("plain per-pull Python loop", n_plain, n_plain * T / dt))
    plain = rows[-1][2]
    print(f"\n(a) VarDE pulls per second on {t.name} (K={t.K}, T={T}); cpu cores visible: {os.cpu_count()}, torch threads: {threads}")
    print(f"{'implementation':40s} {'runs':>7s} {'pulls/s':>12s} {'x plain loop':>13s}")
    for name, n, r in rows:
        print(f"{name:40s} {n:7d} {r:12.3g} {r / plain:13.1f}")


def error_table(quick: bool, seeds_n: int | None, fc_seeds_n: int | None) -> None:
    S = seeds_n or (2000 if quick else 20000)
    seeds = np.arange(S)
    S_fc = min(S, fc_seeds_n or 5000)
    try:
        from icml26.ops import bai_fc  # the fixed-confidence engine, run in budget mode
    except ImportError:
        bai_fc = None
    algos = [("varde", {}), ("uniform", {}), ("successive-rejects", {}), ("sequential-halving", {})]
    algos += [("ucb-e", {"ucbe_a": a}) for a in (2.0, 4.0, 8.0)] + [("ugape", {"ugape_a": a}) for a in (2.0, 4.0, 8.0)]
    algos += [("continuous-rejects", {"cr_variant": "A"}), ("continuous-rejects", {"cr_variant": "C"})]
    label = {
        ("ucb-e", 2.0): "ucb-e (a=2)", ("ucb-e", 4.0): "ucb-e (a=4)", ("ucb-e", 8.0): "ucb-e (a=8)",
        ("ugape", 2.0): "ugape (a=2)", ("ugape", 4.0): "ugape (a=4)", ("ugape", 8.0): "ugape (a=8)",
        ("continuous-rejects", "A"): "cr-a", ("continuous-rejects", "C"): "cr-c",
    }
    fc_algos = []
    if bai_fc is None:
        print("\nnote: icml26.ops.bai_fc not found: fixed-confidence sampling rules skipped")
    else:
        fc_algos = [a for a in bai_fc.ALGOS if a not in bai.ALGOS]
    print(f"\n(b) error probability in % [Wilson 95% interval], {S} runs per cell; * = lowest, "
          "= = VarDE's interval contains the lowest error")
    for t, budgets in instances():
        best = int(np.argmax(t.means))
        res: dict[str, list] = {}
        tt = time.perf_counter()
        for algo, p in algos:
            name = label.get((algo, next(iter(p.values()), None)), algo)
            res[name] = []
            for T in budgets:
                rec = bai.run_fixed_budget(t, algo, T, seeds, p)["recommendation"]
                k = int((rec != best).sum())
                res[name].append((k, wilson(k, S)))
        for algo in fc_algos:
            name = f"{algo} (fc rule{'' if S_fc == S else f', {S_fc} runs'})"
            res[name] = []
            for T in budgets:
                try:
                    out = bai_fc.run_fixed_confidence(t, algo, seeds[:S_fc], None, budget=T)
                    k = int((np.asarray(out["recommendation"]) != best).sum())
                    res[name].append((k * S / S_fc, wilson(k, S_fc)))
                except Exception as e:  # noqa: BLE001 - report, keep benchmarking
                    res[name].append((None, f"{type(e).__name__}: {e}"))
        print(f"\n{t.name}: K={t.K}, best arm {best} (mean {t.means[best]:.3g}), H1={t.complexity_h1():.0f}  [{time.perf_counter() - tt:.0f} s]")
        head = f"{'algorithm':38s}" + "".join(f"{'T=' + str(T):>24s}" for T in budgets)
        print(head)
        lows = []
        for j in range(len(budgets)):
            ks = [v[j][0] for v in res.values() if v[j][0] is not None]
            lows.append(min(ks))
        for name, vals in res.items():
            cells = []
            for j, (k, ci) in enumerate(vals):
                if k is None:
                    cells.append(f"{'error':>24s}")
                    continue
                mark = "*" if k == lows[j] else " "
                cells.append(f"{100 * k / S:6.2f} [{100 * ci[0]:5.2f},{100 * ci[1]:5.2f}]{mark:>1s}".rjust(24))
            print(f"{name:38s}" + "".join(cells))
        verdict = []
        for j, T in enumerate(budgets):
            kv, (lo, hi) = res["varde"][j]
            ok = kv == lows[j] or lo <= lows[j] / S
            verdict.append(f"T={T}: {'=' if ok else 'NOT within'}")
        print("VarDE lowest or within its interval of the lowest: " + ", ".join(verdict))
        for name, vals in res.items():
            for k, ci in vals:
                if k is None:
                    print(f"  {name}: {ci}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2,000 runs per cell and a smaller speed test")
    ap.add_argument("--seeds", type=int, default=None, help="runs per cell (default 20,000; --quick 2,000)")
    ap.add_argument("--fc-seeds", type=int, default=None, help="runs per cell for the fixed-confidence rules (default 5,000)")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-error", action="store_true")
    args = ap.parse_args()
    b = bai.backend()
    print(f"icml26.ops.bai backend: {b}")
    if b != "ext-cpu":
        print("the C++ kernel is unavailable; this benchmark needs it")
        sys.exit(1)
    if not args.skip_speed:
        speed(args.quick)
    if not args.skip_error:
        error_table(args.quick, args.seeds, args.fc_seeds)


if __name__ == "__main__":
    main()
