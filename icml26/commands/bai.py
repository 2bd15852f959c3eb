"""``icml26 bai``: best-arm identification with VarDE and the standard baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from icml26.core.options import OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SeedsOpt, SetOpt, split_csv


def bai(
    env: Annotated[
        Optional[str],
        typer.Option(
            "--env",
            "-e",
            help="Bandit YAML file, or a built-in: varde-3groups, varde-geom14, gk2016-1, abm2010-1..7, "
            "heavy-t3groups, traffic-mid5, ... (see README).",
            show_default=False,
        ),
    ] = None,
    algo: Annotated[
        Optional[List[str]],
        typer.Option(
            "--algo",
            "-a",
            help="varde | uniform | successive-rejects | sequential-halving | ucb-e | ugape | continuous-rejects | "
            "lucb | kl-lucb | track-and-stop | top-two-ts | all (repeatable or comma-separated).",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        Optional[List[int]],
        typer.Option(
            "--budget",
            "-b",
            help="Fixed budget: pulls per run (repeatable: one result per budget).",
            min=1,
            show_default=False,
        ),
    ] = None,
    delta: Annotated[
        Optional[List[float]],
        typer.Option("--delta", "-d", help="Fixed confidence: error level in (0, 1) (repeatable).", show_default=False),
    ] = None,
    seeds: SeedsOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    resume: ResumeOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Identify the best arm of a stochastic bandit: VarDE against the standard algorithms.

    Fixed budget (--budget): error probability (Wilson 95% CI) and simple regret over --seeds runs; `--algo all` runs
    the 7 fixed-budget algorithms and the 4 fixed-confidence sampling rules (without stopping). Fixed confidence
    (--delta): stopping time (mean, q90) and empirical error rate. Every algorithm sees the same reward stream per arm
    and seed (common random numbers).

    Example: icml26 bai --env varde-geom14 --budget 200 --algo all --seeds 2000
    """
    import dataclasses

    from icml26.core.output import previous_results, resume_records, stream
    from icml26.core.preamble import prepare

    # a typed --budget/--delta replaces the recipe's setting of the other kind
    typed_setting = {}
    if budget:
        typed_setting = {"budget": tuple(budget), "delta": ()}
    if delta:
        typed_setting = {"delta": tuple(delta), **({"budget": tuple(budget)} if budget else {"budget": ()})}
    run = prepare(
        "icml26.methods.exploration.bai:Config",
        "bai",
        recipe=recipe,
        sets=set_,
        seed=seed,
        out=out,
        resume=resume,
        resumable=True,
        load_previous=False,  # the config is completed from the bandit file first (below)
        env=env,
        algo=split_csv(algo),
        seeds=seeds,
        **typed_setting,
    )
    from icml26.methods.exploration.api import bai as m
    from icml26.methods.exploration.api import bandit_env

    cfg = run.cfg
    search = (Path(recipe).resolve().parent,) if recipe else ()
    env_path = m.resolve_env_path(cfg.env, search)
    cfg = dataclasses.replace(cfg, env=str(env_path))
    table = bandit_env.load_env(env_path)
    cfg = dataclasses.replace(cfg, reward_range=m.resolve_reward_range(cfg, table))  # the value used, in the record
    m.validate(cfg, table)
    s = run.seed
    cols = [
        "algo",
        "budget" if cfg.budget else "delta",
        "error_probability:P(error)",
        "error_probability_ci:95% CI",
        "simple_regret:regret",
    ]
    if cfg.delta:
        cols += ["stopping_time_mean:E[stop]", "stopping_time_q90:q90 stop", "stopped_fraction:stopped"]
    prev = resume_records(out, command="bai", config=cfg, seed=s) if resume else None
    done = previous_results(prev, "algo", "budget", "delta")
    stream(
        m.run(cfg, seed=s, table=table, done=done),
        run.replace(cfg=cfg, previous=prev),
        quiet=quiet,
        columns=cols,
        plot=m.plot,
    )
