"""geo-fusion benchmark: every fusion variant x seeds on the rendered VSI-style benchmark, per-task table.

Resumable in parts; everything lands in benchmarks/results/geo_fusion/ (runs.json is the cache,
a rerun prints from it):

    OMP_NUM_THREADS=1 nice -n 5 timeout 3000 .venv/bin/python benchmarks/geo_fusion.py --part render
    OMP_NUM_THREADS=1 nice -n 5 timeout 3000 .venv/bin/python benchmarks/geo_fusion.py --part tune --budget-s 2400
    OMP_NUM_THREADS=1 nice -n 5 timeout 3000 .venv/bin/python benchmarks/geo_fusion.py --part train --budget-s 2400
    .venv/bin/python benchmarks/geo_fusion.py --print-only

``--part tune`` chooses the LM's training budget on the training scenes only (45 to train, the
last 15 held out; tune.json); ``--part train`` parts may run side by side with different
``--variant`` (runs.json is merged under a lock). Cached runs of other settings or other
question files are dropped (the ``protocol`` key).

Protocol: evaluation set = 40 scenes (make-bench seed 0, first index 0, 8-16 views, 128x96),
training set = disjoint scenes (first index 1000, 8 views each); the recipe
recipes/geo-fusion/vsi-cpu.yaml holds the training settings. Targets (issue 27): SGF above passive
and none on the overall score (intervals over seeds), frame-strict SGF above global SGF, gating
(sgf vs sgf-nogate) helping on the distance and direction tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RES = ROOT / "benchmarks" / "results" / "geo_fusion"
DATA = ROOT / "runs" / "geo-fusion"
EVAL_SCENES, TRAIN_SCENES = 40, 60
DISTANCE = ("object_abs_distance", "object_rel_distance")
DIRECTION = ("object_rel_direction",)


def _cfg():
    from icml26.core.recipe import load_recipe, build_config
    from icml26.methods.spatial import experiment as E

    cfg, _ = load_recipe(ROOT / "recipes" / "geo-fusion" / "vsi-cpu.yaml", "geo-fusion")
    return build_config(E.Config, dict(cfg["train"]))


def render() -> None:
    from icml26.methods.spatial import bench as B

    for name, cfg, first in (
        ("bench-test", B.BenchConfig(scenes=EVAL_SCENES), 0),
        ("bench-train", B.BenchConfig(scenes=TRAIN_SCENES, views_min=8, views_max=8), 1000),
    ):
        t0 = time.perf_counter()
        settings = DATA / name / B.SETTINGS_FILE
        if (
            DATA / name / "scenes"
        ).is_dir() and not settings.exists():  # renders of this script from before the settings file
            settings.write_text(json.dumps(B._settings(cfg, 0, first)))
        for r in B.build(DATA / name, cfg, seed=0, first_index=first):
            pass
        print(
            f"{name}: {cfg.scenes} scenes in {time.perf_counter() - t0:.0f} s (load {os.getloadavg()[0]:.1f})",
            flush=True,
        )


def _load_runs() -> dict:
    p = RES / "runs.json"
    return json.loads(p.read_text()) if p.is_file() else {"runs": {}, "info": {}}


def _merge_save(name: str, data: dict) -> dict:
    """Write RES/name with data["runs"] merged into what is there now (under a lock), so that two
    parts running side by side (e.g. --variant none and --variant sgf) keep each other's runs."""
    import fcntl

    from icml26.core.output import atomic_write_text

    DATA.mkdir(parents=True, exist_ok=True)
    with open(DATA / f".{name}.lock", "w") as lock:  # runs/ is not tracked
        fcntl.flock(lock, fcntl.LOCK_EX)
        p = RES / name
        cur = json.loads(p.read_text()) if p.is_file() else {"runs": {}}
        if cur.get("protocol") != data.get("protocol"):  # runs of other settings or other questions are not mixed in
            cur = {"runs": {}}
        merged = {
            **cur,
            **{k: v for k, v in data.items() if k != "runs"},
            "runs": {**cur.get("runs", {}), **data["runs"]},
        }
        atomic_write_text(p, json.dumps(merged, indent=1))
    return merged


def _save_runs(data: dict) -> None:
    _merge_save("runs.json", data)


def _protocol(cfg) -> dict:
    """What a cached run depends on: the training settings and both question files (sha256)."""
    import hashlib

    digest = {
        b: hashlib.sha256((DATA / b / "questions.jsonl").read_bytes()).hexdigest()[:16]
        for b in ("bench-train", "bench-test")
    }
    return {"config": repr(cfg), "questions": digest}


def _encoder_key(cfg) -> str:
    """The settings the encoded features depend on (not the LM's training settings: a change of
    steps or lr reuses the frozen encoders' features)."""
    return repr({k: getattr(cfg, k) for k in ("frames", "encoder_steps", "geometry_scale", "threads")})


def _prepared(cfg):
    """E.prepare's encoded splits, cached in runs/geo-fusion/features.safetensors (the frozen
    encoders are deterministic for seed 0; a later part reuses them instead of training again)."""
    from safetensors.torch import load_file, save_file

    from icml26.methods.spatial import bench as B
    from icml26.methods.spatial import experiment as E

    cache, meta = DATA / "features.safetensors", DATA / "features.json"
    key = _encoder_key(cfg)
    if cache.is_file() and meta.is_file():
        m = json.loads(meta.read_text())
        if m.get("config") == key:
            t = load_file(str(cache))
            splits = []
            for split, bench in (("train", "bench-train"), ("test", "bench-test")):
                qs = [q for q in B.read_questions(DATA / bench) if q["task"] in E.TASK_IDS]
                feats = {n: (t[f"{split}/{n}/sem"], t[f"{split}/{n}/geo"]) for n in m[split]}
                splits.append((qs, feats))
            info = {
                **m["info"],
                "train_questions": len(splits[0][0]),
                "test_questions": len(splits[1][0]),
            }  # questions may be newer
            return splits[0], splits[1], info
    trn, tst, info = E.prepare(cfg, DATA / "bench-test", DATA / "bench-train", 0)
    tensors = {
        f"{split}/{n}/{k}": v.contiguous()
        for split, (_, f) in (("train", trn), ("test", tst))
        for n, pair in f.items()
        for k, v in zip(("sem", "geo"), pair)
    }
    save_file(tensors, str(cache))
    meta.write_text(json.dumps({"config": key, "train": sorted(trn[1]), "test": sorted(tst[1]), "info": info}))
    return trn, tst, info


def train(budget_s: float, only: list[str] | None, reverse: bool = False) -> None:
    import torch

    from icml26.methods.spatial import experiment as E

    cfg = _cfg()
    data = _load_runs()
    if data.get("protocol") != _protocol(cfg):
        data = {"runs": {}, "info": {}, "protocol": _protocol(cfg)}
    todo = [
        (v, s)
        for s in range(cfg.seeds)
        for v in cfg.variants
        if f"{v}/{s}" not in data["runs"] and (not only or v in only)
    ]
    if reverse:  # last seed first: a second part beside a first one meets it in the middle
        todo = todo[::-1]
    if not todo:
        return
    t0 = time.perf_counter()
    trn, tst, info = _prepared(cfg)
    info["load_at_start"] = os.getloadavg()[0]
    data["info"] = info
    print(f"prepared in {time.perf_counter() - t0:.0f} s: {info}", flush=True)
    for v, s in todo:
        if time.perf_counter() - t0 > budget_s:
            print(f"budget of {budget_s:.0f} s spent; rerun to continue", flush=True)
            break
        cur = _load_runs()
        if (
            cur.get("protocol") == data["protocol"] and f"{v}/{s}" in cur["runs"]
        ):  # done meanwhile by a part running beside
            continue
        r = E.train_eval(cfg, v, s, trn, tst)
        r["load"] = os.getloadavg()[0]
        preds = r.pop("predictions")
        from icml26.core.output import atomic_write_text, to_json

        atomic_write_text(RES / f"predictions-{v}-seed{s}.jsonl", "".join(to_json(p) + "\n" for p in preds))
        data["runs"][f"{v}/{s}"] = r
        _save_runs(data)
        print(f"{v} seed {s}: overall {r['overall']:.4f} in {r['train_s']:.0f} s (load {r['load']:.1f})", flush=True)
    torch.set_num_threads(1)


def _prior_results(train_q: list[dict] | None = None, test_q: list[dict] | None = None) -> list[dict]:
    """The answer prior of the training questions, no images: per task the geometric mean of the
    numeric answers, the most frequent letter of the multiple-choice ones (a floor for the table)."""
    import math
    from collections import Counter

    from icml26.methods.spatial import bench as B
    from icml26.methods.spatial import scoring as S

    if train_q is None:
        try:
            train_q, test_q = B.read_questions(DATA / "bench-train"), B.read_questions(DATA / "bench-test")
        except Exception:  # noqa: BLE001  (benchmarks not rendered here)
            return []
    guess = {}
    for t in {q["task"] for q in train_q}:
        ans = [q["answer"] for q in train_q if q["task"] == t]
        if t in S.NA_QUESTION_TYPES:
            guess[t] = S.fmt_number(math.exp(sum(math.log(max(float(a), 1e-3)) for a in ans) / len(ans)))
        else:
            guess[t] = Counter(ans).most_common(1)[0][0]
    rows = [{**q, "prediction": guess.get(q["task"])} for q in test_q]
    recs, summ = S.score(rows)
    out = [
        {
            "variant": "prior",
            "task": r["task"],
            "score": r["score"],
            "score_ci": [r["score"], r["score"]],
            "seeds": 0,
            "params_trained": 0,
        }
        for r in recs
    ]
    return out + [
        {
            "variant": "prior",
            "task": "overall",
            "score": summ["overall"],
            "score_ci": [summ["overall"]] * 2,
            "seeds": 0,
            "params_trained": 0,
        }
    ]


HELD_OUT = 15  # training scenes held out by --part tune (the last ones by name)
TUNE = ((200, 2e-3), (400, 2e-3), (800, 2e-3))  # (steps, lr) tried by --part tune, variant none, seed 0


def tune(budget_s: float, only: list[str] | None = None) -> None:
    """Choose the LM's training budget on the training scenes only: train ``none`` on the first
    45 training scenes with each (steps, lr) of TUNE, score the 15 held-out training scenes every
    100 steps; cached in tune.json. The evaluation scenes are not read."""
    import dataclasses

    from icml26.methods.spatial import experiment as E

    cfg = _cfg()
    p = RES / "tune.json"
    done = json.loads(p.read_text()) if p.is_file() else {"runs": {}}
    proto = {
        **_protocol(cfg),
        "config": repr({k: v for k, v in vars(cfg).items() if k not in ("steps", "lr", "variants", "seeds")}),
    }
    if done.get("protocol") != proto:
        done = {"runs": {}, "protocol": proto}
    todo = [(st, lr) for st, lr in TUNE if f"{st}/{lr:g}" not in done["runs"] and (not only or f"{st}/{lr:g}" in only)]
    if not todo:
        return
    t0 = time.perf_counter()
    (qs, feats), _, _ = _prepared(cfg)
    names = sorted(feats)
    held = set(names[-HELD_OUT:])
    trn = ([q for q in qs if q["scene"] not in held], {n: f for n, f in feats.items() if n not in held})
    val = ([q for q in qs if q["scene"] in held], {n: f for n, f in feats.items() if n in held})
    pri = _prior_results(trn[0], val[0])
    done["prior_overall"] = next(r["score"] for r in pri if r["task"] == "overall")
    done["prior"] = {r["task"]: r["score"] for r in pri}
    done["split"] = {
        "train_scenes": len(trn[1]),
        "train_questions": len(trn[0]),
        "val_scenes": len(val[1]),
        "val_questions": len(val[0]),
    }
    for st, lr in todo:
        if time.perf_counter() - t0 > budget_s:
            print(f"budget of {budget_s:.0f} s spent; rerun to continue", flush=True)
            break
        r = E.train_eval(dataclasses.replace(cfg, steps=st, lr=lr), "none", 0, trn, val, eval_every=100)
        r.pop("predictions")
        r["load"] = os.getloadavg()[0]
        done["runs"][f"{st}/{lr:g}"] = r
        _merge_save("tune.json", done)
        print(
            f"tune steps {st} lr {lr:g}: held-out overall {r['overall']:.4f} in {r['train_s']:.0f} s (load "
            f"{r['load']:.1f})",
            flush=True,
        )


def tune_table() -> None:
    p = RES / "tune.json"
    if not p.is_file():
        return
    d = json.loads(p.read_text())
    print(
        f"tune (variant none, seed 0; {d['split']['train_questions']} questions of {d['split']['train_scenes']} "
        "training "
        f"scenes, scored on {d['split']['val_questions']} of {d['split']['val_scenes']} held-out training scenes; "
        "answer prior "
        f"{100 * d['prior_overall']:.1f}):"
    )
    for k, r in d["runs"].items():
        st, lr = k.split("/")
        ev = ", ".join(f"{s}: {100 * v:.1f}" for s, v in r["eval_curve"])
        lc = ", ".join(f"{s}: {v:.3f}" for s, v in r["loss_curve"][3::4])
        print(
            f"  steps {st} lr {lr}: held-out overall by step {ev}; training loss {lc}; {r['train_s']:.0f} s (load "
            f"{r['load']:.1f})"
        )


def _print_targets(checks: list, n_seeds: int) -> None:
    """One line per target: met or not, with whether the 95% intervals separate (n/a with 1 seed)."""
    for name, met, sep, a, b in checks:
        if sep is None:
            sep_s = ""
        elif n_seeds < 2:
            sep_s = "; intervals: n/a with 1 seed"
        else:
            sep_s = f"; intervals disjoint: {'yes' if sep else 'no'}"
        verdict = ("MET" if sep or sep is None else "MET on the means only") if met else "NOT MET"
        if met and n_seeds < 2 and sep is not None:
            verdict = "MET on the means only"
        print(f"target {name}: {verdict} ({100 * a:.2f} vs {100 * b:.2f}{sep_s})")


def table() -> int:
    from icml26.methods.spatial import experiment as E
    from icml26.methods.spatial import scoring as S

    data = _load_runs()
    runs = list(data["runs"].values())
    if not runs:
        print("no runs yet: run --part train")
        return 1
    res = list(E.aggregate(runs)) + _prior_results()
    tasks = [
        t
        for t in list(S.NA_QUESTION_TYPES)
        + ["object_rel_distance", "object_rel_direction", "route_planning", "obj_appearance_order", "overall"]
        if any(r["task"] == t for r in res)
    ]
    short = {
        "object_abs_distance": "abs_dist",
        "object_counting": "count",
        "object_size_estimation": "obj_size",
        "room_size_estimation": "room_size",
        "object_rel_distance": "rel_dist",
        "object_rel_direction": "rel_dir",
        "route_planning": "route",
        "obj_appearance_order": "appear",
        "overall": "overall",
    }
    info = dict(data.get("info", {}))
    try:  # the question counts of the files the runs were made on (the cached info may predate them)
        if data.get("protocol", {}).get("questions") == _protocol(_cfg())["questions"]:
            from icml26.methods.spatial import bench as B

            for k, b in (("train_questions", "bench-train"), ("test_questions", "bench-test")):
                info[k] = sum(q["task"] in E.TASK_IDS for q in B.read_questions(DATA / b))
    except OSError:
        pass
    print(
        f"geo-fusion: {info.get('test_questions')} evaluation questions / {info.get('test_scenes')} scenes; "
        f"{info.get('train_questions')} training questions / {info.get('train_scenes')} scenes; encoder patch F1 "
        f"{info.get('encoder_patch_f1_train', float('nan')):.3f}"
    )
    print("| variant | seeds | params | " + " | ".join(short[t] for t in tasks) + " |")
    print("|---|---|---|" + "---|" * len(tasks))
    by = {(r["variant"], r["task"]): r for r in res}
    variants = [v for v in ("prior",) + E.VARIANTS if (v, "overall") in by]
    for v in variants:
        cells = []
        for t in tasks:
            r = by.get((v, t))
            if r is None:
                cells.append("-")
            elif t == "overall":
                cells.append(f"{100 * r['score']:.1f} [{100 * r['score_ci'][0]:.1f}, {100 * r['score_ci'][1]:.1f}]")
            else:  # the half-width of the 95% t-interval over seeds
                half = 100 * (r["score_ci"][1] - r["score_ci"][0]) / 2
                cells.append(f"{100 * r['score']:.1f}" + (f" ±{half:.1f}" if r["seeds"] > 1 else ""))
        print(
            f"| {v} | {by[(v, 'overall')]['seeds']} | {by[(v, 'overall')]['params_trained']} | "
            + " | ".join(cells)
            + " |"
        )
    print(
        "scores x 100; overall = VSI-Bench's mean of tasks with the 95% t-interval over seeds; per task the mean ± the "
        "half-width of that interval"
    )
    # the appearance-order task has only a handful of evaluation questions: the mean of the other 6 tasks too
    seven = {}
    n_other = len([t for t in runs[0]["scores"] if t not in S.DIRECTION_SPLITS + ("obj_appearance_order",)])
    pri = [
        r
        for r in res
        if r["variant"] == "prior" and r["task"] not in S.DIRECTION_SPLITS + ("obj_appearance_order", "overall")
    ]
    if pri:
        m6 = sum(r["score"] for r in pri) / len(pri)
        print(f"  prior: mean of the {len(pri)} tasks without appearance order {100 * m6:.1f}")
    for v in E.VARIANTS:
        rs = [r for r in runs if r["variant"] == v]
        if rs:
            vals = [
                sum(r["scores"][t] for t in r["scores"] if t not in S.DIRECTION_SPLITS + ("obj_appearance_order",))
                / len([t for t in r["scores"] if t not in S.DIRECTION_SPLITS + ("obj_appearance_order",)])
                for r in rs
            ]
            seven[v] = (sum(vals) / len(vals), E.ci95(vals))
            print(
                f"  {v}: mean of the {n_other} tasks without appearance order {100 * seven[v][0]:.1f} "
                f"[{100 * seven[v][1][0]:.1f}, {100 * seven[v][1][1]:.1f}]"
            )

    def ov(v):
        r = by.get((v, "overall"))
        return None if r is None else r

    def mean(v, ts):
        vals = [by[(v, t)]["score"] for t in ts if (v, t) in by]
        return sum(vals) / len(vals) if vals else None

    checks = []
    if ov("sgf") and ov("passive"):
        checks.append(
            (
                "SGF > passive (overall, intervals disjoint)",
                ov("sgf")["score"] > ov("passive")["score"],
                ov("sgf")["score_ci"][0] > ov("passive")["score_ci"][1],
                ov("sgf")["score"],
                ov("passive")["score"],
            )
        )
    if ov("sgf") and ov("none"):
        checks.append(
            (
                "SGF > none (overall, intervals disjoint)",
                ov("sgf")["score"] > ov("none")["score"],
                ov("sgf")["score_ci"][0] > ov("none")["score_ci"][1],
                ov("sgf")["score"],
                ov("none")["score"],
            )
        )
    if ov("sgf") and ov("sgf-global"):
        checks.append(
            (
                "frame-strict SGF > global SGF (overall)",
                ov("sgf")["score"] > ov("sgf-global")["score"],
                ov("sgf")["score_ci"][0] > ov("sgf-global")["score_ci"][1],
                ov("sgf")["score"],
                ov("sgf-global")["score"],
            )
        )
    if ov("sgf") and ov("sgf-nogate"):
        for name, ts in (("distance", DISTANCE), ("direction", DIRECTION)):
            a, b = mean("sgf", ts), mean("sgf-nogate", ts)
            if a is not None and b is not None:
                ci = {
                    v: E.ci95([sum(r["scores"][t] for t in ts) / len(ts) for r in runs if r["variant"] == v])
                    for v in ("sgf", "sgf-nogate")
                }
                checks.append(
                    (f"gating helps on {name} (sgf vs sgf-nogate)", a > b, ci["sgf"][0] > ci["sgf-nogate"][1], a, b)
                )
    for a_, b_ in (("sgf", "passive"), ("sgf", "none"), ("sgf", "sgf-global")):
        if a_ in seven and b_ in seven:
            checks.append(
                (
                    f"{a_} > {b_} ({n_other} tasks without appearance order)",
                    seven[a_][0] > seven[b_][0],
                    seven[a_][1][0] > seven[b_][1][1],
                    seven[a_][0],
                    seven[b_][0],
                )
            )
    n_seeds = min((by[(v, "overall")]["seeds"] for v in E.VARIANTS if (v, "overall") in by), default=0)
    _print_targets(checks, n_seeds)
    for v in ("sgf", "sgf-nogate", "sgf-global"):
        g = [abs(x) for r in runs if r["variant"] == v for x in r.get("tanh_gamma", [])]
        if g:
            print(f"  {v}: mean |tanh(gamma)| of the SGF layers after training {sum(g) / len(g):.3f} (0 at init)")
    if data["runs"]:
        ts = [r["train_s"] for r in runs]
        print(
            f"training time per run: {min(ts):.0f}-{max(ts):.0f} s on 1 thread (load "
            f"{min(r['load'] for r in runs):.1f}-"
            f"{max(r['load'] for r in runs):.1f} on 2 cores)"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["render", "tune", "train", "all"], default="all")
    ap.add_argument("--budget-s", type=float, default=2400)
    ap.add_argument("--variant", action="append", help="only these variants (repeatable)")
    ap.add_argument(
        "--tune", action="append", help="--part tune: only these STEPS/LR of TUNE, e.g. 800/0.002 (repeatable)"
    )
    ap.add_argument("--reverse", action="store_true", help="--part train: last seed first")
    ap.add_argument("--print-only", action="store_true")
    a = ap.parse_args()
    RES.mkdir(parents=True, exist_ok=True)
    if not a.print_only:
        if a.part in ("render", "all"):
            render()
        if a.part == "tune":
            tune(a.budget_s, a.tune)
        if a.part in ("train", "all"):
            train(a.budget_s, a.variant, a.reverse)
    tune_table()
    return table()


if __name__ == "__main__":
    sys.exit(main())
