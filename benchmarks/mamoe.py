"""Benchmark of ``icml26 mamoe`` on this CPU (MoST / MAMoE, arXiv 2601.10272; shared/methods/mamoe.md).

Parts (each resumable; results cached in --json, default benchmarks/results/mamoe/mamoe.json; a rerun prints
from the cache and computes what is missing):
  forward     the MAMoE block's forward time vs the same block without modality routing (plain MoE), at SmolLM2-135M
              sizes (d 576, intermediate 1536, 4 experts, top-1 + shared, 1024 tokens, half speech), and the patched
              transformers OLMoE / Mixtral blocks vs their originals; alternating rounds, median of each.
              Target: MAMoE within 10% of the plain MoE.
  perplexity  text perplexity of SmolLM2-135M upcycled (MoE every other layer, 2 + 2 experts, top-1, shared) with
              ``upcycle_init: official`` and ``equal`` vs the dense SmolLM2 on held-out WordNet glosses, before any
              speech training. Target: within 5%.
  table-<s>   the variant x task table for seed s: ``mamoe train`` at the recipe recipes/mamoe/cpu-small.yaml (a small
              LLaMA trained here with the SmolLM2 tokenizer: it fits a shared 2-core CPU; SmolLM2-135M itself does not).
              Targets: MAMoE's ASR WER and TTS WER below the plain MoE's and the no-shared variant's.

    OMP_NUM_THREADS=1 nice -n 5 timeout 1200 .venv/bin/python benchmarks/mamoe.py --part forward,perplexity
    for v in mamoe moe mamoe-noshared dense; do OMP_NUM_THREADS=1 nice -n 5 timeout 3000 .venv/bin/python benchmarks/mamoe.py \\
        --part table-0-$v --json benchmarks/results/mamoe/table-0-$v.json --data ~/.cache/icml26/mamoe/speech-b9244f86948c & done; wait   # one process per variant (table-<seed>-<variant>; the same numbers as one run)
    (the folder `icml26 mamoe prepare --recipe recipes/mamoe/cpu-small.yaml` prepares; the same data for every seed)
    .venv/bin/python benchmarks/mamoe.py --print-only
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import load_results, save_results, uptime  # noqa: E402

DEFAULT_JSON = ROOT / "benchmarks/results/mamoe/mamoe.json"
RECIPE = "recipes/mamoe/cpu-small.yaml"


def _time_pair(fa, fb, rounds: int = 7, reps: int = 3) -> tuple[float, float]:
    ta, tb = [], []
    for r in range(rounds):
        for f, t in ((fa, ta), (fb, tb)) if r % 2 == 0 else ((fb, tb), (fa, ta)):
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            t.append((time.perf_counter() - t0) / reps)
    return statistics.median(ta), statistics.median(tb)


def part_forward() -> dict:
    import copy

    import torch

    from icml26.methods.speech import mamoe as M

    torch.manual_seed(0)
    d, i, n = 576, 1536, 1024
    mlp = M.SwiGLU(d, i)
    g = torch.Generator().manual_seed(0)
    mam = M.MAMoEBlock([M.SwiGLU.copy_of(mlp, 1e-2, g) for _ in range(4)], M.SwiGLU.copy_of(mlp), d, top_k=1, groups=((0, 1), (2, 3)), generator=g)
    moe = copy.deepcopy(mam)
    moe.groups = None
    x = torch.randn(1, n, d)
    marks = torch.zeros(1, n, dtype=torch.long)
    marks[:, n // 2:] = 1
    mam.marks = moe.marks = marks
    out = {"tokens": n, "hidden": d, "intermediate": i, "experts": 4, "top_k": 1}
    with torch.no_grad():
        for _ in range(2):
            mam(x), moe(x)
        a, b = _time_pair(lambda: mam(x), lambda: moe(x))
    out["mamoe_block_ms"], out["moe_block_ms"], out["block_ratio"] = a * 1e3, b * 1e3, a / b
    # the patch inside transformers' own blocks
    from transformers import MixtralConfig, OlmoeConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock

    for name, blk in (("olmoe", OlmoeSparseMoeBlock(OlmoeConfig(hidden_size=d, intermediate_size=i, num_experts=8, num_experts_per_tok=2))),
                      ("mixtral", MixtralSparseMoeBlock(MixtralConfig(hidden_size=d, intermediate_size=i, num_local_experts=8, num_experts_per_tok=2)))):
        with torch.no_grad():
            for p in blk.parameters():
                p.normal_(0, 0.02)
        host = copy.deepcopy(blk).eval()
        M.patch_moe_block(blk, groups=((0, 1, 2, 3), (4, 5, 6, 7)))
        with torch.no_grad(), M.modality_context(blk, marks):
            for _ in range(2):
                blk(x), host(x)
            a, b = _time_pair(lambda: blk(x), lambda: host(x))
        out[f"{name}_patched_ms"], out[f"{name}_host_ms"], out[f"{name}_ratio"] = a * 1e3, b * 1e3, a / b
    out["threads"] = torch.get_num_threads()
    return out


def part_perplexity() -> dict:
    from icml26.core.data.speech import spoken_sentences
    from icml26.methods.speech import train as T

    texts = spoken_sentences("wordnet", seed=0)[-60:]  # the tail: never among the first sentences the recipes train on
    cfg = T.Config(model="smollm2-135m")
    res = {"texts": len(texts), "corpus": "wordnet glosses (last 60 of the seeded order)"}
    t0 = time.perf_counter()
    dense = T.build_model(cfg, None, 128, seed=0)
    res["dense"] = T.text_perplexity(dense, texts)
    del dense
    for init in ("official", "equal"):
        for v in ("mamoe", "moe"):
            lm = T.build_model(cfg, v, 128, seed=0, upcycle_init=init)
            res[f"{v}_{init}"] = T.text_perplexity(lm, texts)
            del lm
    res["seconds"] = time.perf_counter() - t0
    return res


def part_table(seed: int, runs: Path, data: str | None = None, variant: str | None = None) -> dict:
    out = runs / (f"seed{seed}" + (f"-{variant}" if variant else ""))
    if out.exists():
        import shutil

        shutil.rmtree(out)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "icml26", "mamoe", "train", "--recipe", RECIPE, "--seed", str(seed), "-q", "--out", str(out)]
                       + (["--data", data] if data else []) + (["--variant", variant] if variant else []),
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"table-{seed} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    keep = ("variant", "task", "wer", "wer_librivox", "unit_error_rate", "text_perplexity", "text_perplexity_dense", "text_perplexity_init",
            "routing_text_to_speech_experts", "routing_speech_to_text_experts", "active_params", "total_params", "train_seconds", "eval_seconds")
    res = [{k: x.get(k) for k in keep} for x in recs if x["kind"] == "result"]
    steps = [x for x in recs if x["kind"] == "step" and "variant" in x]
    return {"seed": seed, "results": res, "final_loss": {v: [s["loss"] for s in steps if s["variant"] == v][-1] for v in {s["variant"] for s in steps}},
            "seconds": time.perf_counter() - t0}


KEEP = ("variant", "task", "wer", "wer_librivox", "unit_error_rate", "text_perplexity", "text_perplexity_dense", "text_perplexity_init",
        "routing_text_to_speech_experts", "routing_speech_to_text_experts", "active_params", "total_params", "train_seconds", "eval_seconds")


def part_collect(runs: Path) -> dict:
    """The result records that the table runs under ``runs`` wrote so far (runs stopped before their end included):
    {"table-<seed>-partial": {...}} per seed, marked partial."""
    out = {}
    for d in sorted(runs.glob("seed*")):
        f = d / "records.jsonl"
        if not f.is_file():
            continue
        recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        seed = recs[0].get("seed") if recs else None
        done = any(r.get("kind") == "summary" for r in recs)
        t = out.setdefault(seed, {"seed": seed, "results": [], "final_loss": {}, "partial": True, "runs": []})
        t["runs"].append({"run": d.name, "complete": done})
        have = {(r["variant"], r["task"]) for r in t["results"]}
        for r in recs:
            if r.get("kind") == "result" and (r["variant"], r["task"]) not in have:
                t["results"].append({k: r.get(k) for k in KEEP})
            if r.get("kind") == "step" and "variant" in r and r["step"] >= t.setdefault("final_step", {}).get(r["variant"], 0):
                t["final_step"][r["variant"]] = r["step"]
                t["final_loss"][r["variant"]] = r["loss"]
    return {f"table-{s}-partial": t for s, t in out.items()}


def _f(x, nd=3):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def report(data: dict) -> None:
    fw = data.get("forward")
    if fw:
        print(f"\n## forward time (ms, median of alternating rounds; {fw['tokens']} tokens, d {fw['hidden']}; load: {fw.get('load')})")
        print("| block | ms | baseline ms | ratio | target <= 1.10 |\n|---|---|---|---|---|")
        print(f"| MAMoE vs plain MoE (ours) | {fw['mamoe_block_ms']:.1f} | {fw['moe_block_ms']:.1f} | {fw['block_ratio']:.3f} | {'met' if fw['block_ratio'] <= 1.10 else 'NOT met'} |")
        for h in ("olmoe", "mixtral"):
            print(f"| patched {h} vs host | {fw[h + '_patched_ms']:.1f} | {fw[h + '_host_ms']:.1f} | {fw[h + '_ratio']:.3f} | {'met' if fw[h + '_ratio'] <= 1.10 else 'NOT met'} |")
    pp = data.get("perplexity")
    if pp:
        print(f"\n## text perplexity before speech training (SmolLM2-135M, {pp['texts']} held-out glosses; load: {pp.get('load')})")
        print("| model | perplexity | vs dense | target within 5% |\n|---|---|---|---|")
        print(f"| dense SmolLM2 | {pp['dense']:.2f} | - | - |")
        for k in ("mamoe_official", "moe_official", "mamoe_equal", "moe_equal"):
            rel = pp[k] / pp["dense"] - 1
            print(f"| {k.replace('_', ' upcycle_init ')} | {pp[k]:.2f} | {rel * 100:+.2f}% | {'met' if abs(rel) <= 0.05 else 'NOT met'} |")
    tabs = [data[k] for k in sorted(data) if k.startswith("table-")]
    seeds = sorted({t["seed"] for t in tabs})
    if tabs:
        print(f"\n## variant x task ({RECIPE}; seeds {seeds}; mean over seeds, per-seed in brackets)")
        print("| variant | ASR WER | ASR WER LibriVox | TTS WER (pocketsphinx) | TTS unit error | text ppl | text->speech | speech->text | active / total params |")
        print("|---|---|---|---|---|---|---|---|---|")
        rows, seen = {}, set()
        for t in sorted(tabs, key=lambda t: t.get("partial", False)):  # complete parts first
            for r in t["results"]:
                if (t["seed"], r["variant"], r["task"]) in seen:
                    continue
                seen.add((t["seed"], r["variant"], r["task"]))
                rows.setdefault((r["variant"], r["task"]), []).append(r)
        if any(t.get("partial") for t in tabs):
            print("(partial: results of runs stopped before their end are included; n per cell below)")

        def m(v, task, key):
            xs = [r[key] for r in rows.get((v, task), []) if r[key] is not None]
            if not xs:
                return "-"
            return f"{statistics.mean(xs):.3f}" + (f" [{', '.join(f'{x:.2f}' for x in xs)}]" if len(xs) > 1 else "") + f" (n={len(xs)})"

        for v in ("mamoe", "moe", "mamoe-noshared", "dense"):
            if (v, "asr") not in rows:
                continue
            a = rows[(v, "asr")][0]
            print(f"| {v} | {m(v, 'asr', 'wer')} | {m(v, 'asr', 'wer_librivox')} | {m(v, 'tts', 'wer')} | {m(v, 'tts', 'unit_error_rate')} | "
                  f"{m(v, 'asr', 'text_perplexity')} | {m(v, 'asr', 'routing_text_to_speech_experts')} | {m(v, 'asr', 'routing_speech_to_text_experts')} | "
                  f"{a['active_params']:,} / {a['total_params']:,} |")

        def mean(v, task):
            xs = [r["wer"] for r in rows.get((v, task), []) if r["wer"] is not None]
            return statistics.mean(xs) if xs else None

        for task in ("asr", "tts"):
            mw, others = mean("mamoe", task), [mean(v, task) for v in ("moe", "mamoe-noshared")]
            if mw is not None and all(o is not None for o in others):
                ok = all(mw < o for o in others)
                print(f"target: MAMoE {task.upper()} WER {mw:.3f} below moe {others[0]:.3f} and mamoe-noshared {others[1]:.3f}: {'met' if ok else 'NOT met'}")
        losses = {}
        for t in tabs:
            for v, x in t["final_loss"].items():
                losses.setdefault(v, []).append(x)
        steps = {v: s for t in tabs for v, s in t.get("final_step", {}).items()}
        print("training loss (mean of the last log window; partial runs: at the step reached): "
              + ", ".join(f"{v} {statistics.mean(x):.3f}" + (f" (step {steps[v]})" if v in steps else "") for v, x in sorted(losses.items())))
        print("load: " + "; ".join(f"seed {t['seed']}: {t.get('load')}" for t in tabs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="forward,perplexity,table-0")
    ap.add_argument("--json", default=str(DEFAULT_JSON))
    ap.add_argument("--runs", default="runs/mamoe-bench")
    ap.add_argument("--print-only", action="store_true")
    ap.add_argument("--data", default=None, help="a prepared folder for the table parts (default: each seed prepares its own)")
    ap.add_argument("--force", action="store_true", help="recompute the parts given")
    a = ap.parse_args()
    path = Path(a.json)
    data = load_results(path)
    for other in sorted(path.parent.glob("*.json")):  # parts run in parallel processes save to their own files
        if other != path:
            data = {**load_results(other), **data}
    if not a.print_only:
        for part in [p.strip() for p in a.part.split(",") if p.strip()]:
            if part in data and not a.force:
                continue
            if part == "forward":
                res = part_forward()
            elif part == "perplexity":
                res = part_perplexity()
            elif part == "collect":
                for k, v in part_collect(ROOT / a.runs).items():
                    v["load"] = uptime()
                    data[k] = v
                    save_results(path, {**load_results(path), k: v})
                continue
            elif part.startswith("table-"):
                seed_s, _, variant = part.split("-", 1)[1].partition("-")  # table-<seed> or table-<seed>-<variant>
                res = part_table(int(seed_s), ROOT / a.runs, a.data, variant or None)
                res["data_seed"] = 0 if a.data else res["seed"]
            else:
                raise SystemExit(f"unknown part {part!r}")
            res["load"] = uptime()
            data[part] = res
            save_results(path, {k: v for k, v in load_results(path).items()} | {part: res})
    report(data)


if __name__ == "__main__":
    main()
