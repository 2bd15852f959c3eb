"""``icml26 geo-fusion``: GeoThinker's Spatial-Grounded Fusion (arXiv 2602.06037) and a rendered
VSI-style spatial-QA benchmark with VSI-Bench's scorer (GeoThinker, arXiv 2602.06037; docs/geo-fusion.md).

Subcommands: make-bench (render scenes with POV-Ray, write questions), train (every fusion
variant on frozen encoders, several seeds, scored on a benchmark), score (the scorer alone, for
any model's predictions). Recipes hold one mapping per subcommand under ``config``
(``config: {make-bench: {...}, train: {...}}``); ``--set key=value``; ``--set help``.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from icml26.core.options import OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt

geo_fusion_app = typer.Typer(
    help="GeoThinker's Spatial-Grounded Fusion for VLMs: a rendered multi-view spatial-QA benchmark (make-bench), "
    "the fusion variants trained on frozen encoders (train), and VSI-Bench's scorer (score).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

SECTIONS = ("make-bench", "train")
BenchOpt = Annotated[
    Optional[str],
    typer.Option(
        "--bench", help="A make-bench folder (questions.jsonl + scenes/): the evaluation set.", show_default=False
    ),
]


@geo_fusion_app.command("make-bench")
def make_bench(
    out: Annotated[
        Optional[str],
        typer.Option(
            "--out",
            "-o",
            help="Benchmark folder: scenes/<scene>/ (renders layout), questions.jsonl, bench.json. Required.",
            show_default=False,
        ),
    ] = None,
    scenes: Annotated[
        Optional[int], typer.Option("--scenes", help="Number of scenes (default 40).", min=1, show_default=False)
    ] = None,
    first_index: Annotated[
        int,
        typer.Option(
            "--first-index",
            help="Index of the first scene (use disjoint ranges for training and evaluation sets).",
            min=0,
        ),
    ] = 0,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Render rooms with POV-Ray (seeded) and write VSI-Bench-type questions with exact answers.

    Example: icml26 geo-fusion make-bench --out runs/bench --scenes 40
    """
    from icml26.core.data.renders import require_povray
    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import prepare
    from icml26.methods.spatial import api

    run = prepare(
        api.BenchConfig,
        "geo-fusion make-bench",
        recipe=recipe,
        sets=set_,
        seed=seed,
        section="make-bench",
        sections=SECTIONS,
        scenes=scenes,
    )
    cfg, s = run.cfg, run.seed
    if out is None:
        raise InputError("geo-fusion make-bench: missing required option --out")
    require_povray()  # exit 2 naming the install command, before anything is written
    api.check_out(out, cfg, seed=s, first_index=first_index)
    stream(
        api.build(out, cfg, seed=s, first_index=first_index),
        run=run,
        quiet=quiet,
        columns=["task", "questions"],
        extra_config={"out": out, "first_index": first_index},
    )


@geo_fusion_app.command("train")
def train(
    bench: BenchOpt = None,
    train_bench: Annotated[
        Optional[str],
        typer.Option(
            "--train-bench", help="A make-bench folder of other scenes to train on. Required.", show_default=False
        ),
    ] = None,
    variant: Annotated[
        Optional[str],
        typer.Option(
            "--variant", help="none | passive | sgf | sgf-nogate | sgf-global | all (comma list).", show_default=False
        ),
    ] = None,
    seeds: Annotated[
        Optional[int], typer.Option("--seeds", help="Seeds per variant (default 3).", min=1, show_default=False)
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train the fusion variants (and a small LM + heads) on frozen encoders; score each on --bench.

    Example: icml26 geo-fusion train --train-bench runs/train --bench runs/bench --variant all --out runs/gf
    """
    from pathlib import Path

    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import parse_names, prepare
    from icml26.methods.spatial.config import VARIANTS

    variants = parse_names(variant, VARIANTS, "--variant")
    run = prepare(
        "icml26.methods.spatial.config:Config",
        "geo-fusion train",
        recipe=recipe,
        sets=set_,
        seed=seed,
        out=out,
        section="train",
        sections=SECTIONS,
        variants=variants,
        seeds=seeds,
    )
    cfg, s = run.cfg, run.seed
    missing = [f for f, v in (("--bench", bench), ("--train-bench", train_bench)) if v is None]
    if missing:
        raise InputError(f"geo-fusion train: missing required option {' and '.join(missing)}")
    from icml26.methods.spatial import api

    for flag, d in (("--bench", bench), ("--train-bench", train_bench)):
        if not (Path(d) / "questions.jsonl").is_file():
            raise InputError(
                f"{flag} {d!r} is not a benchmark folder (no questions.jsonl; run `icml26 geo-fusion make-bench`)"
            )
        try:
            api.read_questions(d)  # every line checked before the first record is written
        except InputError as e:
            raise InputError(f"{flag}: {e}") from None
    if Path(bench).resolve() == Path(train_bench).resolve():
        raise InputError(
            "--train-bench and --bench are the same folder: train on disjoint scenes (make-bench --first-index)"
        )
    splits = api.load_splits(cfg, bench, train_bench)  # a missing or corrupt scene file: exit 2 before any record
    stream(
        api.run(cfg, bench=bench, train_bench=train_bench, seed=s, out=out, splits=splits),
        run=run,
        quiet=quiet,
        columns=["variant", "task", "score", "score_ci", "params_trained", "seeds"],
        extra_config={"bench": bench, "train_bench": train_bench},
    )


@geo_fusion_app.command("score")
def score(
    predictions: Annotated[
        Optional[str],
        typer.Option(
            "--predictions",
            help="JSONL, one line per question: id, task, question_type, answer, prediction (options optional).",
            show_default=False,
        ),
    ] = None,
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Score predictions by VSI-Bench's rules: accuracy (multiple choice), MRA over 0.50:0.05:0.95 (numeric);
    the three direction splits averaged into one task, then the tasks.

    Example: icml26 geo-fusion score --predictions runs/gf/predictions-sgf-seed0.jsonl
    """
    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.methods.spatial import api

    if predictions is None:
        raise InputError("geo-fusion score: missing required option --predictions")
    rows = api.read_predictions(predictions)
    records, summary = api.score(rows)
    stream(
        iter(records + [summary]),
        Run("geo-fusion score", out=out),
        quiet=quiet,
        columns=["task", "metric", "score", "n", "n_unparsable"],
        extra_config={"predictions": predictions},
    )
