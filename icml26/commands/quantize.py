"""``icml26 quantize``: FPTQuant function-preserving transforms + INT4/INT8 quantization of a
LLaMA-architecture model, beside RTN, GPTQ, SmoothQuant and QuaRot-style rotation."""

from __future__ import annotations

from typing import Annotated

import typer

from icml26.core.options import OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt, split_csv


def quantize(
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help=(
                "llama (SmolLM2-135M, default) | gemma3-270m | an HF folder | a .gguf | a folder saved by `quantize "
                "--out` (re-evaluated)."
            ),
            show_default=False,
        ),
    ] = None,
    bits: Annotated[
        int | None,
        typer.Option(
            "--bits",
            "-b",
            help=(
                "Weight width: 4 runs W4A16 and W4A8, 8 runs W8A8 (unless --setting is given); with --setting, keeps "
                "those of this width (2..8)."
            ),
            show_default=False,
        ),
    ] = None,
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method",
            help=(
                "fp | rtn | gptq | smoothquant | quarot | fptquant | fptquant-merged | all (repeatable or "
                "comma-separated; default fp,rtn,fptquant-merged; all = the full comparison at the five standard "
                "settings). An FPTQuant name + -local / -e2e-only / -untrained runs only those training stages; "
                "results are named for the stages that ran (e2e_steps=0 -> fptquant-merged-local)."
            ),
            show_default=False,
        ),
    ] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--setting",
            help=(
                "W4A16 | W4A8 | W4A4 | W4A4KV4 | W8A8 | W<b>A<b>[KV<b>] | all (repeatable; default: what --bits "
                "implies)."
            ),
            show_default=False,
        ),
    ] = None,
    calib_text: Annotated[
        str | None,
        typer.Option(
            "--calib-text",
            help="Your own plain-text calibration file (default: the corpus' calibration documents).",
            show_default=False,
        ),
    ] = None,
    eval_text: Annotated[
        str | None,
        typer.Option(
            "--eval-text",
            help=(
                "Your own plain-text evaluation file (default: the corpus' evaluation documents; calibration then "
                "stays on the corpus)."
            ),
            show_default=False,
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: Annotated[
        str,
        typer.Option(
            "--device", help="cpu (auto = cpu): the quantize pipeline runs on the CPU; cuda is not supported here yet."
        ),
    ] = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Quantize a real LLM with FPTQuant and a baseline; perplexity on held-out real text.

    Default: FP, RTN and fptquant-merged (FPTQuant's mergeable transforms, trained locally and end to
    end) at the settings --bits implies (W4A16 and W4A8 for 4), a few minutes; --method all is the
    full comparison. One result record per (method, setting): perplexity, top-1 / greedy agreement
    with the FP model, size in bytes, weight group size, the transforms and training stages that
    ran. --out saves one (method, setting): fptquant-merged / rtn / smoothquant in compressed-tensors'
    format (transformers loads it), fptquant / quarot in icml26's packed format; pass the folder back
    as --model to re-evaluate it.

    Example: icml26 quantize --model llama --bits 4 --out runs/q4
    """
    import sys

    from icml26.core.output import stream
    from icml26.core.preamble import prepare
    from icml26.core.recipe import load_recipe, parse_sets
    from icml26.methods.quantization import config as C

    settings = tuple(x.upper() for x in split_csv(setting)) if setting else None
    run = prepare(
        "icml26.methods.quantization.config:Config",
        "quantize",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        devices=("cpu",),
        out=out,
        model=model,
        bits=bits,
        methods=split_csv(method),
        settings=settings,
        calib_text=calib_text,
        eval_text=eval_text,
    )
    cfg = run.cfg
    for f in (cfg.calib_text, cfg.eval_text):
        if f is not None:
            from icml26.core.data.text import read_text_file

            read_text_file(f)
    from icml26.methods.quantization import api as m

    packed = m.is_packed_folder(cfg.model) or m.is_export_folder(cfg.model)
    if not packed:
        from icml26.core.data.lm import model_path

        mdir = model_path(cfg.model)  # bad path / corrupt files / missing package -> exit 2 before any output
        if cfg.group_size:
            C.check_group_size(cfg.group_size, C.model_dims(mdir))  # before the model load
        C.check_text_tokens(cfg, mdir)  # a user's text long enough: before the config record
    extra = None
    if not packed:
        # every setting given must be honoured by a selected method (--set: exit 2; a recipe's: listed)
        given = {k: f"recipe {recipe}" for k in (load_recipe(recipe, "quantize")[0] if recipe else {})}
        given.update({k: "--set" for k in parse_sets(set_)})
        unused = C.check_settings(cfg, given, out=out)
        if unused:
            extra = {"unused_settings": unused}
            if not quiet:
                for reason in unused.values():
                    print(f"icml26 quantize: note: {reason} (from the recipe; not used in this run)", file=sys.stderr)
    if (
        cfg.calib_text is None or cfg.eval_text is None
    ):  # text from a built-in corpus: installed (else the install command)
        from icml26.core.data.text import require_corpus

        require_corpus(cfg.corpus)
    cols = [
        "method",
        "setting",
        "wbits",
        "abits",
        "kvbits",
        "perplexity",
        "top1_agreement",
        "greedy_agreement",
        "size_bytes",
        "time_s",
    ]
    s = run.seed
    gen = m.run_packed(cfg, seed=s) if packed else _announce(m.run(cfg, seed=s, out=out), quiet, m.LONG_RUN_S)
    stream(gen, run=run, quiet=quiet, columns=cols, extra_config=extra)


def _announce(records, quiet: bool, long_s: float):
    """Pass the records through; print the run's estimated time on stderr (before the first
    result) when it is longer than ``long_s`` seconds."""
    import sys

    for r in records:
        if r.get("stage") == "estimate" and not quiet and r["estimated_s"] > long_s:
            print(
                f"icml26 quantize: this run should take about {r['estimated_s'] / 60:.0f} min "
                f"({r['estimated_cpu_s'] / 60:.0f} CPU-min at the speed the FP evaluation just ran; {r['runs']} "
                "quantized (method, setting) runs). Fewer methods or settings, or a smaller eval_tokens, make it "
                "shorter.",
                file=sys.stderr,
                flush=True,
            )
        if r.get("kind") == "skipped":  # a warning even with -q: a selected method did not run
            print(f"icml26 quantize: warning: {r['method']} skipped: {r['reason']}", file=sys.stderr, flush=True)
        yield r
