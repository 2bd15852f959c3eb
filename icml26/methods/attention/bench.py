"""``icml26 muse bench``: post-RoPE q/k/v of one layer captured from a model, every method's
causal attention timed and compared with SDPA (relative squared error, sparsity)."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from typing import Iterator

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from icml26.core.data.lm import load_causal_lm
from icml26.core.errors import InputError
from icml26.core.progress import progress
from icml26.core.seed import seed_everything
from icml26.methods.attention import hf
from icml26.methods.attention import muse as M
from icml26.methods.attention.config import Config
from icml26.methods.attention.data import eval_windows
from icml26.ops import muse as kernel


class _Captured(Exception):
    pass


def capture_qkv(model, ids, layer: int):
    """Post-RoPE (q, k, v) of decoder layer ``layer`` on token ids (1, T): the layers before it
    run with exact SDPA, the forward stops there. Returns (q (1, H, T, D), k, v (1, Hkv, T, D), scaling)."""
    got = {}

    def fn(module, query, key, value, attention_mask, **kw):
        if module.layer_idx == layer:
            got.update(
                q=query.detach().clone(), k=key.detach().clone(), v=value.detach().clone(), scale=kw.get("scaling")
            )
            raise _Captured
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kw)

    AttentionInterface.register("icml26_capture", fn)
    old = model.config._attn_implementation
    model.set_attn_implementation("icml26_capture")
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    except _Captured:
        pass
    finally:
        model.set_attn_implementation(old)
    if not got:
        raise InputError(f"layer {layer} was not reached (the model has {model.config.num_hidden_layers} layers)")
    return got["q"], got["k"], got["v"], got["scale"]


def _timed(fn, repeats: int, cpu: list | None = None):
    """(output, median wall seconds); with ``cpu``, the median CPU seconds of this process is appended
    to it (on a shared machine wall time includes other jobs' time slices, CPU time does not)."""
    times, cpus, out = [], [], None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    if cpu is not None:
        cpu.append(statistics.median(cpus))
    return out, statistics.median(times)


def bench_tensors(cfg: Config, q, k, v, scale, n: int, *, methods=None) -> Iterator[dict]:
    """One result per method on given q (1, H, N, D), k, v (1, Hkv, N, D). sdpa runs first."""
    methods = list(methods or cfg.methods)
    kernel.backend()  # load (or build) the C++ kernel before anything is timed
    with torch.no_grad():
        c_sdpa: list = []
        exact, t_sdpa = _timed(lambda: M.sdpa(q, k, v, scale=scale), cfg.repeats, c_sdpa)
        ref = exact.double()
        den = (ref**2).sum().item()
        for mth in methods:
            if mth == "sdpa":
                out, sec, sp, cpu = exact, t_sdpa, 0.0, c_sdpa
            else:
                s = cfg.settings(mth)
                cpu: list = []
                out, sec = _timed(lambda: kernel.attention(q, k, v, s, scale=scale), cfg.repeats, cpu)
                sp = M.sparsity(n, kernel.exact_pairs(q, k, s))
            err = ((out.double() - ref) ** 2).sum().item() / den
            yield {
                "kind": "result",
                "method": mth,
                "context_tokens": n,
                "seconds": sec,
                "speedup_vs_sdpa": t_sdpa / sec,
                "cpu_seconds": cpu[0],  # this process's CPU time (one thread): immune to other jobs' load
                "speedup_vs_sdpa_cpu": c_sdpa[0] / cpu[0],
                "rel_squared_error": err,
                "sparsity": sp,
                "backend": "torch" if mth == "sdpa" else kernel.backend_for(q, s),
                "threads": cfg.threads,
            }


def run_bench(cfg: Config, *, seed: int = 0, device: str = "cpu") -> Iterator[dict]:
    seed_everything(seed)
    torch.set_num_threads(cfg.threads)
    model, tok = load_causal_lm(cfg.model)
    feats = hf.check_model(model.config, max(cfg.context_tokens))
    if feats:
        raise InputError(
            f"muse bench: layer {cfg.layer}'s attention has {feats['attention_features']}, which MuSe does not "
            "compute: its error and speed-up would not be those of this model's attention"
        )
    results = []
    with progress(len(cfg.context_tokens) * len(cfg.methods), "muse bench") as bar:
        for n in cfg.context_tokens:
            wins, data = eval_windows(tok, replace(cfg, windows=1), n)
            yield data
            q, k, v, scale = capture_qkv(model, wins[0], cfg.layer)
            for rec in bench_tensors(cfg, q, k, v, scale, n):
                results.append(rec)
                bar.advance(
                    1, tokens=n, method=rec["method"], speedup=rec["speedup_vs_sdpa"], rse=rec["rel_squared_error"]
                )
                yield rec
    yield bench_summary(results, cfg)


def bench_summary(results: list[dict], cfg: Config) -> dict:
    by = {(r["method"], r["context_tokens"]): r for r in results}
    out = {"kind": "summary", "model": cfg.model, "layer": cfg.layer, "threads": cfg.threads}
    for n in cfg.context_tokens:
        if ("muse", n) in by:
            out[f"muse_speedup_{n}"] = by[("muse", n)]["speedup_vs_sdpa"]
            out[f"muse_rse_{n}"] = by[("muse", n)]["rel_squared_error"]
            if ("block", n) in by:
                out[f"muse_beats_block_{n}"] = (
                    by[("muse", n)]["rel_squared_error"] < by[("block", n)]["rel_squared_error"]
                )
    return out
