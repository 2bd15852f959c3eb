"""How long an ``icml26 quantize`` run should take, printed before the first result (a point
estimate), and the cost model behind the command's up-front work limit (``Config.work``).

Every part of a run is counted in units of the FP evaluation's CPU time per token, measured in the
run itself (``time.process_time``, so the machine's load biases it little): tokens for the parts
that scale with text (quantized evaluations, calibration passes, GPTQ's Hessians, end-to-end
tokens), token equivalents for the parts that scale with the model's weights (copies, rotations,
merges, local and end-to-end steps' merged weights, GPTQ's column sweeps). The ratios (``COST``)
are CPU times of one thread on SmolLM2-135M at seq_len 128 and 512 (per-token FP cost 4.3 and 4.2
CPU-ms: attention is negligible at these lengths), from ``benchmarks/quantize_cost.py``
(docs/quantize.md, "Run time"). The wall time printed is the CPU estimate at the wall / CPU ratio
the FP evaluation had.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.methods.quantization.names import (
    FPT_NAMES,
    FPT_VARIANTS,
    parse_setting,
    prepare_key,
    stage_steps,
    variant_of,
)

if TYPE_CHECKING:
    from icml26.methods.quantization.config import Config

COST = {  # x the FP evaluation's CPU time per token
    "eval_w": 1.0,  # quantized evaluation per token, weight-only settings
    "eval_a": 1.2,  # ... with simulated activation / KV quantization
    "greedy": 1.3,  # greedy continuations, x the FP ones, per (method, setting)
    "calib_pass": 0.92,  # a forward pass per calibration token (SmoothQuant maxima, static ranges)
    "drift": 1.0,  # the function-preservation check, per token of one chunk
    "gptq_token": 3.95,  # GPTQ per calibration token (float64 Hessians, two layer passes)
    "gptq_fixed": 6000,  # GPTQ's Cholesky factors and column sweeps, per weight width
    "copy": 70,  # a deep copy of the model (per method, and per setting)
    "wrap": 30,  # wrapping the linears and the embeddings with quantizers, per method
    "prepare_rot": 1150,  # norm folding + residual / value rotations (quarot, fptquant)
    "prepare_merged": 140,  # fptquant-merged's parameters and merge
    "prepare_smoothquant": 40,  # SmoothQuant's scales and folding (besides its calibration pass)
    "local_step_rot": 280,  # one local step, rotated variant
    "local_step_merged": 205,  # one local step, merged variant
    "e2e_step_rot": 275,  # one end-to-end step's merged weights and update, rotated variant
    "e2e_step_merged": 140,  # ... merged variant
    "e2e_token_rot": 4.3,  # per end-to-end token (student and teacher forward, backward)
    "e2e_token_merged": 3.9,
    "merge_e2e_rot": 175,  # merging the end-to-end parameters into the weights, per setting
    "merge_e2e_merged": 95,
}
LONG_RUN_S = 120.0  # the command prints the estimate when a run should take longer than this
WORK_LIMIT = 5e6  # Config.work: FP-evaluation token equivalents (~4.2 CPU-ms each on SmolLM2-135M: ~6 CPU-h)


def parts(cfg: Config) -> dict[str, float]:
    """The run's work after the FP evaluation, by part, in units of the FP evaluation's CPU time
    per token (the FP evaluation and greedy decoding themselves excluded: measured)."""
    settings = [parse_setting(x) for x in cfg.active_settings()]
    e2e_len = min(cfg.e2e_seq_len, cfg.seq_len)
    out: dict[str, float] = {}
    prepared: set = set()
    first_drift = True

    def add(k, v):
        out[k] = out.get(k, 0.0) + v

    for m in cfg.methods:
        if m == "fp":
            continue
        rot = m == "quarot" or (m in FPT_NAMES and FPT_VARIANTS[variant_of(m)]["rotate"] and cfg.fpt_rotate)
        kind = "rot" if rot else "merged"
        local, e2e = stage_steps(m, cfg)
        key = prepare_key(m, cfg)
        if key is None or key not in prepared:  # FPTQuant names that share a local stage prepare once
            prepared.add(key)
            add("prepare", COST["copy"])
            if m == "quarot" or m in FPT_NAMES:
                add("prepare", COST[f"prepare_{kind}"])
            if m in FPT_NAMES:
                add("local", local * COST[f"local_step_{kind}"])
            if m == "smoothquant":
                add("prepare", COST["prepare_smoothquant"] + cfg.calib_tokens * COST["calib_pass"])
        else:
            add("prepare", COST["copy"])
        add("prepare", COST["wrap"])
        if m not in ("rtn", "gptq"):  # the drift check: one chunk (and the FP one, once)
            add("drift", cfg.seq_len * COST["drift"] * (2 if first_drift else 1))
            first_drift = False
        if m == "gptq":
            for _ in {w for w, _, _ in settings if w < 16}:
                add("gptq", COST["gptq_fixed"] + COST["gptq_token"] * cfg.calib_tokens)
        for _, a, kv in settings:
            add("copy", COST["copy"])
            add("eval", cfg.eval_tokens * COST["eval_a" if a < 16 or kv < 16 else "eval_w"])
            if a < 16 and cfg.act_granularity == "per-tensor":
                add("calibrate", cfg.calib_tokens * COST["calib_pass"] * (2 if e2e else 1))
            if e2e:
                add("e2e", e2e * (COST[f"e2e_step_{kind}"] + e2e_len * COST[f"e2e_token_{kind}"]))
                add("e2e", COST[f"merge_e2e_{kind}"])
    return out


def runs(cfg: Config) -> int:
    return len([m for m in cfg.methods if m != "fp"]) * len(cfg.active_settings())


def estimate_cpu_seconds(cfg: Config, *, eval_cpu_s: float, greedy_cpu_s: float, done_cpu_s: float) -> float:
    """Estimated CPU seconds of the whole run: ``done_cpu_s`` already spent (load, data, the FP
    evaluation ``eval_cpu_s`` and greedy continuations ``greedy_cpu_s``, all measured) plus the
    parts still to run at the FP evaluation's measured per-token CPU time."""
    per_tok = eval_cpu_s / max(cfg.eval_tokens, 1)
    q = runs(cfg) if cfg.greedy_prompts and cfg.greedy_tokens else 0
    return done_cpu_s + per_tok * sum(parts(cfg).values()) + q * COST["greedy"] * greedy_cpu_s


def work_units(cfg: Config) -> float:
    """The whole run in FP-evaluation token units (the up-front limit's measure)."""
    greedy = cfg.greedy_prompts * cfg.greedy_tokens * 20 * (1 + runs(cfg))  # a decoded token: ~20 token units
    return cfg.eval_tokens + sum(parts(cfg).values()) + greedy
