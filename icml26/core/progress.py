"""Progress on stderr for long work (library code may use it; it never touches stdout).

On a terminal: a rich bar with the figures the loop reports (loss, return, ...), rate and ETA.
On a pipe or file: one plain line about every 30 s (``ICML26_PROGRESS_S`` overrides), e.g.
``[dsac-aid] 12000/50000 (24%) 41.2/s eta 15m22s | return=310.2 updates=11800``.
Silent with ``-q``. ``with progress(total, "training") as bar: bar.advance(1, loss=0.3)``.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = bool(quiet)


def quiet() -> bool:
    """Whether the running command was given -q (stderr silenced)."""
    return _quiet


def enabled() -> bool:
    """Whether a bar is drawn (stderr is a terminal and not -q)."""
    return (not _quiet) and sys.stderr.isatty()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _dur(s: float) -> str:
    s = int(max(0, s))
    h, m = divmod(s, 3600)
    m, sec = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


class _Bar:
    """What a loop talks to: ``advance(n, **figures)`` and ``set(**figures)``."""

    def __init__(self, total: float | None, description: str, every_s: float | None):
        self.total, self.description = total, description
        self.done = 0.0
        self._before = 0.0  # units done before this process started (a resumed run)
        self.figures: dict[str, Any] = {}
        self._t0 = time.monotonic()
        self._every = every_s
        self._last = self._t0

    def set(self, **figures: Any) -> None:
        """Figures shown beside the count (None drops one)."""
        for k, v in figures.items():
            if v is None:
                self.figures.pop(k, None)
            else:
                self.figures[k] = v
        self._refresh()

    def resumed(self, n: float) -> None:
        """``n`` units were done before this process (a resumed run): counted, but left out of the
        rate and the ETA."""
        self.done += n
        self._before += n
        self._refresh()

    def advance(self, n: float = 1, **figures: Any) -> None:
        self.done += n
        if figures:
            self.set(**figures)
        else:
            self._refresh()

    def update(self, **kwargs: Any) -> None:
        """rich-style update: ``completed=``, ``total=``, ``description=``; other keys are figures."""
        if "completed" in kwargs:
            self.done = float(kwargs.pop("completed"))
        if "total" in kwargs:
            self.total = kwargs.pop("total")
        if "description" in kwargs:
            self.description = str(kwargs.pop("description"))
        kwargs.pop("advance", None)
        self.set(**kwargs)

    def line(self) -> str:
        el = time.monotonic() - self._t0
        rate = (self.done - self._before) / el if el > 0 else 0.0
        count = f"{self.done:g}"
        if self.total:
            count += f"/{self.total:g} ({100 * self.done / self.total:.0f}%)"
        s = f"[{self.description}] {count} {rate:.3g}/s elapsed {_dur(el)}"
        if self.total and rate > 0 and self.done < self.total:
            s += f" eta {_dur((self.total - self.done) / rate)}"
        if self.figures:
            s += " | " + " ".join(f"{k}={_fmt(v)}" for k, v in self.figures.items())
        return s

    def _refresh(self) -> None:
        if self._every is None:
            return
        now = time.monotonic()
        if now - self._last >= self._every:
            self._last = now
            print(self.line(), file=sys.stderr, flush=True)


class _RichBar(_Bar):
    def __init__(self, total, description, prog, task):
        super().__init__(total, description, None)
        self._p, self._t = prog, task

    def _refresh(self) -> None:
        figs = " ".join(f"{k}={_fmt(v)}" for k, v in self.figures.items())
        self._p.update(self._t, completed=self.done, total=self.total, description=self.description, figures=figs)


class _NullBar(_Bar):
    def __init__(self):
        super().__init__(None, "", None)


def _interval_s() -> float:
    try:
        return max(0.0, float(os.environ.get("ICML26_PROGRESS_S", "30")))
    except ValueError:
        return 30.0


@contextmanager
def progress(total: float | None, description: str) -> Iterator[_Bar]:
    """A progress reporter for a loop of ``total`` units (None: unknown).

    Terminal: a transient rich bar. Pipe / file: a line every ~30 s and a last line at the end
    when the loop ran longer than that. ``-q``: nothing."""
    if _quiet:
        yield _NullBar()
        return
    if not sys.stderr.isatty():
        bar = _Bar(total, description, _interval_s())
        yield bar
        if time.monotonic() - bar._t0 >= bar._every:
            print(bar.line(), file=sys.stderr, flush=True)
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
        TextColumn("{task.fields[figures]}"),
    ]
    with Progress(*cols, console=Console(stderr=True), transient=True) as p:
        yield _RichBar(total, description, p, p.add_task(description, total=total, figures=""))
