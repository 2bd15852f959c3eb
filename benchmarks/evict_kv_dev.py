"""Dev-split sweep of CapKV variants (how CapKV's defaults are chosen; never on the reported split).

Same harness as ``icml26 evict-kv`` (one prefill per sample, every policy applied to the
captured layers, needle asked with the question in the compressed prompt, KL over the real
continuation of the plain haystack), but each "variant" is a named set of press options, so
several CapKV configurations run on identical inputs in one process. The reported benchmark
uses seed 0; the dev split uses other seeds (other haystack offsets, needle keys and codes).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/evict_kv_dev.py --seed 1 --samples 2 \\
        --variant base:method=capkv --variant r50:method=capkv,recent_share=0.5 --variant streaming:method=streaming \\
        --jsonl dev.jsonl

Rows already in ``--jsonl`` (same variant, ratio, length, depth, sample) are not run again, so a
sweep can be extended; the summary reads the whole file. Summary: mean KL with a bootstrap
interval over haystacks, needle hits with a Wilson interval, and the paired KL difference to
``--reference`` (bootstrap over haystacks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_variant(spec: str) -> tuple[str, dict]:
    from icml26.core.recipe import parse_yaml_text  # the project's YAML rules (1e-2 is a float)

    name, _, rest = spec.partition(":")
    kw = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        kw[k.strip()] = parse_yaml_text(v)
    kw.setdefault("method", name)
    return name, kw


def summarise(rows: list[dict], reference: str) -> str:
    import numpy as np

    from icml26.methods.kvcache.evaluate import bootstrap_mean_ci, wilson_interval

    keys = sorted({(r["variant"], r["compression_ratio"]) for r in rows}, key=lambda k: (k[1], k[0]))
    by = {
        k: {
            (r["context_tokens"], r["needle_depth"], r["sample"]): r
            for r in rows
            if (r["variant"], r["compression_ratio"]) == k
        }
        for k in keys
    }
    out = [
        "| variant | ratio | n | KL mean [95% CI] | KL - ref [95% CI] | needle hits | Wilson 95% |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in keys:
        rs = by[k]
        kl = [r["kl"] for r in rs.values()]
        lo, hi = bootstrap_mean_ci(kl)
        hits = sum(r["needle_correct"] for r in rs.values())
        wl, wh = wilson_interval(hits, len(rs))
        ref = by.get((reference, k[1]), {})
        common = sorted(set(rs) & set(ref))
        if common and k[0] != reference:
            d = np.array([rs[c]["kl"] - ref[c]["kl"] for c in common])
            dl, dh = bootstrap_mean_ci(d)
            diff = f"{d.mean():+.4f} [{dl:+.4f}, {dh:+.4f}]"
        else:
            diff = ""
        out.append(
            f"| {k[0]} | {k[1]} | {len(rs)} | {np.mean(kl):.4f} [{lo:.4f}, {hi:.4f}] | {diff} | "
            f"{hits}/{len(rs)} | [{wl:.2f}, {wh:.2f}] |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--context-tokens", type=int, nargs="+", default=[1024])
    ap.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.25, 0.4, 0.55, 0.7, 0.85])
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.5, 0.75])
    ap.add_argument("--continuation-tokens", type=int, default=64)
    ap.add_argument(
        "--variant", action="append", default=[], help="name:key=value,... (press options; method defaults to name)"
    )
    ap.add_argument("--reference", default="base")
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--summary-only", action="store_true")
    args = ap.parse_args()

    path = Path(args.jsonl)
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    if not args.summary_only:
        import torch

        from icml26.core.data.lm import load_causal_lm
        from icml26.methods.kvcache import evaluate as E
        from icml26.methods.kvcache.press import KVPress, capture_layers, compress_captured

        variants = dict(parse_variant(v) for v in args.variant)
        done = {
            (r["variant"], r["compression_ratio"], r["context_tokens"], r["needle_depth"], r["sample"]) for r in rows
        }
        model, tok = load_causal_lm("llama")
        cfg = E.Config(
            context_tokens=tuple(args.context_tokens),
            needle_depths=tuple(args.depths),
            samples=args.samples,
            continuation_tokens=args.continuation_tokens,
        )
        samples = E.make_samples(cfg, tok, args.seed)
        with torch.no_grad(), path.open("a") as fh:
            for smp in samples:
                sid = (smp["length"], smp["depth"], smp["sample"])
                todo = [(n, r) for n in variants for r in args.ratios if (n, r, *sid) not in done]
                if not todo:
                    continue
                ctx, q = smp["context"], smp["question"]
                with capture_layers(model) as cap_n:
                    last_n = model(torch.tensor([ctx + q]), use_cache=True, logits_to_keep=1).logits[0, -1].float()
                with capture_layers(model) as cap_f:
                    model(torch.tensor([smp["plain"]]), use_cache=True, logits_to_keep=1)
                full = compress_captured(KVPress(method="streaming", compression_ratio=0.0), cap_f, model.config)
                _, _, _, ref = E._fidelity(model, full, smp["plain_continuation"], len(smp["plain"]), None)
                del full
                for name, ratio in todo:
                    press = KVPress(compression_ratio=ratio, seed=args.seed, **variants[name])
                    cache = compress_captured(press, cap_n, model.config)
                    ans = E._greedy_answer(model, tok, cache, q, len(ctx) + len(q), 8, first_logits=last_n)
                    del cache
                    cache = compress_captured(press, cap_f, model.config)
                    kl, top1, nll, _ = E._fidelity(model, cache, smp["plain_continuation"], len(smp["plain"]), ref)
                    rec = {
                        "variant": name,
                        "compression_ratio": ratio,
                        "context_tokens": sid[0],
                        "needle_depth": sid[1],
                        "sample": sid[2],
                        "seed": args.seed,
                        "needle_correct": E.needle_correct(ans, smp["answer"]),
                        "answer": ans.strip(),
                        "code": smp["answer"],
                        "kl": kl,
                        "top1_agreement": top1,
                        "options": variants[name],
                    }
                    rows.append(rec)
                    fh.write(json.dumps(rec) + "\n")
                    fh.flush()
                print(f"  sample {sid} done", file=sys.stderr, flush=True)
                del cap_n, cap_f
    print(summarise(rows, args.reference))


if __name__ == "__main__":
    main()
