"""CPU-time ratios behind ``icml26 quantize``'s run-time estimate (fptquant.COST).

Times the parts of a quantize run on SmolLM2-135M with one thread (``time.process_time``, so
the figures hold on a loaded machine): FP evaluation and greedy continuations, quantized
evaluation at W4A16 / W4A8 for RTN and FPTQuant, the rotations and merges of ``prepare``
with 0 and 4 local steps, and two end-to-end FPTQuant steps. Writes the JSON to --out.

    OMP_NUM_THREADS=1 python benchmarks/quantize_cost.py --out runs/quantize_cost.json
"""

import argparse
import copy
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="quantize_cost.json")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from icml26.core.data.lm import load_causal_lm
    from icml26.core.recipe import resolve
    from icml26.methods.quantization import evaluate as E
    from icml26.methods.quantization import fptquant as m
    from icml26.methods.quantization import qmodel as QM
    from icml26.methods.quantization import train as TR

    ct = time.process_time
    cfg = resolve(m.Config, "quantize", None, ["eval_tokens=1024", "calib_tokens=1024", "local_steps=4", "e2e_steps=2"])
    out: dict = {}
    fp, tok = load_causal_lm("llama")
    fp.eval()
    for p in fp.parameters():
        p.requires_grad_(False)
    calib, evalc, e2e, _ = m.load_text(cfg, tok)
    prompts = [c[:, :32] for c in evalc[:1]]
    t = ct()
    E.perplexity(fp, evalc)
    out["fp_eval_1024"] = ct() - t
    t = ct()
    E.greedy(fp, prompts, 16)
    out["fp_greedy_1x16"] = ct() - t
    t = ct()
    m.prepare("fptquant", fp, resolve(m.Config, "quantize", None, ["local_steps=0"]), calib, 0)
    out["fptquant_prep_local0"] = ct() - t
    for method in ("rtn", "fptquant"):
        t = ct()
        base, ex = m.prepare(method, fp, cfg, calib, 0)
        out[f"{method}_prep_local4"] = ct() - t
        QM.quantize_model(
            base,
            QM.QSpec(wbits=16, abits=16, kvbits=16, head_bits=16),
            online_down_hadamard=ex["online_down_hadamard"],
            dyn_scale=ex["dyn_scale"],
        )
        QM.quantize_embeddings(base, 8)
        for st in ("W4A16", "W4A8"):
            QM.set_spec(base, cfg.spec(st))
            if method == "fptquant":
                params = copy.deepcopy(ex["params"])
                t = ct()
                TR.train_e2e(
                    base,
                    fp,
                    ex["bases"],
                    params,
                    ex["dm"],
                    e2e,
                    steps=2,
                    lr=1e-3,
                    down_hadamard=ex["online_down_hadamard"],
                )
                out[f"e2e_2steps_{st}"] = ct() - t
            t = ct()
            E.perplexity(base, evalc)
            out[f"{method}_{st}_eval_1024"] = ct() - t
            t = ct()
            E.greedy(base, prompts, 16)
            out[f"{method}_{st}_greedy_1x16"] = ct() - t
        print(json.dumps(out), flush=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
