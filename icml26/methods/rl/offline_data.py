"""Offline-RL datasets for ``icml26 bfq``: readers (D4RL hdf5, Minari folder), episode boundaries, the
training view (``Dataset``) and the normalised-score references. Nothing is downloaded.

Readers: a D4RL-layout hdf5 file (``d4rl.read``; D4RL's own files, user-made ones, make-dataset's)
and a Minari 0.5 folder (``data/main_data.hdf5``, one ``episode_<i>`` group per episode with T + 1
observations for T steps, ``data/metadata.json`` naming the environment).

Episodes (``transitions``) are cut before anything is dropped, as d4rl.qlearning_dataset does:
at ``terminals`` and ``timeouts``; a file without ``timeouts`` is cut where ``next_observations``
does not continue into the next row, or, without those, every ``max_episode_steps`` steps since
the last cut (qlearning_dataset's rule). Missing next_observations are rebuilt from the next row
of the same episode; the last row of an episode that did not terminate is then dropped (its
successor is unknown), its boundary kept. A row holding NaN / inf is refused by its index, or
dropped and counted with ``drop_nonfinite``. ``Dataset.info`` / the ``data`` record say what was
read (transitions, episodes, how the boundaries were found, episode returns, rows dropped).

Score references (D4RL infos.py REF_MIN_SCORE / REF_MAX_SCORE, the same for every v2 dataset of a
family): hopper -20.272305 / 3234.3, halfcheetah -280.178953 / 12135.0, walker2d 1.629008 /
4592.3. A dataset made here carries its own (``score_reference: dataset``), which wins.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from icml26.core.errors import InputError
from icml26.methods.rl import d4rl
from icml26.methods.rl.offline_config import KINDS

D4RL_REF = {"hopper": (-20.272305, 3234.3), "halfcheetah": (-280.178953, 12135.0), "walker2d": (1.629008, 4592.3)}


def family(env_id: str | None) -> str | None:
    """D4RL task family of a gymnasium id ('Hopper-v5' -> 'hopper') or a D4RL name; None if none."""
    if not env_id:
        return None
    head = env_id.split("-")[0].lower()
    return head if head in D4RL_REF else None


def kind_of(attrs: dict, name: str) -> str | None:
    """The D4RL dataset kind ('medium', 'medium-replay', ...) from the file's ``kind`` attribute
    or its name (hopper-medium-replay-v2.hdf5 -> 'medium-replay'); None if neither says."""
    k = attrs.get("kind")
    if isinstance(k, str) and k in KINDS:
        return k
    stem = name.lower().replace("_", "-")
    return next((k for k in sorted(KINDS, key=len, reverse=True) if f"-{k}" in stem or stem.startswith(k)), None)


# ---------------- readers ----------------


def read_minari(folder: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """(D4RL fields, attrs) of a Minari dataset folder (layout above). InputError on a folder
    without main_data.hdf5, a non-flat observation space, or episodes of inconsistent lengths."""
    h5py = d4rl._h5py()
    p = Path(folder)
    main = next((q for q in (p / "data" / "main_data.hdf5", p / "main_data.hdf5") if q.is_file()), None)
    if main is None:
        raise InputError(f"dataset {str(folder)!r}: a folder but not a Minari dataset (no data/main_data.hdf5)")
    attrs: dict = {}
    meta_file = main.parent / "metadata.json"
    try:
        with h5py.File(main, "r") as f:
            attrs.update(
                {
                    k: (v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v)
                    for k, v in f.attrs.items()
                }
            )
            names = sorted(
                (k for k in f if k.startswith("episode_")),
                key=lambda k: int(k.split("_")[1]) if k.split("_")[1].isdigit() else -1,
            )
            if not names:
                raise InputError(f"dataset {str(folder)!r}: main_data.hdf5 holds no episode_<i> groups")
            rows = {k: [] for k in ("observations", "next_observations", "actions", "rewards", "terminals", "timeouts")}
            for name in names:
                g = f[name]
                for k in ("observations", "actions", "rewards", "terminations", "truncations"):
                    if k not in g:
                        raise InputError(
                            f"dataset {str(folder)!r}: {name} has no {k!r} (Minari episodes hold observations, "
                            "actions, rewards, terminations, truncations)"
                        )
                    if not isinstance(g[k], h5py.Dataset):
                        raise InputError(
                            f"dataset {str(folder)!r}: {name}/{k} is a group (dict spaces are not supported: "
                            "flatten the observations)"
                        )
                obs, act = g["observations"][()], g["actions"][()]
                rew, term, trunc = g["rewards"][()], g["terminations"][()], g["truncations"][()]
                T = len(act)
                if len(obs) != T + 1 or len(rew) != T or len(term) != T or len(trunc) != T:
                    raise InputError(
                        f"dataset {str(folder)!r}: {name} has {len(obs)} observations for {T} actions, "
                        f"{len(rew)} rewards "
                        f"(Minari stores T+1 observations for T steps)"
                    )
                tout = np.asarray(trunc, bool) & ~np.asarray(term, bool)
                if T and not (term[-1] or trunc[-1]):
                    tout[-1] = True  # the recorded episode is cut there
                rows["observations"].append(obs[:-1]), rows["next_observations"].append(obs[1:])
                rows["actions"].append(act), rows["rewards"].append(rew)
                rows["terminals"].append(np.asarray(term, bool)), rows["timeouts"].append(tout)
    except OSError as e:
        raise InputError(
            f"dataset {str(folder)!r}: main_data.hdf5 is not a readable hdf5 file ({' '.join(str(e).split())[:120]})"
        ) from None
    if meta_file.is_file():
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as e:
            raise InputError(f"dataset {str(folder)!r}: metadata.json is not JSON ({e})") from None
        spec = meta.get("env_spec")
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except ValueError:
                spec = None
        if isinstance(spec, dict) and spec.get("id"):
            attrs.setdefault("env", spec["id"])
        if meta.get("dataset_id"):
            attrs.setdefault("dataset_id", meta["dataset_id"])
    data = {k: np.concatenate(v) for k, v in rows.items()}
    return d4rl.check(data, where=str(folder), finite=False), attrs


def transitions(
    data: dict[str, np.ndarray], *, max_episode_steps: int = 1000, drop_nonfinite: bool = False, where: str = "dataset"
) -> tuple[dict[str, np.ndarray], dict]:
    """The training transitions of raw fields (episode boundaries first, then next_observations
    rebuilt, cut ends and, with ``drop_nonfinite``, non-finite rows dropped) and what was read:
    {transitions, episodes, boundaries, return_min / mean / max, rows_dropped_ends,
    rows_dropped_nonfinite, episode_ids (per kept row)}. InputError names a non-finite row."""
    n = len(data["rewards"])
    obs, term = data["observations"], data["terminals"]
    has_next = "next_observations" in data
    if "timeouts" in data:
        cut = data["timeouts"] & ~term
        how = "terminals and timeouts"
    elif has_next:
        cut = np.zeros(n, bool)
        with np.errstate(invalid="ignore"):
            cut[:-1] = ~(np.abs(obs[1:] - data["next_observations"][:-1]).max(1) <= 1e-6)
        cut &= ~term
        how = "terminals, and next_observations that do not continue into the next row (no timeouts)"
    else:  # d4rl.qlearning_dataset: episode_step == max_episode_steps - 1 ends an episode
        mark = np.zeros(n + 1, np.int64)
        after = np.flatnonzero(term) + 1
        mark[after] = after
        pos = np.arange(n) - np.maximum.accumulate(mark[:n])
        cut = ((pos + 1) % max_episode_steps == 0) & ~term
        how = f"terminals, and every {max_episode_steps} steps (no timeouts: d4rl.qlearning_dataset's rule)"
    ends = term | cut
    if n:
        ends[-1] = True  # the file's end closes its last run
    ep = np.concatenate([[0], np.cumsum(ends[:-1])]) if n else np.zeros(0, np.int64)
    bad_raw = d4rl.nonfinite_rows(data)
    if len(bad_raw) and not drop_nonfinite:
        raise InputError(
            f"{where}: {d4rl.describe_nonfinite(data, bad_raw)}; fix the file, or --set drop_nonfinite=true "
            "to drop such rows"
        )
    out = {k: v for k, v in data.items() if k != "timeouts"}
    keep = np.ones(n, bool)
    if not has_next:
        nxt = np.empty_like(obs)
        nxt[:-1], nxt[-1:] = obs[1:], obs[-1:]
        out["next_observations"] = nxt
        keep = ~(ends & ~term)  # an episode cut without a terminal: its last successor is unknown
    dropped_ends = int((~keep).sum())
    finite = np.ones(n, bool)
    finite[d4rl.nonfinite_rows(out)] = False
    dropped_nan = int((keep & ~finite).sum())
    keep &= finite
    out = {k: v[keep] for k, v in out.items()}
    ids = ep[keep]
    uniq, inv = np.unique(ids, return_inverse=True)
    rets = np.bincount(inv, weights=out["rewards"].astype(np.float64), minlength=len(uniq))
    info = {
        "transitions": int(keep.sum()),
        "episodes": len(uniq),
        "boundaries": how,
        "return_min": float(rets.min()) if len(rets) else None,
        "return_mean": float(rets.mean()) if len(rets) else None,
        "return_max": float(rets.max()) if len(rets) else None,
        "rows_dropped_ends": dropped_ends,
        "rows_dropped_nonfinite": dropped_nan,
        "episode_ids": inv,
    }
    return out, info


@dataclass
class Dataset:
    """The training view of a dataset: raw fields as tensors on one device, observation
    statistics, the env id it names (or None), its attributes and ``info`` (what was read:
    ``transitions``' record, plus obs_mean / obs_std, family and kind for the methods)."""

    name: str
    fields: dict
    env: str | None
    attrs: dict
    info: dict

    @property
    def size(self) -> int:
        return int(self.fields["rewards"].shape[0])

    @property
    def obs_dim(self) -> int:
        return int(self.fields["observations"].shape[1])

    @property
    def act_dim(self) -> int:
        return int(self.fields["actions"].shape[1])

    def to(self, device: str) -> Dataset:
        """The same dataset with its tensors on ``device``."""
        return dataclasses.replace(self, fields={k: v.to(device) for k, v in self.fields.items()})

    def sample(self, S: int, batch: int, gen) -> dict:
        """(S, batch, ...) per field, indices uniform with replacement, one draw per seed."""
        idx = torch.randint(0, self.size, (S, batch), generator=gen, device=gen.device)
        return {k: v[idx.to(v.device)] for k, v in self.fields.items()}

    def record(self) -> dict:
        """The ``data`` record: what was read from the file."""
        keep = ("transitions", "episodes", "boundaries", "return_min", "return_mean", "return_max")
        return {
            "kind": "data",
            "dataset": self.name,
            "env": self.env,
            "dataset_kind": self.info.get("kind"),
            **{k: self.info[k] for k in keep},
            "rows_dropped_ends": self.info["rows_dropped_ends"],
            "rows_dropped_nonfinite": self.info["rows_dropped_nonfinite"],
        }


def load(
    path: str | Path,
    *,
    device: str = "cpu",
    max_episode_steps: int = 1000,
    drop_nonfinite: bool = False,
) -> Dataset:
    """Read a D4RL hdf5 file or a Minari folder into a ``Dataset`` (InputError for a missing file,
    missing keys, a non-finite row (unless dropped), mismatched lengths, actions outside [-1, 1],
    fewer than 2 transitions)."""
    p = Path(path)
    raw, attrs = read_minari(p) if p.is_dir() else d4rl.read(p)
    data, info = transitions(raw, max_episode_steps=max_episode_steps, drop_nonfinite=drop_nonfinite, where=str(path))
    n = len(data["rewards"])
    if n < 2:
        raise InputError(f"dataset {str(path)!r}: {n} usable transitions; at least 2 are needed")
    amax = float(np.abs(data["actions"]).max())
    if amax > 1.0 + 1e-3:
        raise InputError(
            f"dataset {str(path)!r}: actions reach {amax:.4g} in magnitude; "
            "expected actions scaled to [-1, 1] (as D4RL's)"
        )
    obs = data["observations"].astype(np.float64)
    env = attrs.get("env") if isinstance(attrs.get("env"), str) else None
    info.update(
        return_range=(info["return_max"] - info["return_min"]) if info["episodes"] > 1 else 0.0,
        obs_mean=obs.mean(0).astype(np.float32),
        obs_std=(obs.std(0) + 1e-3).astype(np.float32),  # TD3+BC's normalize_states eps
        family=family(env),
        kind=kind_of(attrs, p.name),
    )
    t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32), device=device)
    fields = {
        "observations": t(data["observations"]),
        "next_observations": t(data["next_observations"]),
        "actions": t(np.clip(data["actions"], -1.0, 1.0)),
        "rewards": t(data["rewards"]),
        "terminals": t(data["terminals"]),
    }
    return Dataset(name=p.name, fields=fields, env=env, attrs=attrs, info=info)


def score_reference(data: Dataset, env_id: str | None) -> dict:
    """{score_reference: 'dataset' | 'd4rl' | None, ref_min_return, ref_max_return}."""
    a = data.attrs
    if "ref_min_return" in a and "ref_max_return" in a and float(a["ref_max_return"]) > float(a["ref_min_return"]):
        return {
            "score_reference": "dataset",
            "ref_min_return": float(a["ref_min_return"]),
            "ref_max_return": float(a["ref_max_return"]),
        }
    fam = family(env_id)
    if fam:
        lo, hi = D4RL_REF[fam]
        return {"score_reference": "d4rl", "ref_min_return": lo, "ref_max_return": hi}
    return {"score_reference": None, "ref_min_return": None, "ref_max_return": None}
