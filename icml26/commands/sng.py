"""``icml26 sng``: subsampled natural gradient (SNG) and SPRING for physics-informed training,
raced against Adam, L-BFGS, full-batch ENGD and SGD under a time budget."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SeedsOpt, SetOpt, split_csv

COLUMNS = [
    "optim",
    "batch",
    "sampling",
    "final_rel_l2:final rel L2",
    "best_rel_l2:best rel L2",
    "time_to_1e-3_s:t(1e-3) s",
    "time_to_1e-5_s:t(1e-5) s",
    "iterations",
    "jacobian_spectral_decay:J decay",
]


def sng(
    problem: Annotated[
        Optional[str],
        typer.Option("--problem", "-p", help="poisson2d | poisson5d | heat1d | allencahn2d.", show_default=False),
    ] = None,
    optim: Annotated[
        Optional[List[str]],
        typer.Option(
            "--optim",
            "-a",
            help="sng | spring | adam | lbfgs | engd | sgd (repeatable or comma-separated; default "
            "sng,spring,adam,lbfgs,engd).",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[
        Optional[List[str]],
        typer.Option(
            "--batch",
            "-b",
            help="Mini-batch sizes (rows per step) of sng/spring/adam/sgd (repeatable or comma-separated; default "
            "64,256).",
            show_default=False,
        ),
    ] = None,
    time_budget: Annotated[
        Optional[float],
        typer.Option("--time-budget", "-t", help="Optimizer seconds per run (default 300).", show_default=False),
    ] = None,
    sampling: Annotated[
        Optional[str],
        typer.Option(
            "--sampling",
            help="Mini-batch rule of sng/spring: uniform | leverage | volume | volume-approx.",
            show_default=False,
        ),
    ] = None,
    seeds: SeedsOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train a physics-informed network with SNG / SPRING (kernel-form natural gradient on
    mini-batches) and the usual optimizers; report the relative L2 error against wall time.

    `step` records (optim, seed, iteration, wall_s, loss, rel_l2) and one `result` per
    (problem, optim, batch): final / best error, time to 1e-3 and 1e-5, the Jacobian's spectral decay.

    Example: icml26 sng --problem poisson2d --optim sng,spring,adam,lbfgs,engd --time-budget 300
    --batch 64,256 --seeds 3 --out runs/sng
    """
    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import parse_numbers, prepare

    run = prepare(
        "icml26.methods.pinn.config:Config",
        "sng",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        problem=problem,
        optim=split_csv(optim),
        batch=parse_numbers(batch, "--batch", int),
        time_budget_s=time_budget,
        sampling=sampling,
        seeds=seeds,
    )
    if run.device != "cpu" and run.cfg.sampling != "uniform":
        raise InputError(f"sampling {run.cfg.sampling!r} runs on the CPU only; use --device cpu")
    from icml26.methods.pinn import api as m

    stream(m.run(run.cfg, seed=run.seed, device=run.device), run=run, quiet=quiet, columns=COLUMNS, plot=m.plot)
