"""``icml26 train-lfm`` and ``icml26 sample-lfm``: latent flow matching, data reduction and
coarse-to-fine sampling (LFM stability, ICML 2026, arXiv 2605.08398)."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt


def train_lfm(
    stage: Annotated[
        Optional[str],
        typer.Option("--stage", help="vae | fm | all (VAE + feature net, then flow matching).", show_default=False),
    ] = None,
    dataset: Annotated[
        Optional[str],
        typer.Option("--dataset", help="fashion-mnist | mnist | an .npz | an image folder.", show_default=False),
    ] = None,
    vae: Annotated[
        Optional[str],
        typer.Option("--vae", help="Run dir of `train-lfm --stage vae` (for --stage fm).", show_default=False),
    ] = None,
    image_size: Annotated[
        Optional[int],
        typer.Option(
            "--image-size", help="Resize images to this square side (default: their own size).", show_default=False
        ),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option("--model", help="Velocity-network capacity: small | medium | large | xl.", show_default=False),
    ] = None,
    keep_ratio: Annotated[
        Optional[float],
        typer.Option("--keep-ratio", help="Fraction of the training data kept, (0, 1].", show_default=False),
    ] = None,
    scorer: Annotated[
        Optional[str],
        typer.Option(
            "--scorer",
            help="random | kcenter | balanced-cluster | cluster-proportional | loss | grad.",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        Optional[int], typer.Option("--steps", help="Flow-matching training steps.", show_default=False)
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the checkpoints in --out.")] = False,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train a small VAE and a latent flow-matching model, optionally on a reduced subset (runs under torchrun)."""
    import sys
    from pathlib import Path

    from icml26.core.dist import drain_unless_main, is_main
    from icml26.core.preamble import prepare

    run = prepare(
        "icml26.methods.lfm.config:Config",
        "train-lfm",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out if is_main() else None,  # torchrun workers: rank 0 alone owns the run folder
        resume=resume,
        resumable=True,
        out_files_ok=resume,  # --resume continues from the checkpoints in --out
        load_previous=False,  # the records are appended; the checkpoints hold the state
        stage=stage,
        dataset=dataset,
        vae=vae,
        image_size=image_size,
        model=model,
        keep_ratio=keep_ratio,
        scorer=scorer,
        steps=steps,
    )
    from icml26.methods.lfm.api import train as m

    inputs = m.validate(run.cfg, out, resume)  # bad paths and checkpoints fail here, before anything is written
    if resume and is_main() and not any((Path(out) / n).is_file() for n in m.RUN_CHECKPOINTS):
        print(f"train-lfm: --resume: no checkpoint in {out!r} yet; starting a new run there", file=sys.stderr)
    gen = m.run(run.cfg, seed=run.seed, out=out, resume=resume, inputs=inputs, device=str(run.device))
    if drain_unless_main(gen):  # torchrun worker: train, print nothing
        return
    from icml26.core.output import prepare_out_dir, stream

    if out is not None:
        prepare_out_dir(out, resume=resume, resumable=True)
    # width/depth/heads 0 mean the preset's: the config record also names those the flow model runs with
    arch = {"model_arch": run.cfg.arch()} if run.cfg.stage != "vae" else None
    stream(gen, run.replace(resume=True), quiet=quiet, columns=None, extra_config=arch)


def sample_lfm(
    fine: Annotated[
        Optional[str], typer.Option("--fine", help="Large (fine) model checkpoint.safetensors.", show_default=False)
    ] = None,
    coarse: Annotated[
        Optional[str],
        typer.Option("--coarse", help="Small (coarse) model checkpoint for t < t-split.", show_default=False),
    ] = None,
    compare: Annotated[
        Optional[List[str]],
        typer.Option(
            "--compare", help="More checkpoints to sample from the same seeds (repeatable).", show_default=False
        ),
    ] = None,
    t_split: Annotated[
        Optional[float],
        typer.Option("--t-split", help="Switch time from the coarse to the fine model.", show_default=False),
    ] = None,
    steps: Annotated[
        Optional[int],
        typer.Option(
            "--steps",
            help="Euler / Heun steps (default 60); the adaptive sampler picks its own (exit 2 with it).",
            show_default=False,
        ),
    ] = None,
    sampler: Annotated[
        Optional[str], typer.Option("--sampler", help="euler | heun | adaptive.", show_default=False)
    ] = None,
    num_samples: Annotated[
        Optional[int], typer.Option("--num-samples", "-n", help="Samples per mode.", show_default=False)
    ] = None,
    vae: Annotated[
        Optional[str],
        typer.Option("--vae", help="VAE run dir (default: the one recorded in --fine).", show_default=False),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Sample large, small and coarse-to-fine; report NFE, speed, FID/precision/recall (trained feature net), same-seed
    similarity."""
    from icml26.core.errors import InputError
    from icml26.core.preamble import prepare

    run = prepare(
        "icml26.methods.lfm.sample_config:SampleConfig",
        "sample-lfm",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        t_split=t_split,
        steps=steps,
        sampler=sampler,
        num_samples=num_samples,
    )
    if not fine:
        raise InputError("sample-lfm needs --fine CHECKPOINT (a train-lfm checkpoint.safetensors)")
    from icml26.core.output import stream
    from icml26.methods.lfm.api import sample as m

    stream(
        m.run(
            run.cfg, fine=fine, coarse=coarse, compare=compare or (), vae=vae, seed=run.seed, out=out, device=run.device
        ),
        run=run,
        quiet=quiet,
        extra_config={"fine": fine, "coarse": coarse, "compare": list(compare or [])},
        columns=[
            "mode",
            "nfe",
            "seconds_per_sample",
            "speedup",
            "fid",
            "precision",
            "recall",
            "class_accuracy",
            "same_seed_similarity",
            "unmatched_similarity",
        ],
    )
