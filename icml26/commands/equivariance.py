"""``icml26 equivariance``: end-to-end vs layerwise equivariance of trained networks."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt, split_csv


def equivariance(
    task: Annotated[
        Optional[List[str]],
        typer.Option("--task", help="classifier | autoencoder (comma-separated or repeated).", show_default=False),
    ] = None,
    act: Annotated[
        Optional[List[str]],
        typer.Option("--act", help="First activation: tanh | gelu | relu (later ones GELU).", show_default=False),
    ] = None,
    group: Annotated[
        Optional[List[str]],
        typer.Option(
            "--group",
            help="Measured actions: hflip | vflip | rot90 | rot180 | perm:FILE (.npy or text permutation of the "
            "inputs).",
            show_default=False,
        ),
    ] = None,
    seeds: Annotated[
        Optional[int],
        typer.Option("--seeds", help="Networks trained per (task, act, model); default 3.", min=1, show_default=False),
    ] = None,
    data: Annotated[
        Optional[str],
        typer.Option(
            "--data", help="fashion-mnist (default) | mnist | your images (.npz, IDX, folder).", show_default=False
        ),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            help="Your own MLP (.safetensors, linear layers in name order) with --set layer_acts=tanh,gelu,... and "
            "--set out_action=trivial|same.",
            show_default=False,
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Is an end-to-end equivariant network layerwise equivariant? (Shahverdi et al., ICML 2026, arXiv 2601.21645)

    Trains MLPs with a mirror-equivariance loss (and controls: no loss, random init, an
    exactly equivariant tied net), then for each hidden layer fits the latent action A_i by
    least squares on noise inputs and reports the median relative error, the distance of A_i
    to the nearest signed permutation and the end-to-end error. One `result` per (model,
    task, act, group, layer).

    Example: icml26 equivariance --task classifier --act tanh,gelu --group hflip,vflip --seeds 3 --out runs/eq
    """
    from icml26.core.output import stream
    from icml26.core.preamble import prepare

    run = prepare(
        "icml26.methods.theory.equivariance_config:Config",
        "equivariance",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        devices=("cpu",),  # small MLPs: the measurement runs on the CPU
        out=out,
        task=split_csv(task),
        act=split_csv(act),
        group=split_csv(group),
        seeds=seeds,
        data=data,
        model=model,
    )
    cfg, s = run.cfg, run.seed
    from icml26.methods.theory.api import equivariance as m

    user = None
    if cfg.model is not None:
        user = m.load_user_net(cfg)
        for g in cfg.group:
            m.parse_group(g, user[1])
    else:
        m.check_data(cfg)
    stream(
        m.run(cfg, seed=s, device="cpu", user_net=user),
        run=run,
        quiet=quiet,
        columns=list(m.COLUMNS),
        plot=m.plot,
    )
