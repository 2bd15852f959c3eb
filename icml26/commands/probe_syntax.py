"""``icml26 probe-syntax``: syntactic vs semantic centroids in LM hidden states."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt


def probe_syntax(
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            "-m",
            help="smollm2-135m (default), gemma3-270m, a local HF folder or a .gguf file.",
            show_default=False,
        ),
    ] = None,
    sentences: Annotated[
        Optional[str],
        typer.Option(
            "--sentences",
            help="Your own TSV with the header sentence<TAB>syntax_id<TAB>meaning_id (default: the built-in WordNet "
            "set).",
            show_default=False,
        ),
    ] = None,
    n_events: Annotated[
        Optional[int],
        typer.Option(
            "--n-events",
            help="Built-in set: meanings, each realised in every structure (sentences = n_events x structures).",
            min=3,
            show_default=False,
        ),
    ] = None,
    pooling: Annotated[
        Optional[str],
        typer.Option(
            "--pooling", help="last (mean of the last `last_tokens` tokens, default 3) | mean.", show_default=False
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Syntax vs semantics in a causal LM, layer by layer (Acevedo, Laio & Baroni, ICML 2026).

    Sentences that share a structure (syntax twins) or a meaning (paraphrases) are encoded;
    per layer, leave-one-out syntactic and semantic centroids are subtracted and the
    similarity to matched sentences and the Information Imbalance (jackknife CI) are
    measured, beside a shuffled-centroid control. One JSON record per layer; with --out,
    records.jsonl, sentences.tsv and layer_profile.png.

    Example: icml26 probe-syntax --n-events 100 --out runs/probe
    """
    import dataclasses

    from icml26.core.data.lm import model_path
    from icml26.core.output import stream
    from icml26.core.preamble import prepare

    run = prepare(
        "icml26.methods.probing.syntax_semantics:Config",
        "probe-syntax",
        recipe=recipe,
        sets=set_,
        seed=seed,
        out=out,
        model=model,
        sentences=sentences,
        n_events=n_events,
        pooling=pooling,
    )
    cfg, s = run.cfg, run.seed
    from icml26.methods.probing import api as m

    # validate everything the user gave before the first output line
    if cfg.sentences is not None:
        from pathlib import Path

        cfg = dataclasses.replace(cfg, sentences=str(Path(cfg.sentences).expanduser()))
    ss = m.load_sentences(cfg, s)
    model_path(cfg.model)
    from icml26.core.preamble import resolve_device

    dev = resolve_device(device, "probe-syntax")  # after the inputs: a bad model or file speaks first
    stream(
        m.run(cfg, seed=s, device=dev, out_dir=out, sentence_set=ss),
        run.replace(cfg=cfg),
        quiet=quiet,
        columns=list(m.COLUMNS),
        plot=m.plot,
        extra_config={"device": dev},
    )
