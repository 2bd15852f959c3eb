"""Output for shell pipelines and for people (the public import path of the pieces below).

- ``core.jsonl``: JSON lines (NaN/inf -> null).
- ``core.atomic``: atomic files and folders (``atomic_path``, ``atomic_write_bytes`` ...).
- ``core.run_folder``: ``--out DIR`` (config.yaml, records.jsonl, the ``interrupted.json``
  marker, ``--resume``).
- ``core.record_stream``: ``stream()`` (records on stdout and in the folder, the table on stderr).
"""

from __future__ import annotations

from icml26.core.atomic import atomic_dir, atomic_path, atomic_write_bytes, atomic_write_text
from icml26.core.jsonl import _clean, to_json
from icml26.core.record_stream import _emit, _fmt, print_table, stderr_console, stream
from icml26.core.run_folder import (
    _CHECKED,
    _CREATED,
    INTERRUPTED,
    _head,
    _holds_run_message,
    _mark_interrupted,
    _read_lines,
    _RecordsFile,
    _sigterm_raises,
    _Terminated,
    _Undo,
    accept_out_dir,
    holds_run_message,
    prepare_out_dir,
    previous_results,
    read_marker,
    replay_or_run,
    resume_records,
)

__all__ = [
    "INTERRUPTED",
    "accept_out_dir",
    "atomic_dir",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "holds_run_message",
    "prepare_out_dir",
    "previous_results",
    "print_table",
    "read_marker",
    "replay_or_run",
    "resume_records",
    "stderr_console",
    "stream",
    "to_json",
]
_PRIVATE = (_CHECKED, _CREATED, _clean, _emit, _fmt, _head, _holds_run_message, _mark_interrupted, _read_lines)
_PRIVATE += (_RecordsFile, _sigterm_raises, _Terminated, _Undo)  # re-exported for tests and older imports
