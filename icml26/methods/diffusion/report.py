"""``icml26 icr report RUN_DIR``: the plots of an ``icr analyze`` or ``icr train`` run folder, from its
``records.jsonl`` (PNG, written atomically into the run folder or ``--out``).

  analyze  icr_sweep.png: ICR (left axis) and probe accuracy (right axis) against the noise level
           (symlog axis, so sigma = 0 is shown), the ICR minimum and the probe peak marked.
  train    icr_training.png: per training size, ICR (top) and memorization fraction (bottom) against
           the training step, the ICR-minimum step (dashed) and the memorization onset (dotted) marked;
           icr_quality.png: ICR and the Frechet distance (classifier trained here) against the step.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Iterator

from icml26.core.errors import InputError
from icml26.core.output import atomic_write_bytes


def read_run(run_dir: str | Path) -> tuple[str, list[dict]]:
    """(command, records) of a run folder; InputError when it is not an ``icr analyze``/``icr train`` run."""
    p = Path(run_dir)
    rec = p / "records.jsonl"
    if not p.is_dir():
        raise InputError(
            f"RUN_DIR {str(run_dir)!r} is not a folder (expected the --out of `icml26 icr analyze` or `icml26 icr "
            "train`)"
        )
    if not rec.is_file():
        raise InputError(f"RUN_DIR {str(run_dir)!r} holds no records.jsonl")
    out = []
    for i, line in enumerate(rec.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            raise InputError(f"{str(rec)!r} line {i + 1} is not JSON") from None
        if isinstance(r, dict):
            out.append(r)
    cmd = out[0].get("command") if out and out[0].get("kind") == "config" else None
    if cmd not in ("icr analyze", "icr train"):
        raise InputError(f"{str(rec)!r} is a run of {cmd!r}, not of 'icr analyze' or 'icr train'")
    return cmd, out


def _save(fig, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return atomic_write_bytes(path, buf.getvalue())


def plot_sweep(records: list[dict], path: Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in records if r.get("kind") == "result"]
    if not rows:
        raise InputError("the run has no result records to plot")
    lv = [r["noise_level"] for r in rows]
    icr = [r["icr"] for r in rows]
    acc = [r.get("probe_accuracy") for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(lv, icr, "o-", color="C0", label="ICR")
    ax.set_xscale("symlog", linthresh=0.01) if rows[0].get("noise_param") == "sigma" else None
    ax.set_xlabel(f"noise level ({rows[0].get('noise_param')})")
    ax.set_ylabel("ICR (lower = better)", color="C0")
    i = min(range(len(icr)), key=lambda k: icr[k])
    ax.axvline(lv[i], color="C0", ls="--", lw=0.8)
    if any(a is not None for a in acc):
        ax2 = ax.twinx()
        ax2.plot(lv, [a if a is not None else float("nan") for a in acc], "s-", color="C1", label="probe accuracy")
        ax2.set_ylabel("linear-probe accuracy", color="C1")
        j = max((k for k in range(len(acc)) if acc[k] is not None), key=lambda k: acc[k])
        ax2.axvline(lv[j], color="C1", ls=":", lw=0.8)
    ax.set_title(title or f"ICR and probe accuracy ({rows[0].get('feature_layer')})")
    fig.tight_layout()
    out = _save(fig, path)
    plt.close(fig)
    return out


def plot_training(records: list[dict], path: Path, quality_path: Path | None = None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r for r in records if r.get("kind") == "step" and "train_size" in r]
    res = {r["train_size"]: r for r in records if r.get("kind") == "result"}
    sizes = sorted({r["train_size"] for r in steps})
    if not sizes:
        raise InputError("the run has no monitor (step) records to plot")
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(6.4, 5.6), sharex=True)
    for k, n in enumerate(sizes):
        rs = [r for r in steps if r["train_size"] == n]
        s = [r["step"] for r in rs]
        c = f"C{k}"
        a1.plot(s, [r["icr"] for r in rs], "o-", ms=3, color=c, label=f"N = {n}")
        a2.plot(s, [r["memorization_fraction"] for r in rs], "o-", ms=3, color=c, label=f"N = {n}")
        rr = res.get(n, {})
        if rr.get("icr_min_step"):
            a1.axvline(rr["icr_min_step"], color=c, ls="--", lw=0.8)
            a2.axvline(rr["icr_min_step"], color=c, ls="--", lw=0.8)
        if rr.get("memorization_onset_step"):
            a2.axvline(rr["memorization_onset_step"], color=c, ls=":", lw=1.0)
    a1.set_ylabel("ICR at sigma*")
    a2.set_ylabel("memorized fraction (NN ratio < 1/3)")
    a2.set_xlabel("training step")
    a1.legend(fontsize=8)
    a1.set_title("ICR monitor and memorization (dashed: ICR minimum, dotted: onset)")
    fig.tight_layout()
    out = [_save(fig, path)]
    plt.close(fig)
    if quality_path is not None and any(r.get("frechet_distance") is not None for r in steps):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for k, n in enumerate(sizes):
            rs = [r for r in steps if r["train_size"] == n and r.get("frechet_distance") is not None]
            ax.plot(
                [r["icr"] for r in rs], [r["frechet_distance"] for r in rs], "o-", ms=3, color=f"C{k}", label=f"N = {n}"
            )
        ax.set_xlabel("ICR at sigma*")
        ax.set_ylabel("Frechet distance (classifier trained here)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        out.append(_save(fig, quality_path))
        plt.close(fig)
    return out


def plot_seeds(groups: dict[str, dict[int, list[dict]]], path: Path) -> Path:
    """icr_seeds.png: one column per group (e.g. "Fashion-MNIST, N = 32"), ICR (top) and memorized fraction
    (bottom) against the step, one line per seed, each seed's ICR-minimum step (dashed) and onset (dotted)
    marked. ``groups``: label -> {seed: the records of that seed's ``icr train`` run (one training size)}.
    InputError when no group has monitor points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {g: runs for g, runs in groups.items() if any(r.get("kind") == "step" for rs in runs.values() for r in rs)}
    if not groups:
        raise InputError("no run with monitor (step) records to plot")
    fig, axes = plt.subplots(2, len(groups), figsize=(3.6 * len(groups), 5.2), sharex="col", squeeze=False)
    for c, (label, runs) in enumerate(groups.items()):
        a1, a2 = axes[0][c], axes[1][c]
        for k, (seed, recs) in enumerate(sorted(runs.items())):
            st = [r for r in recs if r.get("kind") == "step"]
            res = next((r for r in recs if r.get("kind") == "result"), {})
            col = f"C{k}"
            s = [r["step"] for r in st]
            a1.plot(s, [r["icr"] for r in st], "o-", ms=2.5, lw=1, color=col, label=f"seed {seed}")
            a2.plot(s, [r["memorization_fraction"] for r in st], "o-", ms=2.5, lw=1, color=col)
            if res.get("icr_min_step"):
                for a in (a1, a2):
                    a.axvline(res["icr_min_step"], color=col, ls="--", lw=0.8)
            if res.get("memorization_onset_step"):
                a2.axvline(res["memorization_onset_step"], color=col, ls=":", lw=1.0)
        a2.axhline(0.05, color="0.6", lw=0.6)
        a1.set_title(label, fontsize=9)
        a2.set_xlabel("training step")
        a1.legend(fontsize=7)
    axes[0][0].set_ylabel("ICR at sigma*")
    axes[1][0].set_ylabel("memorized fraction")
    fig.suptitle("ICR monitor over seeds (dashed: smoothed ICR minimum, dotted: onset > 0.05)", fontsize=10)
    fig.tight_layout()
    out = _save(fig, path)
    plt.close(fig)
    return out


def run(run_dir: str | Path, *, out: str | Path | None = None) -> Iterator[dict]:
    """Yield one ``result`` per PNG written, then the summary."""
    cmd, records = read_run(run_dir)
    dest = Path(out) if out is not None else Path(run_dir)
    if cmd == "icr analyze":
        files = [plot_sweep(records, dest / "icr_sweep.png")]
    else:
        files = plot_training(records, dest / "icr_training.png", dest / "icr_quality.png")
    for f in files:
        yield {"kind": "result", "plot": str(f), "run": str(run_dir), "command": cmd, "bytes": f.stat().st_size}
    yield {"kind": "summary", "plots": len(files), "run": str(run_dir)}
