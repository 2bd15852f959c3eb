"""``icml26 modality-pairing``: stochastic vs fixed modality pairing (multimodal learning as
convolutional smoothing, ICML 2026), with SAM / label smoothing / SWA baselines, flatness and robustness."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SeedsOpt, SetOpt, split_csv

COLUMNS = [
    "pairing",
    "reg",
    "fusion",
    "modality",
    "test_accuracy:test acc",
    "test_accuracy_ci:95% CI",
    "hessian_top_eig:λmax",
    "hessian_trace:tr H",
    "weight_noise_loss_gap:noise gap",
    "train_wall_s:train s",
]


def modality_pairing(
    data: Annotated[
        Optional[str],
        typer.Option(
            "--data",
            "-d",
            help="av-digits (built on first use, see `icml26 prepare-data av-digits`) or a folder with one "
            "<modality>.npz per modality (x_train, y_train, x_test, y_test; docs/modality-pairing.md).",
            show_default=False,
        ),
    ] = None,
    pairing: Annotated[
        Optional[List[str]],
        typer.Option(
            "--pairing", "-p", help="unimodal | fixed | stochastic (repeatable or comma-separated).", show_default=False
        ),
    ] = None,
    reg: Annotated[
        Optional[List[str]],
        typer.Option("--reg", help="none | sam | ls | swa (repeatable or comma-separated).", show_default=False),
    ] = None,
    fusion: Annotated[
        Optional[List[str]],
        typer.Option(
            "--fusion", help="late | late-sum | intermediate (repeatable or comma-separated).", show_default=False
        ),
    ] = None,
    modalities: Annotated[
        Optional[List[str]],
        typer.Option(
            "--modalities",
            "-m",
            help="Modalities to use, anchor first (av-digits: image, audio, text; default image,audio).",
            show_default=False,
        ),
    ] = None,
    epochs: Annotated[
        Optional[int], typer.Option("--epochs", help="Training epochs per run.", min=1, show_default=False)
    ] = None,
    seeds: SeedsOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    resume: ResumeOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train multimodal classifiers with fixed and stochastic (within-class re-drawn) modality pairing,
    with unimodal, SAM, label-smoothing and SWA baselines; measure accuracy, corrupted / missing /
    PGD-attacked modality accuracy, the top Hessian eigenvalue, Hutchinson trace and weight-noise gap.

    `step` records (pairing, reg, fusion, modality, seed, epoch, train_loss, val_accuracy); one `result`
    per (pairing, reg, fusion, modality), averaged over seeds with 95% intervals; last a `summary`.
    With --out and `--set landscape_points=11`: loss_landscape.png (filter-normalised 2-D slices).

    Example: icml26 modality-pairing --data av-digits --pairing unimodal,fixed,stochastic --reg none,sam,ls,swa
    --seeds 5 --out runs/mp
    """
    from icml26.core.output import stream
    from icml26.core.preamble import prepare

    run = prepare(
        "icml26.methods.multimodal.config:Config",
        "modality-pairing",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        devices=("cpu",),  # its models are small: trained on the CPU
        out=out,
        resume=resume,
        resumable=True,
        data=data,
        pairing=split_csv(pairing),
        reg=split_csv(reg),
        fusion=split_csv(fusion),
        modalities=split_csv(modalities),
        epochs=epochs,
        seeds=seeds,
    )
    cfg, s, previous = run.cfg, run.seed, run.previous
    from icml26.methods.multimodal import api as m

    m.validate(cfg)
    ms = m.load(cfg)  # builds av-digits on first use; a bad folder / mismatched labels: InputError before any record
    stream(
        m.run(cfg, seed=s, out=out, previous=previous, data=ms),
        run=run,
        quiet=quiet,
        columns=COLUMNS,
    )
