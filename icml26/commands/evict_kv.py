"""``icml26 evict-kv``: CapKV KV-cache eviction against the eviction baselines on a real LM."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt


def evict_kv(
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            "-m",
            help="llama (SmolLM2-135M, built in) | a local HF folder | a .gguf file.",
            show_default=False,
        ),
    ] = None,
    method: Annotated[
        Optional[List[str]],
        typer.Option(
            "--method",
            help=(
                "capkv (the paper) | capkv-qa (+ our question-aware channel) | capkv-greedy | streaming | snapkv | h2o "
                "| tova | knorm | random | expected-attention | kvpress:<Press> (repeatable or "
                "comma-separated; default: "
                "all but capkv-greedy); <method>@key=value runs a setting as its own row (snapkv@kernel_size=13). "
                "`full` is always run."
            ),
            show_default=False,
        ),
    ] = None,
    compression_ratio: Annotated[
        Optional[List[float]],
        typer.Option(
            "--compression-ratio",
            "-c",
            help="Fraction of the prompt's KV entries evicted, in (0, 1) (repeatable; default 0.25 0.5 0.75 0.9).",
            show_default=False,
        ),
    ] = None,
    context_tokens: Annotated[
        Optional[List[int]],
        typer.Option(
            "--context-tokens", "-n", help="Haystack length in tokens (repeatable; default 1024).", show_default=False
        ),
    ] = None,
    haystack: Annotated[
        Optional[str],
        typer.Option(
            "--haystack",
            help="Your own UTF-8 text file as the haystack (default: the python-docs corpus).",
            show_default=False,
        ),
    ] = None,
    mode: Annotated[
        Optional[str],
        typer.Option(
            "--mode",
            help=(
                "prefill (compress the prompt; default) | decode (keep the cache at --decoding-budget "
                "tokens while generating --new-tokens)."
            ),
            show_default=False,
        ),
    ] = None,
    decoding_budget: Annotated[
        Optional[List[int]],
        typer.Option(
            "--decoding-budget",
            help="Mode decode: cache budget in tokens per KV head (repeatable; default 256 512).",
            show_default=False,
        ),
    ] = None,
    new_tokens: Annotated[
        Optional[int],
        typer.Option(
            "--new-tokens", help="Mode decode: tokens generated after the prompt (default 512).", show_default=False
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Evict KV-cache entries with CapKV and the standard policies; report needle retrieval,
    fidelity (KL / top-1 vs the full cache, perplexity), bytes kept and scoring overhead.

    One `result` record per (method, compression_ratio); `full` is the uncompressed reference.
    With --mode decode: one per (method, decoding budget), re-compressing every
    `decoding_interval_tokens` (--set) generated tokens; KL / top-1 teacher-forced on the
    full-cache generation, answer and needle match, peak cache bytes, ms per token.

    Example: icml26 evict-kv --method capkv,capkv-qa,snapkv,snapkv@kernel_size=13 -c 0.5 -c 0.75 -n 1024
    Example: icml26 evict-kv --mode decode --decoding-budget 256 --new-tokens 128
    """
    from icml26.core.errors import InputError
    from icml26.core.options import split_csv
    from icml26.core.preamble import prepare

    methods = split_csv(method)
    run = prepare(  # settings, limits (sized settings, Config.work) and --out: checked before torch loads
        "icml26.methods.kvcache.config:Config",
        "evict-kv",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        model=model,
        methods=tuple(methods) if methods else None,
        compression_ratios=tuple(compression_ratio) if compression_ratio else None,
        context_tokens=tuple(context_tokens) if context_tokens else None,
        haystack=haystack,
        mode=mode,
        decoding_budgets=tuple(decoding_budget) if decoding_budget else None,
        new_tokens=new_tokens,
    )
    cfg = run.cfg
    if cfg.mode != "decode" and (decoding_budget or new_tokens is not None):
        # a decode-only option on a prefill run would be ignored silently
        raise InputError("--decoding-budget and --new-tokens apply to --mode decode; add --mode decode (or drop them)")
    if cfg.mode == "decode" and compression_ratio:  # a prefill-only option on a decode run would be ignored
        raise InputError("--compression-ratio applies to --mode prefill (decode keeps --decoding-budget tokens)")
    from icml26.core.recipe import parse_sets
    from icml26.methods.kvcache import config as C

    C.check_mode_settings(cfg, parse_sets(set_))  # a --set the mode does not read: exit 2, naming it

    C.preflight(cfg)  # model, positions, kvpress names, haystack length: before the config record
    if cfg.mode == "decode":
        cols = [
            "method",
            "decoding_budget_tokens",
            "kl",
            "top1_agreement",
            "answer_match",
            "needle_match",
            "peak_cache_bytes",
            "decode_ms_per_token",
        ]
    else:
        cols = [
            "method",
            "compression_ratio",
            "needle_accuracy",
            "kl",
            "top1_agreement",
            "perplexity",
            "kept_bytes",
            "overhead_ratio",
            "kept_per_head_gini",
        ]
    from icml26.core.output import stream
    from icml26.methods.kvcache import api as m

    stream(
        m.run(cfg, seed=run.seed or 0, device=run.device),
        run=run,
        quiet=quiet,
        columns=cols,
        plot=m.write_head_budgets,
    )
