"""Annotated option aliases shared by every command (Typer public API only)."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

RecipeOpt = Annotated[
    Optional[str], typer.Option("--recipe", "-r", help="YAML recipe (see recipes/<command>/).", show_default=False)
]
SetOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--set",
        "-s",
        help="Override a config field: key=value (repeatable); --set help lists the fields and their defaults.",
        show_default=False,
    ),
]
SeedOpt = Annotated[
    Optional[int],
    typer.Option(
        "--seed", help="Random seed (default: the recipe's, else 0).", min=0, max=2**63 - 1, show_default=False
    ),
]
SeedsOpt = Annotated[
    Optional[int],
    typer.Option("--seeds", help="Number of independent runs (seeds) to average over.", min=1, show_default=False),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto | cpu | cuda | cuda:N")]
ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Continue the interrupted run in --out: the results already in its records.jsonl are kept, the rest "
        "computed (the settings must be the same).",
    ),
]
OutOpt = Annotated[
    Optional[str],
    typer.Option(
        "--out", "-o", help="Run directory: config.yaml, records.jsonl, plots, artifacts.", show_default=False
    ),
]

QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables on stderr.")]


def split_csv(values: list[str] | None) -> tuple[str, ...] | None:
    """Values of a repeatable option, each possibly comma-separated -> flat tuple (None if absent).

    ``["a,b", "c"]`` -> ``("a", "b", "c")``."""
    if not values:
        return None
    return tuple(x.strip() for v in values for x in v.split(",") if x.strip())
