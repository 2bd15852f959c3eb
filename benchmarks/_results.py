"""What the resumable benchmarks share: their results JSON (read if there, written atomically)
and the machine's load beside the timings. Imported by the scripts in this folder (run as
``python benchmarks/<name>.py``, so this folder is on ``sys.path``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterable, Sequence


def load_results(path: Path) -> dict:
    """The saved results at ``path``, or {} when none were saved yet."""
    return json.loads(path.read_text()) if path.is_file() else {}


def save_results(path: Path, data: dict, *, sort_keys: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (a stopped run never leaves half a file)."""
    from icml26.core.output import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=sort_keys))


def uptime() -> str:
    """``uptime``'s line (load averages), or "?" where it cannot run."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Print a markdown table on stdout: the header, its rule, one line per row (cells as given)."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
