"""The run folder (``--out DIR``): its creation and checks, ``records.jsonl`` written one flushed
line per record, the ``interrupted.json`` marker of a run that ended abnormally, and ``--resume``.

- ``config.yaml`` (atomic) and ``records.jsonl`` (appended per record, so an interrupted run keeps
  what it produced); artifacts through ``core.atomic``.
- A folder that holds a run is refused unless ``--resume``; a non-empty folder that holds no run
  is refused (its files are not the run's).
- A run that ends abnormally (Ctrl-C, SIGTERM, an error after its first result) leaves
  ``interrupted.json`` (written atomically, with further SIGINT/SIGTERM held off meanwhile); a later
  run there is refused with a message naming ``--resume`` and the folder to delete.
- ``--resume``: :func:`resume_records` checks the settings and returns the records the folder
  holds; the method replays finished results (:func:`previous_results`, :func:`replay_or_run`)
  and the record stream appends only what is new. Records already written that the resumed run
  does not emit again (steps before a checkpoint) are kept.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from icml26.core.atomic import atomic_write_bytes, atomic_write_text
from icml26.core.errors import InputError
from icml26.core.jsonl import complete_lines as _read_lines
from icml26.core.jsonl import to_json

INTERRUPTED = "interrupted.json"  # marker of a run that ended abnormally (see stream)


# run directories that prepare_out_dir created in this process and no stream has used yet,
# with the topmost folder that call created (``--out a/b/c`` may create a and b too): a run
# that fails before its first result removes them again (see ``stream``)
_CREATED: dict[str, Path] = {}


# run directories this process accepted already (a command that checks --out up front, then
# streams into it, or that writes an artifact there first, is not refused by its own files)
_CHECKED: set[str] = set()


def _key(p: Path) -> str:
    return os.path.abspath(p)


def accept_out_dir(p: str | Path) -> None:
    """Mark ``p`` as checked for this run (the preamble's ``check_out``): files the run writes
    there before its records do not make ``prepare_out_dir`` refuse it as a foreign folder."""
    _CHECKED.add(_key(Path(p)))


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


def prepare_out_dir(
    out: str | Path | None, *, resume: bool = False, force: bool = False, resumable: bool = False
) -> Path | None:
    """Create the run directory. A directory that holds a run (``records.jsonl`` or
    ``config.yaml``) is refused (InputError) unless ``resume`` (the run continues there) or
    ``force`` is set; for a run that was interrupted (``interrupted.json``) or did not finish (no
    ``summary`` record) the message says so, names ``--resume`` when ``resumable`` (the command
    has it) and the folder to delete. An empty path or a folder that cannot be written is refused
    too (InputError naming the path)."""
    if out is None:
        return None
    if not str(out).strip():
        raise InputError("--out is empty; give a directory path")
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise InputError(f"--out {str(out)!r} exists and is not a directory")
    if p.is_dir() and not (resume or force):
        msg = holds_run_message(p, str(out), resumable)
        if msg:
            raise InputError(msg)
        if _key(p) not in _CHECKED:
            others = sorted(q.name for q in p.iterdir() if not q.name.startswith("."))
            if others:
                shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
                raise InputError(
                    f"--out {str(out)!r} is a folder that holds other files ({shown}) and no run; "
                    "give a new or empty folder for the run"
                )
    _CHECKED.add(_key(p))
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


def read_marker(out_dir: str | Path) -> dict | None:
    """The ``interrupted.json`` marker of a run folder (None when absent or unreadable)."""
    try:
        m = json.loads((Path(out_dir) / INTERRUPTED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def _count_kinds(lines: list[str]) -> tuple[int, bool]:
    """(result records, whether a summary record is there) of records.jsonl lines."""
    results, summary = 0, False
    for line in lines:
        try:
            kind = json.loads(line).get("kind")
        except (ValueError, AttributeError):
            continue
        results += kind == "result"
        summary = summary or kind == "summary"
    return results, summary


def holds_run_message(p: Path, out: str, resumable: bool) -> str | None:
    """Why ``--out`` cannot take a new run when the folder ``p`` holds one (``records.jsonl`` or
    ``config.yaml``), naming ``--resume`` for a resumable command; None when it holds none."""
    mine = [n for n in ("records.jsonl", "config.yaml") if (p / n).exists()]
    return _holds_run_message(p, out, mine[0], resumable) if mine else None


def _holds_run_message(p: Path, out: str, what: str, resumable: bool) -> str:
    head = f"--out {out!r} already holds a run ({what})"
    marker = read_marker(p)
    rec = p / "records.jsonl"
    try:
        n_results, finished = _count_kinds(_read_lines(rec)[0]) if rec.is_file() else (0, False)
    except OSError:
        n_results, finished = 0, True
    if marker is None and (finished or not rec.is_file()):
        return f"{head}; choose a new directory or remove it"
    if marker is not None:
        state = (
            f"that was interrupted ({marker.get('reason', '?')} at {marker.get('when', '?')}, "
            f"after {marker.get('results', n_results)} results)"
        )
    else:
        state = f"that did not finish ({n_results} results, no summary)"
    todo = "continue it with --resume, or" if resumable else "to start over,"
    start = " to start over" if resumable else ""
    return f"{head} {state}; {todo} delete the folder {out!r}{start} (or choose a new directory)"


def _head(command: str, config: Any = None, seed: int | None = None, extra_config: dict | None = None) -> dict:
    """The ``config`` record a run starts with."""
    from icml26.core.recipe import config_dict

    head = {"kind": "config", "command": command}
    if seed is not None:
        head["seed"] = seed
    if config is not None:
        head.update(config_dict(config))
    if extra_config:
        head.update(extra_config)
    return head


def resume_records(
    out: str | Path | None,
    *,
    command: str,
    config: Any = None,
    seed: int | None = None,
    extra_config: dict | None = None,
) -> list[dict]:
    """``--resume``: the records an earlier run of ``command`` left in ``out/records.jsonl``
    (its config record first), to continue it with ``stream(records, run.replace(previous=...))``.

    Returns [] (with a note on stderr) when ``out`` holds no run yet: the run starts there.
    Raises InputError when ``out`` is not given, when the folder holds another command's run or
    a damaged records file, or when a setting differs from the stored run's (naming the field,
    both values and the folder to delete to start over). A setting the stored run lacks counts as
    equal while it is unset (None) now: runs stored before an optional setting existed resume."""
    if out is None:
        raise InputError("--resume needs --out DIR: the folder of the run to continue")
    p = Path(out)
    rec = p / "records.jsonl"
    if p.exists() and not p.is_dir():
        raise InputError(f"--out {str(out)!r} exists and is not a directory")
    if not rec.is_file():
        print(f"icml26 {command}: --resume: {str(out)!r} holds no run yet; starting a new run there", file=sys.stderr)
        return []
    try:
        lines = _read_lines(rec)[0]
    except OSError as e:
        raise InputError(f"--resume: cannot read {str(rec)!r} ({e.strerror or e})") from None
    records = []
    for i, line in enumerate(lines):
        try:
            r = json.loads(line)
        except ValueError:
            r = None
        if not isinstance(r, dict):
            raise InputError(
                f"--resume: {str(rec)!r} line {i + 1} is not a JSON record; "
                f"delete the folder {str(out)!r} to start over"
            )
        records.append(r)
    if not records:
        return []
    first = records[0]
    if first.get("kind") != "config" or first.get("command") != command:
        raise InputError(
            f"--resume: {str(rec)!r} is not a run of 'icml26 {command}' (it starts with "
            f"{first.get('kind')!r} of {first.get('command')!r}); choose its own folder or delete {str(out)!r}"
        )
    head = json.loads(to_json(_head(command, config, seed, extra_config)))
    for k in list(head) + [k for k in first if k not in head]:
        if k not in first and head[k] is None:
            continue  # a setting added since that run, left unset now: the run was made without it
        if head.get(k, "<absent>") != first.get(k, "<absent>"):
            raise InputError(
                f"--resume: {k} is {_short(head.get(k, '<absent>'))} now but "
                f"{_short(first.get(k, '<absent>'))} in the run "
                f"in {str(out)!r}; resume with the same settings, or delete the folder {str(out)!r} to start over"
            )
    return records


def _short(v: Any) -> str:
    t = json.dumps(v, ensure_ascii=False)
    return t if len(t) <= 80 else t[:77] + "..."


def previous_results(records: Sequence[dict] | None, *fields: str) -> dict[tuple, dict]:
    """The ``result`` records of an earlier run (``resume_records``), keyed by the tuple of their
    ``fields`` (a missing field is None): e.g. ``previous_results(prev, "algo", "simulations")``.
    A method replays the record found under a key instead of computing it again."""
    out: dict[tuple, dict] = {}
    for r in records or ():
        if r.get("kind") == "result":
            out.setdefault(tuple(r.get(f) for f in fields), r)
    return out


def replay_or_run(
    methods: Iterable[str], previous: Sequence[dict] | None, run_one, *, field: str, key: tuple, results: list[dict]
) -> Iterator[dict]:
    """For each method name (its records carry ``field``, e.g. "algo"): when an earlier run finished it
    (a ``result`` under ``(method, *key)`` in ``previous``), yield that run's ``step`` records of the
    method and its result again; otherwise yield from ``run_one(method)``. Every ``result`` yielded
    is appended to ``results`` (for the caller's summary)."""
    fields = (field, *(f for f, _ in key))
    done = previous_results(previous, *fields)
    for m in methods:
        k = (m, *(v for _, v in key))
        if k in done:
            yield from (r for r in previous or () if r.get("kind") == "step" and r.get(field) == m)
            results.append(done[k])
            yield done[k]
            continue
        for r in run_one(m):
            if r.get("kind") == "result":
                results.append(r)
            yield r


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
            elif (
                rec.is_file() and rec.stat().st_size > self.records_size
            ):  # (never extend: a resumed file may be shorter)
                os.truncate(rec, self.records_size)
        except OSError:
            pass  # best effort: the run's own error is the one to report


class _RecordsFile:
    """``records.jsonl``, appended one flushed line per record. With ``replay`` (``--resume``)
    the lines already there are matched in order against the records written: a record equal to
    the next stored line is not written again; at the first one that differs the file is cut
    back to the lines matched so far and everything from there on is appended (a run replays its
    stored results in their order, so normally only the new records are written)."""

    def __init__(self, path: Path, *, replay: bool = False):
        self.path = path
        self.stored: list[str] = []
        self.offsets: list[int] = []
        end = None
        if replay and path.is_file():
            self.stored, self.offsets, end = _read_lines(path)
            if end != path.stat().st_size:
                os.truncate(path, end)  # a last line cut short by a kill
        self.matched = 0  # stored lines matched so far (the file's lines beyond are stale until cut)
        self.f = open(path, "a", encoding="utf-8")
        self.records = len(self.stored) if replay else 0  # records in the file after this run's writes
        self.results = 0

    def _cut(self) -> None:
        if self.matched < len(self.stored):
            self.f.flush()
            os.truncate(self.path, self.offsets[self.matched])
            self.stored = self.stored[: self.matched]
            self.records = self.matched

    def write(self, line: str, kind: Any) -> None:
        if self.matched < len(self.stored):
            if line == self.stored[self.matched]:
                self.matched += 1
                self.results += kind == "result"
                return
            self._cut()
        self.f.write(line + "\n")
        self.f.flush()
        self.records += 1
        self.results += kind == "result"

    def finish(self) -> None:
        """The run completed: stored lines it did not emit again are dropped."""
        self._cut()

    def close(self) -> None:
        if not self.f.closed:
            self.f.close()

    def counts(self) -> tuple[int, int]:
        """(records, results) in the file now (a stored tail not yet matched counted as kept)."""
        if self.matched < len(self.stored):
            rest = _count_kinds(self.stored[self.matched :])[0]
            return self.records, self.results + rest
        return self.records, self.results


def _mark_interrupted(
    out_dir: Path | None, command: str, exc: BaseException, rec_file: "_RecordsFile", resumable: bool = False
) -> None:
    """Write ``interrupted.json`` and say so on stderr (best effort: the run's own exception is
    the one to report)."""
    import datetime

    if out_dir is None:
        return
    n_records, n_results = rec_file.counts()
    if isinstance(exc, _Terminated):
        reason = "SIGTERM"
    elif isinstance(exc, KeyboardInterrupt):
        reason = "KeyboardInterrupt"
    else:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        reason = f"{type(exc).__name__}: {msg}"[:300] if msg else type(exc).__name__
    marker = {
        "kind": "interrupted",
        "command": command,
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "reason": reason,
        "records": n_records,
        "results": n_results,
    }
    try:
        atomic_write_text(out_dir / INTERRUPTED, to_json(marker) + "\n")
    except OSError:
        return
    todo = (
        "continue it with --resume (same settings), or delete it to start over"
        if resumable
        else "delete it to start over"
    )
    try:
        print(
            f"icml26 {command}: stopped ({reason}) after {n_results} results; "
            f"{str(out_dir)!r} is marked as interrupted "
            f"({INTERRUPTED}): {todo}",
            file=sys.stderr,
            flush=True,
        )
    except (OSError, ValueError):
        pass


class _Terminated(KeyboardInterrupt):
    """SIGTERM during a run with ``--out`` (so that the folder is marked; exits as Ctrl-C does)."""


_STOP_SIGNALS: list = []  # SIGINT and SIGTERM where the platform has them (filled on first use)


def _stop_signals() -> set:
    import signal

    if not _STOP_SIGNALS:
        _STOP_SIGNALS.extend(getattr(signal, n) for n in ("SIGINT", "SIGTERM") if hasattr(signal, n))
    return set(_STOP_SIGNALS)


def _hold_stop_signals() -> bool:
    """Block SIGINT and SIGTERM in this thread (they stay pending); False where the platform cannot."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        return False
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, _stop_signals())
    except (ValueError, OSError):
        return False
    return True


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT / SIGTERM held pending while the interrupted marker is written, so that a second
    Ctrl-C or ``kill`` (``timeout`` sends SIGTERM to the process group, then the user again) cannot
    leave a half-written ``.interrupted.json.*.tmp`` instead of the marker; they act after it."""
    import signal
    import threading

    held = threading.current_thread() is threading.main_thread() and _hold_stop_signals()
    try:
        yield
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _stop_signals())


@contextmanager
def _sigterm_raises(active: bool) -> Iterator[None]:
    """While active, in the main thread: SIGTERM (when it has its default action) raises
    ``_Terminated`` instead of ending the process on the spot, and SIGTERM or Ctrl-C (Python's
    default handler) holds further stop signals until the run folder is marked (``signals_held``)."""
    import signal
    import threading

    old, old_int = None, None
    if active and threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGTERM"):
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:

                def _raise(signum, frame):  # noqa: ARG001
                    _hold_stop_signals()
                    raise _Terminated()

                old = signal.signal(signal.SIGTERM, _raise)
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:

                def _interrupt(signum, frame):  # noqa: ARG001
                    _hold_stop_signals()
                    raise KeyboardInterrupt()

                old_int = signal.signal(signal.SIGINT, _interrupt)
        except (ValueError, OSError):
            old = old_int = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
        if old_int is not None:
            signal.signal(signal.SIGINT, old_int)
