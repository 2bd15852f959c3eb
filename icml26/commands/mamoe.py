"""``icml26 mamoe``: MoST's modality-aware mixture of experts (arXiv 2601.10272) for speech and text, with the
plain-MoE, no-shared-expert and dense ablations (arXiv 2601.10272; docs/mamoe.md).

Subcommands: prepare (synthesized speech corpus + k-means units), train (--stage asr,tts: upcycle, train and
evaluate each variant; prepares the data itself when none is given), eval (a train run's checkpoints, or the
untrained upcycled models). Settings: ``recipes/mamoe/*.yaml`` (``method: mamoe``), ``--set key=value``,
``--set help``.
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt, split_csv

CONFIG = "icml26.methods.speech.config:Config"  # torch-free: settings checked before the method loads

mamoe_app = typer.Typer(
    help="MAMoE (MoST): modality-aware MoE for speech and text, as upcycling of a dense LM, trained on synthesized "
    "speech "
    "and scored by ASR / TTS WER against plain MoE, no-shared-expert and dense ablations.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

StageOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--stage", help="Tasks to train and evaluate: asr, tts (comma-separated or repeated).", show_default=False
    ),
]
VariantOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--variant",
        help="mamoe, moe, mamoe-noshared, dense (comma-separated or repeated; default all).",
        show_default=False,
    ),
]
ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", help="smollm2-135m (default), an HF LLaMA folder, or tiny-random.", show_default=False),
]
DataOpt = Annotated[
    Optional[str],
    typer.Option(
        "--data", help="A `icml26 mamoe prepare` folder (default: prepared in the cache).", show_default=False
    ),
]

COLUMNS = [
    "variant",
    "task",
    "wer",
    "wer_librivox",
    "unit_error_rate",
    "text_perplexity",
    "text_perplexity_dense",
    "routing_text_to_speech_experts",
    "routing_speech_to_text_experts",
    "active_params",
    "total_params",
]


def _stages(values):
    from icml26.core.errors import InputError
    from icml26.methods.speech.config import STAGES

    items = split_csv(values)
    if items is None:
        return None
    for s in items:
        if s not in STAGES:
            raise InputError(f"--stage: {s!r} is not one of {', '.join(STAGES)}")
    return tuple(dict.fromkeys(items))


@mamoe_app.command("prepare")
def prepare(
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Synthesize the speech corpus (espeak-ng, several voices / speeds / pitches, disjoint sentence splits), add the
    LibriVox test clips and fit the k-means units. Writes the prepared folder into --out (default: the cache).

    Example: icml26 mamoe prepare --set train_sentences=400 --out runs/mamoe-data
    """
    from pathlib import Path

    from icml26.core.output import stream
    from icml26.core.preamble import prepare as preamble

    run = preamble(CONFIG, "mamoe prepare", recipe=recipe, sets=set_, seed=seed, out=out)
    cfg, s = run.cfg, run.seed
    from icml26.methods.speech import api as m

    m.validate_prepare(cfg)
    data_dir = Path(out) / "data" if out is not None else m.default_data_dir(cfg, s)
    stream(
        m.prepare(cfg, seed=s, data_dir=data_dir),
        run=run,
        quiet=quiet,
        columns=[
            "task",
            "data",
            "train_utterances",
            "test_utterances",
            "librivox_clips",
            "num_units",
            "train_hours",
            "seconds",
        ],
    )


@mamoe_app.command("train")
def train(
    stage: StageOpt = None,
    variant: VariantOpt = None,
    model: ModelOpt = None,
    data: DataOpt = None,
    steps: Annotated[
        Optional[int], typer.Option("--steps", help="Training steps per variant.", min=1, show_default=False)
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Upcycle the dense LM per variant, train on ASR / TTS (+ text LM), evaluate: one result per (variant, task).

    Example: icml26 mamoe train --stage asr,tts --recipe recipes/mamoe/cpu.yaml --out runs/mamoe
    """
    from icml26.core.output import stream
    from icml26.core.preamble import prepare as preamble

    run = preamble(
        CONFIG,
        "mamoe train",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        devices=("cpu",),  # small speech LMs: trained on the CPU
        out=out,
        stages=_stages(stage),
        variants=split_csv(variant),
        model=model,
        data=data,
        steps=steps,
    )
    cfg, s = run.cfg, run.seed
    from icml26.methods.speech import api as m

    inputs = m.validate(cfg, seed=s, out=out)
    stream(
        m.run(cfg, inputs=inputs, seed=s, out=out),
        run=run,
        quiet=quiet,
        columns=COLUMNS,
    )


@mamoe_app.command("eval")
def eval_(
    run_dir: Annotated[
        Optional[str],
        typer.Option(
            "--run",
            help="A `mamoe train --out` folder: evaluate its checkpoints (default: the untrained upcycled models).",
            show_default=False,
        ),
    ] = None,
    stage: StageOpt = None,
    variant: VariantOpt = None,
    model: ModelOpt = None,
    data: DataOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Evaluate (ASR / TTS WER, text perplexity, routing) a train run's checkpoints, or the upcycled models at init.

    Example: icml26 mamoe eval --run runs/mamoe --stage asr
    """
    from pathlib import Path

    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import Run, check_out, prepare, resolve_device

    ckpts = None
    resolve_device(device, "mamoe eval", ("cpu",))
    check_out(out)
    from icml26.methods.speech import api as m

    if run_dir is not None:
        if recipe is not None or set_:
            raise InputError("--run takes the settings of the train run: give no --recipe / --set with it")
        base, s0 = m.config_from_run(run_dir)
        import dataclasses

        over = {k: v for k, v in {"stages": _stages(stage), "variants": split_csv(variant)}.items() if v is not None}
        try:
            cfg = dataclasses.replace(base, **over)
        except ValueError as e:
            raise InputError(f"mamoe eval: {e}") from None
        s = s0 if seed is None else seed
        ckpts = {v: Path(run_dir) / "checkpoints" / f"{v}.safetensors" for v in cfg.variants}
        for v, p in ckpts.items():
            if not p.is_file():
                raise InputError(f"run {run_dir!r} has no checkpoint for variant {v!r} ({p.name})")
    else:
        run = prepare(
            CONFIG,
            "mamoe eval",
            recipe=recipe,
            sets=set_,
            seed=seed,
            stages=_stages(stage),
            variants=split_csv(variant),
            model=model,
            data=data,
        )
        cfg, s = run.cfg, run.seed
    inputs = m.validate(cfg, seed=s, out=out)
    stream(
        m.run(cfg, inputs=inputs, seed=s, out=out, train=False, checkpoints=ckpts),
        Run("mamoe eval", cfg=cfg, seed=s, out=out),
        quiet=quiet,
        extra_config={"run": run_dir},
        columns=COLUMNS,
    )
