"""Benchmark: CapKV (capkv, capkv-qa) vs the eviction baselines and kvpress' presses, one run.

Prints: quality (method x ratio -> needles [Wilson 95%], KL [bootstrap 95%], top-1, perplexity,
MB kept, overhead) on SmolLM2-135M over real python-docs haystacks, the verdicts at 95%, and
capkv / capkv-qa minus every other row paired per haystack; optionally the approximation to
the exact greedy log-det and the scoring speed against kvpress' CapPress.

kvpress 0.5.5 pins transformers<5.3: the script re-runs itself in the kvpress peer venv of
`make peers` (or under ``--kvpress-python PY``); ``--no-kvpress`` stays in the project venv.
``--samples-jsonl FILE`` appends every sample record as it finishes; ``--pool-json`` pools
saved runs (``--json`` files, or those JSONL files: their complete haystacks):
    .venv/bin/python benchmarks/evict_kv.py --seed 0 --samples-jsonl s0.jsonl
    .venv/bin/python benchmarks/evict_kv.py --pool-json s0.jsonl s3.jsonl s4.jsonl

``--mode decode``: decoding-time compression (``icml26 evict-kv --mode decode``), resumable per
(haystack, policy, budget) in ``--results`` (default benchmarks/results/evict_kv_decode.json,
with the full cache's generation, so a rerun skips what is saved); ``--max-haystacks K``,
``--haystacks FROM TO`` (parts in parallel), ``--print-only`` (reprint, pooling parts).
Decode results saved before the renaming have their ``capkv`` relabelled ``capkv-qa``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OURS = [
    "capkv",  # the paper's CapKV (one channel)
    "capkv-qa",  # + our question-aware retrieval channel (max-pool over 13 tokens)
    "streaming",
    "snapkv",  # its default pooling, kernel 5
    "snapkv@kernel_size=13",  # at capkv-qa's pooling width
    "h2o",
    "tova",
    "knorm",
    "random",
    "expected-attention",
]
KVPRESS = ["kvpress:CapPress", "kvpress:FinchPress"]  # FinchPress: kvpress' question-aware press
MIN_PAIRED = (
    5  # fewer paired samples than this: no better/worse/tie verdict (a bootstrap over 1-4 values is not an interval)
)


def quality(args) -> list[dict]:
    from icml26.methods.kvcache import evaluate as E

    methods = list(args.methods or OURS)
    if importlib.util.find_spec("kvpress") is not None and not args.no_kvpress:
        methods += list(args.kvpress_methods)
    cfg = E.Config(
        methods=tuple(methods),
        compression_ratios=tuple(args.ratios),
        context_tokens=tuple(args.context_tokens),
        needle_depths=tuple(args.depths),
        samples=args.samples,
        continuation_tokens=args.continuation_tokens,
        question_aware=not args.question_agnostic,
        corpus=args.corpus,
    )
    results, samples = [], []
    stream = open(args.samples_jsonl, "a", encoding="utf-8") if args.samples_jsonl else None
    for r in E.run(cfg, seed=args.seed):
        if r["kind"] == "sample":
            samples.append(r)
            if stream:  # kept as they come: a run stopped early still has its finished haystacks
                stream.write(json.dumps({**r, "seed": args.seed}) + "\n")
                stream.flush()
        if r["kind"] == "result":
            results.append(r)
            print(
                f"  {r['method']:>28} {r['compression_ratio']:.2f}  needle {r['needle_accuracy']:.2f}  kl "
                f"{r['kl']:.4f}",
                file=sys.stderr,
                flush=True,
            )
    return results, samples


def paired(samples: list[dict], ours: str = "capkv") -> list[dict]:
    """Paired comparison of ``ours`` with every other method on the same samples (same haystack,
    needle and ratio): mean KL difference (ours - baseline) and needle accuracy difference, each
    with a 95% percentile bootstrap interval over samples (haystacks); ``kl_verdict``/``needle_verdict``
    say whether ours is better/worse at 95% or the difference is not resolved ("tie"), or
    "too few" with fewer than ``MIN_PAIRED`` common samples;
    ``kl_lower_on``: on how many of the samples ours has the lower KL."""
    import numpy as np

    from icml26.methods.kvcache.evaluate import bootstrap_mean_ci

    key = lambda r: (r.get("run"), r["context_tokens"], r["needle_depth"], r["sample"])
    by: dict = {}
    for r in samples:
        by.setdefault((r["method"], r["compression_ratio"], r["context_tokens"]), {})[key(r)] = r
    rows = []
    for (m, ratio, n), rs in sorted(by.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
        mine = by.get((ours, ratio, n))
        if m in (ours, "full") or not mine:
            continue
        common = sorted(set(rs) & set(mine))
        dkl = np.array([mine[c]["kl"] - rs[c]["kl"] for c in common])
        dnd = np.array([float(mine[c]["needle_correct"]) - float(rs[c]["needle_correct"]) for c in common])
        kl_lo, kl_hi = bootstrap_mean_ci(dkl)
        nd_lo, nd_hi = bootstrap_mean_ci(dnd)
        verdict = lambda lo, hi, better_if_negative: (
            "too few"
            if len(common) < MIN_PAIRED
            else "better"
            if (hi < 0 if better_if_negative else lo > 0)
            else "worse"
            if (lo > 0 if better_if_negative else hi < 0)
            else "tie"
        )
        rows.append(
            {
                "context_tokens": n,
                "compression_ratio": ratio,
                "ours": ours,
                "baseline": m,
                "n": len(common),
                "kl_diff": float(dkl.mean()),
                "kl_diff_ci": f"[{kl_lo:+.4f}, {kl_hi:+.4f}]",
                "kl_verdict": verdict(kl_lo, kl_hi, True),
                "kl_lower_on": f"{int((dkl < 0).sum())}/{len(common)}",
                "needle_diff": float(dnd.mean()),
                "needle_diff_ci": f"[{nd_lo:+.2f}, {nd_hi:+.2f}]",
                "needle_verdict": verdict(nd_lo, nd_hi, False),
            }
        )
    return rows


def _complete_haystacks(rows: list[dict]) -> list[dict]:
    """The sample rows of the haystacks that have every (method, ratio) of the file."""
    combos = {(r["method"], r["compression_ratio"]) for r in rows}
    hay = lambda r: (r.get("seed"), r["context_tokens"], r["needle_depth"], r["sample"])
    by: dict = {}
    for r in rows:
        by.setdefault(hay(r), {})[(r["method"], r["compression_ratio"])] = r
    return [r for h, rs in by.items() if set(rs) == combos for r in rs.values()]


def pooled(paths: list[str]) -> tuple[list[dict], list[dict]]:
    """Result records over the sample records of several saved runs (``--json`` files, e.g. one per
    seed), as if they were one run: each file's samples are tagged with its index (``run``) so
    that the paired comparison pairs samples within a file. A file given twice, or two files
    holding the same samples, are refused (they would count the same haystacks twice)."""
    from icml26.methods.kvcache.evaluate import result_record

    samples, order, seen = [], {}, {}
    for i, path in enumerate(paths):
        p = Path(path)
        try:
            if p.suffix == ".jsonl":  # --samples-jsonl: the haystacks whose every row finished
                rows = _complete_haystacks(
                    [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line]
                )
            else:
                rows = json.loads(p.read_text(encoding="utf-8"))["samples"]
            fingerprint = tuple(
                sorted(
                    (r["method"], r["compression_ratio"], r["context_tokens"], r["needle_depth"], r["sample"], r["kl"])
                    for r in rows
                )
            )
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(
                f"--pool-json {path}: not a saved benchmark run (a --json file of this script): {type(e).__name__}: {e}"
            )
        if not rows:
            raise SystemExit(f"--pool-json {path}: the run has no samples")
        if fingerprint in seen:
            raise SystemExit(f"--pool-json {path}: the same samples as {seen[fingerprint]} (a run given twice)")
        seen[fingerprint] = path
        for r in rows:
            samples.append({**r, "run": i})
            order.setdefault((r["method"], r["compression_ratio"]), []).append(samples[-1])
    return [result_record(m, ratio, recs) for (m, ratio), recs in order.items()], samples


OURS_PAIRED = ("capkv", "capkv-qa")  # each paired against every other method


def approximation(args) -> tuple[list[dict], list[dict]]:
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.data.text import load_corpus
    from icml26.methods.kvcache import KVPress, capture_layers, logdet
    from icml26.methods.kvcache import scoring as S

    model, tok = load_causal_lm("llama")
    text = "\n\n".join(load_corpus(args.corpus)[300:340])
    ids = tok(text[: args.approx_tokens * 8], add_special_tokens=False).input_ids[: args.approx_tokens]
    with torch.no_grad(), capture_layers(model) as cap:
        model(torch.tensor([ids]), use_cache=True, logits_to_keep=1)
    rows = []
    layers = [0, 7, 15, 23, 29]
    for ratio in args.ratios:
        caps = {m: [] for m in ("capkv", "knorm", "random", "streaming")}
        for li in layers:
            x = cap[li]
            t = x.keys.shape[2]
            n = S.n_kept(t, ratio)
            base = KVPress(method="capkv", sink_tokens=4, window_tokens=0, question_share=0.0)  # the leverage core
            p = base.params
            b, hkv, _, d = x.keys.shape
            w = S.capkv_token_weights(x, p)[0]  # (Hkv, g, T)
            if p.gqa == "pool":  # the objective CapKV and the greedy maximise: one channel per KV head
                w = w.mean(1, keepdim=True)  # (Hkv, 1, T)
            gr = KVPress(method="capkv-greedy", sink_tokens=4, window_tokens=0).select(x, n)[0]
            sel = {
                m: KVPress(method=m, sink_tokens=4, window_tokens=0, question_share=0.0).select(x, n)[0] for m in caps
            }
            for h in range(hkv):
                u = x.values[0, h].double()
                rho = logdet.ridge_of(u, w[h], p.ridge_ratio)
                cg = logdet.capacity(u, w[h], gr[h].tolist(), rho)
                for m in caps:
                    caps[m].append(logdet.capacity(u, w[h], sel[m][h].tolist(), rho) / cg)
        rows.append({"compression_ratio": ratio, **{f"{m}_over_greedy": sum(v) / len(v) for m, v in caps.items()}})
    # speed: ours vs kvpress CapPress on identical layer inputs
    speed = []
    ours = KVPress(method="capkv", compression_ratio=0.5)
    t0 = time.perf_counter()
    for x in cap:
        ours.select(x, S.n_kept(x.keys.shape[2], 0.5))
    t_ours = (time.perf_counter() - t0) / len(cap)
    row = {"tokens": len(ids), "capkv_ms_per_layer": 1000 * t_ours}
    if importlib.util.find_spec("kvpress") is not None and not args.no_kvpress:
        from icml26.methods.kvcache.kvpress_adapter import KvpressRunner, kvpress_press

        for name in ("CapPress", "LeverageScorePress", "SnapKVPress"):
            runner = KvpressRunner(kvpress_press(name, 0.5), model)
            for x in cap:
                runner.compress(x, 0)
            row[f"kvpress_{name}_ms_per_layer"] = 1000 * runner.stats["score_s"] / len(cap)
        row["CapPress_over_capkv_time"] = row["kvpress_CapPress_ms_per_layer"] / row["capkv_ms_per_layer"]
    speed.append(row)
    return rows, speed


def overhead(args) -> list[dict]:
    """Scoring + selection time of every layer / the model's prefill time, real SmolLM2 prompts.

    Prefill = the plain forward of the prompt (no hooks, best of ``--reps``); scoring = each
    method's ``compress`` of all 30 captured layers (best of ``--reps``), so both are measured
    in the same process on the same machine state."""
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.data.text import load_corpus
    from icml26.methods.kvcache import KVPress, capture_layers
    from icml26.methods.kvcache import scoring as S

    model, tok = load_causal_lm("llama")
    text = "\n\n".join(load_corpus(args.corpus)[200:400])
    rows = []
    for n in args.overhead_tokens:
        ids = tok(text[: n * 8], add_special_tokens=False).input_ids[:n]
        inp = torch.tensor([ids])
        best_prefill = float("inf")
        with torch.no_grad():
            for _ in range(args.reps):
                t0 = time.perf_counter()
                model(inp, use_cache=True, logits_to_keep=1)
                best_prefill = min(best_prefill, time.perf_counter() - t0)
            with capture_layers(model) as cap:
                model(inp, use_cache=True, logits_to_keep=1)
        row = {"tokens": len(ids), "prefill_s": best_prefill}
        for m in args.overhead_methods:
            press = KVPress(
                method=m,
                compression_ratio=0.5,
                **({"head_budget": "adaptive"} if m == "capkv" and args.adaptive else {}),
            )
            press.compress(cap[0], S.n_kept(len(ids), 0.5))  # warm-up (lazy init)
            best = float("inf")
            for _ in range(args.reps):
                press.reset_stats()
                for x in cap:
                    press.compress(x, S.n_kept(len(ids), 0.5))
                best = min(best, press.stats["score_s"])
            row[f"{m}_overhead"] = best / best_prefill
        rows.append(row)
        print(f"  overhead {row}", file=sys.stderr, flush=True)
        del cap
    return rows


DECODE_KVPRESS = ["kvpress:DecodingPress/KnormPress", "kvpress:DecodingPress/CapPress"]
DECODE_RESULTS = Path(__file__).resolve().parent / "results" / "evict_kv_decode.json"


def _decode_settings(args) -> dict:
    from icml26.methods.kvcache.decode import DECODE_METHODS

    methods = list(args.methods or DECODE_METHODS)
    if importlib.util.find_spec("kvpress") is not None and not args.no_kvpress:
        methods += list(args.decode_kvpress)
    return {
        "model": "llama",
        "corpus": args.corpus,
        "context_tokens": args.context_tokens[0],
        "depths": list(args.depths),
        "samples": args.samples,
        "budgets": list(args.budgets),
        "new_tokens": args.new_tokens,
        "timed_tokens": args.timed_tokens,
        "interval": args.interval,
        "methods": methods,
        "seed": args.seed,
        "overhead_baseline": "full cache timed before each policy",
    }  # runs before this key: the haystack's first full-cache steps


def relabel(doc: dict) -> dict:
    """Decode results saved before the renaming: their ``capkv`` ran what is now ``capkv-qa``
    (question_share 0.4); relabelled on load so tables never mix the two. A run that lists
    ``capkv-qa`` among its methods was made after the renaming: its ``capkv`` is the paper's."""
    if doc.get("method_names") == 2 or "capkv-qa" in doc.get("settings", {}).get("methods", []):
        doc["method_names"] = 2
        return doc
    for r in doc.get("samples", []):
        if r.get("method") == "capkv":
            r["method"] = "capkv-qa"
    st = doc.get("settings", {})
    if "methods" in st:
        st["methods"] = ["capkv-qa" if m == "capkv" else m for m in st["methods"]]
    doc["method_names"] = 2
    return doc


def decode_run(args) -> dict:
    """Run the haystacks of ``--results`` not saved yet (at most ``--max-haystacks``), saving
    after each; returns the saved document (settings, samples)."""
    from icml26.core.output import atomic_write_text
    from icml26.methods.kvcache import evaluate as E
    from icml26.methods.kvcache.decode import run_decode

    if args.print_only:  # the samples of every --results file (parts of one run: same settings)
        docs = [relabel(json.loads(Path(p).read_text(encoding="utf-8"))) for p in args.results if Path(p).exists()]
        if not docs:
            raise SystemExit(f"no results file among {args.results}")
        if any(d["settings"] != docs[0]["settings"] for d in docs):
            raise SystemExit("--results files with different settings cannot be pooled")
        seen, merged = set(), []
        for d in docs:
            for r in d["samples"]:
                k = (r["sample_index"], r["method"], r["decoding_budget_tokens"])
                if k not in seen:
                    seen.add(k)
                    merged.append(r)
        return {"settings": docs[0]["settings"], "samples": merged}
    if len(args.results) != 1:
        raise SystemExit("--results: one file per run (several only with --print-only)")
    path = Path(args.results[0])
    settings = _decode_settings(args)
    doc = {"settings": settings, "samples": [], "method_names": 2}
    if path.exists():
        doc = relabel(json.loads(path.read_text(encoding="utf-8")))
        if doc.get("settings") != settings:
            raise SystemExit(f"{path} holds a run with other settings ({doc.get('settings')}); pass another --results")
    doc.setdefault("references", {})
    n_total = len(args.depths) * args.samples
    n_combos = 1 + len(settings["methods"]) * len(args.budgets)
    if args.reuse:
        reuse_rows(doc, settings, args.reuse, keep=set(args.recompute or ()))
        atomic_write_text(path, json.dumps(doc, indent=0))
    done = {(r["sample_index"], r["method"], r["decoding_budget_tokens"]) for r in doc["samples"]}
    complete = {i for i in range(n_total) if sum(1 for d in done if d[0] == i) == n_combos}
    if args.indices:
        bad = [i for i in args.indices if not 0 <= i < n_total]
        if bad:
            raise SystemExit(f"--indices {bad}: haystacks are 0..{n_total - 1}")
        order = list(dict.fromkeys(args.indices))
    else:
        lo, hi = args.haystacks if args.haystacks else (0, n_total)
        order = list(range(max(0, lo), min(hi, n_total)))
    todo = [i for i in order if i not in complete][: args.max_haystacks or None]
    if not todo:
        return doc
    cfg = E.Config(
        mode="decode",
        methods=tuple(settings["methods"]),
        context_tokens=(settings["context_tokens"],),
        needle_depths=tuple(args.depths),
        samples=args.samples,
        corpus=args.corpus,
        decoding_budgets=tuple(args.budgets),
        new_tokens=args.new_tokens,
        timed_tokens=args.timed_tokens,
        decoding_interval_tokens=args.interval,
    )
    refs = {int(k): v for k, v in doc["references"].items()}  # sample index -> the full cache's generation
    one_by_one = (
        r
        for i in todo
        for r in run_decode(cfg, seed=args.seed, skip=set(range(n_total)) - {i}, done=done, references=refs)
    )
    for r in one_by_one:  # in the order asked (--indices), one haystack per call
        if r["kind"] != "sample":
            continue
        r.pop("kept_per_head", None)  # uniform budgets in decode mode: the per-head file adds nothing here
        si = r["sample_index"]
        doc["samples"].append(r)  # saved after every (haystack, policy, budget): a rerun resumes from the next one
        doc["references"][str(si)] = refs[si]
        atomic_write_text(path, json.dumps(doc, indent=0))
        n_done = sum(1 for x in doc["samples"] if x["sample_index"] == si)
        print(
            f"  haystack {si} {r['method']} {r['decoding_budget_tokens']} saved ({n_done}/{n_combos}; kl "
            f"{r['kl']:.4f}, "
            f"overhead {r['decode_overhead_ratio']:+.3f})",
            file=sys.stderr,
            flush=True,
        )
    return doc


def reuse_rows(doc: dict, settings: dict, files: list[str], keep: set) -> None:
    """Copy into ``doc`` the full cache's generations (``references``) and the sample rows of an
    earlier run (``files``: ``--results`` files whose settings equal ``settings`` except for the
    methods), for the methods of this run other than ``keep`` (``--recompute``), where ``doc``
    has none yet: a run with new rows re-runs only those, on the same prompts and generations."""
    methods = {"full", *settings["methods"]} - keep
    have = {(r["sample_index"], r["method"], r["decoding_budget_tokens"]) for r in doc["samples"]}
    same = {k: v for k, v in settings.items() if k != "methods"}
    for f in files:
        old = relabel(json.loads(Path(f).read_text(encoding="utf-8")))
        if {k: v for k, v in old.get("settings", {}).items() if k != "methods"} != same:
            raise SystemExit(f"--reuse {f}: its run has other settings than this one ({old.get('settings')})")
        for k, v in old.get("references", {}).items():
            doc["references"].setdefault(k, v)
        for r in old.get("samples", []):
            key = (r["sample_index"], r["method"], r["decoding_budget_tokens"])
            if r["method"] in methods and key not in have:
                doc["samples"].append({**r, "reused_from": Path(f).name})
                have.add(key)


def paired_decode(samples: list[dict], ours: str = "capkv") -> list[dict]:
    """CapKV minus each baseline per budget, paired on the same haystacks: KL difference (95%
    bootstrap over haystacks; better / worse / tie), answer-match difference, haystacks with lower KL."""
    import numpy as np

    from icml26.methods.kvcache.evaluate import bootstrap_mean_ci

    by: dict = {}
    for r in samples:
        by.setdefault((r["method"], r["decoding_budget_tokens"]), {})[r["sample_index"]] = r
    rows = []
    for (m, b), rs in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        mine = by.get((ours, b))
        if m in (ours, "full") or not mine:
            continue
        common = sorted(set(rs) & set(mine))
        dkl = np.array([mine[c]["kl"] - rs[c]["kl"] for c in common])
        dans = np.array([float(mine[c]["answer_match"]) - float(rs[c]["answer_match"]) for c in common])
        lo, hi = bootstrap_mean_ci(dkl)
        alo, ahi = bootstrap_mean_ci(dans)
        verdict = "too few" if len(common) < MIN_PAIRED else "better" if hi < 0 else "worse" if lo > 0 else "tie"
        rows.append(
            {
                "decoding_budget_tokens": b,
                "ours": ours,
                "baseline": m,
                "n": len(common),
                "kl_diff": float(dkl.mean()),
                "kl_diff_ci": f"[{lo:+.4f}, {hi:+.4f}]",
                "kl_verdict": verdict,
                "kl_lower_on": f"{int((dkl < 0).sum())}/{len(common)}",
                "answer_match_diff": float(dans.mean()),
                "answer_match_diff_ci": f"[{alo:+.2f}, {ahi:+.2f}]",
            }
        )
    return rows


def common_haystacks(samples: list[dict]) -> tuple[list[dict], str]:
    """The sample rows of the haystacks that every (method, budget) has (a part file may hold
    copied rows for more haystacks than its new rows), and a line saying what was left out ("" if
    nothing): every mean and pairing is then over the same haystacks."""
    have: dict = {}
    for r in samples:
        have.setdefault((r["method"], r["decoding_budget_tokens"]), set()).add(r["sample_index"])
    every = set.intersection(*have.values()) if have else set()
    alls = {r["sample_index"] for r in samples}
    if every == alls:
        return samples, ""
    short = sorted(f"{m}@{b} ({len(v)})" for (m, b), v in have.items() if v != alls)
    note = (
        f"Pooled over the {len(every)} haystacks that every method has; {len(alls - every)} others left out "
        f"(haystacks per row short of {len(alls)}: {', '.join(short)})\n"
    )
    return [r for r in samples if r["sample_index"] in every], note


def decode_tables(doc: dict) -> None:
    from icml26.methods.kvcache.decode import budget_verdicts, decode_result, mark_over_budget

    st = doc["settings"]
    smp, note = common_haystacks(doc["samples"])
    if not smp:
        print("no haystacks saved yet" if not doc["samples"] else note)
        return
    groups: dict = {}
    for r in smp:
        groups.setdefault((r["method"], r["decoding_budget_tokens"]), []).append(r)
    res = [
        decode_result(m, b, rs)
        for (m, b), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0] != "capkv", kv[0][0]))
    ]
    n = len({r["sample_index"] for r in smp})
    prompt = sorted(r["prompt_tokens"] for r in smp if r["method"] == "full")
    print(
        f"## Decoding-time compression: SmolLM2-135M, {n} haystacks ({st['corpus']}, prompts "
        f"{prompt[0]}-{prompt[-1]} tokens: "
        f"{st['context_tokens']}-token haystack with a needle + question), {st['new_tokens']} new tokens, "
        "re-compression every "
        f"{st['interval']} tokens, seed {st['seed']}\n"
    )
    print(
        "KL: mean per-token KL(full || compressed) teacher-forced on the full-cache generation [bootstrap "
        "95% over haystacks]; "
        f"answer / needle: the first {st['timed_tokens']} greedy tokens' answer span equals the full cache's "
        "/ holds the code; "
        "peak: keys + values held while a step attends; ms/token: greedy steps with the press "
        "(re-compression included); "
        + (
            "overhead: ms/token / the full cache's on the same steps, timed right before each policy - 1\n"
            if st.get("overhead_baseline")
            else "overhead: ms/token / the full cache's (same haystack) - 1\n"
        )
    )
    if note:
        print(note)
    full = next((r for r in smp if r["method"] == "full"), None)
    if full:  # the bytes of one position (all layers): the full cache's last step attends prompt + new tokens
        mark_over_budget(res, full["peak_cache_bytes"] // (full["prompt_tokens"] + full["new_tokens"]))
    print(
        "over budget: peak above (budget + interval) positions, what a policy keeping the budget holds; such "
        "rows are left out of the verdicts and targets\n"
    )
    for r in res:
        r["kl_95ci"] = f"[{r['kl_ci'][0]:.4f}, {r['kl_ci'][1]:.4f}]" if r["kl_ci"] else "n < 5"
        r["peak_mb"] = r["peak_cache_bytes"] / 2**20
        if "over_budget" in r:
            ratio = r["peak_cache_bytes"] / r["budget_peak_bytes"]
            r["over_budget_note"] = f"OVER ({ratio:.1f}x)" if r["over_budget"] else "no"
        else:
            r["over_budget_note"] = "-"
    print(
        table(
            res,
            [
                "method",
                "decoding_budget_tokens",
                "kl",
                "kl_95ci",
                "top1_agreement",
                "answer_match",
                "needle_match",
                "peak_mb",
                "over_budget_note",
                "decode_ms_per_token",
                "decode_overhead_ratio",
                "score_ms_per_token",
            ],
        )
    )
    print()
    print(
        "## Verdicts at 95% (icml26.core.verdict: a winner only when its interval separates it; full and "
        "rows over budget left out)\n"
    )
    vs = budget_verdicts(res, st["budgets"])
    for b in st["budgets"]:
        for metric in ("kl", "needle"):
            m = f"{metric}_at_{b}"
            print(
                f"- {metric} at budget {b}: best {vs[f'best_{m}'] or 'none'}; tied with the leader: "
                f"{', '.join(vs[f'tied_with_best_{m}'])}"
            )
        if vs[f"over_budget_at_{b}"]:
            print(f"- left out at budget {b} (over budget): {', '.join(vs[f'over_budget_at_{b}'])}")
    print()
    over = {(r["method"], r["decoding_budget_tokens"]) for r in res if r.get("over_budget")}
    pair = [row for ours in OURS_PAIRED if any(r["method"] == ours for r in smp) for row in paired_decode(smp, ours)]
    for p in pair:
        p["baseline_over_budget"] = (p["baseline"], p["decoding_budget_tokens"]) in over
    print("## capkv and capkv-qa minus each other method, paired on the same haystacks (bootstrap 95%)\n")
    print(
        table(
            pair,
            [
                "decoding_budget_tokens",
                "ours",
                "baseline",
                "n",
                "kl_diff",
                "kl_diff_ci",
                "kl_verdict",
                "kl_lower_on",
                "answer_match_diff",
                "answer_match_diff_ci",
                "baseline_over_budget",
            ],
        )
    )
    print()
    rows = decode_targets(smp, pair)
    print(
        "## Targets, for the paper's capkv and for capkv-qa: KL at least as good as every baseline that keeps "
        "the budget (better or a tie at 95%, paired; the other CapKV row is not a baseline); decode overhead "
        "< 15% of full-cache decode, met only when the 95% interval's upper end is below 0.15\n"
    )
    print(table(rows, list(rows[0].keys())) if rows else "no CapKV rows")
    doc["results"], doc["paired"], doc["targets"] = res, pair, rows


def decode_targets(smp: list[dict], pair: list[dict]) -> list[dict]:
    """One row per (budget, capkv | capkv-qa): KL not worse than any in-budget baseline (paired
    verdicts; the baselines it is worse than), the decode overhead, its bootstrap interval over
    haystacks and whether the interval's upper end is under 15%."""
    from icml26.core.stats import bootstrap_mean_ci

    rows = []
    for b in sorted({r["decoding_budget_tokens"] for r in smp if r["method"] != "full"}):
        for ours in OURS_PAIRED:
            cap = [r for r in smp if r["method"] == ours and r["decoding_budget_tokens"] == b]
            if not cap:
                continue
            ps = [
                p
                for p in pair
                if p["decoding_budget_tokens"] == b
                and p["ours"] == ours
                and p["baseline"] not in OURS_PAIRED
                and not p.get("baseline_over_budget")
            ]
            verdicts = [p["kl_verdict"] for p in ps]
            kl_ok = (
                f"too few (n < {MIN_PAIRED})"
                if "too few" in verdicts or not verdicts
                else all(v in ("better", "tie") for v in verdicts)
            )
            ov = [r["decode_overhead_ratio"] for r in cap]
            lo, hi = bootstrap_mean_ci(ov)
            rows.append(
                {
                    "decoding_budget_tokens": b,
                    "method": ours,
                    "kl_not_worse_than_every_baseline": kl_ok,
                    "kl_worse_than": ", ".join(p["baseline"] for p in ps if p["kl_verdict"] == "worse") or "-",
                    "decode_overhead": sum(ov) / len(ov),
                    "overhead_95ci": f"[{lo:+.3f}, {hi:+.3f}]",
                    "overhead_under_15pct": f"too few (n < {MIN_PAIRED})" if len(ov) < MIN_PAIRED else hi < 0.15,
                }
            )
    return rows


def table(rows: list[dict], cols: list[str]) -> str:
    def f(v):
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 1e4 else f"{v:.3e}"
        return str(v)

    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(f(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def _run_in_kvpress_venv(python: str | None) -> None:
    """Without kvpress here: re-run this script (same arguments) under ``python`` or the kvpress
    peer venv's python, on this checkout's code; return (ours only) when there is neither."""
    import os

    if importlib.util.find_spec("kvpress") is not None or os.environ.get("ICML26_PEER_RERUN"):
        return
    from icml26.core.peers import find_peer, peer_env

    py = python or find_peer("kvpress")
    if py is None:
        print(
            "kvpress is not installed here and there is no kvpress peer venv (`make peers`): running ours only",
            file=sys.stderr,
        )
        return
    if not Path(py).exists():
        sys.exit(f"--kvpress-python {py}: no such file")
    env = peer_env("kvpress")
    env["ICML26_PEER_RERUN"] = "1"
    print(f"kvpress: re-running under {py}", file=sys.stderr, flush=True)
    os.execve(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]], env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context-tokens", type=int, nargs="+", default=[1024])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.5, 0.75])
    ap.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.7, 0.9])
    ap.add_argument(
        "--samples", type=int, default=4, help="haystacks per depth (needles = haystacks = depths x samples)"
    )
    ap.add_argument("--continuation-tokens", type=int, default=64)
    ap.add_argument("--methods", nargs="+", default=None)
    ap.add_argument("--corpus", default="python-docs")
    ap.add_argument("--question-agnostic", action="store_true")
    ap.add_argument("--no-kvpress", action="store_true")
    ap.add_argument(
        "--kvpress-methods",
        nargs="*",
        default=KVPRESS,
        help="kvpress presses run beside ours when kvpress is installed",
    )
    ap.add_argument("--approx-tokens", type=int, default=512)
    ap.add_argument("--skip-approx", action="store_true", help="skip the approximation and speed tables")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument(
        "--overhead-tokens",
        type=int,
        nargs="*",
        default=[1024, 4096],
        help="prompt lengths for the overhead table (none: skip)",
    )
    ap.add_argument("--overhead-methods", nargs="+", default=["capkv", "snapkv", "expected-attention", "tova"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--adaptive", action="store_true", help="CapKV with head-adaptive budgets (the default config sets this)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write all rows to this JSON file")
    ap.add_argument(
        "--samples-jsonl", default=None, metavar="FILE", help="append each sample record to FILE as it finishes"
    )
    ap.add_argument(
        "--pool-json",
        nargs="+",
        default=None,
        metavar="FILE",
        help="no new runs: print the quality and paired tables over the samples of these saved --json runs together",
    )
    ap.add_argument(
        "--kvpress-python",
        default=None,
        metavar="PY",
        help="python of a venv with kvpress to re-run this script in (default: the kvpress peer venv of `make peers`)",
    )
    ap.add_argument("--mode", choices=["prefill", "decode"], default="prefill")
    ap.add_argument("--budgets", type=int, nargs="+", default=[256, 512], help="decode: cache budgets (tokens)")
    ap.add_argument("--new-tokens", type=int, default=512, help="decode: tokens generated per haystack")
    ap.add_argument(
        "--timed-tokens", type=int, default=16, help="decode: greedy steps with the press (answer span, ms/token)"
    )
    ap.add_argument("--interval", type=int, default=16, help="decode: re-compression interval (tokens)")
    ap.add_argument(
        "--decode-kvpress", nargs="*", default=DECODE_KVPRESS, help="decode: kvpress presses run beside ours"
    )
    ap.add_argument(
        "--results",
        nargs="+",
        default=[str(DECODE_RESULTS)],
        help="decode: the resumable results file (with --print-only: several parts of one run, pooled)",
    )
    ap.add_argument(
        "--haystacks",
        type=int,
        nargs=2,
        default=None,
        metavar=("FROM", "TO"),
        help="decode: run only haystacks FROM..TO-1 (parts in parallel, each with its own --results)",
    )
    ap.add_argument(
        "--indices",
        type=int,
        nargs="+",
        default=None,
        metavar="I",
        help=(
            "decode: run these haystacks, in this order (e.g. one needle depth after another, so a part "
            "stopped early stays balanced)"
        ),
    )
    ap.add_argument("--max-haystacks", type=int, default=0, help="decode: stop after this many new haystacks (0: all)")
    ap.add_argument(
        "--reuse",
        nargs="+",
        default=None,
        metavar="FILE",
        help=(
            "decode: earlier --results files of the same settings (other methods): their full-cache generations "
            "and the rows of this run's methods are copied in, so only new rows run"
        ),
    )
    ap.add_argument(
        "--recompute", nargs="+", default=None, metavar="METHOD", help="decode, with --reuse: rows not copied"
    )
    ap.add_argument("--print-only", action="store_true", help="decode: reprint the tables of --results")
    args = ap.parse_args()
    if args.mode == "decode":
        if not args.no_kvpress and not args.print_only:
            _run_in_kvpress_venv(args.kvpress_python)
        import torch

        print(f"# evict-kv decode benchmark (torch {torch.__version__}, {torch.get_num_threads()} threads)\n")
        doc = decode_run(args)
        decode_tables(doc)
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1))
        return
    if args.json and not Path(args.json).resolve().parent.is_dir():
        ap.error(f"--json {args.json}: the folder {str(Path(args.json).resolve().parent)!r} does not exist")
    if not args.no_kvpress and not args.pool_json:
        _run_in_kvpress_venv(args.kvpress_python)

    import torch

    header = f"# evict-kv benchmark (torch {torch.__version__}, {torch.get_num_threads()} threads)\n"
    if args.pool_json:
        res, smp = pooled(args.pool_json)  # a bad file stops here, before anything is printed
        args.skip_approx, args.overhead_tokens, args.json = True, [], None
        print(header)
    else:
        print(header)
        res, smp = ([], []) if args.skip_quality else quality(args)
    pair = []
    if res:
        for r in res:
            r["kept_mb"] = r["kept_bytes"] / 2**20
            r["needle"] = (
                f"{r['needle_hits']}/{r['n_samples']} [{r['needle_accuracy_ci'][0]:.2f}, "
                f"{r['needle_accuracy_ci'][1]:.2f}]"
            )
            r["kl_95ci"] = f"[{r['kl_ci'][0]:.4f}, {r['kl_ci'][1]:.4f}]"
        n_needles = res[0]["n_samples"]
        where = (
            f"pooled over {len(args.pool_json)} runs ({', '.join(args.pool_json)})"
            if args.pool_json
            else f"seed {args.seed}"
        )
        print(f"## Quality: SmolLM2-135M, {n_needles} needles (= haystacks), {where}\n")
        print(
            "needle: hits/n [Wilson 95%]; KL: mean per-token KL(full || evicted) over the continuation, "
            "averaged over haystacks, [bootstrap 95% over haystacks]\n"
        )
        print(
            table(
                res,
                [
                    "method",
                    "compression_ratio",
                    "needle",
                    "kl",
                    "kl_95ci",
                    "top1_agreement",
                    "perplexity",
                    "kept_mb",
                    "overhead_ratio",
                ],
            )
        )
        print()
        from icml26.methods.kvcache.evaluate import prefill_verdicts

        print("## Verdicts at 95% (icml26.core.verdict: a winner only when its interval separates it)\n")
        for ratio in sorted({r["compression_ratio"] for r in res if r["method"] != "full"}):
            v = prefill_verdicts([r for r in res if r["compression_ratio"] == ratio], ratio)
            for metric in ("needle", "kl"):
                best, tied = v[f"best_{metric}_at_{ratio}"], v[f"tied_with_best_{metric}_at_{ratio}"]
                print(f"- {metric} at {ratio}: best {best or 'none'}; tied with the leader: {', '.join(tied)}")
        print()
        pair = [row for ours in OURS_PAIRED for row in paired(smp, ours)]
        print(
            "## capkv and capkv-qa minus each other method, paired on the same samples (bootstrap 95% over haystacks)\n"
        )
        print(
            table(
                pair,
                [
                    "context_tokens",
                    "compression_ratio",
                    "ours",
                    "baseline",
                    "n",
                    "kl_diff",
                    "kl_diff_ci",
                    "kl_verdict",
                    "kl_lower_on",
                    "needle_diff",
                    "needle_diff_ci",
                    "needle_verdict",
                ],
            )
        )
        print()
    if args.overhead_tokens:
        ov = overhead(args)
        print("## Scoring overhead: scoring + selection of all layers / prefill (best of reps, same process)\n")
        print(table(ov, list(ov[0].keys())))
        print()
    else:
        ov = []
    approx, speed = ([], []) if args.skip_approx else approximation(args)
    if approx:
        print(
            "## Approximation: capacity of the selection / capacity of the exact greedy log-det "
            f"({args.approx_tokens} tokens, layers 0/7/15/23/29)\n"
        )
        print(table(approx, list(approx[0].keys())))
        print("\n## Scoring speed on identical inputs\n")
        print(table(speed, list(speed[0].keys())))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "quality": res,
                    "paired": pair,
                    "samples": smp,
                    "overhead": ov,
                    "approximation": approx,
                    "speed": speed,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
