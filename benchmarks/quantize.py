"""Benchmark of ``icml26 quantize`` on SmolLM2-135M (CPU).

Prints, in one run:
 1. perplexity of FP, RTN, SmoothQuant, QuaRot-style and FPTQuant at W4A4, W4A8, W8A8
    (recipes/quantize/smollm2.yaml, or ``--records FILE`` to print a finished
    ``icml26 quantize ... --out DIR`` run's DIR/records.jsonl instead of recomputing);
 2. the packed GEMV kernels against FP32 ``F.linear``, torch's own ``_weight_int8pack_mm`` /
    ``_weight_int4pack_mm_for_cpu``, and the pure-torch ``_ref`` twin, with the effective
    bandwidth against the machine's measured copy bandwidth;
 3. whole-model prefill / decode tokens/s and memory of FP32 vs the packed INT4 model
    (W4A16 RTN, per-channel; lm_head / embedding INT8): Hugging Face forward and ``generate``
    and the lean runtime, each model in its own process so that peak RSS is the model's own,
    then both lean runtimes in one process with alternating decode trials (the ratio that the
    3x decode target is judged on), and the cost of simulated per-token A8;
 4. with ``--rotation-analysis``: per-linear weight / output quantization errors of the original
    vs the QuaRot-style rotated weights (why rotation does not lead at W4A8).

With ``--device cuda`` (a GPU machine; see benchmarks/quantize_cuda.sh) it prints instead the CUDA
kernel's GEMV / small-M GEMM times against torch FP16 / FP32 matmul and the bandwidth bound, and
SmolLM2 decode with the packed INT4 model on the GPU.

Usage: .venv/bin/python benchmarks/quantize.py [--records DIR/records.jsonl] [--skip-ppl] [--skip-gemv]
       [--skip-speed] [--rotation-analysis] [--threads 2] [--rounds 2] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from icml26.core.lm_cache import forward as lm_forward, new_cache  # noqa: E402  (the cache API of every transformers release)


def _bench(f, min_time=0.5, min_iter=5):
    for _ in range(2):
        f()
    n, t0 = 0, time.perf_counter()
    while n < min_iter or time.perf_counter() - t0 < min_time:
        f()
        n += 1
    return (time.perf_counter() - t0) / n


def copy_bandwidth_gbs() -> float:
    import torch

    a = torch.empty(64 * 1024 * 1024, dtype=torch.float32).fill_(1.0)  # 256 MiB
    b = torch.empty_like(a)
    t = _bench(lambda: b.copy_(a), 1.0, 3)
    return 2 * a.numel() * 4 / t / 1e9  # read + write


def ppl_table(records_path: str | None) -> None:
    print("== 1. perplexity on held-out Python-docs text (SmolLM2-135M) ==")
    if records_path:
        recs = [json.loads(line) for line in Path(records_path).read_text().splitlines() if line.strip()]
        print(f"(from {records_path})")
    else:
        from icml26.core.recipe import resolve
        from icml26.methods.quantization import fptquant as m

        cfg = resolve(m.Config, "quantize", ROOT / "recipes/quantize/smollm2.yaml", None)
        recs = list(m.run(cfg, seed=0))
    res = [r for r in recs if r.get("kind") == "result"]
    cfgrec = next((r for r in recs if r.get("kind") == "config"), {})
    data = next((r for r in recs if r.get("stage") == "data"), {})
    print(
        f"eval tokens {data.get('eval_tokens')}, calib tokens {data.get('calib_tokens')}, weights "
        f"{data.get('weight_quant')}, "
        f"activations {cfgrec.get('act_granularity')}, local_steps {cfgrec.get('local_steps')}, e2e_steps "
        f"{cfgrec.get('e2e_steps')}"
    )
    settings = sorted({r["setting"] for r in res if r["method"] != "fp"})
    methods = [
        m for m in ("fp", "rtn", "gptq", "smoothquant", "quarot", "fptquant") if any(r["method"] == m for r in res)
    ]
    print(f"{'method':<12}" + "".join(f"{s:>12}" for s in settings) + f"{'size MB':>10}")
    for m in methods:
        row = f"{m:<12}"
        size = None
        for s in settings:
            r = next((r for r in res if r["method"] == m and (r["setting"] == s or m == "fp")), None)
            row += f"{r['perplexity']:>12.2f}" if r else f"{'-':>12}"
            size = r["size_bytes"] if r else size
        print(row + (f"{size / 1e6:>10.1f}" if size else ""))
    for s in settings:
        rs = {r["method"]: r["perplexity"] for r in res if r["setting"] == s}
        if "fptquant" in rs and len(rs) > 1:
            base = min(v for k, v in rs.items() if k != "fptquant")
            print(
                f"{s}: fptquant {rs['fptquant']:.2f} vs best baseline {base:.2f} -> "
                f"{'BELOW' if rs['fptquant'] < base else 'NOT below'}"
            )


def gemv_table(threads: int) -> None:
    import torch
    import torch.nn.functional as F

    from icml26.ops import quant as ops
    from icml26.ops._ref import quant as ref

    torch.set_num_threads(threads)
    print(
        f"\n== 2. GEMV (batch 1), {threads} threads, kernel backend {ops.backend()} / fp32-activation ISA {ops.isa()} "
        "/ "
        f"integer-activation ISA {ops.int_isa()} =="
    )
    bw = copy_bandwidth_gbs()
    print(f"measured copy bandwidth: {bw:.1f} GB/s; load average {os.getloadavg()[0]:.2f}")
    print(
        "columns: fp32 F.linear; ours INT4 weights x fp32 / INT8 (x8) / 15-bit (x16, the decode default) activations; "
        "ours INT8 weights x fp32 / x16 activations; torch _weight_int8pack_mm / _weight_int4pack_mm_for_cpu; _ref "
        "twin; "
        "speed-up of i4 x16 over fp32; its effective GB/s; time to stream the INT4 bytes at the measured copy bandwidth"
    )
    print(
        f"{'N x K':<13}{'fp32 us':>9}{'i4 f32a':>9}{'i4 x8':>9}{'i4 x16':>9}{'i8 f32a':>9}{'i8 x16':>9}{'aten i8':>9}"
        f"{'aten i4':>9}"
        f"{'ref i4':>9}{'x16/fp32':>9}{'GB/s':>7}{'bound us':>9}"
    )
    g = torch.Generator().manual_seed(0)
    for n, k in ((576, 576), (960, 576), (3072, 576), (576, 1536), (49152, 576), (4096, 4096)):
        w = torch.randn(n, k, generator=g)
        x = torch.randn(1, k, generator=g)
        q4 = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=g)
        p4 = ref.pack_int4(q4)
        q8 = torch.randint(0, 256, (n, k), dtype=torch.uint8, generator=g)
        s = torch.rand(n, 1, generator=g) * 0.01
        mn = -8 * s
        t_fp = _bench(lambda: F.linear(x, w))
        t4 = _bench(lambda: ops.quant_gemm(x, p4, s, mn, 4, k))
        t8 = _bench(lambda: ops.quant_gemm(x, q8, s, -128 * s, 8, k))
        t4q = _bench(lambda: ops.quant_gemm_i8act(x, p4, s, mn, k))
        t4w = _bench(lambda: ops.quant_gemm_i8act(x, p4, s, mn, k, act_bits=16))
        t8w = _bench(lambda: ops.quant_gemm_i8act(x, q8, s, -128 * s, k, bits=8, act_bits=16))
        try:
            wi8 = (q8.to(torch.int16) - 128).to(torch.int8)
            sc = s.reshape(n).contiguous()
            t_a8 = _bench(lambda: torch._weight_int8pack_mm(x, wi8, sc))
        except Exception:  # noqa: BLE001
            t_a8 = float("nan")
        try:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q4.to(torch.int32), 1)
            sz = torch.stack([s.expand(n, 1).T, torch.zeros(1, n)], -1).contiguous()  # (K/gs, N, 2)
            t_a4 = _bench(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, k, sz))
        except Exception:  # noqa: BLE001
            t_a4 = float("nan")
        t_ref = _bench(lambda: ref.quant_gemm(x, p4, s, mn, 4, k), 0.3, 2)
        bound = (n * k / 2) / (bw * 1e9)  # INT4 bytes at the measured copy rate (read + write bytes / s)
        print(
            f"{f'{n}x{k}':<13}{t_fp * 1e6:>9.0f}{t4 * 1e6:>9.0f}{t4q * 1e6:>9.0f}{t4w * 1e6:>9.0f}{t8 * 1e6:>9.0f}"
            f"{t8w * 1e6:>9.0f}"
            f"{t_a8 * 1e6:>9.0f}{t_a4 * 1e6:>9.0f}{t_ref * 1e6:>9.0f}{t_fp / t4w:>9.2f}{n * k / 2 / t4w / 1e9:>7.1f}"
            f"{bound * 1e6:>9.0f}"
        )


def _cuda_time(f, iters: int = 200) -> tuple[float, str]:
    """Seconds per call of ``f`` on the current CUDA stream: replayed from a CUDA graph of ``iters``
    calls (kernel time without Python launch overhead) when capture works, else a timed loop."""
    import torch

    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                f()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(iters):
                f()
        graph.replay()
        torch.cuda.synchronize()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters, "graph"
    except Exception:  # noqa: BLE001  (capture unsupported: time a plain loop)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            f()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters, "loop"


def gemv_cuda_table() -> None:
    """GEMV (M = 1) and small-M GEMM of the CUDA kernel against torch FP16 / FP32 ``F.linear``
    (cuBLAS), the ``_ref`` path (dequantize + matmul) and the bandwidth bound (the kernel's bytes
    at the device's measured copy bandwidth), with a parity check against ``_ref`` per shape."""
    import torch
    import torch.nn.functional as F

    from icml26.ops import quant as ops
    from icml26.ops import quant_cuda
    from icml26.ops._ref import quant as ref

    if not torch.cuda.is_available():
        print("--device cuda: no CUDA device (torch.version.cuda = %s)" % torch.version.cuda)
        return
    dev = torch.device("cuda")
    b = quant_cuda.backend()
    print(
        f"== CUDA: {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), torch "
        f"{torch.__version__}, CUDA {torch.version.cuda}; kernel backend {b}"
        + (f" ({quant_cuda.why()})" if quant_cuda.why() else "")
    )
    a = torch.empty(256 * 1024 * 1024, dtype=torch.float32, device=dev)  # 1 GiB
    c = torch.empty_like(a)
    t_copy, _ = _cuda_time(lambda: c.copy_(a), 20)
    bw = 2 * a.numel() * 4 / t_copy / 1e9
    # free the 1 GiB buffers before the next measurement (rebinding, not del: the lambda above closes over them)
    a = c = None
    torch.cuda.empty_cache()
    print(f"measured device copy bandwidth: {bw:.0f} GB/s (read + write)")
    print(
        "columns: torch F.linear FP16 / FP32 (cuBLAS); ours INT4 (groups of 128) with fp16 / fp32 activations; ours "
        "INT4 with "
        "INT8 activation codes (quant_gemm_i8act, dp4a, incl. its quantization pass); ours INT8 per "
        "channel (fp16 act.); _ref INT4 (dequantize + matmul, fp16); bound = INT4 weight + scale/offset bytes at the "
        "copy "
        "bandwidth; x bound = ours fp16 / bound; FP16/ours = speed-up over FP16 F.linear; max rel. error vs _ref"
    )
    print(
        f"{'N x K':<13}{'M':>3}{'fp16 us':>9}{'fp32 us':>9}{'i4 f16':>9}{'i4 f32':>9}{'i4 a8':>9}{'i8 f16':>9}"
        f"{'ref i4':>9}{'bound':>8}"
        f"{'x bound':>8}{'GB/s':>7}{'fp16/i4':>8}{'err':>9}  timing"
    )
    g = torch.Generator().manual_seed(0)
    shapes = [
        (576, 576, 1),
        (1536, 576, 1),
        (576, 1536, 1),
        (49152, 576, 1),
        (4096, 4096, 1),
        (11008, 4096, 1),
        (4096, 11008, 1),
        (8192, 8192, 1),
        (4096, 4096, 4),
        (4096, 4096, 16),
    ]
    for n, k, m in shapes:
        gs = 128
        q4 = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=g)
        p4 = ref.pack_int4(q4).to(dev)
        s4 = (torch.rand(n, k // gs, generator=g) * 0.01).to(dev)
        m4 = -8 * s4
        q8 = torch.randint(0, 256, (n, k), dtype=torch.uint8, generator=g).to(dev)
        s8 = (torch.rand(n, 1, generator=g) * 0.01).to(dev)
        m8 = -128 * s8
        w16 = torch.randn(n, k, generator=g).half().to(dev)
        w32 = w16.float()
        x32 = torch.randn(m, k, generator=g).to(dev)
        x16 = x32.half()
        t16, how = _cuda_time(lambda: F.linear(x16, w16))
        t32, _ = _cuda_time(lambda: F.linear(x32, w32))
        t4h, _ = _cuda_time(lambda: ops.quant_gemm(x16, p4, s4, m4, 4, gs))
        t4f, _ = _cuda_time(lambda: ops.quant_gemm(x32, p4, s4, m4, 4, gs))
        t4a8, _ = _cuda_time(lambda: ops.quant_gemm_i8act(x32, p4, s4, m4, gs, act_bits=8))
        t8h, _ = _cuda_time(lambda: ops.quant_gemm(x16, q8, s8, m8, 8, k))
        tref, _ = _cuda_time(lambda: ref.quant_gemm(x32, p4, s4, m4, 4, gs).half(), 20)
        want = ref.quant_gemm(x32, p4, s4, m4, 4, gs)
        err = ((ops.quant_gemm(x32, p4, s4, m4, 4, gs) - want).abs().max() / want.abs().max()).item()
        nbytes = n * k / 2 + 8 * n * (k // gs) + 2 * m * (k + n)
        bound = nbytes / (bw * 1e9)
        print(
            f"{f'{n}x{k}':<13}{m:>3}{t16 * 1e6:>9.2f}{t32 * 1e6:>9.2f}{t4h * 1e6:>9.2f}{t4f * 1e6:>9.2f}"
            f"{t4a8 * 1e6:>9.2f}{t8h * 1e6:>9.2f}"
            f"{tref * 1e6:>9.1f}{bound * 1e6:>8.2f}{t4h / bound:>8.2f}{nbytes / t4h / 1e9:>7.0f}{t16 / t4h:>8.2f}"
            f"{err:>9.1e}  {how}"
        )
        p4 = s4 = m4 = q8 = s8 = m8 = w16 = w32 = None  # free this shape's buffers (the lambdas above close over them)
        torch.cuda.empty_cache()


def model_cuda(n_dec: int = 32) -> None:
    """SmolLM2-135M packed INT4 (RTN W4A16, per channel) on the GPU: Hugging Face greedy decode
    time against the FP32 / FP16 model on the GPU, and its greedy tokens against the same packed
    model on the CPU (exact fp32 activations there): the CUDA kernel inside a real model."""
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.data.text import load_corpus
    from icml26.methods.quantization import pack
    from icml26.methods.quantization import qmodel as QM

    print(
        f"\n== CUDA whole model: SmolLM2-135M, batch 1, prompt 64 tokens, greedy decode {n_dec} tokens (HF forward "
        "loop) =="
    )

    def decode(model, prompt):
        with torch.no_grad():
            cache = new_cache(model)
            out = lm_forward(model, prompt, cache)
            nxt = out.logits[:, -1:].argmax(-1)
            toks = []
            if prompt.is_cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n_dec):
                toks.append(nxt.item())
                o = lm_forward(model, nxt, cache)
                nxt = o.logits[:, -1:].argmax(-1)
            return toks, (time.perf_counter() - t0) / n_dec

    if not torch.cuda.is_available():
        print("no CUDA device")
        return
    with tempfile.TemporaryDirectory() as d:
        model, tok = load_causal_lm("llama")
        prompt = tok(load_corpus("python-docs")[9], return_tensors="pt")["input_ids"][:, :64]
        fp_toks, t_fp32 = decode(model.to("cuda"), prompt.cuda())
        _, t_fp16 = decode(model.half(), prompt.cuda())
        del model
        model, tok = load_causal_lm("llama")  # fresh fp32 weights to quantize
        spec = QM.QSpec(wbits=4, abits=16, kvbits=16, w_clip_search=False)
        QM.quantize_model(model, spec)
        pack.save_quantized(model, tok, Path(d) / "int4", spec, method="rtn", extras={})
        del model
        q, _, _ = pack.load_quantized(str(Path(d) / "int4"))
    for mod in q.modules():
        if hasattr(mod, "int_act"):
            mod.int_act = 0  # exact fp32 activations on the CPU, as on CUDA
    cpu_toks, _ = decode(q, prompt)
    gpu_toks, t_q = decode(q.to("cuda"), prompt.cuda())
    same = sum(a == b for a, b in zip(cpu_toks, gpu_toks))
    print(
        f"FP32 {t_fp32 * 1e3:.2f} ms/token, FP16 {t_fp16 * 1e3:.2f} ms/token, packed INT4 (CUDA kernel) "
        f"{t_q * 1e3:.2f} ms/token; "
        f"INT4 greedy tokens CUDA vs CPU equal {same}/{n_dec}; INT4 vs FP32 equal "
        f"{sum(a == b for a, b in zip(fp_toks, gpu_toks))}/{n_dec} (a 135M model at batch 1 is launch-bound on a GPU)"
    )


def _vm_hwm_kb() -> float:
    """Peak resident memory of this process (VmHWM; ru_maxrss would include the parent's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1])
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _speed_one(kind: str, folder: str | None, threads: int, n_dec: int = 32, trials: int = 3) -> dict:
    """Run in a child process: load one model, measure the Hugging Face forward loop, HF
    ``generate`` and the lean runtime (prefill, decode), report peak RSS."""
    import torch

    from icml26.methods.quantization import lean as LN

    torch.set_num_threads(threads)
    rss0 = _vm_hwm_kb()
    if kind == "fp":
        from icml26.core.data.lm import load_causal_lm

        model, tok = load_causal_lm("llama")
    else:
        from icml26.methods.quantization import pack

        model, tok, _ = pack.load_quantized(folder)
    weight_bytes = sum(
        t.numel() * t.element_size()
        for t in {id(p): p for p in list(model.parameters()) + list(model.buffers())}.values()
    )
    from icml26.core.data.text import load_corpus

    prompt = tok(load_corpus("python-docs")[9], return_tensors="pt")["input_ids"][:, :128]
    with torch.no_grad():
        # (a) Hugging Face forward with its dynamic cache, one token at a time
        t_pre = _bench(lambda: model(input_ids=prompt), 1.0, 2)
        best_hf = float("inf")
        for _ in range(trials):
            cache = new_cache(model)
            out = lm_forward(model, prompt, cache)
            nxt = out.logits[:, -1:].argmax(-1)
            hf_logits = [out.logits[0, -1]]
            t0 = time.perf_counter()
            toks = []
            for _ in range(n_dec):
                toks.append(nxt.item())
                o = lm_forward(model, nxt, cache)
                nxt = o.logits[:, -1:].argmax(-1)
                hf_logits.append(o.logits[0, -1])
            best_hf = min(best_hf, (time.perf_counter() - t0) / n_dec)
        # (b) Hugging Face generate (greedy), decode time = (n_dec + 1 tokens) - (1 token)
        gen = {}
        for n in (1, n_dec + 1):
            t0 = time.perf_counter()
            g = model.generate(
                prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=tok.eos_token_id
            )
            gen[n] = time.perf_counter() - t0
        gen_tokens = g[0, prompt.shape[1] :].tolist()
        # (c) lean runtime: static cache, fused GEMVs, fused decode ops
        ln = LN.LeanLM(model, max_len=prompt.shape[1] + n_dec + 8)
        best_lean, pre_lean = float("inf"), float("inf")
        for _ in range(trials):
            r = ln.generate(prompt[0], n_dec)
            best_lean = min(best_lean, r["decode_s_per_token"])
            pre_lean = min(pre_lean, r["prefill_s"])
        diff = max((a - b).abs().max().item() for a, b in zip(r["logits"], hf_logits))
        scale = max(b.abs().max().item() for b in hf_logits)
    rss = _vm_hwm_kb()
    return {
        "kind": kind,
        "prefill_tok_s": prompt.shape[1] / t_pre,
        "decode_ms_per_token": best_hf * 1e3,
        "generate_ms_per_token": (gen[n_dec + 1] - gen[1]) / n_dec * 1e3,
        "lean_decode_ms_per_token": best_lean * 1e3,
        "lean_prefill_tok_s": prompt.shape[1] / pre_lean,
        "lean_fast_path": ln.fast,
        "lean_fused": ln.fused(),
        "lean_weight_bytes": ln.weight_bytes(),
        "lean_vs_hf_max_logit_diff": diff,
        "hf_max_abs_logit": scale,
        "lean_tokens_equal_hf": r["tokens"] == toks,
        "generate_tokens_equal_hf": gen_tokens[:n_dec] == toks,
        "weight_bytes": weight_bytes,
        "peak_rss_mb": rss / 1024,
        "rss_before_load_mb": rss0 / 1024,
        "tokens": toks[:8],
    }


def _speed_pair(folder: str, threads: int, n_dec: int = 32, trials: int = 7) -> dict:
    """Child process: lean FP32 and lean INT4 in ONE process, decode trials alternating
    (fp, int4, fp, int4, ...), so that both see the same machine load."""
    import gc
    import statistics

    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.data.text import load_corpus
    from icml26.methods.quantization import lean as LN
    from icml26.methods.quantization import pack

    torch.set_num_threads(threads)
    model, tok = load_causal_lm("llama")
    prompt = tok(load_corpus("python-docs")[9], return_tensors="pt")["input_ids"][0, :128]
    n = prompt.shape[0] + n_dec + 8
    fp = LN.LeanLM(model, max_len=n)
    del model
    gc.collect()
    q, _, _ = pack.load_quantized(folder)
    i4 = LN.LeanLM(q, max_len=n)
    del q
    q, _, _ = pack.load_quantized(str(Path(folder).parent / "int4a8"))
    a8 = LN.LeanLM(q, max_len=n)  # same INT4 weights + simulated dynamic per-token A8 in front of every linear
    del q
    gc.collect()
    tf, tq, ta, pf, pq = [], [], [], [], []
    for _ in range(trials):
        r = fp.generate(prompt, n_dec)
        tf.append(r["decode_s_per_token"])
        pf.append(r["prefill_s"])
        r = i4.generate(prompt, n_dec)
        tq.append(r["decode_s_per_token"])
        pq.append(r["prefill_s"])
        ta.append(a8.generate(prompt, n_dec)["decode_s_per_token"])
    ratios = [a / b for a, b in zip(tf, tq)]
    pre = [a / b for a, b in zip(pf, pq)]  # > 1: INT4 prefill faster than FP32
    return {
        "prefill_tokens": int(prompt.shape[0]),
        "fp_prefill_tok_s_best": prompt.shape[0] / min(pf),
        "int4_prefill_tok_s_best": prompt.shape[0] / min(pq),
        "median_paired_prefill_ratio": statistics.median(pre),
        "min_paired_prefill_ratio": min(pre),
        "max_paired_prefill_ratio": max(pre),
        "fp_best_ms": min(tf) * 1e3,
        "int4_best_ms": min(tq) * 1e3,
        "ratio_of_best": min(tf) / min(tq),
        "int4_a8sim_best_ms": min(ta) * 1e3,
        "a8sim_fast_path": a8.fast,
        "median_paired_ratio": statistics.median(ratios),
        "min_paired_ratio": min(ratios),
        "max_paired_ratio": max(ratios),
        "fp_ms": [round(t * 1e3, 2) for t in tf],
        "int4_ms": [round(t * 1e3, 2) for t in tq],
    }


def model_speed(threads: int, rounds: int = 2) -> None:
    print(
        f"\n== 3. whole model, batch 1, {threads} threads: prefill 128 tokens, decode 32 tokens (best of 3 trials, "
        f"{rounds} alternating rounds of one process per model) =="
    )
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as d:
        # build the packed INT4 model (RTN W4A16, per-channel) once
        from icml26.core.data.lm import load_causal_lm
        from icml26.methods.quantization import pack
        from icml26.methods.quantization import qmodel as QM

        model, tok = load_causal_lm("llama")
        spec = QM.QSpec(wbits=4, abits=16, kvbits=16, w_clip_search=False)
        QM.quantize_model(model, spec)
        pack.save_quantized(model, tok, Path(d) / "int4", spec, method="rtn", extras={})
        spec8 = QM.QSpec(wbits=4, abits=8, kvbits=16, w_clip_search=False)
        QM.set_spec(model, spec8)
        pack.save_quantized(model, tok, Path(d) / "int4a8", spec8, method="rtn", extras={})
        del model
        runs: dict[str, list[dict]] = {"fp": [], "int4": []}
        for _ in range(rounds):
            for kind in ("fp", "int4"):
                cmd = [
                    sys.executable,
                    __file__,
                    "--speed-one",
                    kind,
                    "--folder",
                    str(Path(d) / "int4"),
                    "--threads",
                    str(threads),
                ]
                outp = subprocess.run(
                    cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)}
                )
                if outp.returncode:
                    print(outp.stderr[-2000:])
                    continue
                runs[kind].append(json.loads(outp.stdout.strip().splitlines()[-1]))
        cmd = [
            sys.executable,
            __file__,
            "--speed-one",
            "pair",
            "--folder",
            str(Path(d) / "int4"),
            "--threads",
            str(threads),
        ]
        outp = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
        pair = json.loads(outp.stdout.strip().splitlines()[-1]) if not outp.returncode else None
        if pair is None:
            print(outp.stderr[-2000:])
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    rows = {}
    for kind, rs in runs.items():
        if not rs:
            continue
        best = dict(rs[0])
        for key in ("decode_ms_per_token", "generate_ms_per_token", "lean_decode_ms_per_token"):
            best[key] = min(r[key] for r in rs)
        for key in ("prefill_tok_s", "lean_prefill_tok_s"):
            best[key] = max(r[key] for r in rs)
        best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rs)
        rows[kind] = best
    for kind, r in rows.items():
        print(
            f"{kind:<5} HF forward: prefill {r['prefill_tok_s']:7.1f} tok/s, decode {r['decode_ms_per_token']:6.1f} "
            "ms/token | "
            f"HF generate decode {r['generate_ms_per_token']:6.1f} ms/token | lean: prefill "
            f"{r['lean_prefill_tok_s']:7.1f} tok/s, "
            f"decode {r['lean_decode_ms_per_token']:6.2f} ms/token ({1e3 / r['lean_decode_ms_per_token']:.1f} tok/s)"
        )
        print(
            f"      weights {r['weight_bytes'] / 1e6:7.1f} MB (lean reads {r['lean_weight_bytes'] / 1e6:.1f} "
            "MB/token), peak RSS "
            f"{r['peak_rss_mb']:7.1f} MB; lean fast path {r['lean_fast_path']} {r['lean_fused']}; lean vs HF: greedy "
            "tokens equal "
            f"{r['lean_tokens_equal_hf']}, max |logit diff| {r['lean_vs_hf_max_logit_diff']:.2e} (max |logit| "
            f"{r['hf_max_abs_logit']:.1f}); "
            f"generate tokens equal {r['generate_tokens_equal_hf']}"
        )
    if len(rows) == 2:
        fp, q = rows["fp"], rows["int4"]
        print(
            "TARGET (lean INT4 vs lean FP32, same runtime): decode "
            f"x{fp['lean_decode_ms_per_token'] / q['lean_decode_ms_per_token']:.2f} faster, "
            f"weights x{fp['weight_bytes'] / q['weight_bytes']:.2f} smaller"
        )
        print(
            "reference: lean INT4 vs HF FP32 forward loop "
            f"x{fp['decode_ms_per_token'] / q['lean_decode_ms_per_token']:.2f}, "
            f"vs HF FP32 generate x{fp['generate_ms_per_token'] / q['lean_decode_ms_per_token']:.2f}; "
            f"HF INT4 vs HF FP32 (forward loop) x{fp['decode_ms_per_token'] / q['decode_ms_per_token']:.2f}; "
            f"prefill lean INT4 vs lean FP32 x{q['lean_prefill_tok_s'] / fp['lean_prefill_tok_s']:.2f}; "
            f"peak RSS x{fp['peak_rss_mb'] / q['peak_rss_mb']:.2f} smaller"
        )
    if pair:
        print(
            f"PAIRED (one process, alternating decode trials, same load): lean FP32 best {pair['fp_best_ms']:.2f} "
            "ms/token, "
            f"lean INT4 best {pair['int4_best_ms']:.2f} ms/token -> x{pair['ratio_of_best']:.2f} (ratio of bests); "
            "per-trial ratios "
            f"median x{pair['median_paired_ratio']:.2f}, min x{pair['min_paired_ratio']:.2f}, max "
            f"x{pair['max_paired_ratio']:.2f}"
        )
        print(f"  fp32 trials {pair['fp_ms']}\n  int4 trials {pair['int4_ms']}")
        print(
            f"PAIRED prefill ({pair['prefill_tokens']} tokens, same trials): lean FP32 best "
            f"{pair['fp_prefill_tok_s_best']:.1f} tok/s, lean INT4 best {pair['int4_prefill_tok_s_best']:.1f} tok/s; "
            f"per-trial INT4/FP32 speed median x{pair['median_paired_prefill_ratio']:.2f}, "
            f"min x{pair['min_paired_prefill_ratio']:.2f}, max x{pair['max_paired_prefill_ratio']:.2f}"
        )
        print(
            f"  same INT4 weights with simulated dynamic per-token A8 (quantize-dequantize before every linear): best "
            f"{pair['int4_a8sim_best_ms']:.2f} ms/token (x{pair['int4_a8sim_best_ms'] / pair['int4_best_ms']:.2f} of "
            "W4A16)"
        )


def rotation_analysis() -> None:
    """Why rotated models do not lead at W4A8: weight and output quantization errors of the
    original vs the QuaRot-style rotated SmolLM2 linears (10 of 30 layers, one 128-token sequence)."""
    import copy
    import statistics

    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.data.text import load_corpus
    from icml26.methods.quantization import hadamard as had
    from icml26.methods.quantization import qmodel as QM
    from icml26.methods.quantization import quantizers as Q
    from icml26.methods.quantization import transforms as T

    print("\n== 4. rotation analysis: per-linear quantization error, original vs QuaRot-style rotated weights ==")
    m, tok = load_causal_lm("llama")
    w = m.model.layers[5].self_attn.q_proj.weight
    nd = torch.tensor([len(torch.unique(b)) for b in w.reshape(-1, 32)[:2000]]).float()
    print(f"GGUF grid: distinct values per 32-weight block (layer 5 q_proj): mean {nd.mean():.1f}, max {int(nd.max())}")
    r = copy.deepcopy(m)
    T.untie_embeddings(r)
    T.fuse_norms(r)
    T.rotate_residual(r, had.random_hadamard(m.config.hidden_size, 0))
    T.down_hadamard(r)
    # full-precision wrappers: the online Hadamard before down_proj runs inside QuantLinear
    QM.quantize_model(r, QM.QSpec(wbits=16, abits=16, kvbits=16, head_bits=16), online_down_hadamard=True)
    ids = tok(load_corpus("python-docs")[0], return_tensors="pt")["input_ids"][:, :128]

    def collect(model, online):
        acts, hooks = {}, []
        for i in range(0, len(model.model.layers), 3):
            for n in QM.LINEARS:

                def f(mod, a, key=(i, n)):
                    x = a[0].reshape(-1, a[0].shape[-1])
                    acts[key] = had.apply(x) if online and key[1] == "mlp.down_proj" else x

                hooks.append(QM._get(model.model.layers[i], n).register_forward_pre_hook(f))
        with torch.no_grad():
            model(input_ids=ids)
        for h in hooks:
            h.remove()
        return acts

    acts = {"original": collect(m, False), "rotated": collect(r, True)}
    res: dict = {}
    for tag, model in (("original", m), ("rotated", r)):
        for (i, n), x in acts[tag].items():
            wt = QM._get(model.model.layers[i], n).weight.detach()
            y = x @ wt.T
            wq = Q.fake_quant_weight(wt, 4, sym=True, group_size=0, clip_search=True)
            xa = Q.fake_quant_per_token(x, 8, sym=False, clip_ratio=0.9)
            res.setdefault(tag, []).append(
                {
                    "name": n,
                    "w": ((wq - wt).norm() / wt.norm()).item(),
                    "w4": ((x @ wq.T - y).norm() / y.norm()).item(),
                    "a8": ((xa @ wt.T - y).norm() / y.norm()).item(),
                    "w4a8": ((xa @ wq.T - y).norm() / y.norm()).item(),
                }
            )
    print(f"{'relative error (mean over linears)':<40}{'original':>10}{'rotated':>10}")
    for key, label in (
        ("w", "W4 RTN weight (Frobenius)"),
        ("w4", "W4 output"),
        ("a8", "A8 output"),
        ("w4a8", "W4A8 output"),
    ):
        print(
            f"{label:<40}{statistics.mean(d[key] for d in res['original']):>10.4f}"
            f"{statistics.mean(d[key] for d in res['rotated']):>10.4f}"
        )
    for n in QM.LINEARS:
        o = statistics.mean(d["w4a8"] for d in res["original"] if d["name"] == n)
        q = statistics.mean(d["w4a8"] for d in res["rotated"] if d["name"] == n)
        print(f"  W4A8 output {n:<20}{o:>10.4f}{q:>10.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", default=None)
    ap.add_argument("--skip-ppl", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--speed-one", default=None)
    ap.add_argument("--folder", default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip-gemv", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument(
        "--rotation-analysis", action="store_true", help="also print the per-linear error analysis (~3 min)"
    )
    ap.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="cuda: only the GPU kernel table (GEMV / small-M GEMM vs FP16 cuBLAS and the bandwidth bound) "
        "and, unless --skip-speed, SmolLM2 decode with the packed INT4 model on the GPU",
    )
    a = ap.parse_args()
    if a.device == "cuda":
        if not a.skip_gemv:
            gemv_cuda_table()
        if not a.skip_speed:
            try:
                model_cuda()
            except Exception as e:  # noqa: BLE001  (model files missing, ...: the kernel table stands alone)
                print(f"whole-model CUDA section skipped: {type(e).__name__}: {e}")
        return
    if a.speed_one == "pair":
        print(json.dumps(_speed_pair(a.folder, a.threads)))
        return
    if a.speed_one:
        print(json.dumps(_speed_one(a.speed_one, a.folder, a.threads)))
        return
    if not a.skip_ppl:
        ppl_table(a.records)
    if not a.skip_gemv:
        gemv_table(a.threads)
    if not a.skip_speed:
        model_speed(a.threads, a.rounds)
    if a.rotation_analysis:
        rotation_analysis()


if __name__ == "__main__":
    main()
