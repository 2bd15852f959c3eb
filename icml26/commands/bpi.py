"""``icml26 bpi``: best-policy identification with a generative model, VarDE against
uniform sampling and a published gap-based sampling rule."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from icml26.core.options import OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SeedsOpt, SetOpt

COLUMNS = ["algo", "samples", "seeds", "p_eps_optimal", "p_eps_optimal_ci", "policy_gap", "stopped"]


def bpi(
    mdp: Annotated[
        Optional[str],
        typer.Option(
            "--mdp",
            "-m",
            help="Built-in MDP (riverswim, garnet, frozenlake4x4, frozenlake8x8; options as "
            "'garnet?states=20&actions=4&seed=1') or a YAML/npz file.",
            show_default=False,
        ),
    ] = None,
    algo: Annotated[
        Optional[str],
        typer.Option("--algo", "-a", help="all | comma list of varde, uniform, klb-ts.", show_default=False),
    ] = None,
    epsilon: Annotated[
        Optional[float],
        typer.Option(
            "--epsilon",
            help="Accuracy: a policy is correct when V*(rho) - V^pi(rho) <= epsilon.",
            min=0.0,
            show_default=False,
        ),
    ] = None,
    delta: Annotated[
        Optional[float],
        typer.Option(
            "--delta",
            help="Confidence: sample until the stopping rule certifies an epsilon-optimal policy w.p. 1 - delta "
            "(capped by --budget).",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        Optional[int],
        typer.Option(
            "--budget",
            "-n",
            help="Samples of the generative model (fixed budget; the cap when --delta is given).",
            min=1,
            show_default=False,
        ),
    ] = None,
    seeds: SeedsOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    resume: ResumeOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Identify an (epsilon-)optimal policy of a tabular MDP from generative-model samples; report the
    probability of an epsilon-optimal answer (Wilson 95% interval), the policy gap and the samples used."""
    from icml26.core.output import previous_results, stream
    from icml26.core.preamble import prepare

    run = prepare(
        "icml26.methods.exploration.bpi:Config",
        "bpi",
        recipe=recipe,
        sets=set_,
        seed=seed,
        out=out,
        resume=resume,
        resumable=True,
        mdp=mdp,
        algo=algo,
        epsilon=epsilon,
        delta=delta,
        budget=budget,
        seeds=seeds,
    )
    from icml26.methods.exploration.api import bpi as m

    mdp_ = m.prepare(run.cfg)  # every check before the first record
    stream(
        m.run(run.cfg, seed=run.seed, mdp=mdp_, done=previous_results(run.previous, "algo")),
        run=run,
        quiet=quiet,
        columns=COLUMNS,
    )
