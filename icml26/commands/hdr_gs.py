"""``icml26 hdr-gs``: Expo-GS exposure-aware Gaussian splatting and an HDR-GS-style baseline for
HDR novel-view synthesis from multi-exposure views (docs/hdr-gs.md).

Subcommands: train (every method on every scene: step records, one result per (method, scene)
with the HDR-NeRF protocol's metrics, a summary; resumable, safetensors checkpoints), render (a
checkpoint at any exposure: PNG, Radiance .hdr and OpenEXR .exr), eval (a checkpoint on a scene folder).
Without ``--data`` train renders ``scenes`` small scenes with POV-Ray into ``--out``/scenes.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from icml26.core.options import OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SetOpt

hdr_gs_app = typer.Typer(
    help="Expo-GS (exposure-aware SDF in Gaussian splatting) and an HDR-GS-style baseline: train on multi-exposure "
    "views, "
    "render at any exposure, evaluate (LDR-OE / LDR-NE / HDR PSNR, SSIM). `icml26 hdr-gs --recipe R` = `icml26 "
    "hdr-gs train --recipe R`.",
    rich_markup_mode="rich",
)

DataOpt = Annotated[
    Optional[str],
    typer.Option(
        "--data",
        help="A scene folder (cameras.json, hdr/, ldr/<t>/, depth/: icml26.core.data.renders layout; "
        "or the HDR-NeRF dataset's layout: transforms_*.json, exposure_*.json, <view>_<k>.png, exr/ or test_hdr/) "
        "or a folder of them.",
        show_default=False,
    ),
]
CkptOpt = Annotated[
    Optional[str],
    typer.Option(
        "--ckpt",
        help="A checkpoint written by `icml26 hdr-gs train` (--out DIR/ckpt/<scene>-<method>.safetensors).",
        show_default=False,
    ),
]
COLUMNS = [
    "method",
    "scene",
    "psnr_ldr_oe:LDR-OE",
    "psnr_ldr_ne:LDR-NE",
    "psnr_hdr:HDR",
    "psnr_hdr_predmax:HDR(predmax)",
    "ssim_ldr_oe:SSIM-OE",
    "gaussians",
    "floaters",
    "train_s",
]


@hdr_gs_app.callback(invoke_without_command=True)
def _group(
    ctx: typer.Context,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Without a subcommand: ``--recipe R`` runs ``train`` with it; nothing at all prints this help."""
    if ctx.invoked_subcommand is not None:
        return
    if recipe is None and not set_:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    # the registered callback of `train` (cli wraps every command: bad input -> one line, exit 2), not the bare function
    train_cmd = next(c.callback for c in hdr_gs_app.registered_commands if c.callback.__name__ == "train")
    train_cmd(
        data=None, method=None, iters=None, recipe=recipe, set_=set_, seed=seed, out=out, resume=False, quiet=quiet
    )


@hdr_gs_app.command("train")
def train(
    data: DataOpt = None,
    method: Annotated[
        Optional[str],
        typer.Option(
            "--method",
            help="expo-gs | hdr-gs | expo-gs-norel | expo-gs-nosdfdc | all (comma list).",
            show_default=False,
        ),
    ] = None,
    iters: Annotated[
        Optional[int],
        typer.Option(
            "--iters", help="Training iterations per (method, scene), all three stages.", min=1, show_default=False
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    resume: ResumeOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train Expo-GS and the baselines on every scene; evaluate each on the odd (test) views.

    Example: icml26 hdr-gs train --data runs/scenes --method expo-gs,hdr-gs --iters 1500 --out runs/hdrgs
    """
    from icml26.core.output import resume_records, stream
    from icml26.core.preamble import parse_names, prepare
    from icml26.methods.splatting.config import METHODS

    methods = parse_names(method, METHODS, "--method")
    run = prepare(
        "icml26.methods.splatting.config:Config",
        "hdr-gs train",
        recipe=recipe,
        sets=set_,
        seed=seed,
        out=out,
        resume=resume,
        resumable=True,
        load_previous=False,  # the records to continue are matched with --data too (below)
        methods=methods,
        iters=iters,
    )
    cfg, s = run.cfg, run.seed
    from icml26.methods.splatting import api as H

    if data is not None:
        for f in H.scene_folders(data):  # a bad folder: one line, exit 2, before anything is written
            H.load_scene(f, cfg)
    else:
        from icml26.core.data.renders import require_povray

        require_povray()
    prev = (
        resume_records(out, command="hdr-gs train", config=cfg, seed=s, extra_config={"data": data}) if resume else None
    )
    stream(
        H.run(cfg, seed=s, data=data, out=out, resume=resume, previous=prev),
        run.replace(previous=prev),
        quiet=quiet,
        columns=COLUMNS,
        extra_config={"data": data},
    )


@hdr_gs_app.command("render")
def render(
    ckpt: CkptOpt = None,
    data: DataOpt = None,
    exposure: Annotated[
        Optional[float],
        typer.Option(
            "--exposure",
            help="Exposure time (s) of the LDR images; the .hdr files do not depend on it.",
            show_default=False,
        ),
    ] = None,
    views: Annotated[
        Optional[str],
        typer.Option(
            "--views", help="View indices of --data's cameras, comma list (default: all).", show_default=False
        ),
    ] = None,
    out: Annotated[
        Optional[str],
        typer.Option(
            "--out", "-o", help="Folder for ldr_NNN.png, hdr_NNN.hdr and hdr_NNN.exr. Required.", show_default=False
        ),
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Render a trained model at the cameras of a scene folder: LDR PNG at --exposure and linear HDR (.hdr and OpenEXR
    .exr).

    Example: icml26 hdr-gs render --ckpt runs/hdrgs/ckpt/scene000-expo-gs.safetensors --data runs/hdrgs/scenes/scene000
    --exposure 2 --out runs/img
    """
    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.methods.splatting import api as H

    missing = [f for f, v in (("--ckpt", ckpt), ("--data", data), ("--out", out)) if v is None]
    if missing:
        raise InputError(f"hdr-gs render: missing required option {' and '.join(missing)}")
    if exposure is not None and not exposure > 0:
        raise InputError(f"--exposure must be > 0 s, got {exposure}")
    from icml26.core.data.hdr_nerf import _openexr

    _openexr()  # the .exr writer: MissingDataError (exit 2, install line) before anything is written
    model, meta = H.load_ckpt(ckpt)
    sc = H.open_scene(data)
    idx = list(range(len(sc)))
    if views is not None:
        from icml26.core.preamble import parse_numbers

        idx = list(parse_numbers(views, "--views", int) or ())
        bad = [v for v in idx if not 0 <= v < len(sc)]
        if bad:
            raise InputError(f"--views: view {bad[0]} out of range 0..{len(sc) - 1}")
    stream(
        H.render_views(model, sc, idx, exposure, out),
        Run("hdr-gs render"),
        quiet=quiet,
        columns=["view", "ldr", "hdr", "exr"],
        extra_config={"ckpt": ckpt, "data": data, "exposure": exposure},
    )


@hdr_gs_app.command("eval")
def evaluate(
    ckpt: CkptOpt = None,
    data: DataOpt = None,
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Evaluate a checkpoint on a scene folder's odd views (the HDR-NeRF protocol's metrics).

    Example: icml26 hdr-gs eval --ckpt runs/hdrgs/ckpt/scene000-expo-gs.safetensors --data runs/hdrgs/scenes/scene000
    """
    from pathlib import Path

    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.methods.splatting import api as H

    missing = [f for f, v in (("--ckpt", ckpt), ("--data", data)) if v is None]
    if missing:
        raise InputError(f"hdr-gs eval: missing required option {' and '.join(missing)}")
    model, meta = H.load_ckpt(ckpt)
    sd = H.load_scene(data, model.cfg)
    res = {
        "kind": "result",
        **H.evaluate(model, sd, model.cfg),
        "method": meta.get("method"),
        "scene": Path(data).name,
        "gaussians": model.n,
        "train_s": meta.get("train_s"),
    }
    stream(
        iter([res, {"kind": "summary", "lpips": H.LPIPS_NOTE, "iteration": meta.get("iteration")}]),
        Run("hdr-gs eval", out=out),
        quiet=quiet,
        columns=COLUMNS,
        extra_config={"ckpt": ckpt, "data": data},
    )
