"""``icml26 muse eval``: drop-in perplexity of a pretrained model with ``attn_implementation="muse"``
per method and context length, exact SDPA as the reference."""

from __future__ import annotations

import math
import time
from typing import Iterator

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from icml26.core.data.lm import model_path
from icml26.core.errors import InputError
from icml26.core.progress import progress
from icml26.core.seed import seed_everything
from icml26.methods.attention import hf
from icml26.methods.attention import muse as M
from icml26.methods.attention.config import Config
from icml26.methods.attention.data import eval_windows
from icml26.ops import muse as kernel


def run_eval(cfg: Config, *, seed: int = 0, device: str = "cpu", reference: dict | None = None) -> Iterator[dict]:
    """Perplexity per (method, context_tokens) on ``windows`` windows of the ``eval_split`` split (test by
    default; "val" to choose settings without touching the test windows); sdpa is the reference.
    ``reference``: {context_tokens: sdpa perplexity} measured before on the same windows (sdpa
    is then not run again at that length, and no sdpa record is yielded for it)."""
    seed_everything(seed)
    torch.set_num_threads(cfg.threads)
    hf.register(cfg.settings())
    path = model_path(cfg.model)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = (
        AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch.float32, local_files_only=True, attn_implementation="muse"
        )
        .eval()
        .to(device)
    )
    methods = ["sdpa"] + [m_ for m_ in cfg.methods if m_ != "sdpa"]
    results = []
    for n in cfg.context_tokens:
        wins, data = eval_windows(tok, cfg, n)
        feats = hf.check_model(model.config, n)  # one warning line before the run when MuSe cannot cover it
        data.update(feats)
        yield data
        if feats and feats["muse_layers"] == 0 and any(m_ != "sdpa" for m_ in methods):
            raise InputError(
                f"muse eval: every layer of this model has {feats['attention_features']} at {n} tokens, which MuSe "
                "does not compute: no MuSe figure can be reported (use --method sdpa, or a shorter context)"
            )
        ref_ppl = (reference or {}).get(n)
        for mth in methods:
            if mth == "sdpa" and ref_ppl is not None:
                continue
            nll, count, sec = 0.0, 0, 0.0
            c0 = hf.counters()
            with (
                hf.settings(cfg.settings(mth), method=mth),
                torch.no_grad(),
                progress(len(wins), f"muse eval {mth} n={n}") as bar,
            ):
                for w in wins:
                    ids = torch.tensor([w], device=device)
                    t0 = time.perf_counter()
                    logits = model(ids).logits
                    sec += time.perf_counter() - t0
                    for r0 in range(0, n - 1, 1024):  # rows in chunks: float64 log-softmax without 8k x vocab x 8 B
                        r1 = min(n - 1, r0 + 1024)
                        lp = torch.log_softmax(logits[0, r0:r1].double(), -1)
                        nll += -lp.gather(-1, ids[0, r0 + 1 : r1 + 1, None]).sum().item()
                    del logits
                    count += n - 1
                    bar.advance(1, ppl=math.exp(nll / count))
            c1 = hf.counters()
            ppl = math.exp(nll / count)
            ref_ppl = ppl if mth == "sdpa" else ref_ppl
            rec = {
                "kind": "result",
                "method": mth,
                "context_tokens": n,
                "perplexity": ppl,
                "perplexity_ratio": ppl / ref_ppl,
                "seconds": sec,
                "windows": len(wins),
                "split": data["split"],
            }
            if mth != "sdpa":
                rec["sparsity"] = M.sparsity(n, kernel.exact_pairs_shape(n, cfg.settings(mth)))
                rec["muse_calls"] = c1["calls"] - c0["calls"]  # attention calls MuSe computed
                rec["exact_calls"] = c1["fallbacks"] - c0["fallbacks"]  # and those exact attention computed
                if feats:
                    rec["attention_features"], rec["fallback"] = feats["attention_features"], feats["fallback"]
            results.append(rec)
            yield rec
    summ = {"kind": "summary", "model": cfg.model, "windows": cfg.windows}
    for r in results:
        if r["method"] == "muse":
            summ[f"muse_perplexity_ratio_{r['context_tokens']}"] = r["perplexity_ratio"]
    yield summ
