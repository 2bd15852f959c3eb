"""Reports of ``icml26 bai``: the summary record (per setting, the algorithm with the lowest error
probability whose Wilson interval separates it, or the ties; with --delta, the ones whose error
rate is below delta) and the error-vs-budget figure."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from icml26.core.output import atomic_path

if TYPE_CHECKING:  # pragma: no cover
    from icml26.methods.exploration.bai import Config


def below_delta(ci: list[float], delta: float) -> bool | None:
    """Whether a run's error probability is below ``delta``, decided on its Wilson 95% interval
    ``ci = [lo, hi]`` of the empirical error rate: True when ``hi <= delta`` (below delta at 95%
    confidence), False when ``lo > delta`` (above it), None when the interval spans delta (too few
    seeds to tell; e.g. 1 error in 10 seeds is 0.1 [0.018, 0.404]: None at delta 0.1 or 0.2)."""
    lo, hi = float(ci[0]), float(ci[1])
    if hi <= delta:
        return True
    if lo > delta:
        return False
    return None


def summarize(results: list[dict], cfg: Config) -> dict:
    """Best algorithm: fixed budget -> the leader (lowest mean error probability over settings,
    ties: lower simple regret), named ``best_algo`` only when no other algorithm's Wilson
    interval overlaps its own in every setting (else None; ``tied_with_best`` lists them); fixed confidence -> lowest
    mean stopping time among the
    algorithms whose error rate is below delta (``error_below_delta`` True: the upper end of
    its 95% interval at most delta) and that stopped in every run, in every setting; None when
    no algorithm qualifies (``delta_undetermined`` lists those whose interval spans delta). With a
    single algorithm ``best_algo`` is None (nothing to compare; ``leader`` still names it)."""
    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(r["algo"], []).append(r)
    summary: dict = {
        "kind": "summary",
        "setting": cfg.setting,
        "env": results[0]["env"] if results else None,
        "seeds": cfg.seeds,
    }
    if cfg.setting == "budget":
        score = {
            a: (float(np.mean([r["error_probability"] for r in rs])), float(np.mean([r["simple_regret"] for r in rs])))
            for a, rs in by.items()
        }
        best = min(score, key=lambda a: score[a])
        # algorithms statistically tied with the leader (Wilson intervals overlap in every setting)
        tied = []
        for a, rs in by.items():
            if all(r["error_probability_ci"][0] <= b["error_probability_ci"][1] for r, b in zip(rs, by[best])):
                tied.append(a)
        summary["leader"] = best  # the lowest mean error probability (ties: lower simple regret)
        # named only when its intervals separate it from another algorithm's (one algorithm: nothing to compare)
        summary["best_algo"] = best if tied == [best] and len(by) > 1 else None
        summary["error_probability"] = score[best][0]
        summary["tied_with_best"] = tied
        if "varde" in by:  # 1 + number of algorithms strictly better (ties share a rank)
            summary["varde_rank"] = 1 + sum(1 for a in score if score[a][0] < score["varde"][0])
    else:
        ok = {
            a: rs
            for a, rs in by.items()
            if all(r["error_below_delta"] is True and r.get("stopped_fraction", 1.0) == 1.0 for r in rs)
        }
        score = {a: float(np.mean([r["stopping_time_mean"] for r in rs])) for a, rs in ok.items()}
        best = min(score, key=lambda a: score[a]) if score else None
        # None: no algorithm stopped in every run with error shown below delta, or one algorithm (nothing to compare)
        summary["best_algo"] = best if len(by) > 1 else None
        summary["leader"] = best
        summary["stopping_time_mean"] = score[best] if best else None
        summary["delta_respected_by"] = sorted(ok)
        # not shown above delta, but not shown below it either (more seeds would tell)
        summary["delta_undetermined"] = sorted(
            a
            for a, rs in by.items()
            if any(r["error_below_delta"] is None for r in rs) and not any(r["error_below_delta"] is False for r in rs)
        )
    return summary


def plot(records: list[dict], out_dir: Path) -> None:
    """error_probability vs budget (fixed budget) or stopping time per algo (fixed confidence) -> PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = [r for r in records if r.get("kind") == "result"]
    if not res:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    algos = list(dict.fromkeys(r["algo"] for r in res))
    if "budget" in res[0]:
        for a in algos:
            rs = sorted((r for r in res if r["algo"] == a), key=lambda r: r["budget"])
            x = [r["budget"] for r in rs]
            y = [r["error_probability"] for r in rs]
            lo = [r["error_probability_ci"][0] for r in rs]
            hi = [r["error_probability_ci"][1] for r in rs]
            ax.plot(x, y, marker="o", lw=2.5 if a == "varde" else 1.2, label=a)
            ax.fill_between(x, lo, hi, alpha=0.15)
        ax.set_xlabel("budget (pulls)")
        ax.set_ylabel("error probability")
        ax.set_yscale("log")
    else:
        rs = [r for r in res if r["delta"] == res[0]["delta"]]
        ax.bar(
            [r["algo"] for r in rs],
            [r["stopping_time_mean"] for r in rs],
            color=["C3" if r["algo"] == "varde" else "C0" for r in rs],
        )
        ax.set_ylabel(f"mean stopping time (delta = {res[0]['delta']})")
        ax.tick_params(axis="x", rotation=30)
    ax.set_title(f"icml26 bai: {res[0]['env']} ({res[0]['seeds']} runs)")
    if "budget" in res[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out_dir / "bai.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
