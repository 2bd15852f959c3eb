"""icml26 bfq benchmark: speed (inference actions/s, training gradient steps/s) of BFQ against
Diffusion-QL (N = 5 and N = 50 denoising steps), FQL and the one-step baselines, and normalised
scores on the D4RL-style datasets made here. Resumable, in parts; results in
benchmarks/results/bfq/bfq.json (a rerun prints from it).

    OMP_NUM_THREADS=1 python benchmarks/bfq.py --part speed            # the speed table (minutes)
    OMP_NUM_THREADS=1 python benchmarks/bfq.py --part scores --steps 3000 [--datasets hopper-v5-medium,...]
    python benchmarks/bfq.py --print                                   # the tables from the saved JSON

Speed protocol: one policy (1 seed), Hopper-v5 sizes (11 observation, 3 action dims), the
networks of the scores run (3 x 256), batch 256 for training on random batches (speed does not
depend on the data); ``--rounds`` alternating rounds over the methods, the median per method (the
machine is shared: the load is saved beside the figures). Targets (issue 21): BFQ's inference at
batch 1 >= 3x Diffusion-QL-5's and >= 20x Diffusion-QL-50's (the paper: 851 vs 238 / 35.5 Hz),
BFQ's training >= 1.5x Diffusion-QL-5's gradient steps per second.

Scores protocol: ``icml26 bfq train`` on each dataset (made by ``icml26 bfq make-dataset -r
recipes/bfq/make-hopper.yaml``), 3 seeds for BFQ / FQL / Diffusion-QL-5, 1 for IQL / TD3+BC / BC,
``--steps`` updates, evaluation of 10 episodes at 4 points; every run resumable under
runs/bfq-bench/. Target: BFQ >= FQL and > Diffusion-QL on at least 4 of the 6 datasets.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

from _results import load_results, save_results, uptime

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bfq" / "bfq.json"
SPEED_ROWS = {"bfq": ("bfq", {}), "fql": ("fql", {}), "diffusion-ql-5": ("diffusion-ql", {"dql_steps": 5}),
              "diffusion-ql-50": ("diffusion-ql", {"dql_steps": 50}), "iql": ("iql", {}), "td3bc": ("td3bc", {}), "bc": ("bc", {})}
DATASETS = ("hopper-v5-medium", "hopper-v5-medium-replay", "walker2d-v5-medium", "walker2d-v5-medium-replay",
            "halfcheetah-v5-medium", "halfcheetah-v5-medium-replay")
SEEDS = {"bfq": 3, "fql": 3, "diffusion-ql": 3, "iql": 1, "td3bc": 1, "bc": 1}


def _train_hz(algo: str, cfg, n: int) -> float:
    import torch

    from icml26.methods.rl import offline

    ag = offline.agent_class(algo)(cfg, 11, 3, 1, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    B = cfg.batch_size
    b = {"observations": torch.randn(1, B, 11, generator=g), "next_observations": torch.randn(1, B, 11, generator=g),
         "actions": torch.rand(1, B, 3, generator=g) * 2 - 1, "rewards": torch.randn(1, B, generator=g), "terminals": torch.zeros(1, B)}
    for _ in range(2):
        ag.update(b)
    t0 = time.perf_counter()
    for _ in range(n):
        ag.update(b)
    return n / (time.perf_counter() - t0)


def part_speed(res: dict, rounds: int, timing_s: float, train_n: int) -> None:
    import torch

    from icml26.methods.rl import offline

    torch.set_num_threads(1)
    base = offline.Config(hidden=(256, 256, 256), batch_size=256)
    rows: dict[str, dict[str, list]] = {k: {"b1": [], "b256": [], "train": []} for k in SPEED_ROWS}
    loads = [uptime()]
    for r in range(rounds):
        for name, (algo, kw) in SPEED_ROWS.items():
            cfg = dataclasses.replace(base, **kw)
            rows[name]["b1"].append(offline.actions_per_s(algo, cfg, 11, 3, 1, "cpu", timing_s))
            rows[name]["b256"].append(offline.actions_per_s(algo, cfg, 11, 3, 256, "cpu", timing_s))
            n = max(2, train_n // (10 if name == "diffusion-ql-50" else 1))
            rows[name]["train"].append(_train_hz(algo, cfg, n))
        print(f"speed round {r + 1}/{rounds} done", file=sys.stderr)
    loads.append(uptime())
    res["speed"] = {"rows": {k: {m: statistics.median(v) for m, v in d.items()} for k, d in rows.items()},
                    "raw": rows, "rounds": rounds, "timing_s": timing_s, "train_updates": train_n, "load": loads,
                    "torch_threads": 1, "sizes": "Hopper-v5 (11, 3), 3 x 256, batch 256"}


def part_scores(res: dict, data_dir: Path, datasets: list[str], steps: int, algos: list[str]) -> None:
    from icml26.core.output import to_json
    from icml26.methods.rl import offline

    scores = res.setdefault("scores", {})
    for ds in datasets:
        f = data_dir / f"{ds}.hdf5"
        if not f.is_file():
            print(f"{ds}: no {f} (make it with icml26 bfq make-dataset); skipped", file=sys.stderr)
            continue
        for algo in algos:
            key = f"{ds}/{algo}/{steps}"
            if key in scores:
                continue
            cfg = offline.Config(dataset=str(f), algo=(algo,), steps=steps, seeds=SEEDS[algo], eval_interval=max(1, steps // 4),
                                 checkpoint_interval=max(1, steps // 8), eval_episodes=10)
            out = ROOT / "runs" / "bfq-bench" / ds / f"{algo}-{steps}"
            out.mkdir(parents=True, exist_ok=True)
            inputs = offline.validate(cfg)
            t0 = time.perf_counter()
            load0 = uptime()
            recs = list(offline.run(cfg, seed=0, out=out, resume=True, inputs=inputs))
            res_rec = next(r for r in recs if r["kind"] == "result")
            curve = [{k: r[k] for k in ("step", "seed", "normalized_score")} for r in recs if r["kind"] == "step"]
            scores[key] = {"result": res_rec, "curve": curve, "wall_s": time.perf_counter() - t0, "load": [load0, uptime()]}
            save_results(RESULTS, res)
            print(to_json({"dataset": ds, "algo": algo, "final": res_rec["normalized_score_final"], "best": res_rec["normalized_score_best"]}))


def _fmt(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


def report(res: dict) -> None:
    sp = res.get("speed")
    if sp:
        rows = sp["rows"]
        print(f"\nSpeed ({sp['sizes']}, 1 thread, median of {sp['rounds']} rounds; load {sp['load'][0].split('load average:')[-1].strip()} -> "
              f"{sp['load'][-1].split('load average:')[-1].strip()})")
        print("| method | nfe | actions/s b1 | actions/s b256 | train Hz |")
        print("|---|---|---|---|---|")
        for k, v in rows.items():
            nfe = 50 if k == "diffusion-ql-50" else 5 if k == "diffusion-ql-5" else 1
            print(f"| {k} | {nfe} | {_fmt(v['b1'])} | {_fmt(v['b256'])} | {_fmt(v['train'], 2)} |")
        b, d5, d50 = rows["bfq"], rows["diffusion-ql-5"], rows["diffusion-ql-50"]
        print("\n| target | measured | met |")
        print("|---|---|---|")
        for name, val, want in (("BFQ inference b1 >= 3x DQL-5", b["b1"] / d5["b1"], 3.0), ("BFQ inference b1 >= 20x DQL-50", b["b1"] / d50["b1"], 20.0),
                                ("BFQ inference b256 >= 3x DQL-5", b["b256"] / d5["b256"], 3.0), ("BFQ inference b256 >= 20x DQL-50", b["b256"] / d50["b256"], 20.0),
                                ("BFQ training >= 1.5x DQL-5", b["train"] / d5["train"], 1.5)):
            print(f"| {name} | {val:.2f}x | {'met' if val >= want else 'NOT met'} |")
    sc = res.get("scores")
    if sc:
        print("\nNormalised scores (final [95% CI] / best; seeds: BFQ, FQL, DQL 3, others 1)")
        print("| dataset | steps | " + " | ".join(SEEDS) + " |")
        print("|---|---|" + "---|" * len(SEEDS))
        keys = sorted({tuple(k.split("/")[::2]) for k in sc})
        for ds, steps in keys:
            cells = []
            for algo in SEEDS:
                e = sc.get(f"{ds}/{algo}/{steps}")
                if e is None:
                    cells.append("-")
                    continue
                r = e["result"]
                ci = r.get("normalized_score_final_ci")
                cells.append(f"{_fmt(r['normalized_score_final'])}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci and r["seeds"] > 1 else "") +
                             f" / {_fmt(r['normalized_score_best'])}")
            print(f"| {ds} | {steps} | " + " | ".join(cells) + " |")
        wins = 0
        n = 0
        for ds, steps in keys:
            g = {a: sc.get(f"{ds}/{a}/{steps}") for a in ("bfq", "fql", "diffusion-ql")}
            if all(g.values()):
                n += 1
                s = {a: v["result"]["normalized_score_final"] for a, v in g.items()}
                wins += s["bfq"] >= s["fql"] and s["bfq"] > s["diffusion-ql"]
        print(f"\nBFQ >= FQL and > Diffusion-QL (final score): {wins} of {n} datasets measured (target: 4 of 6)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("speed", "scores"), action="append", default=[])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timing-s", type=float, default=0.5)
    ap.add_argument("--train-updates", type=int, default=20)
    ap.add_argument("--data-dir", default="runs/bfq-data/hopper")
    ap.add_argument("--datasets", default=",".join(DATASETS[:2]))
    ap.add_argument("--algos", default=",".join(SEEDS))
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--print", action="store_true")
    a = ap.parse_args()
    res = load_results(RESULTS)
    if "speed" in a.part:
        part_speed(res, a.rounds, a.timing_s, a.train_updates)
        save_results(RESULTS, res)
    if "scores" in a.part:
        part_scores(res, ROOT / a.data_dir, [d for d in a.datasets.split(",") if d], a.steps, [x for x in a.algos.split(",") if x])
    report(res)


if __name__ == "__main__":
    main()
