"""``icml26 prepare-data``: build the real-data inputs that commands read."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

DATASETS = ("traffic-bandit",)


def prepare_data(
    dataset: Annotated[str, typer.Argument(help="What to build: traffic-bandit.")],
    out: Annotated[str, typer.Option("--out", "-o", help="Directory to write into (created).")] = "data/traffic",
    counts: Annotated[Optional[str], typer.Option("--counts", help="Your own counts parquet/CSV (timestamp, detector, total); default: the sample shipped in PyPI traffic-anomaly.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist.")] = False,
) -> None:
    """Build real-data inputs.

    traffic-bandit: writes counts.csv (15-minute vehicle counts per detector, in hundreds of
    vehicles, from PyPI traffic-anomaly) and two bandit env files whose arms resample the
    recorded counts of real detectors: traffic-top5.yaml (the 5 busiest lanes) and
    traffic-mid5.yaml (5 lanes with close means: a hard, highly stochastic instance)."""
    from icml26.core.errors import InputError
    from icml26.methods.exploration.traffic import prepare_traffic_bandit

    if dataset not in DATASETS:
        raise InputError(f"unknown dataset {dataset!r}; choose one of: {', '.join(DATASETS)}")
    for path in prepare_traffic_bandit(out, counts=counts, force=force):
        typer.echo(str(path))
