"""Output for shell pipelines and for people.

- stdout: JSON lines only, flushed per line: first ``{"kind": "config", ...}``, then
  ``step``/``result`` records, last ``{"kind": "summary", ...}``. NaN/inf -> null.
- stderr: warnings and a final rich table of the ``result`` records (``-q`` silences).
- ``--out DIR``: ``config.yaml`` (atomic), ``records.jsonl`` (appended per record, so an
  interrupted run keeps what it produced), and whatever artifacts the method writes
  (plots, safetensors) through :func:`atomic_write_bytes` / :func:`atomic_path`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from icml26.core.errors import InputError


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:  # numpy / torch scalar
        return _clean(v.item())
    if hasattr(v, "tolist") and callable(v.tolist):
        return _clean(v.tolist())
    return v


def to_json(record: dict) -> str:
    """One JSON line; NaN and infinities become null."""
    return json.dumps(_clean(record), allow_nan=False, ensure_ascii=False)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # like a plain open(), not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; on success it replaces ``path`` (an existing
    folder there is removed first), on failure it is deleted and ``path`` is left as it was."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


# run directories that prepare_out_dir created in this process and no stream has used yet,
# with the topmost folder that call created (``--out a/b/c`` may create a and b too): a run
# that fails before its first result removes them again (see ``stream``)
_CREATED: dict[str, Path] = {}


def _key(p: Path) -> str:
    return os.path.abspath(p)


def _first_missing(p: Path) -> Path | None:
    """The topmost folder of ``p``'s path (``p`` included) that does not exist yet, or None."""
    q, top = Path(os.path.abspath(p)), None
    while not q.exists() and q != q.parent:
        top, q = q, q.parent
    return top


def _remove_created(d: Path, top: Path) -> None:
    """Remove ``d`` and its parents up to ``top`` (a folder this process created), while empty."""
    q, top = Path(os.path.abspath(d)), Path(os.path.abspath(top))
    while q == top or top in q.parents:
        try:
            q.rmdir()  # fails on a folder that is not empty (or is gone): stop there
        except OSError:
            return
        q = q.parent


def prepare_out_dir(out: str | Path | None, *, resume: bool = False, force: bool = False) -> Path | None:
    """Create the run directory. An existing non-empty directory is refused (InputError)
    unless ``resume`` (training continues there) or ``force`` is set. An empty path or a
    folder that cannot be written is refused too (InputError naming the path)."""
    if out is None:
        return None
    if not str(out).strip():
        raise InputError("--out is empty; give a directory path (use --out . for the current directory)")
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise InputError(f"--out {str(out)!r} exists and is not a directory")
    if p.is_dir() and not (resume or force):
        mine = [n for n in ("records.jsonl", "config.yaml") if (p / n).exists()]
        if mine:
            raise InputError(f"--out {str(out)!r} already holds a run ({mine[0]}); choose a new directory or remove it")
    existed = p.is_dir()
    top = _first_missing(p)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {str(out)!r}: cannot create the directory ({e.strerror or e})") from None
    if not existed and top is not None:
        _CREATED[_key(p)] = top
    try:  # probe: a read-only or full folder is a one-line error now, not a traceback later
        fd, probe = tempfile.mkstemp(prefix=".icml26-write-test.", dir=p)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if not existed:
            _CREATED.pop(_key(p), None)
            if top is not None:
                _remove_created(p, top)
        raise InputError(f"--out {str(out)!r}: cannot write there ({e.strerror or e})") from None
    return p


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
    *,
    command: str,
    config: Any = None,
    seed: int | None = None,
    out: str | Path | None = None,
    quiet: bool = False,
    columns: Sequence[str] | None = None,
    plot: Callable[[list[dict], Path], None] | None = None,
    resume: bool = False,
    extra_config: dict | None = None,
) -> list[dict]:
    """Write the config record, then every record as a JSON line on stdout (and to
    ``records.jsonl`` under ``out``), then a table of ``result`` records on stderr.

    ``plot(records, out_dir)`` is called at the end when ``out`` is given.
    Returns the list of records (config record first)."""
    from icml26.core import progress
    from icml26.core.recipe import config_dict

    progress.set_quiet(quiet)
    out_dir = prepare_out_dir(out, resume=resume)
    undo = _Undo(out_dir) if out_dir is not None else None
    head = {"kind": "config", "command": command}
    if seed is not None:
        head["seed"] = seed
    if config is not None:
        head.update(config_dict(config))
    if extra_config:
        head.update(extra_config)
    rec_file = None
    seen: list[dict] = []
    has_result = False
    try:
        if out_dir is not None:
            import yaml

            atomic_write_text(out_dir / "config.yaml", yaml.safe_dump({"method": command, "seed": seed, "config": {k: v for k, v in head.items() if k not in ("kind", "command", "seed")}}, sort_keys=False))
            rec_file = open(out_dir / "records.jsonl", "a", encoding="utf-8")
        _emit(head, rec_file, seen)
        for rec in records:
            _emit(rec, rec_file, seen)
            has_result = has_result or (isinstance(rec, dict) and rec.get("kind") == "result")
    except InputError:
        if rec_file is not None:
            rec_file.close()
            rec_file = None
        if undo is not None and not has_result:
            undo.rollback()  # the same --out can be used again once the input is fixed
        raise
    finally:
        if rec_file is not None:
            rec_file.close()
    results = [r for r in seen if r.get("kind") == "result"]
    if out_dir is not None and plot is not None and results:
        plot(seen, out_dir)
    if not quiet:
        print_table(results, columns, title=f"icml26 {command}")
        summ = [r for r in seen if r.get("kind") == "summary"]
        if summ:
            stderr_console().print("summary: " + ", ".join(f"{k}={_fmt(_clean(v))}" for k, v in summ[-1].items() if k != "kind" and not isinstance(v, (dict, list))))
    return seen


class _Undo:
    """What one ``stream`` call changed under ``--out``, to take back when the run stops on bad
    input (``InputError``) before its first result: ``config.yaml`` / ``records.jsonl`` as they
    were, and the folder itself (with the parents ``--out a/b/c`` created) if this invocation
    created it and nothing else was written there (checkpoints or caches a run already wrote are
    kept; nothing that existed is deleted). What was created is what ``prepare_out_dir`` recorded
    in ``_CREATED`` in this process (the topmost new folder), by this stream or by the command."""

    def __init__(self, out_dir: Path):
        self.dir = out_dir
        self.top = _CREATED.pop(_key(out_dir), None)  # None: the folder existed
        cfg = out_dir / "config.yaml"
        self.config = cfg.read_bytes() if cfg.is_file() else None
        rec = out_dir / "records.jsonl"
        self.records_size = rec.stat().st_size if rec.is_file() else None

    def rollback(self) -> None:
        try:
            cfg, rec = self.dir / "config.yaml", self.dir / "records.jsonl"
            if self.top is not None:
                cfg.unlink(missing_ok=True)
                rec.unlink(missing_ok=True)
                _remove_created(self.dir, self.top)
                return
            if self.config is None:
                cfg.unlink(missing_ok=True)
            elif cfg.is_file() and cfg.read_bytes() != self.config:
                atomic_write_bytes(cfg, self.config)
            if self.records_size is None:
                rec.unlink(missing_ok=True)
            elif rec.is_file():
                os.truncate(rec, self.records_size)
        except OSError:
            pass  # best effort: the run's own error is the one to report


def _emit(rec: dict, rec_file, seen: list) -> None:
    line = to_json(rec)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if rec_file is not None:
        rec_file.write(line + "\n")
        rec_file.flush()
    seen.append(json.loads(line))
