"""``icml26 filter-data``: classifier-based quality filtering (CQF, arXiv 2510.00866).

Subcommands: make-corpus, train, score, select, analyze, proxy.

Output convention. ``make-corpus``, ``train``, ``analyze`` and ``proxy`` follow the
toolkit's record stream (config / result / summary JSON lines on stdout, a table on
stderr). ``score`` and ``select`` are filters in a document pipeline: their stdout carries
documents only (one JSON object per line, the input documents), so
``score ... | select ... > kept.jsonl`` works. Their run record goes to stderr as one
``filter-data score: ...`` line (``-q`` silences it) and, with ``--log FILE``, as the
usual ``config`` and ``summary`` JSON lines written atomically to FILE.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from icml26.core.options import OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt

filter_app = typer.Typer(
    help="Classifier-based quality filtering (CQF): build a corpus, train a quality classifier, "
    "score and select documents, and the paper's analyses.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

InputArg = Annotated[str, typer.Argument(help="Documents: .jsonl, .jsonl.gz, .parquet, or - for stdin.", show_default=False)]
OutputOpt = Annotated[Optional[str], typer.Option("--output", help="Write documents here (atomically; .gz = gzip) instead of stdout.", show_default=False)]
SkipBadOpt = Annotated[bool, typer.Option("--skip-bad", help="Skip malformed lines (counted in the summary) instead of stopping at the first.")]
FieldOpt = Annotated[str, typer.Option("--field", help="Score key inside each document's metadata.")]
LogOpt = Annotated[Optional[str], typer.Option("--log", help="Write the run's config and summary JSON lines to this file.", show_default=False)]


def _finish(command: str, config: dict, summary: dict, log: str | None, quiet: bool) -> None:
    """The run record of a filter command: stderr line (+ --log file); never stdout."""
    import sys

    from icml26.core.output import atomic_write_text, to_json

    if log:
        atomic_write_text(log, to_json({"kind": "config", "command": command, **config}) + "\n"
                          + to_json({"kind": "summary", **summary}) + "\n")
    if not quiet:
        parts = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items() if v is not None)
        print(f"icml26 {command}: {parts}", file=sys.stderr)


@filter_app.command("make-corpus")
def make_corpus(
    out: Annotated[str, typer.Option("--out", "-o", help="Folder for hq.jsonl, hq_heldout.jsonl, pool.jsonl, pool_heldout.jsonl.")],
    docs_per_source: Annotated[Optional[int], typer.Option("--docs-per-source", help="Documents drawn from each Debian text source.", min=10, show_default=False)] = None,
    recipe: RecipeOpt = None, set_: SetOpt = None, seed: SeedOpt = None, quiet: QuietOpt = False,
) -> None:
    """Build the HQ set and a web-like pool from real Debian text with seeded degradations."""
    from icml26.core.output import stream
    from icml26.core.recipe import recipe_seed, resolve
    from icml26.methods.filtering import corpus as m

    cfg = resolve(m.CorpusConfig, "filter-data", recipe, set_, docs_per_source=docs_per_source)
    seed = recipe_seed(recipe, "filter-data", seed) or 0

    def run():
        parts = m.build(cfg, seed)
        recs = list(m.write(parts, out))
        yield from recs
        yield {"kind": "summary", "out": out, "n_hq": len(parts["hq"]), "n_pool": len(parts["pool"]),
               "pool_gold_fraction": recs[2]["gold_fraction"]}

    stream(run(), command="filter-data make-corpus", config=cfg, seed=seed, out=out, quiet=quiet,
           columns=["file", "n_docs", "n_chars", "gold_fraction"])


@filter_app.command("train")
def train(
    hq: Annotated[str, typer.Option("--hq", help="High-quality documents (JSONL/parquet), label 1.")],
    pool: Annotated[str, typer.Option("--pool", help="Raw pool documents (JSONL/parquet), label 0.")],
    out: Annotated[str, typer.Option("--out", "-o", help="Model folder: model.safetensors, config.yaml, records.jsonl.")],
    classifier: Annotated[Optional[str], typer.Option("--classifier", help="ngram (hashed n-gram LR) | embed (MiniLM + LR) | dsir (importance weights).", show_default=False)] = None,
    skip_bad: SkipBadOpt = False,
    recipe: RecipeOpt = None, set_: SetOpt = None, seed: SeedOpt = None, quiet: QuietOpt = False,
) -> None:
    """Train a quality classifier (HQ vs pool) and save it as safetensors."""
    from icml26.core.output import stream
    from icml26.core.recipe import recipe_seed, resolve
    from icml26.methods.filtering import classifiers as m

    cfg = resolve(m.TrainConfig, "filter-data", recipe, set_, classifier=classifier)
    seed = recipe_seed(recipe, "filter-data", seed) or 0
    stream(m.run_train(cfg, hq=hq, pool=pool, out=out, seed=seed, skip_bad=skip_bad), command="filter-data train",
           config=cfg, seed=seed, out=out, quiet=quiet, extra_config={"hq": hq, "pool": pool})


@filter_app.command("score")
def score(
    model: Annotated[str, typer.Option("--model", "-m", help="A model folder (or .safetensors) from `filter-data train`.")],
    input: InputArg = "-",
    output: OutputOpt = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Documents scored per batch.", min=1)] = 256,
    field: FieldOpt = "quality_score",
    skip_bad: SkipBadOpt = False,
    no_spool: Annotated[bool, typer.Option("--no-spool", help="Stream to stdout batch by batch (a failure then leaves partial output).")] = False,
    log: LogOpt = None, quiet: QuietOpt = False,
) -> None:
    """Add metadata.quality_score to every document (stdout: documents only)."""
    import time

    from icml26.core import progress
    from icml26.methods.filtering.classifiers import load_model
    from icml26.methods.filtering.cqf import score_stream
    from icml26.methods.filtering.jsonl import DocumentWriter

    progress.set_quiet(quiet)
    m = load_model(model)
    t0 = time.perf_counter()
    with progress.progress(None, f"scoring ({m.classifier})") as bar, DocumentWriter(output, spool=not no_spool) as w:
        st = score_stream(m, input, w, batch_size=batch_size, skip_bad=skip_bad, field=field, bar=bar)
    dt = time.perf_counter() - t0
    _finish("filter-data score", {"input": input, "model": model, "classifier": m.classifier, "field": field,
                                  "batch_size": batch_size, "skip_bad": skip_bad},
            {"n_scored": st.written, "n_bad": st.bad, "first_bad": st.first_bad, "score_mean": st.score_mean,
             "docs_per_s": st.written / dt if dt > 0 else None}, log, quiet)


@filter_app.command("select")
def select(
    input: InputArg = "-",
    top: Annotated[Optional[float], typer.Option("--top", help="Keep this fraction of documents with the highest scores (exact).", show_default=False)] = None,
    threshold: Annotated[Optional[float], typer.Option("--threshold", help="Keep documents with score >= this (one pass).", show_default=False)] = None,
    field: FieldOpt = "quality_score",
    output: OutputOpt = None,
    skip_bad: SkipBadOpt = False,
    log: LogOpt = None, quiet: QuietOpt = False,
) -> None:
    """Keep the top fraction (or those above a threshold) of scored documents (stdout: documents only)."""
    from icml26.methods.filtering.cqf import select_stream
    from icml26.methods.filtering.jsonl import DocumentWriter

    with DocumentWriter(output) as w:
        st = select_stream(input, w, top=top, threshold=threshold, field=field, skip_bad=skip_bad)
    _finish("filter-data select", {"input": input, "top": top, "threshold": threshold, "field": field, "skip_bad": skip_bad},
            {"n_read": st.read, "n_kept": st.written, "n_bad": st.bad, "first_bad": st.first_bad,
             "score_threshold": st.threshold}, log, quiet)
