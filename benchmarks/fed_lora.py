"""fed-lora benchmark: every strategy's local / global perplexity, ROUGE-1, communication and wall
time on SmolLM2-135M with 6 clients (the issue: 3 seeds for Het-CPFLoRA and FedIT, 1 for the
others), and the targets:

  T1  Het-CPFLoRA has the lowest local perplexity (mean over clients, own test sets)
  T2  Het-CPFLoRA's global perplexity (cross-domain test set) is no worse than FedIT's
  T3  Het-CPFLoRA communicates no more than FLoRA

Each (strategy, seed) is one ``icml26 fed-lora`` run in
``benchmarks/results/fed_lora/<budget>/<strategy>-s<seed>/`` (records.jsonl, per-round
checkpoints), so an interrupted run continues with ``--resume`` at its last round; finished
runs are read back, and the table is printed from what is there (``--print-only``).

    OMP_NUM_THREADS=1 nice -n 5 timeout 3000 .venv/bin/python benchmarks/fed_lora.py --strategy het-cpflora --seed 0
    .venv/bin/python benchmarks/fed_lora.py --print-only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import load_results, save_results, uptime  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "fed_lora"
BUDGETS = {"smollm2-cpu": "recipes/fed-lora/smollm2-cpu.yaml", "paper-6clients": "recipes/fed-lora/paper-6clients.yaml"}
ORDER = ("het-cpflora", "fedit", "flora", "hetlora", "ffa-lora", "fedsa-lora", "local")


def _run_dir(budget: str, strategy: str, seed: int) -> Path:
    return OUT / budget / f"{strategy}-s{seed}"


def _result(d: Path) -> dict | None:
    f = d / "records.jsonl"
    if not f.is_file():
        return None
    recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    res = [r for r in recs if r.get("kind") == "result"]
    return res[-1] if res and recs[-1].get("kind") == "summary" else None


def run_one(budget: str, strategy: str, seed: int) -> dict | None:
    d = _run_dir(budget, strategy, seed)
    if _result(d) is not None:
        return _result(d)
    cmd = [
        str(ROOT / ".venv" / "bin" / "icml26"),
        "fed-lora",
        "--recipe",
        BUDGETS[budget],
        "--strategy",
        strategy,
        "--seed",
        str(seed),
        "--out",
        str(d.relative_to(ROOT)),
        "-q",
    ]
    if (d / "records.jsonl").is_file():
        cmd.append("--resume")
    import resource

    load0 = uptime()
    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(" ".join(cmd[1:]), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (
        ru1.ru_stime - ru0.ru_stime
    )  # this call's CPU time (a resumed run: its part only)
    res = _result(d)
    if res is not None:
        db = load_results(OUT / f"{budget}.json")
        db.setdefault("runs", {})[f"{strategy}-s{seed}"] = {
            "result": {k: v for k, v in res.items() if k != "per_client"},
            "per_client": res["per_client"],
            "load_before": load0,
            "load_after": uptime(),
            "process_s": time.perf_counter() - t0,
            "cpu_s": cpu_s,
        }
        save_results(OUT / f"{budget}.json", db)
    return res


T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)  # Student t, 0.975 quantile, df 1..9


def mean_ci(xs) -> tuple[float, float]:
    """Mean and the half-width of its two-sided 95% Student-t interval over seeds (0 for one seed)."""
    import statistics

    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, T975[min(len(xs) - 1, len(T975)) - 1] * statistics.stdev(xs) / len(xs) ** 0.5


def _cell(xs, fmt="{:.3f}") -> str:
    m, h = mean_ci(xs)
    return fmt.format(m) + (f" ± {fmt.format(h)}" if len(xs) > 1 else "")


def table(budget: str) -> str:
    by: dict[str, dict[int, dict]] = {}
    for s in ORDER:
        for seed in range(10):
            r = _result(_run_dir(budget, s, seed))
            if r is not None:
                by.setdefault(s, {})[seed] = r
    db = load_results(OUT / f"{budget}.json").get("runs", {})
    lines = [
        f"fed-lora benchmark, budget {budget} ({BUDGETS[budget]}); load now: {uptime()}",
        "mean over seeds ± half-width of the 95% Student-t interval (3 seeds: t(0.975, 2) = 4.303 x sd / sqrt 3)",
        f"{'strategy':<12} {'seeds':>6} {'local ppl':>17} {'global ppl':>17} {'ROUGE-1':>13} {'comm MB':>8} "
        f"{'wall s':>7} {'load (1-min, start..end)':>24}",
    ]
    agg = {}
    for s, runs in by.items():
        rs = list(runs.values())
        lp, gp, ro = ([r[k] for r in rs] for k in ("local_perplexity", "global_perplexity", "local_rouge1"))
        comm, wall = rs[0]["comm_bytes_total"] / 1e6, sum(r["wall_s"] for r in rs) / len(rs)
        loads = []
        for seed in runs:
            e = db.get(f"{s}-s{seed}", {})
            la = [e.get("load_before", ""), e.get("load_after", "")]
            loads.append(
                "..".join(
                    x.split("load average:")[1].split(",")[0].strip() if "load average:" in x else "?" for x in la
                )
            )
        agg[s] = {
            "local": mean_ci(lp)[0],
            "global": mean_ci(gp)[0],
            "comm": rs[0]["comm_bytes_total"],
            "seeds": sorted(runs),
        }
        lines.append(
            f"{s:<12} {','.join(map(str, sorted(runs))):>6} {_cell(lp):>17} {_cell(gp):>17} {_cell(ro, '{:.1f}'):>13} "
            f"{comm:>8.1f} {wall:>7.0f} {' '.join(loads):>24}"
        )
    h = agg.get("het-cpflora")
    if h:
        others = [s for s in agg if s != "het-cpflora"]
        if others:
            # on the seeds both have (a seed is a data split: means over different seeds do not compare)
            cmp = {}
            for o in others:
                common = sorted(set(by["het-cpflora"]) & set(by[o]))
                if common:
                    cmp[o] = (
                        common,
                        mean_ci([by["het-cpflora"][x]["local_perplexity"] for x in common])[0],
                        mean_ci([by[o][x]["local_perplexity"] for x in common])[0],
                    )
            ok = all(h_ < o_ for _, h_, o_ in cmp.values())
            lines.append(
                "T1 lowest local perplexity (het-cpflora vs each, on common seeds): "
                + "; ".join(f"{o} {h_:.3f} vs {o_:.3f} (seeds {c})" for o, (c, h_, o_) in cmp.items())
                + f" -> {'met' if ok else 'NOT met'}"
            )
        if "fedit" in agg:
            ok = h["global"] <= agg["fedit"]["global"]
            lines.append(
                f"T2 global perplexity <= FedIT: {h['global']:.3f} vs {agg['fedit']['global']:.3f} -> "
                f"{'met' if ok else 'NOT met'}"
            )
            both = sorted(set(by["het-cpflora"]) & set(by["fedit"]))
            for k in ("local_perplexity", "global_perplexity"):
                d = [by["het-cpflora"][x][k] - by["fedit"][x][k] for x in both]
                if len(d) > 1:
                    m, hw = mean_ci(d)
                    lines.append(
                        f"   het-cpflora - fedit, {k}, paired over seeds {both}: {m:+.3f} [{m - hw:+.3f}, "
                        f"{m + hw:+.3f}] "
                        f"(per seed {', '.join(f'{x:+.3f}' for x in d)})"
                    )
        if "flora" in agg:
            ok = h["comm"] <= agg["flora"]["comm"]
            lines.append(
                f"T3 communication <= FLoRA: {h['comm'] / 1e6:.3f} MB vs {agg['flora']['comm'] / 1e6:.3f} MB -> "
                f"{'met' if ok else 'NOT met'}"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", default="smollm2-cpu", choices=sorted(BUDGETS))
    ap.add_argument("--strategy", action="append", help="strategies to run (default: all, the issue's seeds)")
    ap.add_argument(
        "--seed", type=int, action="append", help="seeds (default: 0 1 2 for het-cpflora and fedit, 0 for the others)"
    )
    ap.add_argument("--print-only", action="store_true")
    a = ap.parse_args()
    if not a.print_only:
        for s in a.strategy or ORDER:
            for seed in a.seed or ((0, 1, 2) if s in ("het-cpflora", "fedit") else (0,)):
                run_one(a.budget, s, seed)
    print(table(a.budget))


if __name__ == "__main__":
    main()
