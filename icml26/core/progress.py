"""Progress bars on stderr for long work (library code may use them; they never touch stdout).

Bars show only when stderr is a terminal and the command was not run with ``-q``.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = bool(quiet)


def quiet() -> bool:
    """Whether the running command was given -q (stderr silenced)."""
    return _quiet


def enabled() -> bool:
    return (not _quiet) and sys.stderr.isatty()


class _NullBar:
    def advance(self, n: float = 1) -> None:
        pass

    def update(self, **kwargs) -> None:
        pass


class _RichBar:
    def __init__(self, progress, task):
        self._p, self._t = progress, task

    def advance(self, n: float = 1) -> None:
        self._p.advance(self._t, n)

    def update(self, **kwargs) -> None:
        self._p.update(self._t, **kwargs)


@contextmanager
def progress(total: float | None, description: str) -> Iterator[_NullBar | _RichBar]:
    """``with progress(total, "training") as bar: bar.advance(1)``.

    total: number of units (None for an indeterminate bar)."""
    if not enabled():
        yield _NullBar()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cols = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*cols, console=Console(stderr=True), transient=True) as p:
        yield _RichBar(p, p.add_task(description, total=total))
