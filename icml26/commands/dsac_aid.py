"""``icml26 dsac-aid``: DSAC-AID against DSAC-T and SAC on gymnasium MuJoCo and dm_control."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SeedsOpt, SetOpt, split_csv


def dsac_aid(
    env: Annotated[
        Optional[str],
        typer.Option(
            "--env",
            "-e",
            help="gymnasium id (Hopper-v5, Walker2d-v5, HalfCheetah-v5, Ant-v5, Humanoid-v5, ...) or "
            "dmc:domain-task (dmc:cheetah-run).",
            show_default=False,
        ),
    ] = None,
    algo: Annotated[
        Optional[List[str]],
        typer.Option(
            "--algo",
            "-a",
            help="dsac-aid | dsac-t | sac | dsac-aid-epi (the epistemic-only ablation), repeatable or comma-separated.",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        Optional[int], typer.Option("--steps", help="Environment steps per seed.", min=1, show_default=False)
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
    """Train DSAC-AID (aleatoric impulse damping) and its baselines; log returns, Q bias and both uncertainty parts.

    All seeds of a method train batched in one process; checkpoints (safetensors: weights, Adam states, replay buffer,
    RNG and environment states) go to --out every checkpoint_interval steps, and --resume continues exactly where the
    run stopped. Defaults: gymnasium ids train as Stable-Baselines3 / CleanRL run SAC (family sb3: 1 env, one update per
    step, 100 random warm-up steps, reward scale 1, 2x256 ReLU), each algorithm with its own loss; family=mujoco|ant|dmc
    (recipes mujoco-official.yaml, ant-official.yaml, dmc-humanoid-run.yaml) are the official GOPS scripts' settings.
    --set help lists the effective values.

    Example: icml26 dsac-aid --env InvertedPendulum-v5 --algo sac,dsac-t,dsac-aid --steps 15000 --seeds 3 --out runs/ip
    """
    from icml26.core.errors import InputError
    from icml26.core.preamble import prepare
    from icml26.core.recipe import load_recipe, parse_sets, resolve, settings_help, wants_help
    from icml26.methods.rl import dsac_config as c  # torch-free: every setting is checked before torch loads

    algos = split_csv(algo)
    typed = dict(env=env, algo=algos, steps=steps, seeds=seeds)
    if wants_help(set_):  # the effective defaults of the family the other settings choose
        rest = [x for x in set_ if str(x).strip() not in ("help", "list")]
        cfg = c.resolve_family(resolve(c.Config, "dsac-aid", recipe, rest, **typed))
        settings_help(c.Config, "dsac-aid", set_, c.help_view(cfg))
    run = prepare(
        c.Config,
        "dsac-aid",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        resume=resume,
        resumable=True,
        load_previous=False,  # the records are read below, against the config the run recorded
        **typed,
    )
    cfg, s = run.cfg, run.seed
    stored = c.stored_config(out) if resume else None
    if stored is not None and stored.get("command") == "dsac-aid":  # --resume keeps the run's settings
        given = set(parse_sets(set_)) | {k for k, v in typed.items() if v is not None}
        if recipe is not None:
            given |= {str(k).replace("-", "_") for k in load_recipe(recipe, "dsac-aid")[0]}
        cfg, recorded = c.for_resume(cfg, stored, given)
    else:
        cfg = recorded = c.resolve_family(cfg)
    dims = c.validate(cfg)  # a bad env id: one line, exit 2, before anything is written
    if cfg.d4rl and out is None:
        raise InputError("d4rl=true writes hdf5 files into the run folder: give --out DIR")
    from icml26.core.output import resume_records, stream
    from icml26.core.preamble import Run
    from icml26.methods.rl.api import dsac_aid as m

    c.tune_allocator()
    extra = {"effective": c.effective(cfg)} if stored is None or "effective" in stored else None
    if extra and stored is not None:  # values added to the record since that run, at the value it ran with
        for a, e in extra["effective"].items():
            was = stored["effective"].get(a) or {}
            for k in [k for k in e if k not in was and c.LEGACY.get(k) == e[k]]:
                del e[k]
    prev = resume_records(out, command="dsac-aid", config=recorded, seed=s, extra_config=extra) if resume else None
    cols = [
        "algo",
        "env",
        "final_return:final",
        "final_return_ci:95% CI",
        "max_avg_return:max avg",
        "max_avg_return_ci:95% CI",
        "seeds",
        "steps",
        "wall_s",
    ]
    stream(
        m.run(cfg, seed=s, device=run.device, out=out, resume=resume, previous=prev, dims=dims),
        Run("dsac-aid", cfg=recorded, seed=s, out=out, resumable=True, previous=prev),
        extra_config=extra,
        quiet=quiet,
        columns=cols,
        plot=m.plot,
    )
