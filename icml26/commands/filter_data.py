"""``icml26 filter-data``: classifier-based quality filtering (CQF, arXiv 2510.00866).

Subcommands: make-corpus, train, score, select, analyze, proxy.

Output convention. ``make-corpus``, ``train``, ``analyze`` and ``proxy`` follow the
toolkit's record stream (config / result / summary JSON lines on stdout, a table on
stderr). ``score`` and ``select`` are filters in a document pipeline: their stdout carries
documents only (one JSON object per line, the input documents), so
``score ... | select ... > kept.jsonl`` works. Their run record goes to stderr as one
``filter-data score: ...`` line (``-q`` silences it) and, with ``--log FILE``, as the
usual ``config`` and ``summary`` JSON lines written atomically to FILE.

``score --level line`` and ``select --level line`` work on the lines of each text
(``icml26.methods.filtering.lines``); without ``--level`` both behave as before.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from icml26.commands.filter_data_common import SECTIONS, _finish, _prepare, _refuse_overwrite, _refuse_same  # noqa: F401
from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt

filter_app = typer.Typer(
    help="Classifier-based quality filtering (CQF): build a corpus, train a quality classifier, "
    "score and select documents, and the paper's analyses.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

InputArg = Annotated[
    str, typer.Argument(help="Documents: .jsonl, .jsonl.gz, .parquet, or - for stdin.", show_default=False)
]
OutputOpt = Annotated[
    Optional[str],
    typer.Option(
        "--output", help="Write documents here (atomically; .gz = gzip) instead of stdout.", show_default=False
    ),
]
SkipBadOpt = Annotated[
    bool,
    typer.Option("--skip-bad", help="Skip malformed lines (counted in the summary) instead of stopping at the first."),
]
FieldOpt = Annotated[str, typer.Option("--field", help="Score key inside each document's metadata.")]
LogOpt = Annotated[
    Optional[str],
    typer.Option("--log", help="Write the run's config and summary JSON lines to this file.", show_default=False),
]
LevelOpt = Annotated[
    str,
    typer.Option(
        "--level",
        help="document (whole documents, the default) | line (every line of the text: split on newlines, blank "
        "lines kept as separators).",
    ),
]
LineFieldOpt = Annotated[
    str, typer.Option("--line-field", help="Line-scores key inside each document's metadata (--level line).")
]


@filter_app.command("make-corpus")
def make_corpus(
    out: Annotated[
        Optional[str],
        typer.Option(
            "--out",
            "-o",
            help="Folder for hq.jsonl, hq_heldout.jsonl, pool.jsonl, pool_heldout.jsonl. Required.",
            show_default=False,
        ),
    ] = None,
    docs_per_source: Annotated[
        Optional[int],
        typer.Option(
            "--docs-per-source", help="Documents drawn from each Debian text source.", min=10, show_default=False
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Build the HQ set and a web-like pool from real Debian text with seeded degradations."""
    # --out is checked here (not by typer) so that `--set help` works without it
    run = _prepare(
        "icml26.methods.filtering.corpus:CorpusConfig",
        "make-corpus",
        recipe,
        set_,
        seed=seed,
        out=out,
        docs_per_source=docs_per_source,
        required={"--out DIR": out},
    )
    cfg, seed = run.cfg, run.seed
    from icml26.core.data.text import require_corpus
    from icml26.core.output import stream
    from icml26.methods.filtering.api import corpus as m

    for src in (
        *cfg.hq_sources,
        m.INFORMAL_SOURCE,
    ):  # every source installed (else its install command), before the config record
        require_corpus(src)

    def records():
        parts = m.build(cfg, seed)
        recs = list(m.write(parts, out))
        yield from recs
        yield {
            "kind": "summary",
            "out": out,
            "n_hq": len(parts["hq"]),
            "n_pool": len(parts["pool"]),
            "pool_gold_fraction": recs[2]["gold_fraction"],
        }

    stream(records(), run=run, quiet=quiet, columns=["file", "n_docs", "n_chars", "gold_fraction"])


@filter_app.command("train")
def train(
    hq: Annotated[
        Optional[str],
        typer.Option("--hq", help="High-quality documents (JSONL/parquet), label 1. Required.", show_default=False),
    ] = None,
    pool: Annotated[
        Optional[str],
        typer.Option("--pool", help="Raw pool documents (JSONL/parquet), label 0. Required.", show_default=False),
    ] = None,
    out: Annotated[
        Optional[str],
        typer.Option(
            "--out",
            "-o",
            help="Model folder: model.safetensors, config.yaml, records.jsonl. Required.",
            show_default=False,
        ),
    ] = None,
    classifier: Annotated[
        Optional[str],
        typer.Option(
            "--classifier",
            help="ngram (hashed n-gram LR) | embed (MiniLM + LR) | dsir (importance weights).",
            show_default=False,
        ),
    ] = None,
    skip_bad: SkipBadOpt = False,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Train a quality classifier (HQ vs pool) and save it as safetensors."""
    # --hq/--pool/--out are checked here (not by typer) so that `--set help` works without them
    run = _prepare(
        "icml26.methods.filtering.classifiers:TrainConfig",
        "train",
        recipe,
        set_,
        seed=seed,
        out=out,
        classifier=classifier,
        required={"--hq FILE": hq, "--pool FILE": pool, "--out DIR": out},
    )
    _refuse_same(hq, pool)
    if run.cfg.classifier == "embed":  # only the sentence encoder runs on torch
        from icml26.core.device import resolve_device

        device = resolve_device(device)
    from icml26.core.output import stream
    from icml26.methods.filtering.api import classifiers as m

    stream(
        m.run_train(run.cfg, hq=hq, pool=pool, out=out, seed=run.seed, skip_bad=skip_bad, device=device),
        run=run,
        quiet=quiet,
        extra_config={"hq": hq, "pool": pool},
    )


@filter_app.command("score")
def score(
    model: Annotated[
        str, typer.Option("--model", "-m", help="A model folder (or .safetensors) from `filter-data train`.")
    ],
    input: InputArg = "-",
    output: OutputOpt = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Documents scored per batch.", min=1)] = 256,
    field: FieldOpt = "quality_score",
    skip_bad: SkipBadOpt = False,
    no_spool: Annotated[
        bool, typer.Option("--no-spool", help="Stream to stdout batch by batch (a failure then leaves partial output).")
    ] = False,
    level: LevelOpt = "document",
    doc_score: Annotated[
        str,
        typer.Option(
            "--doc-score",
            help="With --level line, metadata.quality_score is: document (the whole-text score, as at document "
            "level) | mean | min | len-weighted (of the line scores; words as weights).",
        ),
    ] = "document",
    line_field: LineFieldOpt = "line_scores",
    device: DeviceOpt = "auto",
    log: LogOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Add metadata.quality_score (and quality_score_range, the values it can take) to every document; with --level line
    also metadata.line_scores, one per line (stdout: documents only)."""
    import time
    from pathlib import Path

    from icml26.core import progress
    from icml26.methods.filtering.api import MODEL_FILE, DocumentWriter, check_score_options, load_model, score_stream

    check_score_options(level, doc_score, field, line_field)
    model_file = str(Path(model) / MODEL_FILE) if Path(model).is_dir() else model  # (a train --out folder)
    _refuse_overwrite(output, input)
    _refuse_overwrite(log, input, flag="--log")
    _refuse_overwrite(output, model_file, what="model")
    _refuse_overwrite(log, model_file, flag="--log", what="model")
    _refuse_overwrite(log, output, flag="--log", what="output")
    progress.set_quiet(quiet)
    m = load_model(model)
    if m.classifier == "embed":  # only the sentence encoder runs on torch
        from icml26.core.device import resolve_device

        m.device = resolve_device(device)
    m.score(["warm-up"])  # imports / encoder load stay out of docs_per_s
    t0 = time.perf_counter()
    with progress.progress(None, f"scoring ({m.classifier})") as bar, DocumentWriter(output, spool=not no_spool) as w:
        st = score_stream(
            m,
            input,
            w,
            batch_size=batch_size,
            skip_bad=skip_bad,
            field=field,
            bar=bar,
            level=level,
            doc_score=doc_score,
            line_field=line_field,
        )
    dt = time.perf_counter() - t0
    lvl = {} if level == "document" else {"level": level, "doc_score": doc_score, "line_field": line_field}
    _finish(
        "filter-data score",
        {
            "input": input,
            "model": model,
            "classifier": m.classifier,
            "field": field,
            "batch_size": batch_size,
            "skip_bad": skip_bad,
            "score_range": m.score_range,
            "score_kind": m.score_kind,
            **lvl,
        },
        {
            "n_scored": st.written,
            "n_bad": st.bad,
            "first_bad": st.first_bad,
            "score_mean": st.score_mean,
            "score_range": m.score_range,
            "docs_per_s": st.written / dt if dt > 0 else None,
        },
        log,
        quiet,
    )


@filter_app.command("select")
def select(
    input: InputArg = "-",
    top: Annotated[
        Optional[float],
        typer.Option(
            "--top", help="Keep this fraction of documents with the highest scores (exact).", show_default=False
        ),
    ] = None,
    threshold: Annotated[
        Optional[float],
        typer.Option(
            "--threshold",
            help="Keep documents with score >= this (one pass); must lie in the scores' range ([0, 1] for "
            "ngram/embed).",
            show_default=False,
        ),
    ] = None,
    field: FieldOpt = "quality_score",
    output: OutputOpt = None,
    skip_bad: SkipBadOpt = False,
    level: LevelOpt = "document",
    min_kept: Annotated[
        Optional[float],
        typer.Option(
            "--min-kept",
            help="--level line: keep a document when its kept lines hold at least this fraction of its words "
            "[default: 0.5].",
            show_default=False,
        ),
    ] = None,
    line_field: LineFieldOpt = "line_scores",
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            "-m",
            help="--level line, documents scored with --doc-score document: the classifier that rescores the kept "
            "text.",
            show_default=False,
        ),
    ] = None,
    log: LogOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Keep the top fraction (or those above a threshold) of scored documents; with --level line, drop the lines below
    --threshold (stdout: documents only)."""
    from icml26.methods.filtering.api import DocumentWriter, check_select_options, select_stream

    check_select_options(level, top=top, threshold=threshold, min_kept=min_kept, model=model)
    _refuse_overwrite(output, input)
    _refuse_overwrite(log, input, flag="--log")
    _refuse_overwrite(log, output, flag="--log", what="output")
    import sys

    from icml26.methods.filtering.api import range_text

    if level == "line":
        _select_lines(
            input,
            output,
            threshold=threshold,
            min_kept=0.5 if min_kept is None else min_kept,
            field=field,
            line_field=line_field,
            model=model,
            skip_bad=skip_bad,
            log=log,
            quiet=quiet,
        )
        return
    with DocumentWriter(output) as w:
        st = select_stream(input, w, top=top, threshold=threshold, field=field, skip_bad=skip_bad)
    if threshold is not None and st.read and st.written in (0, st.read) and not quiet:
        seen = f"{st.score_min:.4g} to {st.score_max:.4g}" if st.score_min is not None else "unknown"
        print(
            f"icml26 filter-data select: warning: --threshold {threshold:g} kept "
            f"{'none' if st.written == 0 else 'all'} of "
            f"the {st.read} documents (their scores: {seen}; possible range {range_text(st.score_range)}); "
            "choose a threshold between the scores, or --top K for a fraction",
            file=sys.stderr,
        )
    _finish(
        "filter-data select",
        {"input": input, "top": top, "threshold": threshold, "field": field, "skip_bad": skip_bad},
        {
            "n_read": st.read,
            "n_kept": st.written,
            "n_bad": st.bad,
            "first_bad": st.first_bad,
            "score_threshold": st.threshold,
            "score_range": st.score_range,
            "score_min": st.score_min,
            "score_max": st.score_max,
        },
        log,
        quiet,
    )


def _select_lines(input, output, *, threshold, min_kept, field, line_field, model, skip_bad, log, quiet) -> None:
    """select --level line (see icml26.methods.filtering.lines.select_line_stream)."""
    import sys
    from pathlib import Path

    from icml26.methods.filtering.api import DocumentWriter, select_line_stream

    m = None
    if model is not None:
        from icml26.methods.filtering.api import MODEL_FILE, load_model

        model_file = str(Path(model) / MODEL_FILE) if Path(model).is_dir() else model
        _refuse_overwrite(output, model_file, what="model")
        _refuse_overwrite(log, model_file, flag="--log", what="model")
        m = load_model(model)
    with DocumentWriter(output) as w:
        st = select_line_stream(
            input,
            w,
            threshold=threshold,
            min_kept=min_kept,
            field=field,
            line_field=line_field,
            model=m,
            skip_bad=skip_bad,
        )
    if st.read and st.lines_total and st.lines_dropped + st.dropped_min_kept == 0 and not quiet:
        print(
            f"icml26 filter-data select: warning: --threshold {threshold:g} dropped none of the {st.lines_total} "
            "lines; "
            f"choose a threshold between the values of metadata.{line_field}",
            file=sys.stderr,
        )
    _finish(
        "filter-data select",
        {
            "input": input,
            "level": "line",
            "threshold": threshold,
            "min_kept": min_kept,
            "field": field,
            "line_field": line_field,
            "model": model,
            "skip_bad": skip_bad,
        },
        {
            "n_read": st.read,
            "n_kept": st.written,
            "n_dropped": st.dropped_min_kept,
            "n_bad": st.bad,
            "first_bad": st.first_bad,
            "lines_total": st.lines_total,
            "lines_dropped": st.lines_dropped,
            "words_total": st.words_total,
            "words_kept": st.words_kept,
            "words_kept_fraction": st.words_kept / st.words_total if st.words_total else None,
            "score_threshold": st.threshold,
            "score_range": st.score_range,
        },
        log,
        quiet,
    )


@filter_app.command("analyze")
def analyze(
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m", help="A model folder from `filter-data train`. Required.", show_default=False),
    ] = None,
    hq: Annotated[
        Optional[str],
        typer.Option("--hq", help="Held-out HQ documents (e.g. hq_heldout.jsonl). Required.", show_default=False),
    ] = None,
    pool: Annotated[
        Optional[str],
        typer.Option(
            "--pool",
            help="A pool sample that defines the score CDF (e.g. pool_heldout.jsonl). Required.",
            show_default=False,
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Implicit filtering of the HQ set: how much HQ each CQF threshold drops, HQ score deciles, length bias."""
    # --model/--hq/--pool are checked here (not by typer) so that `--set help` works without them
    run = _prepare(
        "icml26.methods.filtering.analysis:AnalyzeConfig",
        "analyze",
        recipe,
        set_,
        default_seed=None,
        out=out,
        required={"--model DIR": model, "--hq FILE": hq, "--pool FILE": pool},
    )
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.methods.filtering.api import analysis as m

    stream(
        m.run(run.cfg, model_path=model, hq=hq, pool=pool),
        Run(run.command, cfg=run.cfg, out=out),  # no seed: analyze draws nothing at random
        quiet=quiet,
        extra_config={"model": model, "hq": hq, "pool": pool},
        columns=[
            "top_fraction",
            "score_threshold",
            "hq_filtered_fraction",
            "pool_kept_fraction",
            "gold_precision",
            "gold_recall",
        ],
    )


@filter_app.command("proxy")
def proxy(
    corpus: Annotated[
        Optional[str],
        typer.Option("--corpus", help="Folder written by `filter-data make-corpus`. Required.", show_default=False),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model", "-m", help="The CQF classifier (a `filter-data train` folder). Required.", show_default=False
        ),
    ] = None,
    dsir: Annotated[
        Optional[str],
        typer.Option(
            "--dsir",
            help="Also train on the DSIR baseline's selection (a `train --classifier dsir` folder).",
            show_default=False,
        ),
    ] = None,
    experiment: Annotated[
        Optional[str],
        typer.Option(
            "--experiment", help="selection (CQF vs HQ vs random) | conditioning (Sec. 7).", show_default=False
        ),
    ] = None,
    tokens: Annotated[
        Optional[int], typer.Option("--tokens", help="Training bytes per proxy model.", min=1, show_default=False)
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Proxy experiments: small byte-level LMs trained on CQF-selected, HQ-only and random data at equal budgets."""
    # --corpus/--model are checked here (not by typer) so that `--set help` works without them
    run = _prepare(
        "icml26.methods.filtering.proxy:ProxyConfig",
        "proxy",
        recipe,
        set_,
        seed=seed,
        out=out,
        experiment=experiment,
        tokens=tokens,
        required={"--corpus DIR": corpus, "--model DIR": model},
    )
    from icml26.core.output import stream
    from icml26.methods.filtering.api import proxy as m

    cols = (
        [
            "condition",
            "train_docs",
            "gold_fraction",
            "hq_bpb",
            "pool_bpb",
            "gold_bpb",
            "word_order_acc",
            "continuation_acc",
        ]
        if run.cfg.experiment == "selection"
        else ["family", "tokens", "train_k", "eval_k", "loss_bpb", "delta_bpb"]
    )
    stream(
        m.run(run.cfg, corpus=corpus, model_path=model, dsir_path=dsir, seed=run.seed),
        run=run,
        quiet=quiet,
        extra_config={"corpus": corpus, "model": model, "dsir": dsir},
        columns=cols,
    )
