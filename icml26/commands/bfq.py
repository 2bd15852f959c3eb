"""``icml26 bfq``: Bootstrapped Flow Q-learning (arXiv 2606.10613) for offline RL against FQL,
Diffusion-QL, IQL, TD3+BC and BC on D4RL-style datasets (docs/bfq.md).

Subcommands: make-dataset (D4RL-style datasets from a SAC run: dsac-aid's learner), train (every
method on one dataset, resumable). Settings: ``recipes/bfq/*.yaml`` (``method: bfq``),
``--set key=value``, ``--set help``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SeedsOpt, SetOpt, split_csv

bfq_app = typer.Typer(
    help="BFQ (one-step flow policy, bootstrapped) and the offline-RL baselines on D4RL-style datasets.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


@bfq_app.command("make-dataset")
def make_dataset(
    env: Annotated[
        str | None,
        typer.Option("--env", "-e", help="gymnasium id (Hopper-v5, Walker2d-v5, HalfCheetah-v5).", show_default=False),
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            help="random | medium | medium-replay | expert | medium-expert, repeatable or comma-separated.",
            show_default=False,
        ),
    ] = None,
    from_dir: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="An icml26 dsac-aid run folder (its checkpoint, replay buffer and evaluations) instead of training "
            "SAC here.",
            show_default=False,
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    resume: ResumeOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Build D4RL-style datasets (hdf5, D4RL/Minari fields) from a SAC run; D4RL's construction rules (docs/bfq.md).

    Example: icml26 bfq make-dataset --env Hopper-v5 --kind medium,medium-replay --out data/hopper

    A stopped run continues with the same command and --resume (SAC from its last checkpoint).
    """
    from pathlib import Path

    from icml26.core.errors import InputError
    from icml26.core.preamble import prepare
    from icml26.methods.rl import dsac_config
    from icml26.methods.rl import offline_config as c  # torch-free: settings are checked before torch loads

    run = prepare(
        c.MakeConfig,
        "bfq make-dataset",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        resume=resume,
        resumable=True,
        load_previous=False,
        env=env,
        kinds=split_csv(kind),
    )
    cfg = run.cfg
    if out is None:
        raise InputError("make-dataset writes hdf5 files: give --out DIR")
    if from_dir is not None:
        from icml26.methods.rl.api import offline_make as m

        run_info = m.read_run(from_dir)  # a bad folder: exit 2 before anything is written
        if env is not None and env != run_info["config"].env:
            raise InputError(f"--env {env!r} differs from the run's environment {run_info['config'].env!r}")
        import dataclasses

        cfg = dataclasses.replace(cfg, env=run_info["config"].env)
    else:
        dsac_config.validate(c.sac_config(cfg))  # a bad env id: exit 2
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.methods.rl.api import offline_make as m

    s, dev = run.seed, run.device
    stream(
        m.make(cfg, Path(out), seed=s, device=dev, from_dir=from_dir),
        Run("bfq make-dataset", cfg=cfg, seed=s, out=out, resume=resume),
        quiet=quiet,
        extra_config={"from": from_dir},
        columns=[
            "dataset",
            "made",
            "transitions",
            "episodes",
            "mean_episode_return",
            "ref_min_return",
            "ref_max_return",
            "policy_step",
            "why",
        ],
    )


@bfq_app.command("train")
def train(
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            "-d",
            help="A D4RL hdf5 file (make-dataset writes them) or a Minari dataset folder.",
            show_default=False,
        ),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            "-e",
            help="gymnasium id to evaluate in (default: the one the dataset names; none: training only).",
            show_default=False,
        ),
    ] = None,
    algo: Annotated[
        list[str] | None,
        typer.Option(
            "--algo",
            "-a",
            help="bfq | fql | diffusion-ql | iql | td3bc | bc, repeatable or comma-separated.",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option("--steps", help="Gradient updates per seed.", min=1, show_default=False)
    ] = None,
    seeds: SeedsOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    out: OutOpt = None,
    resume: ResumeOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train BFQ and the baselines on one dataset; normalised scores, train Hz, inference actions/s.

    Seeds of a method train batched in one process; checkpoints go to --out every checkpoint_interval updates
    and --resume continues.

    Example: icml26 bfq train --dataset data/hopper/hopper-v5-medium.hdf5 --algo bfq,fql,diffusion-ql
    --steps 100000 --seeds 3 --out runs/bfq-hopper
    """
    from icml26.core.preamble import prepare
    from icml26.methods.rl import offline_config as c  # torch-free: settings are checked before torch loads

    run = prepare(
        c.Config,
        "bfq train",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        resume=resume,
        resumable=True,
        dataset=dataset,
        env=env,
        algo=split_csv(algo),
        steps=steps,
        seeds=seeds,
    )
    cfg, s, dev, prev = run.cfg, run.seed, run.device, run.previous
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.methods.rl.api import offline as m

    inputs = m.validate(cfg)  # bad dataset / env: one line, exit 2, before anything is written
    cols = [
        "algo",
        "normalized_score_final:final",
        "normalized_score_final_ci:95% CI",
        "normalized_score_best:best",
        "train_hz:train Hz",
        "actions_per_s_b1:act/s b1",
        "actions_per_s_b256:act/s b256",
        "nfe",
        "score_reference:reference",
    ]
    stream(
        m.run(cfg, seed=s, device=dev, out=out, resume=resume, previous=prev, inputs=inputs),
        Run("bfq train", cfg=cfg, seed=s, out=out, resumable=True, previous=prev),
        quiet=quiet,
        columns=cols,
    )
