"""Streaming document I/O for ``filter-data`` (datatrove's layout: ``text``, ``id``, ``metadata``).

Reading
  ``iter_documents(path, skip_bad=...)`` yields ``(line_number, doc)`` one document at a
  time (constant memory) from ``.jsonl``, ``.jsonl.gz`` / ``.jsonl.zst`` (detected by their magic bytes,
  so gzip on stdin works too), ``-`` (stdin) and ``.parquet`` (row groups streamed through
  pyarrow; the "line number" is the 1-based row number). A malformed line (not JSON, not an
  object, ``text`` missing or not a string, ``metadata`` not an object) raises
  :class:`InputError` naming the file and line number; with ``skip_bad`` it is skipped
  and counted in ``stats.bad`` instead. Blank lines are ignored.

Writing
  ``DocumentWriter(output)`` writes JSON lines. A file path is written atomically (a temp
  file beside it, renamed on success; ``.gz`` suffix -> gzip). ``None``/``-`` means stdout:
  by default the lines are spooled to a temporary file (on disk past 16 MiB, so memory
  stays bounded) and copied to stdout only when the command succeeded, so a failed run
  leaves nothing half-written downstream; ``spool=False`` streams each batch at once.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import shutil
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from icml26.core.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # zstd frame (datatrove / DCLM shards: .jsonl.zst)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800..\udfff: a pair is fine, a lone one is not text


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text[:20]} is beyond float range")
    return v


def _loads_line(line: bytes):
    """``json.loads`` of one line, strictly: NaN/Infinity (which Python's json reads but cannot
    write back), numbers beyond float range, integers past Python's digit limit, nesting past
    the recursion limit and lone surrogates (``"\ud800"``: not encodable as UTF-8) raise
    ValueError with a short reason; JSONDecodeError / UnicodeDecodeError pass through."""
    try:
        obj = json.loads(line, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise
    except RecursionError:
        raise ValueError("nested too deep") from None
    if _SURROGATE_ESCAPE.search(line):
        try:
            dumps(obj).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff), not text") from None
    return obj


@dataclass
class ReadStats:
    """Counts kept while reading (``bad`` = malformed lines skipped under ``skip_bad``)."""

    read: int = 0
    bad: int = 0
    first_bad: str | None = None


def _open_binary(path: str) -> IO[bytes]:
    if path == "-":
        raw: IO[bytes] = sys.stdin.buffer
    else:
        p = Path(path)
        if not p.exists():
            raise InputError(f"input {path!r} does not exist")
        if p.is_dir():
            raise InputError(f"input {path!r} is a directory, expected a .jsonl[.gz] or .parquet file")
        raw = open(p, "rb")
    buf = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)  # type: ignore[arg-type]
    head = buf.peek(4)[:4]
    if head[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=buf, mode="rb")  # type: ignore[return-value]
    if head == ZSTD_MAGIC:
        try:
            import zstandard
        except ImportError:  # pragma: no cover - zstandard is a dependency
            raise InputError(f"input {path!r} is zstd-compressed: reading it needs `pip install zstandard`") from None
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(buf, read_across_frames=True))
    return buf


def _check_doc(obj, where: str) -> str | None:
    """Return an error message for a record that is not a document, else None."""
    if not isinstance(obj, dict):
        return f"{where}: expected a JSON object, got {type(obj).__name__}"
    if "text" not in obj:
        return f"{where}: document has no 'text' field"
    if not isinstance(obj["text"], str):
        return f"{where}: 'text' must be a string, got {type(obj['text']).__name__}"
    md = obj.get("metadata")
    if md is not None and not isinstance(md, dict):
        return f"{where}: 'metadata' must be an object, got {type(md).__name__}"
    return None


def _bad(msg: str, stats: ReadStats, skip_bad: bool) -> None:
    if not skip_bad:
        raise InputError(msg + " (pass --skip-bad to skip malformed lines)")
    stats.bad += 1
    if stats.first_bad is None:
        stats.first_bad = msg


def iter_documents(path: str, *, skip_bad: bool = False, stats: ReadStats | None = None) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, document)`` from a JSONL(.gz) file, ``-`` (stdin) or parquet.

    Raises InputError ``"<path>:<line>: ..."`` on a malformed line unless ``skip_bad``."""
    stats = stats if stats is not None else ReadStats()
    name = "<stdin>" if path == "-" else path
    if path != "-" and str(path).endswith(".parquet"):
        yield from _iter_parquet(path, skip_bad=skip_bad, stats=stats)
        return
    f = _open_binary(path)
    try:
        lineno = 0
        while True:
            try:
                line = f.readline()
            except (OSError, EOFError, zlib.error) as e:  # truncated / corrupt gzip or zstd
                raise InputError(f"{name}:{lineno + 1}: cannot read compressed input: {e}") from None
            if not line:
                break
            lineno += 1
            if not line.strip():
                continue
            where = f"{name}:{lineno}"
            try:
                obj = _loads_line(line)
            except UnicodeDecodeError as e:
                _bad(f"{where}: not UTF-8 ({e.reason} at byte {e.start})", stats, skip_bad)
                continue
            except json.JSONDecodeError as e:
                _bad(f"{where}: not valid JSON ({e.msg} at column {e.colno})", stats, skip_bad)
                continue
            except ValueError as e:  # NaN, 1e999, a 5000-digit integer, deep nesting, a lone surrogate
                _bad(f"{where}: not valid JSON ({e})", stats, skip_bad)
                continue
            err = _check_doc(obj, where)
            if err:
                _bad(err, stats, skip_bad)
                continue
            stats.read += 1
            yield lineno, obj
    finally:
        if path != "-":
            f.close()


def _iter_parquet(path: str, *, skip_bad: bool, stats: ReadStats) -> Iterator[tuple[int, dict]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow is a core dependency
        raise InputError("reading parquet needs pyarrow: pip install pyarrow") from None
    if not Path(path).is_file():
        raise InputError(f"input {path!r} does not exist")
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types
        raise InputError(f"{path}: not a readable parquet file ({e})") from None
    if "text" not in pf.schema_arrow.names:
        raise InputError(f"{path}: parquet file has no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
    row = 0
    for batch in pf.iter_batches(batch_size=1024):
        for obj in batch.to_pylist():
            row += 1
            err = _check_doc(obj, f"{path}:{row}")
            if err:
                _bad(err, stats, skip_bad)
                continue
            stats.read += 1
            yield row, obj


def read_texts(path: str, *, skip_bad: bool = False, limit: int | None = None) -> list[str]:
    """All ``text`` fields of a (small) document file, e.g. the HQ / pool training sets."""
    out: list[str] = []
    for _, d in iter_documents(path, skip_bad=skip_bad):
        out.append(d["text"])
        if limit is not None and len(out) >= limit:
            break
    return out


# characters that str.splitlines() (and so many JSONL readers) treat as line ends; json escapes
# the ASCII ones but not these
_LINE_SEPARATORS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def dumps(doc: dict) -> str:
    """One JSONL line: UTF-8 text kept as is, except U+0085 / U+2028 / U+2029, written escaped so
    that the line stays one line for readers that split on them."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False).translate(_LINE_SEPARATORS)


class DocumentWriter:
    """JSON lines to a file (atomic) or to stdout (spooled until success, see module doc).

    Use as a context manager: the output appears only if the block exits without an error."""

    def __init__(self, output: str | None = None, *, spool: bool = True):
        self.output = None if output in (None, "-") else str(output)
        self.spool = spool
        self.count = 0
        self._tmp: str | None = None
        self._f: IO[bytes] | None = None
        self._direct = False

    def __enter__(self) -> "DocumentWriter":
        if self.output is None:
            if self.spool:
                self._f = tempfile.SpooledTemporaryFile(max_size=16 << 20, mode="w+b")
            else:
                self._f = sys.stdout.buffer
            return self
        p = Path(self.output)
        if p.exists() and not p.is_file():  # /dev/null, a FIFO: write straight through
            self._direct = True
            self._f = open(p, "wb")
            return self
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        raw = os.fdopen(fd, "wb")
        self._f = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if p.name.endswith(".gz") else raw
        self._raw = raw
        return self

    def write(self, doc: dict) -> None:
        """Append one document; InputError (nothing is left behind: see __exit__) when it
        holds what JSON lines cannot (NaN or infinity, e.g. from a parquet column; a lone
        surrogate)."""
        assert self._f is not None
        try:
            line = (dumps(doc) + "\n").encode("utf-8")
        except (ValueError, UnicodeEncodeError) as e:
            what = "a lone surrogate" if isinstance(e, UnicodeEncodeError) else "NaN or infinity"
            raise InputError(
                f"document {str(doc.get('id', ''))[:60]!r} holds {what}, which JSON lines cannot hold"
            ) from None
        self._f.write(line)
        self.count += 1

    def flush(self) -> None:
        if self._f is not None and self.output is None and not self.spool:
            self._f.flush()

    def __exit__(self, exc_type, exc, tb) -> None:
        f = self._f
        if f is None:
            return
        if self.output is None:
            if self.spool:
                if exc_type is None:
                    f.seek(0)
                    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
                    sys.stdout.buffer.flush()
                f.close()
            else:
                f.flush()
            return
        if self._direct:
            f.close()
            return
        try:
            f.close()
            if f is not self._raw:
                self._raw.close()
            if exc_type is None:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(self._tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual mode
                os.replace(self._tmp, self.output)
        finally:
            if exc_type is not None and self._tmp and os.path.exists(self._tmp):
                os.unlink(self._tmp)
