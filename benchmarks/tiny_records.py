"""Compare every command's tiny-recipe records between two revisions, timings aside.

A refactor (formatting, file splits, moved imports) must not change what a command computes:
this runs ``icml26 <command> -r recipes/<command>/tiny.yaml -q`` in a git worktree of each
revision and compares the JSON records after dropping fields that measure time or the machine.

    python benchmarks/tiny_records.py --base c472ae2 --head HEAD [--commands bai,mcts] [--json out.json]

Prints one line per command: ``same``, ``differs`` (with the first differing field) or
``failed``; exit 1 when any command differs or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# standalone tiny recipes (group commands need inputs made by another subcommand first)
GROUPS = {"sample-lfm", "filter-data", "traffic", "muse", "icr", "geo-fusion", "bfq", "mamoe"}
TIMING = re.compile(
    r"(^|_)(time|times|seconds|secs|wall|elapsed|rate|throughput|per_s|speed|eta|duration|started|"
    r"finished|date|host|pid|cpu|threads|load|version|versions|backend|path|dir|out|checkpoint|ckpt|overhead)(_|$)|"
    r"_s$|_ms$|_us$|_per_s$|_per_sec$|ms_per|tok_s|tokens_per_s|updates_per_s|steps_per_s"
)


def _strip(v, tree: str = "", out: str = ""):
    """Drop timing / machine fields; write the worktree and output folders as <tree> / <out>."""
    if isinstance(v, dict):
        return {k: _strip(x, tree, out) for k, x in v.items() if not TIMING.search(k)}
    if isinstance(v, list):
        return [_strip(x, tree, out) for x in v]
    if isinstance(v, float):
        return round(v, 9)
    if isinstance(v, str):
        return v.replace(tree, "<tree>").replace(out, "<out>") if tree else v
    return v


def _first_diff(a, b, path="") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'head' if k not in a else 'base'}"
            d = _first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def _run(tree: Path, command: str, python: str) -> list[dict] | str:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(tree))
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run(
            [python, "-m", "icml26", command, "-r", f"recipes/{command}/tiny.yaml", "-q", "--out", f"{out}/run"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if p.returncode != 0:
            return (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        return [_strip(json.loads(line), str(tree), out) for line in p.stdout.splitlines() if line.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="revision to compare against (e.g. the parent commit)")
    ap.add_argument("--head", default="HEAD", help="revision under test (default HEAD)")
    ap.add_argument("--commands", default="", help="comma-separated commands (default: every standalone tiny recipe)")
    ap.add_argument("--json", default=None, help="write the per-command verdicts here")
    a = ap.parse_args(argv)
    cmds = (
        [c for c in a.commands.split(",") if c]
        if a.commands
        else sorted(p.parent.name for p in (ROOT / "recipes").glob("*/tiny.yaml") if p.parent.name not in GROUPS)
    )
    python = sys.executable
    out, bad = {}, 0
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for name, rev in (("base", a.base), ("head", a.head)):
            trees[name] = Path(tmp) / name
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(trees[name]), rev], cwd=ROOT, check=True, capture_output=True
            )
        try:
            for c in cmds:
                ra, rb = _run(trees["base"], c, python), _run(trees["head"], c, python)
                if isinstance(ra, str) or isinstance(rb, str):
                    verdict = (
                        f"failed (base: {ra if isinstance(ra, str) else 'ok'}; "
                        f"head: {rb if isinstance(rb, str) else 'ok'})"
                    )
                else:
                    d = _first_diff(ra, rb, "records")
                    verdict = "same" if d is None else f"differs at {d}"
                bad += verdict != "same"
                out[c] = verdict
                print(f"{c:20s} {verdict}", flush=True)
        finally:
            for t in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(t)], cwd=ROOT, capture_output=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"base": a.base, "head": a.head, "commands": out}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
