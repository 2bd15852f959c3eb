"""``icml26 bfq make-dataset``: D4RL's construction rules applied to a SAC run of dsac-aid's learner.

SAC (``algo: sac``, dsac-aid's ``sb3`` family defaults) trains with an evaluation and a policy
snapshot every ``eval_interval`` environment steps (D4RL, Fu et al. 2020, arXiv 2004.07219, Sec. 5
and appendix). ``expert`` = rollouts of the best evaluated policy (``expert_policy``: the
snapshot, or the final policy, with the highest evaluation return; D4RL's expert is the best policy
trained), made only when that return reaches ``expert_fraction`` of D4RL's expert reference for the
family (any environment without one: that policy, said in the file). ``medium`` = rollouts of the
first snapshot whose return reaches ``medium_fraction`` (1/3) of D4RL's expert reference return
(``medium_reference: d4rl``, for a D4RL family; ``final``: of the final policy's return), not made
when no snapshot reaches it.
``medium-replay`` = the replay buffer up to that snapshot; ``random`` = rollouts of the untrained
policy; ``medium-expert`` = medium then expert. Rollouts sample the stochastic policy (as D4RL's).
Each file carries its own score reference (the random policy's mean return and the expert's
evaluation return, ``expert_step`` naming its snapshot). A
stopped SAC run resumes from its checkpoint, and ``--resume`` with a larger ``sac_steps`` takes a
finished one further (``extends``); ``--from`` a run folder makes datasets from it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from icml26.core import safetensors_file
from icml26.core.errors import InputError
from icml26.core.output import atomic_path, atomic_write_text, to_json
from icml26.core.recipe import build_config, config_dict
from icml26.methods.rl import d4rl, dsac_aid
from icml26.methods.rl.envs import env_dims
from icml26.methods.rl.offline_config import KINDS, MakeConfig, sac_config  # noqa: F401  (re-exported)
from icml26.methods.rl.offline_data import D4RL_REF, family
from icml26.methods.rl.sac import Learner


def _learner(cfg, state: dict | None, device: str):

    o, a = env_dims(cfg.env)
    ln = Learner(
        dsac_aid.learner_spec(cfg, "sac" if "sac" in cfg.algo else cfg.algo[0], o, a),
        device=device,
        generator=torch.Generator().manual_seed(12345),
    )
    if state is not None:
        ln.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("model.")})
    return ln


def train_sac(mc: MakeConfig, run_dir: Path, *, seed: int, device: str) -> Iterator[dict]:
    """Run SAC with ``dsac_aid.train`` into ``run_dir`` (its checkpoint, the records, and a copy of
    the checkpoint at each evaluation under ``snapshots/``); yields dsac-aid's records. A folder
    holding a stopped run of the same settings is resumed from its checkpoint (run in parts), one
    of fewer ``sac_steps`` goes on to the new count."""
    cfg = sac_config(mc)
    o, a = dsac_aid.validate(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / dsac_aid.CHECKPOINT.format(algo="sac")
    snaps = run_dir / "snapshots"
    snaps.mkdir(exist_ok=True)
    head = json.loads(to_json({"kind": "config", "command": "dsac-aid", "seed": seed, **config_dict(cfg)}))
    rec_file = run_dir / "records.jsonl"
    previous, written_for = None, None
    if ckpt.is_file() and rec_file.is_file():
        old = [json.loads(x) for x in rec_file.read_text().splitlines() if x.strip()]
        if old and old[0] != head and extends(old[0], head):  # a larger sac_steps: the run goes on
            written_for = dataclasses.replace(cfg, steps=old[0]["steps"], buffer_size=old[0]["buffer_size"])
        elif not old or old[0] != head:
            raise InputError(
                f"--out: {str(run_dir)!r} holds a SAC run made with other settings; use another --out or delete it"
            )
        previous = old[1:]
    records, last_step = [head], None

    def write_records():  # after every evaluation: a stopped run resumes, and is usable with --from
        atomic_write_text(rec_file, "".join(to_json(r) + "\n" for r in records))

    def snapshot(step):  # the checkpoint holds ``step``'s state now; a snapshot from an earlier part is kept
        dest = snaps / f"step-{step:09d}.safetensors"
        if not dest.exists():
            _snapshot(ckpt, dest)

    for r in dsac_aid.train(
        cfg,
        "sac",
        seed=seed,
        device=device,
        obs_dim=o,
        act_dim=a,
        out=run_dir,
        resume=previous is not None,
        previous=previous,
        written_for=written_for,
    ):
        if r["kind"] == "step" and last_step is not None and r["step"] != last_step and ckpt.is_file():
            snapshot(last_step)
        if r["kind"] == "step":
            last_step = r["step"]
        records.append(r)
        if r["kind"] == "step":
            write_records()
        yield r
    snapshot(last_step)
    write_records()


def extends(old: dict, new: dict) -> bool:
    """Whether the SAC run recorded with config record ``old`` can go on as the run ``new``
    describes: the same settings but more steps, and a replay buffer that holds every transition
    of both (it never wrapped, so the continued run equals an uninterrupted one of the new steps)."""
    same = {k: v for k, v in old.items() if k not in ("steps", "buffer_size")} == {
        k: v for k, v in new.items() if k not in ("steps", "buffer_size")
    }
    return (
        same
        and isinstance(old.get("steps"), int)
        and new["steps"] > old["steps"]
        and old["buffer_size"] > old["steps"]
        and new["buffer_size"] > new["steps"]
    )


def _snapshot(ckpt: Path, dest: Path) -> None:
    """The policy and critic weights of a dsac-aid checkpoint (no buffer, no optimizer) at ``dest``."""

    t = {k: v for k, v in load_file(str(ckpt)).items() if k.startswith("model.")}
    with atomic_path(dest) as tmp:
        save_file(t, str(tmp))


def read_run(run_dir: str | Path) -> dict:
    """A dsac-aid (or make-dataset SAC) run folder: its Config, evaluation history {step: mean
    return}, the final checkpoint's tensors and the snapshots {step: path}. InputError otherwise."""

    p = Path(run_dir)
    rec = p / "records.jsonl"
    if not p.is_dir() or not rec.is_file():
        raise InputError(f"--from {str(run_dir)!r}: not an icml26 dsac-aid run folder (no records.jsonl)")
    recs = []
    for line in rec.read_text().splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            raise InputError(f"--from {str(run_dir)!r}: records.jsonl has a line that is not JSON") from None
    head = recs[0] if recs else {}
    if head.get("kind") != "config" or head.get("command") != "dsac-aid":
        raise InputError(f"--from {str(run_dir)!r}: records.jsonl is not from icml26 dsac-aid")
    fields = {f for f in dsac_aid.Config.__dataclass_fields__}
    cfg = build_config(dsac_aid.Config, {k: v for k, v in head.items() if k in fields}, source=f"{rec}")
    algo = cfg.algo[0]
    ckpts = [a for a in cfg.algo if (p / dsac_aid.CHECKPOINT.format(algo=a)).is_file()]
    if not ckpts:
        raise InputError(f"--from {str(run_dir)!r}: no checkpoint-<algo>.safetensors in the folder")
    algo = "sac" if "sac" in ckpts else ckpts[0]
    # settings the run was recorded without take the values it ran with (dsac_config.LEGACY)
    cfg = dsac_aid.resolve_family(dsac_aid.dataclasses.replace(cfg, algo=(algo,)), legacy=dsac_aid.legacy_fields(head))
    evals: dict[int, list] = {}
    for r in recs:
        if r.get("kind") == "step" and r.get("algo") == algo and r.get("eval_return") is not None:
            evals.setdefault(int(r["step"]), []).append(float(r["eval_return"]))
    if not evals:
        raise InputError(f"--from {str(run_dir)!r}: no evaluation of {algo} in records.jsonl")
    t, _ = safetensors_file.read(p / dsac_aid.CHECKPOINT.format(algo=algo), fix="re-run the SAC training")
    snaps = (
        {int(q.stem.split("-")[1]): q for q in sorted((p / "snapshots").glob("step-*.safetensors"))}
        if (p / "snapshots").is_dir()
        else {}
    )
    return {
        "config": cfg,
        "algo": algo,
        "evals": {k: float(np.mean(v)) for k, v in sorted(evals.items())},
        "final": t,
        "snapshots": snaps,
    }


def _replay_until(t: dict, step: int, seeds: int, num_envs: int) -> dict[str, np.ndarray]:
    """The first ``step`` environment steps of seed 0's replay buffer, whole trajectories per
    environment (env-major, the cut-off tails marked as timeouts), in D4RL fields."""
    size = int(t["buffer.ptr_size"][1])
    n = min(size, step)
    data = {
        k: t[f"buffer.{k}"][0, :n].numpy().astype(np.float32)
        for k in ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
    }
    order = np.concatenate([np.arange(i, n, num_envs) for i in range(num_envs)])
    data = {k: v[order] for k, v in data.items()}
    ends = np.cumsum([len(range(i, n, num_envs)) for i in range(num_envs)]) - 1
    data["timeouts"][ends] = 1.0
    data["terminals"] = data["terminals"] > 0
    data["timeouts"] = (data["timeouts"] > 0) & ~data["terminals"]
    return data


def make(
    mc: MakeConfig, out: Path, *, seed: int = 0, device: str = "cpu", from_dir: str | None = None
) -> Iterator[dict]:
    """Build the datasets of ``mc.kinds`` into ``out`` (``<env>-<kind>.hdf5``); yields the SAC run's
    records (prefixed ``sac_``) when it trains, then one ``result`` per dataset and a ``summary``."""

    if from_dir is None:
        run_dir = out / "sac"
        for r in train_sac(mc, run_dir, seed=seed, device=device):
            if r["kind"] == "step":
                yield {
                    "kind": "step",
                    "step": r["step"],
                    "algo": "sac",
                    "seed": r["seed"],
                    "eval_return": r["eval_return"],
                    "updates_per_s": r["updates_per_s"],
                }
        from_dir = str(run_dir)
    run = read_run(from_dir)
    cfg, evals = run["config"], run["evals"]
    steps = sorted(evals)
    final_step = steps[-1]
    final_ret = evals[final_step]
    env = cfg.env
    fam = family(env)
    expert_step = expert_policy(evals, set(run["snapshots"]) | {final_step})
    expert_ret = evals[expert_step]
    expert_ok = expert_ret >= mc.expert_fraction * D4RL_REF[fam][1] if fam else True
    if mc.medium_reference == "d4rl" and fam:
        med_target, med_basis = mc.medium_fraction * D4RL_REF[fam][1], f"D4RL's expert return {D4RL_REF[fam][1]}"
    else:
        med_target, med_basis = mc.medium_fraction * final_ret, f"the final return {final_ret:.1f}"
    med_step = next((s for s in steps if evals[s] >= med_target), None)
    no_medium = (
        None
        if med_step is not None
        else f"no evaluation reached {mc.medium_fraction:.3g} x {med_basis} (best {max(evals.values()):.1f})"
    )
    random_ln = _learner(cfg, None, device)
    rand = d4rl.rollout(random_ln, env, 0, mc.transitions, seed=dsac_aid._env_seed(seed, 0, 0, 3), device=device)
    rand_ret = _mean_episode_return(rand)
    if expert_step == final_step:
        expert_ln = _learner(cfg, run["final"], device)
    else:
        t, _ = safetensors_file.read(run["snapshots"][expert_step], fix="re-run make-dataset")
        expert_ln = _learner(cfg, t, device)
    ref = {"ref_min_return": rand_ret, "ref_max_return": expert_ret}
    base_attrs = {
        "env": env,
        "source_run": Path(from_dir).name,
        "sac_algo": run["algo"],
        "expert_return": expert_ret,
        "expert_step": expert_step,
        "final_return": final_ret,
        "final_step": final_step,
        "random_return": rand_ret,
        "rules": f"D4RL: random = untrained policy; medium = first snapshot at >= {mc.medium_fraction:.3g} x "
        f"{med_basis}; medium-replay = replay buffer up to it; expert = the best evaluated snapshot; "
        "medium-expert = medium + expert",
        **ref,
    }
    made: dict[str, dict] = {}

    def med_policy():
        if med_step == expert_step:
            return expert_ln
        if med_step == final_step:
            return _learner(cfg, run["final"], device)
        if med_step not in run["snapshots"]:
            raise InputError(
                f"--kind medium: the run reached {mc.medium_fraction:.3g} x {med_basis} at step {med_step}, "
                f"but {str(from_dir)!r} keeps no "
                "snapshot there (a dsac-aid run keeps only its last checkpoint); run make-dataset without --from"
            )
        t, _ = safetensors_file.read(run["snapshots"][med_step], fix="re-run make-dataset")
        return _learner(cfg, t, device)

    order = [k for k in KINDS if k in mc.kinds]
    for kind in order:
        attrs = dict(base_attrs, kind=kind)
        if kind in ("medium", "medium-replay", "medium-expert") and no_medium:
            yield {
                "kind": "result",
                "dataset": f"{_stem(env)}-{kind}",
                "made": False,
                "transitions": 0,
                "why": no_medium,
            }
            continue
        if kind == "random":
            data = rand
        elif kind == "expert":
            if not expert_ok:
                yield {
                    "kind": "result",
                    "dataset": f"{_stem(env)}-expert",
                    "made": False,
                    "transitions": 0,
                    "why": f"the SAC run's best evaluated return {expert_ret:.1f} (step {expert_step}) is below "
                    f"{mc.expert_fraction:g} x "
                    f"D4RL's expert {D4RL_REF[fam][1]} ({fam})",
                }
                continue
            data = d4rl.rollout(
                expert_ln, env, 0, mc.transitions, seed=dsac_aid._env_seed(seed, 0, 1, 3), device=device
            )
        elif kind == "medium":
            data = d4rl.rollout(
                med_policy(), env, 0, mc.transitions, seed=dsac_aid._env_seed(seed, 0, 2, 3), device=device
            )
            attrs["medium_step"], attrs["medium_return"] = med_step, evals[med_step]
        elif kind == "medium-replay":
            data = _replay_until(run["final"], med_step, cfg.seeds, cfg.num_envs)
            attrs["medium_step"] = med_step
        else:  # medium-expert
            if not expert_ok:
                yield {
                    "kind": "result",
                    "dataset": f"{_stem(env)}-medium-expert",
                    "made": False,
                    "transitions": 0,
                    "why": f"no expert policy (best evaluated return {expert_ret:.1f} below {mc.expert_fraction:g} x "
                    "D4RL's expert)",
                }
                continue
            med = made.get("medium", {}).get("data") or d4rl.rollout(
                med_policy(), env, 0, mc.transitions, seed=dsac_aid._env_seed(seed, 0, 2, 3), device=device
            )
            exp = made.get("expert", {}).get("data") or d4rl.rollout(
                expert_ln, env, 0, mc.transitions, seed=dsac_aid._env_seed(seed, 0, 1, 3), device=device
            )
            data = {k: np.concatenate([med[k], exp[k]]) for k in med}
        path = out / f"{_stem(env)}-{kind}.hdf5"
        d4rl.write(path, data, attrs=attrs)
        made[kind] = {"data": data}
        yield {
            "kind": "result",
            "dataset": path.stem,
            "made": True,
            "path": path.name,
            "transitions": len(data["rewards"]),
            "episodes": len(d4rl.episodes(data)),
            "mean_episode_return": _mean_episode_return(data),
            **ref,
            "policy_step": {
                "random": 0,
                "medium": med_step,
                "medium-replay": med_step,
                "expert": expert_step,
                "medium-expert": None,
            }[kind],
        }
    yield {
        "kind": "summary",
        "env": env,
        "source_run": Path(from_dir).name,
        "final_return": final_ret,
        "final_step": final_step,
        "expert_return": expert_ret,
        "expert_step": expert_step,
        "medium_step": med_step,
        "random_return": rand_ret,
        "expert_made": bool(expert_ok),
        "datasets": sorted(f"{_stem(env)}-{k}" for k in made),
    }


def expert_policy(evals: dict[int, float], available: set[int]) -> int:
    """The step of the expert policy: the highest evaluation return among the steps whose policy is
    kept (snapshots and the final one); the earliest of equal returns. D4RL (Fu et al. 2020, Sec. 5):
    the expert is the best policy trained, so the score reference's maximum is its return."""
    kept = sorted(s for s in evals if s in available)
    if not kept:
        raise InputError("make-dataset: the run keeps no evaluated policy (no snapshot, no final checkpoint)")
    return max(kept, key=lambda s: evals[s])


def _stem(env: str) -> str:
    return env.replace(":", "-").lower()


def _mean_episode_return(data: dict) -> float:
    """Mean return of the episodes of ``data``; the last one is left out when the data cut it
    (no terminal) and others exist."""
    eps = d4rl.episodes(data)
    if len(eps) > 1 and not data["terminals"][eps[-1].stop - 1]:
        eps = eps[:-1]
    return float(np.mean([data["rewards"][sl].sum() for sl in eps]))
