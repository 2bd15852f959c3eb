"""Checkpoints of ``icml26 dsac-aid`` for ``--resume``: one safetensors file per method with
everything the continuation depends on, tagged with the settings it was written for (``_meta``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from icml26.core.errors import InputError
from icml26.methods.rl.dsac_config import LEGACY, Config


def _meta(cfg: Config, algo: str, seed: int) -> str:
    from icml26.core.recipe import config_dict

    c = config_dict(cfg)
    if c.get("reward_noise_from") is None:  # unset: the meta of checkpoints written before the setting existed
        c.pop("reward_noise_from", None)
    for k, v in LEGACY.items():  # at the value runs had before the setting existed: the meta they wrote
        if k in c and c[k] == v:
            c.pop(k)
    return json.dumps({"config": c, "algo": algo, "seed": seed}, sort_keys=True)


def save_checkpoint(path: Path, learner, buffer, venv, loop: dict, meta: str) -> None:
    """Everything the continuation depends on, in one safetensors file (atomic): weights and
    their targets, Adam states, EMAs, beta, the torch RNG, the replay buffer, each environment's
    (episode, actions since reset) for replay, the loop counters and the evaluation history."""
    import torch
    from safetensors.torch import save_file

    from icml26.core.output import atomic_path

    t = learner.state_tensors()
    t.update(buffer.state_tensors())
    for i, (ep, acts) in enumerate(venv.call("get_replay")):
        t[f"env.{i}.episode"] = torch.tensor([ep], dtype=torch.int64)
        t[f"env.{i}.actions"] = torch.as_tensor(np.ascontiguousarray(acts), dtype=torch.float32).reshape(
            -1, learner.spec.act_dim
        )
    t["loop.counters"] = torch.tensor(
        [loop["step"], loop["updates"], loop["next_eval"], loop["next_ckpt"]], dtype=torch.int64
    )
    t["loop.times"] = torch.tensor(
        [loop["wall_s"], loop["interval_update_s"], loop["interval_updates"]], dtype=torch.float64
    )
    t["loop.evals"] = torch.as_tensor(np.asarray(loop["evals"], dtype=np.float64).reshape(-1, learner.spec.seeds + 1))
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in t.items()}, str(tmp), metadata={"icml26": meta})


def load_checkpoint(path: Path, meta: str) -> dict:
    """The tensors of a checkpoint written by ``save_checkpoint`` for the same settings
    (InputError naming the file otherwise)."""
    from icml26.core import safetensors_file

    t, md = safetensors_file.read(path, fix="delete it to start this method over")
    if md.get("icml26") != meta:
        raise InputError(
            f"--resume: {str(path)!r} was written with other settings; resume with the same settings or delete it"
        )
    return t
