"""Annotated option aliases shared by every command (Typer public API only)."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

RecipeOpt = Annotated[Optional[str], typer.Option("--recipe", "-r", help="YAML recipe (see recipes/<command>/).", show_default=False)]
SetOpt = Annotated[Optional[List[str]], typer.Option("--set", "-s", help="Override a config field: key=value (repeatable).", show_default=False)]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Random seed (default: the recipe's, else 0).", min=0, show_default=False)]
SeedsOpt = Annotated[Optional[int], typer.Option("--seeds", help="Number of independent runs (seeds) to average over.", min=1, show_default=False)]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto | cpu | cuda | cuda:N")]
OutOpt = Annotated[Optional[str], typer.Option("--out", "-o", help="Run directory: config.yaml, records.jsonl, plots, artifacts.", show_default=False)]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables on stderr.")]
