"""Offline-RL datasets in the D4RL / Minari field layout (hdf5 via h5py): writer, reader, rollouts.

Layout (D4RL, Fu et al. 2020, arXiv 2004.07219; the ``get_dataset`` fields): one hdf5 file with
top-level datasets ``observations`` (N, obs_dim), ``actions`` (N, act_dim), ``rewards`` (N,),
``terminals`` (N,) bool (true terminations), optionally ``timeouts`` (N,) bool (time-limit cuts;
optional as in d4rl.qlearning_dataset) and ``next_observations`` (N, obs_dim); other groups
(``infos/``, ``metadata/``) are ignored; string attributes (env id, how it was made). Rows are
stored trajectory by trajectory. Floats are read as float32. ``icml26 bfq`` reads them
(offline_data.load draws the episode boundaries).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from icml26.core.errors import InputError
from icml26.core.output import atomic_path
from icml26.methods.rl.envs import SeededEnv

REQUIRED = ("observations", "actions", "rewards", "terminals")
OPTIONAL = ("timeouts", "next_observations")
FLOATS = ("observations", "actions", "rewards", "next_observations")


def _h5py():
    try:
        import h5py
    except ImportError:
        raise InputError("reading/writing D4RL hdf5 needs h5py: pip install 'h5py>=3.8'") from None
    return h5py


def check(data: dict[str, np.ndarray], where: str = "dataset", *, finite: bool = True) -> dict[str, np.ndarray]:
    """Validate and normalise the fields (float32 values, bool flags). InputError naming the field
    for a missing key, mismatched lengths, a wrong rank or non-number values; with ``finite``,
    naming the first row holding a NaN or infinite value."""
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise InputError(f"{where}: missing field {missing[0]!r} (a D4RL dataset has {', '.join(REQUIRED)})")
    out = {}
    n = len(np.asarray(data["rewards"]))
    for k in REQUIRED + tuple(x for x in OPTIONAL if x in data):
        v = np.asarray(data[k])
        if len(v) != n:
            raise InputError(f"{where}: field {k!r} has {len(v)} rows but rewards has {n}")
        want = 2 if k in ("observations", "actions", "next_observations") else 1
        if v.ndim != want:
            raise InputError(f"{where}: field {k!r} must be {want}-D, got shape {v.shape}")
        if v.dtype.kind not in "biuf":
            raise InputError(f"{where}: field {k!r} holds {v.dtype} values; numbers are expected")
        if k in ("terminals", "timeouts"):
            if v.dtype.kind == "f" and not np.isin(v, (0.0, 1.0)).all():
                raise InputError(f"{where}: field {k!r} holds values other than 0 and 1 (flags are expected)")
            out[k] = v.astype(bool)
        else:
            out[k] = v.astype(np.float32)
    if out["observations"].shape[1:] != out.get("next_observations", out["observations"]).shape[1:]:
        raise InputError(f"{where}: next_observations and observations differ in width")
    if finite:
        bad = nonfinite_rows(out)
        if len(bad):
            raise InputError(f"{where}: {describe_nonfinite(out, bad)}")
    return out


def nonfinite_rows(data: dict[str, np.ndarray]) -> np.ndarray:
    """Indices of the rows holding a NaN or infinite value in any float field."""
    bad = np.zeros(len(data["rewards"]), bool)
    for k in FLOATS:
        if k in data:
            v = data[k]
            bad |= ~np.isfinite(v).all(1) if v.ndim == 2 else ~np.isfinite(v)
    return np.flatnonzero(bad)


def describe_nonfinite(data: dict[str, np.ndarray], bad: np.ndarray) -> str:
    """'row 3 holds NaN in 'rewards' (1 row in all)' for the first of ``bad``."""
    i = int(bad[0])
    for k in FLOATS:
        if k in data and not np.isfinite(data[k][i]).all():
            v = np.asarray(data[k][i]).ravel()
            x = v[~np.isfinite(v)][0]
            what = "NaN" if np.isnan(x) else ("inf" if x > 0 else "-inf")
            return f"row {i} holds {what} in {k!r} ({len(bad)} row{'s' if len(bad) > 1 else ''} with NaN or inf in all)"
    return f"row {i} holds NaN or inf"


def write(path: str | Path, data: dict[str, np.ndarray], attrs: dict | None = None) -> Path:
    """Write ``data`` (the fields above, ``timeouts`` included: files written here carry both flags)
    to ``path`` atomically; returns the path."""
    h5py = _h5py()
    if "timeouts" not in data:
        raise InputError(f"{path}: missing field 'timeouts' (files written here carry terminals and timeouts)")
    d = check(data, where=str(path))
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        for k, v in d.items():
            f.create_dataset(k, data=v, compression="gzip", compression_opts=4)
        for k, v in (attrs or {}).items():
            f.attrs[k] = v if isinstance(v, (int, float, np.integer, np.floating)) else str(v)
    return Path(path)


def read(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """(fields, attributes) of a D4RL-layout hdf5 file (ours or D4RL's own). InputError for a
    missing or unreadable file and the checks of ``check`` (non-finite values are left to the caller)."""
    h5py = _h5py()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"dataset {str(path)!r} does not exist or is not a file")
    try:
        with h5py.File(p, "r") as f:
            data = {k: f[k][()] for k in REQUIRED + OPTIONAL if k in f and isinstance(f[k], h5py.Dataset)}
            attrs = {
                k: (v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v)
                for k, v in f.attrs.items()
            }
    except OSError as e:
        raise InputError(
            f"dataset {str(path)!r} is not a readable hdf5 file ({' '.join(str(e).split())[:120]})"
        ) from None
    return check(data, where=str(path), finite=False), attrs


def episodes(data: dict[str, np.ndarray]) -> list[slice]:
    """The trajectory slices of a dataset: runs ending at a terminal or a timeout (a last run
    without either is included)."""
    flags = data["terminals"] | data["timeouts"] if "timeouts" in data else data["terminals"]
    ends = np.flatnonzero(flags)
    out, start = [], 0
    for e in ends:
        out.append(slice(start, int(e) + 1))
        start = int(e) + 1
    if start < len(data["rewards"]):
        out.append(slice(start, len(data["rewards"])))
    return out


def rollout(
    learner, env_id: str, seed_index: int, steps: int, *, seed: int, device: str = "cpu", deterministic: bool = False
) -> dict[str, np.ndarray]:
    """``steps`` transitions of seed ``seed_index``'s policy in a fresh ``env_id`` (sampled actions,
    as D4RL's policy datasets; ``deterministic``: tanh(mean)), in the fields above."""
    env = SeededEnv(env_id, seed)
    S = learner.spec.seeds
    rows = {k: [] for k in ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")}
    try:
        obs, _ = env.reset()
        for t in range(steps):
            x = torch.zeros(S, 1, obs.shape[0], device=device)
            x[seed_index, 0] = torch.as_tensor(obs, device=device)
            with torch.no_grad():
                a = learner.policy(x, deterministic=deterministic)[0][seed_index, 0].cpu().numpy()
            o2, r, term, trunc, _ = env.step(a)
            last = t == steps - 1
            for k, v in zip(rows, (obs, a, r, o2, term, (trunc or last) and not term)):
                rows[k].append(v)
            obs = env.reset()[0] if (term or trunc) else o2
    finally:
        env.close()
    return {k: np.asarray(v) for k, v in rows.items()}
