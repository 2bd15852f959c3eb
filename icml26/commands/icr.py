"""``icml26 icr``: the Invariant Contamination Ratio of diffusion models (arXiv 2606.09718), as an
analysis of a trained U-Net's features across noise levels and as a training-time memorization
monitor (arXiv 2606.09718; docs/icr.md).

Subcommands: analyze (noise sweep: ICR and linear-probe accuracy), train (small U-Net with the ICR
monitor and a memorization measure; resumable), report (the PNG plots of a run folder). Settings:
``recipes/icr/*.yaml`` (``method: icr``), ``--set key=value``, ``--set help``.
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SetOpt

icr_app = typer.Typer(
    help="ICR (Invariant Contamination Ratio) of diffusion-model features: noise sweep with a linear probe, "
    "and a training-time memorization monitor.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

DataOpt = Annotated[
    Optional[str], typer.Option("--data", help="fashion-mnist | mnist | an .npz | an image folder.", show_default=False)
]


@icr_app.command("analyze")
def analyze(
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            help="A diffusers UNet2DModel folder (config.json + safetensors), e.g. RUN/size-N/unet.",
            show_default=False,
        ),
    ] = None,
    data: DataOpt = None,
    noise_level: Annotated[
        Optional[List[str]],
        typer.Option(
            "--noise-level",
            help="Noise levels: sigma (EDM) or timesteps t (DDPM), comma-separated or repeated (default: the paper's "
            "grid).",
            show_default=False,
        ),
    ] = None,
    feature_layer: Annotated[
        Optional[str],
        typer.Option(
            "--feature-layer",
            help="mid_block (default) | down_blocks.K | up_blocks.K | any submodule.",
            show_default=False,
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Noise sweep: ICR and linear-probe accuracy of the U-Net's features at each noise level.

    Example: icml26 icr analyze --model runs/icr-full/size-60000/unet --data fashion-mnist --out runs/icr-sweep
    """
    from icml26.core.output import stream
    from icml26.core.preamble import parse_numbers, prepare

    run = prepare(
        "icml26.methods.diffusion.config:AnalyzeConfig",
        "icr analyze",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        devices=("cpu",),  # small U-Nets: the sweep runs on the CPU (docs/icr.md)
        out=out,
        data=data,
        noise_levels=parse_numbers(noise_level, "--noise-level"),
        feature_layer=feature_layer,
    )
    cfg, s = run.cfg, run.seed
    from icml26.methods.diffusion.api import analyze as m

    inputs = m.validate(cfg, model, s)  # every input check before the config record
    stream(
        m.run(cfg, inputs=inputs, seed=s),
        run=run,
        quiet=quiet,
        extra_config={"model": str(model)},
        columns=[
            "noise_level",
            "noise_param",
            "alpha_bar",
            "icr",
            "probe_accuracy",
            "shrinkage",
            "trace_sigma_s",
            "trace_sigma_xi",
            "seconds",
        ],
    )


@icr_app.command("train")
def train(
    data: DataOpt = None,
    train_size: Annotated[
        Optional[List[str]],
        typer.Option(
            "--train-size",
            help="Training images, comma-separated or repeated for several runs (0 = the whole split).",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        Optional[int], typer.Option("--steps", help="Training steps per size.", min=1, show_default=False)
    ] = None,
    resume: ResumeOpt = False,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train a small U-Net (EDM) with the ICR monitor and a memorization measure; one result per training size.

    Example: icml26 icr train --data fashion-mnist --train-size 64,256 --out runs/icr-small

    Data parallel: torchrun --standalone --nproc_per_node 2 -m icml26 icr train ...
    (gloo; the batch is split over the processes).
    """
    from icml26.core.output import prepare_out_dir, stream
    from icml26.core.preamble import parse_numbers, prepare

    run = prepare(
        "icml26.methods.diffusion.config:TrainConfig",
        "icr train",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        devices=("cpu",),  # small U-Nets: trained on the CPU (docs/icr.md)
        out=out,
        resume=resume,
        resumable=True,
        data=data,
        train_sizes=parse_numbers(train_size, "--train-size", int),
        steps=steps,
    )
    cfg, s, previous = run.cfg, run.seed, run.previous
    from icml26.methods.diffusion.api import train as m

    inputs = m.validate(cfg, out, resume)
    from icml26.core.dist import drain_unless_main, is_main

    if out is not None and is_main():
        prepare_out_dir(out, resume=resume, resumable=True)
    gen = m.run(cfg, inputs=inputs, seed=s, out=out, previous=previous)
    if drain_unless_main(gen):  # other torchrun ranks train silently; rank 0 writes
        return
    stream(
        gen,
        run=run,
        quiet=quiet,
        columns=[
            "train_size",
            "icr_min_step",
            "icr_min",
            "memorization_onset_step",
            "onset_minus_icr_min_steps",
            "final_memorization_fraction",
            "train_step_seconds",
            "icr_eval_seconds",
            "sample_seconds",
        ],
    )


@icr_app.command("report")
def report(
    run_dir: Annotated[str, typer.Argument(help="The --out folder of `icml26 icr analyze` or `icml26 icr train`.")],
    quiet: QuietOpt = False,
) -> None:
    """Write the PNG plots of a run folder (icr_sweep.png, or icr_training.png and icr_quality.png) into it."""
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.methods.diffusion.api import report as m

    m.read_run(run_dir)  # bad folder: exit 2 before any output
    stream(m.run(run_dir), Run("icr report"), quiet=quiet, extra_config={"run_dir": run_dir}, columns=["plot", "bytes"])
