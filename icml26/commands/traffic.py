"""``icml26 traffic``: MiniTraffic lane-level forecasting with road-level pre-training, against
the forecasting baselines (docs/traffic.md).

Subcommands: prepare (the built-in road/lane datasets from real counts), pretrain, finetune,
eval, and run (all stages for every selected model). Every subcommand reads the same settings
(``recipes/traffic/*.yaml`` with ``method: traffic``; ``--set key=value``; ``--set help``).
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SeedsOpt, SetOpt, split_csv

traffic_app = typer.Typer(
    help="MiniTraffic: lane-level traffic forecasting pre-trained on road-level series, against HA, persistence, "
    "ridge, DLinear, PatchTST, STID and a Graph WaveNet-style model.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

DataOpt = Annotated[
    Optional[str],
    typer.Option(
        "--data",
        help="Lane-level series: CSV (a timestamp column + one column per sensor), METR-LA/PEMS-BAY .h5, PeMSD4/8 "
        ".npz, or a long parquet (timestamp, detector, total). Default: the built-in traffic-anomaly lanes.",
        show_default=False,
    ),
]
RoadOpt = Annotated[
    Optional[str],
    typer.Option(
        "--road-data",
        help="Road-level series for pre-training (same formats; rows before the fine-tuning days are used). "
        "Without it, MiniTraffic pre-trains on pseudo-roads: correlation groups of the --data lanes over the "
        "pre-training days.",
        show_default=False,
    ),
]
ModelOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--model",
        "-m",
        help="minitraffic | minitraffic-nopretrain | minitraffic-noaug | minitraffic-nocluster | ha | persistence "
        "| ridge | dlinear | patchtst | stid | graph | all (repeatable or comma-separated).",
        show_default=False,
    ),
]
HorizonOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--horizon",
        help="Steps ahead to score, e.g. 1,4,8 (default); at most output_steps (8; --set output_steps=12 for 3,6,12).",
        show_default=False,
    ),
]
FractionOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--lane-fraction",
        help="Fraction(s) of the lane-level fine-tuning days used, in (0, 1] (default 0.05,0.1,0.2).",
        show_default=False,
    ),
]
COLUMNS = [
    "model",
    "pretrained",
    "horizon_steps:h",
    "lane_fraction:lanes",
    "mae",
    "rmse",
    "mape:mape %",
    "params",
    "train_s",
    "infer_ms_per_batch:ms/batch",
    "seeds",
]


def _run(
    command, recipe, set_, *, seed=None, device=None, out=None, model=None, horizon=None, lane_fraction=None, **typed
):
    """The preamble of every subcommand: Config (recipe, --set, typed options), seed, device, --out."""
    from icml26.core.preamble import parse_numbers
    from icml26.core.preamble import prepare as preamble

    models = split_csv(model)
    if models == ("all",):
        from icml26.methods.traffic.config import MODELS

        models = MODELS
    return preamble(
        "icml26.methods.traffic.config:Config",
        command,
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        models=models,
        horizons=parse_numbers(horizon, "--horizon", int),
        lane_fractions=parse_numbers(lane_fraction, "--lane-fraction", float),
        **typed,
    )


def _require(what: str, **opts):
    from icml26.core.errors import InputError

    missing = [k for k, v in opts.items() if v is None]
    if missing:
        raise InputError(f"traffic {what}: missing required option {', '.join(missing)}")


@traffic_app.command("run")
def run(
    data: DataOpt = None,
    road_data: RoadOpt = None,
    model: ModelOpt = None,
    horizon: HorizonOpt = None,
    lane_fraction: FractionOpt = None,
    seeds: SeedsOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Pre-train, fine-tune and test every selected model; one `result` per (model, horizon, lane_fraction).

    Example: icml26 traffic run --model persistence,ridge,minitraffic,minitraffic-nopretrain --horizon 1,4 --seeds 3
    """
    from icml26.core.output import stream

    run = _run(
        "traffic run",
        recipe,
        set_,
        seed=seed,
        device=device,
        out=out,
        data=data,
        road_data=road_data,
        model=model,
        horizon=horizon,
        lane_fraction=lane_fraction,
        seeds=seeds,
    )
    from icml26.methods.traffic import api

    inp = api.load_inputs(run.cfg)  # every data check before the config record
    stream(
        api.run(run.cfg, seed=run.seed, device=run.device, inputs=inp),
        run=run,
        quiet=quiet,
        columns=COLUMNS,
        extra_config={"device": run.device},
    )


@traffic_app.command("prepare")
def prepare(
    out: Annotated[
        Optional[str],
        typer.Option(
            "--out",
            "-o",
            help="Folder for lanes.csv, roads.csv, sensors.csv, dataset.json. Required.",
            show_default=False,
        ),
    ] = None,
    counts: Annotated[
        Optional[str],
        typer.Option(
            "--counts",
            help="Your own long counts table (parquet/CSV: timestamp, detector, total); default: PyPI "
            "traffic-anomaly sample_counts.",
            show_default=False,
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write the road/lane datasets from real counts: lanes = detectors, roads = correlation groups of detectors (the
    grouping is written to sensors.csv)."""
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.methods.traffic import api

    _require("prepare", **{"--out": out})
    cfg = _run("traffic prepare", recipe, set_).cfg
    prepared = api.prepare_dataset(counts, cfg)
    stream(
        api.prepare_files(prepared, out, counts=counts, cfg=cfg),
        Run("traffic prepare", cfg=cfg, out=out),
        quiet=quiet,
        columns=["file", "size_bytes"],
        extra_config={"counts": counts},
    )


@traffic_app.command("pretrain")
def pretrain(
    out: Annotated[
        Optional[str],
        typer.Option(
            "--out", "-o", help="Folder for pretrain-<model>-seed<k>.safetensors. Required.", show_default=False
        ),
    ] = None,
    data: DataOpt = None,
    road_data: RoadOpt = None,
    model: ModelOpt = None,
    seeds: SeedsOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Pre-train MiniTraffic (and the noaug / nocluster variants selected) on road-level series."""
    from icml26.core.output import stream
    from icml26.core.preamble import Run

    _require("pretrain", **{"--out": out})
    run = _run(
        "traffic pretrain",
        recipe,
        set_,
        seed=seed,
        device=device,
        data=data,
        road_data=road_data,
        model=model or ["minitraffic"],
        seeds=seeds,
    )
    cfg, s, dev = run.cfg, run.seed, run.device
    from icml26.methods.traffic import api

    inp = api.load_inputs(cfg)
    api.check_pretrain(cfg, inp)
    stream(
        api.pretrain_files(cfg, inp, out, seed=s, device=dev),
        Run("traffic pretrain", cfg=cfg, seed=s, out=out),
        quiet=quiet,
        columns=["model", "seed", "params", "pretrain_s", "forecast_l1", "recon_mse", "info_nce"],
    )


@traffic_app.command("finetune")
def finetune(
    out: Annotated[
        Optional[str],
        typer.Option(
            "--out", "-o", help="Folder for <model>-f<fraction>-seed<k>.safetensors. Required.", show_default=False
        ),
    ] = None,
    checkpoint: Annotated[
        Optional[str],
        typer.Option(
            "--checkpoint",
            help="A `traffic pretrain` folder; without it MiniTraffic trains from scratch.",
            show_default=False,
        ),
    ] = None,
    data: DataOpt = None,
    model: ModelOpt = None,
    lane_fraction: FractionOpt = None,
    seeds: SeedsOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Fit the selected models on the lane-level fine-tuning fraction(s) and save them."""
    from icml26.core.output import stream
    from icml26.core.preamble import Run

    _require("finetune", **{"--out": out})
    run = _run(
        "traffic finetune",
        recipe,
        set_,
        seed=seed,
        device=device,
        data=data,
        model=model or ["minitraffic"],
        lane_fraction=lane_fraction,
        seeds=seeds,
    )
    cfg, s, dev = run.cfg, run.seed, run.device
    from icml26.methods.traffic import api

    inp = api.load_inputs(cfg)
    states = api.pretrained_states(cfg, checkpoint, s)
    stream(
        api.finetune_files(cfg, inp, out, states=states, seed=s, device=dev),
        Run("traffic finetune", cfg=cfg, seed=s, out=out),
        quiet=quiet,
        columns=["model", "seed", "lane_fraction", "pretrained", "params", "train_s", "epochs_run"],
        extra_config={"checkpoint": checkpoint},
    )


@traffic_app.command("eval")
def eval_(
    checkpoint: Annotated[
        Optional[str], typer.Option("--checkpoint", help="A `traffic finetune` folder. Required.", show_default=False)
    ] = None,
    data: DataOpt = None,
    horizon: HorizonOpt = None,
    device: DeviceOpt = "auto",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Test the fitted models of a finetune folder on the test days (records as `traffic run`)."""
    from icml26.core.output import stream
    from icml26.core.preamble import Run, check_out, parse_numbers, resolve_device

    _require("eval", **{"--checkpoint": checkpoint})
    horizons = parse_numbers(horizon, "--horizon", int)
    dev = resolve_device(device, "traffic eval")
    check_out(out)
    from icml26.methods.traffic import api

    cfg, inp, groups = api.eval_plan(checkpoint, data=data, horizons=horizons)
    stream(
        api.eval_files(cfg, inp, groups, device=dev),
        Run("traffic eval", cfg=cfg, out=out),
        quiet=quiet,
        columns=COLUMNS,
        extra_config={"checkpoint": checkpoint},
    )
