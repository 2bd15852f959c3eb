"""How long an ``icml26 quantize`` run should take, printed before the first result.

The parts of a run are counted in FP-evaluation token equivalents (one unit = the time the FP
model took per evaluated token, measured in the run itself, so a loaded machine's slowness is
carried by the measured rate) and multiplied by that rate. The ratios (``COST``) are CPU times
measured on SmolLM2-135M with ``benchmarks/quantize_cost.py`` (docs/quantize.md, "Run time").
"""

from __future__ import annotations

from icml26.methods.quantization.config import FPT_VARIANTS, Config, parse_setting

COST = {
    "eval": 1.0,  # quantized evaluation (perplexity + greedy), x the FP one, weight-only settings
    "eval_act": 1.4,  # ... with simulated activation / KV quantization (1.12 idle, 1.64 at load 20)
    "prepare": 1750,  # rotations + merges of quarot / rotated FPTQuant (tokens)
    "prepare_merged": 300,  # merges of fptquant-merged (no rotation; tokens)
    "local_step": 85,  # one FPTQuant local step (tokens; 120 from idle CPU times, 61 at load 20)
    "e2e_step": 1.9,  # one end-to-end step, x e2e_seq_len tokens (4.2 from idle CPU times, 0.9 at load 20)
    "gptq": 3.0,  # GPTQ per weight width, x calib_tokens (not measured: a rough guide)
}
# The ratios move with the machine's load (the FP evaluation that sets the rate suffers most from
# memory contention), so the estimate is printed as a range that held at both ends measured here.
RANGE = (0.6, 1.6)
LONG_RUN_S = 120.0  # the command prints the estimate when a run should take longer than this


def estimate_seconds(cfg: Config, *, eval_s: float, greedy_s: float) -> float:
    """Estimated wall seconds of the whole run, from the FP evaluation's measured time
    ``eval_s`` (perplexity over the eval tokens) and ``greedy_s`` (greedy continuations)."""
    settings = [parse_setting(x) for x in cfg.active_settings()]
    per_tok = eval_s / max(cfg.eval_tokens, 1)  # seconds per evaluated token (FP, this run)
    total = eval_s + greedy_s
    for m in cfg.methods:
        if m == "fp":
            continue
        fpt = FPT_VARIANTS.get(m)
        if m == "quarot" or (fpt and fpt["rotate"] and cfg.fpt_rotate):
            total += COST["prepare"] * per_tok
        elif fpt:
            total += COST["prepare_merged"] * per_tok
        if m not in ("rtn", "gptq"):
            total += 2 * cfg.seq_len * per_tok  # the fp_drift check
        if m == "smoothquant":
            total += cfg.calib_tokens * per_tok
        if fpt:
            total += cfg.local_steps * COST["local_step"] * per_tok
        if m == "gptq":
            total += COST["gptq"] * cfg.calib_tokens * per_tok * len({w for w, _, _ in settings if w < 16})
        for _, a, kv in settings:
            total += (COST["eval_act"] if a < 16 or kv < 16 else COST["eval"]) * (eval_s + greedy_s)
            if a < 16 and cfg.act_granularity == "per-tensor":
                total += cfg.calib_tokens * per_tok * (2 if fpt and cfg.e2e_steps else 1)
            if fpt:
                total += cfg.e2e_steps * COST["e2e_step"] * min(cfg.e2e_seq_len, cfg.seq_len) * per_tok
    return total
