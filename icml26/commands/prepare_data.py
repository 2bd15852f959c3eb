"""``icml26 prepare-data``: build the real-data inputs that commands read."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from icml26.core.options import QuietOpt

DATASETS = ("traffic-bandit", "av-digits")


def prepare_data(
    dataset: Annotated[str, typer.Argument(help="What to build: traffic-bandit | av-digits.")],
    out: Annotated[
        Optional[str],
        typer.Option(
            "--out",
            "-o",
            help="Directory to write into (created); default data/traffic (traffic-bandit), the cache folder that "
            "`icml26 modality-pairing --data av-digits` reads (av-digits).",
            show_default=False,
        ),
    ] = None,
    counts: Annotated[
        Optional[str],
        typer.Option(
            "--counts",
            help="Your own counts parquet/CSV (timestamp, detector, total); default: the sample shipped in PyPI "
            "traffic-anomaly.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Build real-data inputs (JSON lines: one `result` record per file written).

    traffic-bandit: counts.csv (15-minute vehicle counts per lane, in hundreds of vehicles, from PyPI traffic-anomaly)
    and two bandit env files whose arms resample the recorded counts of real lanes: traffic-top5.yaml (the 5 busiest
    lanes) and traffic-mid5.yaml (5 lanes with close means, a hard and highly stochastic instance).

    av-digits: image.npz (real MNIST digits, degraded), audio.npz (the digit spoken by espeak-ng, log-mel; test variants
    shift (voices held out of training) / librivox_noise (real LibriVox speech at 5 dB)), text.npz (the digit's word
    rendered in Debian fonts), aligned by label (docs/modality-pairing.md).
    """
    from pathlib import Path

    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import Run

    if dataset not in DATASETS:
        raise InputError(f"unknown dataset {dataset!r}; choose one of: {', '.join(DATASETS)}")
    if dataset == "av-digits":
        from icml26.core.data.multimodal import prepare_records

        if out is not None and Path(out).exists() and not Path(out).is_dir():
            raise InputError(f"--out {out!r} exists and is not a directory")
        stream(
            prepare_records(out, force=force),
            Run("prepare-data"),
            extra_config={"dataset": dataset, "out": out},
            quiet=quiet,
            columns=["path", "size_bytes"],
        )
        return
    from icml26.methods.exploration.api import traffic_bandit

    out = "data/traffic" if out is None else out
    if Path(out).exists() and not Path(out).is_dir():
        raise InputError(f"--out {out!r} exists and is not a directory")
    paths = traffic_bandit.prepare_traffic_bandit(out, counts=counts, force=force)  # all checks before any output

    def records():
        for p in paths:
            yield {"kind": "result", "dataset": dataset, "path": str(p), "size_bytes": p.stat().st_size}
        yield {"kind": "summary", "dataset": dataset, "out": str(out), "files": len(paths)}

    stream(
        records(),
        Run("prepare-data"),
        extra_config={"dataset": dataset, "out": out, "counts": counts},
        quiet=quiet,
        columns=["path", "size_bytes"],
    )
