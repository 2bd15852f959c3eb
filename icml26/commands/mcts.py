"""``icml26 mcts``: pure-exploration MCTS, VarDE against UCT, Power-UCT, MENTS, MDP-GapE,
sequential halving and Gumbel sequential halving at the root."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SeedsOpt, SetOpt

COLUMNS = ["algo", "simulations", "seeds", "p_correct", "p_correct_ci", "simple_regret", "backend"]
EPISODE_COLUMNS = ["episode_return:return", "episode_return_ci:return 95%"]
# envs without exact values (no transition table): what the seeds recommended
COLUMNS_NO_EXACT = [
    "algo",
    "simulations",
    "seeds",
    "top_action:most chosen",
    "top_action_share:share",
    "action_counts:recommended",
    "backend",
]


def mcts(
    env: Annotated[
        Optional[str],
        typer.Option(
            "--env",
            "-e",
            help="Tree YAML file (see recipes/mcts/envs/) or gymnasium id with keyword arguments, e.g. "
            "'FrozenLake-v1?map_name=8x8&is_slippery=true'.",
            show_default=False,
        ),
    ] = None,
    algo: Annotated[
        Optional[str],
        typer.Option(
            "--algo",
            "-a",
            help="all | comma list of varde, uct, power-uct, ments, mdp-gape, sequential-halving, gumbel.",
            show_default=False,
        ),
    ] = None,
    simulations: Annotated[
        Optional[List[int]],
        typer.Option(
            "--simulations",
            "-n",
            help="Simulation budget at the root (repeatable: one result per budget).",
            min=1,
            show_default=False,
        ),
    ] = None,
    seeds: SeedsOpt = None,
    episodes: Annotated[
        Optional[int],
        typer.Option(
            "--episodes",
            help="Also play N full episodes per algorithm and budget (plan, act in the real env, repeat); reports "
            "episode_return.",
            show_default=False,
        ),
    ] = None,
    reuse_tree: Annotated[
        Optional[bool],
        typer.Option(
            "--reuse-tree/--no-reuse-tree",
            help="With --episodes: keep the chosen child's subtree between moves.",
            show_default=False,
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    resume: ResumeOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Recommend the best root action within a simulation budget; report the probability of an optimal
    recommendation (Wilson 95% interval) and the simple regret against exact values."""
    from icml26.core.output import previous_results, resume_records, stream
    from icml26.core.preamble import prepare

    run = prepare(
        "icml26.methods.exploration.mcts:Config",
        "mcts",
        recipe=recipe,
        sets=set_,
        seed=seed,
        out=out,
        resume=resume,
        resumable=True,
        load_previous=False,  # the settings are compared once the env file's gamma is in the Config
        env=env,
        algo=algo,
        simulations=tuple(simulations) if simulations else None,
        seeds=seeds,
        episodes=episodes,
        reuse_tree=reuse_tree,
    )
    cfg, s = run.cfg, run.seed
    from icml26.methods.exploration.api import mcts as m

    loaded = m.load_env(cfg)  # a bad --env exits 2 before any record is printed or written
    cfg = m.config_used(cfg, loaded[1])  # the config record holds the gamma used (a file's own)
    m.value_scale(cfg, *loaded)  # value_norm declared without a range: likewise
    m.check_episode_work(cfg, *loaded)
    exact = loaded[0] == "tree" or loaded[1].q_root is not None
    prev = resume_records(out, command="mcts", config=cfg, seed=s) if resume else None
    done = previous_results(prev, "algo", "simulations")
    stream(
        m.run(cfg, seed=s, env=loaded, done=done),
        run.replace(cfg=cfg, previous=prev),
        quiet=quiet,
        columns=(COLUMNS if exact else COLUMNS_NO_EXACT) + (EPISODE_COLUMNS if cfg.episodes else []),
        plot=m.plot,
    )
