"""Bandit instances whose arms resample real recorded traffic counts.

Each arm is one detector (one approach lane) of a signalised intersection; a pull draws a
recorded 15-minute count of that lane uniformly at random (in hundreds of vehicles). The
best arm is the busiest lane. Counts follow the daily cycle, so every arm is highly
stochastic and bimodal (coefficient of variation 0.7-0.9): a real heteroscedastic BAI
problem. Source data: PyPI ``traffic-anomaly`` ``sample_counts`` (22 detectors, 2,492
intervals each), read through :mod:`icml26.core.data.sensor_series`.
"""

from __future__ import annotations

from pathlib import Path

from icml26.core.data import cache_root
from icml26.core.data.sensor_series import counts_wide
from icml26.core.errors import InputError
from icml26.core.output import atomic_write_text

INSTANCES = {
    # name: (description, number of arms, rank of the first arm by mean)
    "traffic-top5": ("the 5 busiest lanes", 5, 0),
    "traffic-mid5": ("5 lanes with close mean counts (ranks 3-7)", 5, 2),
}


def prepare_traffic_bandit(out: str | Path, *, counts: str | Path | None = None, force: bool = False) -> list[Path]:
    """Write ``counts.csv`` and one env YAML per instance into ``out``; return the paths.

    Raises InputError if files exist (unless force) or MissingDataError without the package."""
    import yaml

    out = Path(out)
    targets = [out / "counts.csv"] + [out / f"{n}.yaml" for n in INSTANCES]
    if not force:
        for t in targets:
            if t.exists():
                raise InputError(f"{t} already exists; pass --force to overwrite or choose another --out")
    wide = counts_wide(counts)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {str(out)!r}: cannot create the directory ({e.strerror})") from None
    order = wide.mean().sort_values(ascending=False)
    atomic_write_text(out / "counts.csv", wide.to_csv(index_label="timestamp", float_format="%.2f"))
    for name, (desc, k, start) in INSTANCES.items():
        cols = list(order.index[start : start + k])
        env = {
            "name": name,
            "description": f"Real traffic counts (hundreds of vehicles / 15 min), {desc}; "
            f"source: PyPI traffic-anomaly sample_counts. Best arm: {cols[0]}.",
            "arms": [{"dist": "empirical", "file": "counts.csv", "column": c, "label": c} for c in cols],
        }
        atomic_write_text(out / f"{name}.yaml", yaml.safe_dump(env, sort_keys=False, width=200))
    return targets


def builtin_traffic_env(name: str) -> Path:
    """Path of a prepared traffic env in the cache (prepared on first use)."""
    if name not in INSTANCES:
        raise InputError(f"unknown traffic instance {name!r}; built-ins: {', '.join(INSTANCES)}")
    d = cache_root() / "bandits" / "traffic"
    if not (d / f"{name}.yaml").exists():
        prepare_traffic_bandit(d, force=True)
    return d / f"{name}.yaml"
