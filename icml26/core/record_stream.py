"""The record stream of a command: JSON lines on stdout (config record first, then ``step`` /
``result`` records, last a ``summary``), the same lines in the run folder, and a rich table of the
results on stderr (``-q`` silences)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from icml26.core.atomic import atomic_write_text
from icml26.core.errors import InputError
from icml26.core.jsonl import _clean, to_json
from icml26.core.run_folder import (
    INTERRUPTED,
    _head,
    _mark_interrupted,
    _RecordsFile,
    _sigterm_raises,
    _Undo,
    prepare_out_dir,
    signals_held,
)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
            return f"{v:.3e}"
        return f"{v:.4f}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(f"{x:.3f}" if isinstance(x, float) else _fmt(x) for x in v) + "]"
    return str(v)


def stderr_console():
    """The rich console for tables and summaries on stderr. A terminal sets its width; a file or
    pipe (a log) gets $COLUMNS or 200 columns rather than rich's 80, so wide result tables are
    not cut."""
    from rich.console import Console

    if sys.stderr.isatty() or os.environ.get("COLUMNS", "").strip().isdigit():
        return Console(stderr=True)
    return Console(stderr=True, width=200)  # (also when $COLUMNS is not a number: rich would use 80)


def print_table(records: Sequence[dict], columns: Sequence[str] | None = None, title: str | None = None) -> None:
    """A rich table of records on stderr."""
    if not records:
        return
    from rich.table import Table

    if columns is None:
        columns = []
        for r in records:
            for k, v in r.items():
                if k != "kind" and k not in columns and not isinstance(v, dict):
                    columns.append(k)
    table = Table(title=title, header_style="bold")
    keys = []
    for c in columns:  # "key" or "key:Header"
        key, _, header = c.partition(":")
        keys.append(key)
        left = key in ("algo", "method", "env", "mode", "name")
        table.add_column(header or key, justify="left" if left else "right", no_wrap=left)
    for r in records:
        table.add_row(*[_fmt(_clean(r.get(k))) for k in keys])
    stderr_console().print(table)


def stream(
    records: Iterable[dict],
    run: Any,
    *,
    quiet: bool = False,
    columns: Sequence[str] | None = None,
    plot: Callable[[list[dict], Path], None] | None = None,
    extra_config: dict | None = None,
) -> list[dict]:
    """Write the config record, then every record as a JSON line on stdout (and to
    ``records.jsonl`` under ``run.out``), then a table of ``result`` records on stderr.

    ``run``: the preamble's ``Run`` (``core.preamble.prepare``, or ``Run("icr report", out=out)``
    for a command without settings): its command names the records, its ``cfg``, ``seed`` and
    ``extra_config`` make the config record, ``out`` is the run folder. ``run.resume``: ``out``
    may hold a run; the records are appended to it (train-lfm's checkpoints). ``run.resumable``:
    the command has ``--resume`` (named when ``out`` holds an unfinished run). ``run.previous``:
    ``resume_records``'s list (``--resume``): ``records`` starts with the earlier run's records
    replayed (the method skips what they hold), and the leading records that equal the lines
    already in ``records.jsonl`` are printed but not written again, so the file ends as an
    uninterrupted run's would. ``quiet``: no table and no progress; ``columns``: the table's
    ("key" or "key:Header"); ``plot(records, out_dir)`` is called at the end when ``out`` is given.
    A run that ends by an exception (KeyboardInterrupt, SIGTERM, an error) once records are
    written leaves ``interrupted.json`` (``{"kind": "interrupted", "when", "reason", "records",
    "results"}``); one that completes removes it. Bad input (InputError) before the first result
    undoes what the call wrote instead. Returns the list of records (config record first)."""
    from icml26.core import progress

    command, config, seed, out = run.command, run.cfg, run.seed, run.out
    resume, resumable, previous = run.resume, run.resumable, run.previous
    progress.set_quiet(quiet)
    out_dir = prepare_out_dir(out, resume=resume or previous is not None, resumable=resumable)
    undo = _Undo(out_dir) if out_dir is not None else None
    head = _head(command, config, seed, extra_config)
    rec_file: _RecordsFile | None = None
    seen: list[dict] = []
    has_result = False
    try:
        with _sigterm_raises(out_dir is not None):
            if out_dir is not None:
                import yaml

                if previous is None or not (out_dir / "config.yaml").is_file():
                    atomic_write_text(
                        out_dir / "config.yaml",
                        yaml.safe_dump(
                            {
                                "method": command,
                                "seed": seed,
                                "config": {k: v for k, v in head.items() if k not in ("kind", "command", "seed")},
                            },
                            sort_keys=False,
                        ),
                    )
                rec_file = _RecordsFile(out_dir / "records.jsonl", replay=previous is not None)
            _emit(head, rec_file, seen)
            for rec in records:
                _emit(rec, rec_file, seen)
                has_result = has_result or (isinstance(rec, dict) and rec.get("kind") == "result")
            if rec_file is not None:
                rec_file.finish()
    except InputError as e:
        if rec_file is not None:
            rec_file.close()
        if undo is not None and not has_result:
            undo.rollback()  # the same --out can be used again once the input is fixed
        elif rec_file is not None:
            _mark_interrupted(out_dir, command, e, rec_file, resumable)
        rec_file = None
        raise
    except BaseException as e:  # Ctrl-C, SIGTERM, a crash: say so in the folder
        with signals_held():  # a second signal waits until the marker is written
            if rec_file is not None:
                rec_file.close()
                _mark_interrupted(out_dir, command, e, rec_file, resumable)
                rec_file = None
        raise
    finally:
        if rec_file is not None:
            rec_file.close()
    if out_dir is not None:
        (out_dir / INTERRUPTED).unlink(missing_ok=True)  # complete now (also after --resume)
    results = [r for r in seen if r.get("kind") == "result"]
    if out_dir is not None and plot is not None and results:
        plot(seen, out_dir)
    if not quiet:
        print_table(results, columns, title=f"icml26 {command}")
        summ = [r for r in seen if r.get("kind") == "summary"]
        if summ:
            stderr_console().print(
                "summary: "
                + ", ".join(
                    f"{k}={_fmt(_clean(v))}"
                    for k, v in summ[-1].items()
                    if k != "kind" and not isinstance(v, (dict, list))
                )
            )
    return seen


def _emit(rec: dict, rec_file: "_RecordsFile | None", seen: list) -> None:
    line = to_json(rec)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if rec_file is not None:
        rec_file.write(line, rec.get("kind") if isinstance(rec, dict) else None)
    seen.append(json.loads(line))
