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
BUDGETS = {"smollm2-cpu": "recipes/fed-lora/smollm2-cpu.yaml", "issue-6clients": "recipes/fed-lora/issue-6clients.yaml"}
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
    cmd = [str(ROOT / ".venv" / "bin" / "icml26"), "fed-lora", "--recipe", BUDGETS[budget], "--strategy", strategy, "--seed", str(seed),
           "--out", str(d.relative_to(ROOT)), "-q"]
    if (d / "records.jsonl").is_file():
        cmd.append("--resume")
    load0 = uptime()
    t0 = time.perf_counter()
    print(" ".join(cmd[1:]), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    res = _result(d)
    if res is not None:
        db = load_results(OUT / f"{budget}.json")
        db.setdefault("runs", {})[f"{strategy}-s{seed}"] = {"result": {k: v for k, v in res.items() if k != "per_client"},
                                                             "per_client": res["per_client"], "load_before": load0, "load_after": uptime(),
                                                             "process_s": time.perf_counter() - t0}
        save_results(OUT / f"{budget}.json", db)
    return res


def _mean_sd(xs):
    import statistics

    return (statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)


def table(budget: str) -> str:
    rows, by = [], {}
    for s in ORDER:
        for seed in range(10):
            r = _result(_run_dir(budget, s, seed))
            if r is not None:
                by.setdefault(s, []).append(r)
    lines = [f"fed-lora benchmark, budget {budget} ({BUDGETS[budget]}); load now: {uptime()}",
             f"{'strategy':<12} {'seeds':>5} {'local ppl':>16} {'global ppl':>16} {'ROUGE-1':>12} {'comm MB':>9} {'wall s':>8}"]
    agg = {}
    for s, rs in by.items():
        lp, gp, ro = _mean_sd([r["local_perplexity"] for r in rs]), _mean_sd([r["global_perplexity"] for r in rs]), _mean_sd([r["local_rouge1"] for r in rs])
        comm, wall = rs[0]["comm_bytes_total"] / 1e6, sum(r["wall_s"] for r in rs) / len(rs)
        agg[s] = {"local": lp[0], "global": gp[0], "comm": rs[0]["comm_bytes_total"], "seeds": len(rs)}
        lines.append(f"{s:<12} {len(rs):>5} {lp[0]:>9.3f} ±{lp[1]:<5.3f} {gp[0]:>9.3f} ±{gp[1]:<5.3f} {ro[0]:>6.2f} ±{ro[1]:<4.1f} {comm:>9.3f} {wall:>8.0f}")
        rows.append(s)
    h = agg.get("het-cpflora")
    if h:
        others = {s: a for s, a in agg.items() if s != "het-cpflora"}
        if others:
            best = min(others, key=lambda s: others[s]["local"])
            ok = h["local"] < others[best]["local"]
            lines.append(f"T1 lowest local perplexity: het-cpflora {h['local']:.3f} vs best other {best} {others[best]['local']:.3f} "
                         f"({', '.join(sorted(others))} run) -> {'met' if ok else 'NOT met'}")
        if "fedit" in agg:
            ok = h["global"] <= agg["fedit"]["global"]
            lines.append(f"T2 global perplexity <= FedIT: {h['global']:.3f} vs {agg['fedit']['global']:.3f} -> {'met' if ok else 'NOT met'}")
        if "flora" in agg:
            ok = h["comm"] <= agg["flora"]["comm"]
            lines.append(f"T3 communication <= FLoRA: {h['comm'] / 1e6:.3f} MB vs {agg['flora']['comm'] / 1e6:.3f} MB -> {'met' if ok else 'NOT met'}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", default="smollm2-cpu", choices=sorted(BUDGETS))
    ap.add_argument("--strategy", action="append", help="strategies to run (default: all, the issue's seeds)")
    ap.add_argument("--seed", type=int, action="append", help="seeds (default: 0 1 2 for het-cpflora and fedit, 0 for the others)")
    ap.add_argument("--print-only", action="store_true")
    a = ap.parse_args()
    if not a.print_only:
        for s in a.strategy or ORDER:
            for seed in a.seed or ((0, 1, 2) if s in ("het-cpflora", "fedit") else (0,)):
                run_one(a.budget, s, seed)
    print(table(a.budget))


if __name__ == "__main__":
    main()
