"""Shared checks of the ``icml26 filter-data`` subcommands: a recipe's per-subcommand section,
outputs that would overwrite an input, --hq and --pool being one file, the run record of the
document filters (stderr line and --log)."""

from __future__ import annotations

SECTIONS = ("make-corpus", "train", "analyze", "proxy")


def _prepare(config: str, section: str, recipe, sets, *, required: dict | None = None, **kw):
    """The preamble of a filter-data subcommand (``core.preamble.prepare``): a recipe holds one
    mapping per subcommand under ``config`` (``config: {make-corpus: {...}, train: {...}}``) and
    this subcommand reads its own; defaults < recipe < --set < typed options.

    required: ``{"--hq FILE": value, ...}``, options that typer leaves optional so that
    ``--set help`` works without them; once the settings are checked (their limits first), a
    missing one is an InputError (one line, exit 2) naming every missing option."""
    from icml26.core.errors import InputError
    from icml26.core.preamble import prepare

    run = prepare(config, f"filter-data {section}", recipe=recipe, sets=sets, section=section, sections=SECTIONS, **kw)
    missing = [flag for flag, v in (required or {}).items() if v is None]
    if missing:
        names = ", ".join(missing[:-1]) + " and " + missing[-1] if len(missing) > 1 else missing[0]
        raise InputError(f"filter-data {section}: missing required option{'s' if len(missing) > 1 else ''} {names}")
    return run


def _refuse_overwrite(output: str | None, *inputs: str | None, flag: str = "--output", what: str = "input") -> None:
    """--output must not be one of the inputs: the atomic rename would replace the input with
    the (partial) selection (and --log must not be --output). Exit 2 before anything is read or
    written."""
    import os
    from pathlib import Path

    from icml26.core.errors import InputError

    if output in (None, "-"):
        return
    if not str(output).strip():
        raise InputError(f"{flag} is empty: give a file path (or - for stdout)")
    out = Path(output).expanduser()
    if out.is_dir():
        raise InputError(f"{flag} {output!r} is a directory: give a file path")
    if out.exists() and not out.is_file():  # /dev/null, a FIFO: written straight through
        return
    for src in inputs:
        if src in (None, "-"):
            continue
        p = Path(src).expanduser()
        try:
            same = out.resolve() == p.resolve() or (out.exists() and p.exists() and os.path.samefile(out, p))
        except OSError:
            same = False
        if same:
            raise InputError(
                f"{flag} {output!r} is the {what} file {src!r}: writing it would overwrite the {what}; "
                f"choose another {flag} path"
            )


def _refuse_same(hq: str, pool: str) -> None:
    """--hq and --pool must be different files: a classifier of a file against itself learns nothing."""
    import os

    from icml26.core.errors import InputError

    try:
        same = hq == pool or (hq != "-" and pool != "-" and os.path.samefile(hq, pool))
    except OSError:  # a missing file: the reader names it
        same = False
    if same:
        raise InputError(
            f"--hq and --pool are the same file ({hq!r}): give the high-quality documents and the raw pool separately"
        )


def _finish(command: str, config: dict, summary: dict, log: str | None, quiet: bool) -> None:
    """The run record of a filter command: stderr line (+ --log file); never stdout."""
    import sys

    from icml26.core.output import atomic_write_text, to_json

    if log:
        atomic_write_text(
            log,
            to_json({"kind": "config", "command": command, **config})
            + "\n"
            + to_json({"kind": "summary", **summary})
            + "\n",
        )
    if not quiet:
        parts = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items() if v is not None
        )
        print(f"icml26 {command}: {parts}", file=sys.stderr)
