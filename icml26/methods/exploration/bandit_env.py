"""Bandit environment files (a public contract of ``icml26 bai``).

```yaml
name: my-bandit
arms:
  - {dist: bernoulli, p: 0.5}
  - {dist: gaussian, mean: 0.45, std: 2.0}
  - {dist: student_t, mean: 0.4, scale: 1.0, df: 3}
  - {dist: lognormal, mean: 0.3, sigma: 1.2}      # mean is the arm's mean reward
  - {dist: empirical, file: counts.csv, column: det_07}   # resamples recorded values
  - {dist: empirical, file: counts.csv, column: det_08, missing: drop}  # blank cells dropped
```
Each arm may carry a ``label``. ``file`` paths are relative to the YAML file; CSV files
need a header row; values are read with pandas (``.csv``, ``.parquet``). Every cell of an
empirical column must be a finite number: a non-numeric cell is an error naming the file,
column and row, and so is a missing one (blank, ``NA``, ``nan``, a blank line) unless the arm
says ``missing: drop`` (default ``missing: error``); ``ArmTable.dropped`` counts the cells
dropped per arm. Any problem raises :class:`~icml26.core.errors.InputError` naming the arm
and field.

The arrays of :class:`ArmTable` are what the kernels consume (see
``icml26/csrc/cpu/bandit_sampler.h`` for the kind codes and parameter meaning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icml26.core.errors import InputError
from icml26.core.recipe import read_yaml

KINDS = {"bernoulli": 0, "gaussian": 1, "student_t": 2, "lognormal": 3, "empirical": 4}
# dist -> (required fields, optional fields)
FIELDS = {
    "bernoulli": (("p",), ()),
    "gaussian": (("mean", "std"), ()),
    "student_t": (("mean", "scale", "df"), ()),
    "lognormal": (("mean", "sigma"), ()),
    "empirical": (("file", "column"), ("missing",)),
}
MISSING = ("error", "drop")  # empirical arms: what a missing cell does


@dataclass(frozen=True)
class ArmTable:
    """A bandit instance as flat arrays.

    kind: (K,) int32 codes; params: (K, 3) float64; emp_values: (M,) float64 and
    emp_offsets: (K+1,) int64 (empirical arm k resamples emp_values[off[k]:off[k+1]]);
    means: (K,) true mean rewards; variances: (K,) true reward variances (inf if undefined);
    dropped: (K,) missing cells dropped from each empirical arm's column (``missing: drop``;
    0 for the other arms; empty for a table built by hand); reward_range: the env file's
    declared (lo, hi) scale of the rewards (key ``reward_range``), None when not declared."""

    name: str
    labels: tuple[str, ...]
    kind: np.ndarray
    params: np.ndarray
    emp_values: np.ndarray
    emp_offsets: np.ndarray
    means: np.ndarray
    variances: np.ndarray
    specs: tuple[dict, ...] = field(default=(), compare=False)
    dropped: tuple[int, ...] = field(default=(), compare=False)
    reward_range: tuple[float, float] | None = field(default=None, compare=False)

    @property
    def K(self) -> int:
        return int(self.kind.shape[0])

    @property
    def best_arms(self) -> np.ndarray:
        """Indices of the arms whose mean equals the maximum (ties: all of them)."""
        m = self.means
        return np.flatnonzero(m >= m.max() - 1e-12 * max(1.0, abs(m.max())))

    def gaps(self) -> np.ndarray:
        return self.means.max() - self.means

    def complexity_h1(self) -> float:
        """H1 = sum over suboptimal arms of 1/gap^2 (Audibert, Bubeck & Munos 2010)."""
        g = self.gaps()
        g = g[g > 1e-12]
        return float(np.sum(1.0 / g**2)) if g.size else 0.0


def _num(arm_no: int, label: str, key: str, value, *, positive=False, unit=False, source: str = "") -> float:
    where = f"{source + ': ' if source else ''}arm {arm_no}{f' ({label})' if label else ''}: field '{key}'"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where} must be a number, got {value!r}")
    try:
        v = float(value)
    except OverflowError:  # an integer beyond float range
        v = math.inf
    if not math.isfinite(v) or abs(v) > 1e150:  # variances (squares) and sums must stay finite
        raise InputError(f"{where} must be finite and at most 1e150 in magnitude, got {value!r}")
    if positive and v <= 0:
        raise InputError(f"{where} must be > 0, got {value!r}")
    if unit and not 0.0 <= v <= 1.0:
        raise InputError(f"{where} must be in [0, 1], got {value!r}")
    return v


def _cell_float(x) -> float:
    """One cell as a float, NaN when it is not a plain number."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating, str)):
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _read_column(path: Path, column: str, where: str, missing: str = "error") -> tuple[np.ndarray, int]:
    """The values of ``column`` in a CSV / parquet file -> ((n,) float64, cells dropped).

    Every cell must be a finite number of magnitude at most 1e150 (variances stay finite).
    A missing cell (blank, a pandas NA string such as ``NA`` / ``nan``, a blank line of a CSV)
    is dropped when ``missing == "drop"`` and counted; otherwise, like a non-numeric cell, it
    raises InputError naming the file, column and row (data rows counted from 1 after the
    header; a CSV's line number too)."""
    import pandas as pd

    if path.is_dir():
        raise InputError(f"{where}: field 'file': {str(path)!r} is a directory, not a CSV or parquet file")
    if not path.is_file():
        raise InputError(f"{where}: field 'file': {str(path)!r} does not exist")
    csv = path.suffix != ".parquet"
    try:
        # blank lines are rows (a missing cell), not skipped: nothing is dropped unasked
        df = pd.read_csv(path, skip_blank_lines=False) if csv else pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - any parse failure is the user's file
        raise InputError(f"{where}: field 'file': cannot read {str(path)!r} ({type(e).__name__})") from None
    if column not in df.columns:
        cols = ", ".join(map(str, list(df.columns)[:12]))
        raise InputError(f"{where}: field 'column': {column!r} not in {path.name} (columns: {cols})")
    cells = df[column]
    if isinstance(cells, pd.DataFrame):  # a repeated header name (parquet; pandas renames CSV repeats)
        raise InputError(f"{where}: field 'column': {column!r} appears more than once in {path.name}")
    absent = cells.isna().to_numpy()
    v = np.full(len(cells), np.nan)
    if not (cells.dtype.kind in "bmMc" or str(cells.dtype) == "boolean"):  # true/false, dates, durations: not rewards
        try:
            v = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError):  # e.g. a categorical or nested parquet column
            v = np.array([_cell_float(x) for x in cells], dtype=np.float64)
    bad = ~absent & ~(np.isfinite(v) & (np.abs(v) <= 1e150))
    if missing != "drop":
        bad |= absent

    def at(i: int) -> str:
        return f"row {i + 1}" + (f" (line {i + 2})" if csv else "")

    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        n_bad = int(bad.sum())
        more = f"; {n_bad - 1} more such cell{'s' if n_bad > 2 else ''}" if n_bad > 1 else ""
        if absent[i]:
            raise InputError(
                f"{where}: field 'column': {str(path)!r} column {column!r} {at(i)} is missing{more}; "
                "fix the file, or give the arm 'missing: drop' to drop missing cells"
            )
        raw = cells.iloc[i]
        shown = repr(raw) if isinstance(raw, str) else str(raw)
        raise InputError(
            f"{where}: field 'column': {str(path)!r} column {column!r} {at(i)} is {shown}, "
            f"not a finite number (at most 1e150 in magnitude){more}"
        )
    v = v[~absent]
    if v.size == 0:
        raise InputError(f"{where}: field 'column': {column!r} in {path.name} has no numeric values")
    return v, int(absent.sum())


def parse_env(data: object, base_dir: Path, source: str = "env") -> ArmTable:
    """Validate a parsed env mapping and build the ArmTable. Raises InputError."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping with 'name' and 'arms'")
    unknown = sorted(
        set(data) - {"name", "arms", "description", "reward_range"}, key=str
    )  # keys of mixed types (1, "a")
    if unknown:
        hint = " (this looks like a recipe: use -r/--recipe)" if "config" in data else ""
        raise InputError(
            f"{source}: unknown key {unknown[0]!r}; valid keys: arms, description, name, reward_range{hint}"
        )
    reward_range = parse_reward_range(data.get("reward_range"), f"{source}: key 'reward_range'")
    arms = data.get("arms")
    if not isinstance(arms, list):
        raise InputError(f"{source}: 'arms' must be a list of arm mappings")
    if len(arms) < 2:
        raise InputError(f"{source}: 'arms' needs at least 2 arms, got {len(arms)}")
    name = str(data.get("name") or Path(source).stem)
    kinds, params, means, variances, labels, emp, offs, dropped = [], [], [], [], [], [], [0], []
    for i, arm in enumerate(arms):
        if not isinstance(arm, dict):
            raise InputError(f"{source}: arm {i} must be a mapping like {{dist: gaussian, mean: 0.5, std: 1}}")
        label = str(arm.get("label", "")) if arm.get("label") is not None else ""
        shown = label if label.isprintable() else repr(label)  # a message stays one line
        where = f"{source}: arm {i}{f' ({shown})' if label else ''}"
        dist = arm.get("dist")
        if not isinstance(dist, str) or dist not in KINDS:  # a list or mapping is unhashable
            raise InputError(f"{where}: field 'dist' must be one of {', '.join(KINDS)}, got {dist!r}")
        req, opt = FIELDS[dist]
        for k in arm:
            if k not in ("dist", "label", *req, *opt):
                raise InputError(
                    f"{where}: unknown field {k!r} for dist {dist}; valid: {', '.join(('label', *req, *opt))}"
                )
        for k in req:
            if k not in arm:
                raise InputError(f"{where}: missing field {k!r} (dist {dist} needs {', '.join(req)})")
        p = [0.0, 0.0, 0.0]
        n = lambda k, **kw: _num(i, shown, k, arm[k], source=source, **kw)  # noqa: E731
        if dist == "bernoulli":
            p[0] = n("p", unit=True)
            mean, var = p[0], p[0] * (1 - p[0])
        elif dist == "gaussian":
            p[0], p[1] = n("mean"), n("std", positive=True)
            mean, var = p[0], p[1] ** 2
        elif dist == "student_t":
            p[0], p[1], p[2] = n("mean"), n("scale", positive=True), n("df", positive=True)
            if p[2] <= 1.0:
                raise InputError(f"{where}: field 'df' must be > 1 so that the mean exists, got {arm['df']!r}")
            mean, var = p[0], (p[1] ** 2 * p[2] / (p[2] - 2.0) if p[2] > 2.0 else math.inf)
        elif dist == "lognormal":
            p[0], p[1] = n("mean", positive=True), n("sigma", positive=True)
            if p[1] ** 2 > 700.0:  # exp(sigma^2) beyond float range
                raise InputError(
                    f"{where}: field 'sigma' must be at most 26 (the variance mean^2 (exp(sigma^2) - 1) "
                    f"overflows beyond), got {arm['sigma']!r}"
                )
            mean, var = p[0], p[0] ** 2 * (math.exp(p[1] ** 2) - 1.0)
        else:  # empirical
            f, col = arm["file"], arm["column"]
            if not isinstance(f, str) or not f:
                raise InputError(f"{where}: field 'file' must be a path string")
            missing = arm.get("missing", "error")
            if not isinstance(missing, str) or missing not in MISSING:
                raise InputError(f"{where}: field 'missing' must be one of {', '.join(MISSING)}, got {missing!r}")
            vals, n_dropped = _read_column((base_dir / f), str(col), where, missing)
            emp.append(vals)
            dropped.append(n_dropped)
            mean, var = float(vals.mean()), float(vals.var())
        if dist != "empirical":
            emp.append(np.zeros(0))
            dropped.append(0)
        offs.append(offs[-1] + emp[-1].size)
        kinds.append(KINDS[dist])
        params.append(p)
        means.append(mean)
        variances.append(var)
        labels.append(label or f"arm{i}")
    return ArmTable(
        name=name,
        labels=tuple(labels),
        kind=np.asarray(kinds, dtype=np.int32),
        params=np.asarray(params, dtype=np.float64).reshape(-1, 3),
        emp_values=np.concatenate(emp).astype(np.float64) if emp else np.zeros(0),
        emp_offsets=np.asarray(offs, dtype=np.int64),
        means=np.asarray(means, dtype=np.float64),
        variances=np.asarray(variances, dtype=np.float64),
        specs=tuple(dict(a) for a in arms),
        dropped=tuple(dropped),
        reward_range=reward_range,
    )


def parse_reward_range(value, where: str = "reward_range") -> tuple[float, float] | None:
    """None, or [lo, hi] (two finite numbers, lo < hi) -> (lo, hi); InputError otherwise.
    The declared scale of the rewards (bai: every scale parameter is in units of hi - lo)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__") or len(value) != 2:
        raise InputError(f"{where} must be [lo, hi] (two numbers), got {value!r}"[:300])
    out = []
    for v in value:
        try:
            f = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan
        except OverflowError:  # an integer beyond float range
            f = math.inf
        if not (math.isfinite(f) and abs(f) <= 1e150):
            raise InputError(
                f"{where} must be [lo, hi] with finite numbers (at most 1e150 in magnitude), got {list(value)!r}"[:300]
            )
        out.append(f)
    if not out[0] < out[1]:
        raise InputError(f"{where} must be [lo, hi] with lo < hi, got {list(value)!r}")
    return (out[0], out[1])


def load_env(path: str | Path) -> ArmTable:
    """Read and validate a bandit YAML file (yaml.safe_load)."""
    p = Path(path)
    return parse_env(read_yaml(p, "env file"), p.parent, source=str(path))


def make_env(name: str, arms: list[dict]) -> ArmTable:
    """Build an ArmTable from in-memory arm specs (as in the YAML)."""
    return parse_env({"name": name, "arms": arms}, Path("."), source=name)
