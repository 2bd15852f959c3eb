"""``icml26 bfq train``: one harness for offline RL on D4RL-style datasets, BFQ beside FQL,
Diffusion-QL, IQL, TD3+BC and BC (methods in bfq.py and offline_baselines.py; docs/bfq.md).

Every method trains S batched seeds in one process with its own networks (offline_config.py),
batch 256, discount 0.99, target rate 0.005. A ``data`` record says what the dataset held.
Divergence: a non-finite loss or Q stops that method's run (core/diverge): its result has
``diverged: true`` and the step, stderr says so, and the verdict leaves it out.

Protocol: evaluation every ``eval_interval`` updates, ``eval_episodes`` episodes per seed as each
method's official evaluation acts (FQL samples its noise, Diffusion-QL draws among 50 candidates
by softmax(Q), IQL / TD3+BC / BC act with the mean, BFQ with eps = 0), ``max_episode_steps`` per
episode; normalised score 100 (R - R_min) / (R_max - R_min) with the dataset's own references, else
D4RL's (offline_data.score_reference); ``normalized_score_d4rl_final``: on D4RL's scale for its
task families. ``normalized_score_final``: seed mean at the last
evaluation; ``_best``: the highest seed-mean over evaluations (optimistic; ``final`` is the unbiased
one); ``_ci``: Student-t 95% interval over seeds (null with one seed). ``best_algo`` names a method
only when its interval separates it (core/verdict). ``train_hz``: updates per second (each steps
every batched seed once); ``actions_per_s_b1`` / ``_b256``: one policy's actions per second at
batch 1 / 256; ``nfe``: denoiser / flow network calls per action.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from icml26.core import diverge, safetensors_file
from icml26.core.errors import InputError
from icml26.core.limits import check_work
from icml26.core.output import atomic_path, replay_or_run
from icml26.core.progress import progress
from icml26.core.recipe import config_dict
from icml26.core.verdict import seed_interval, verdict
from icml26.methods.rl import offline_data as od
from icml26.methods.rl.bfq import BFQ
from icml26.methods.rl.envs import SeededEnv, env_dims
from icml26.methods.rl.offline_agent import OfflineAgent
from icml26.methods.rl.offline_baselines import BC, FQL, IQL, TD3BC, DiffusionQL
from icml26.methods.rl.offline_config import ALGOS, Config, cost

__all__ = ["ALGOS", "CHECKPOINT", "Config", "OfflineAgent", "agent_class", "evaluate", "run", "train", "validate"]

CHECKPOINT = "checkpoint-{algo}.safetensors"
AGENTS = {"bfq": BFQ, "fql": FQL, "diffusion-ql": DiffusionQL, "iql": IQL, "td3bc": TD3BC, "bc": BC}


def agent_class(algo: str) -> type[OfflineAgent]:
    return AGENTS[algo]


# ---------------- seeds, evaluation, timing ----------------


def _algo_seed(seed: int, algo: str) -> int:
    return int(np.random.SeedSequence([seed, ALGOS.index(algo), 21]).generate_state(1, np.uint32)[0])


def _eval_seed(seed: int, k: int, e: int, n: int) -> int:
    return int(np.random.SeedSequence([seed + k, e, n, 7]).generate_state(1, np.uint32)[0])


def normalized_score(ret, ref_min: float, ref_max: float):
    """D4RL's normalised score 100 (R - R_min) / (R_max - R_min) (d4rl/infos.py, get_normalized_score x 100)."""
    return 100.0 * (np.asarray(ret, dtype=np.float64) - ref_min) / (ref_max - ref_min)


def evaluate(agent: OfflineAgent, data, env_id: str, cfg: Config, seed: int, n_eval: int) -> np.ndarray:
    """Mean undiscounted return per seed (S,) of ``eval_episodes`` episodes each (each method acts as its
    official evaluation does),
    all S x E environments stepped together (one batched policy call per time step)."""
    S, E = agent.S, cfg.eval_episodes
    envs = [[SeededEnv(env_id, _eval_seed(seed, k, e, n_eval)) for e in range(E)] for k in range(S)]
    try:
        obs = np.stack([np.stack([env.reset()[0] for env in row]) for row in envs])  # (S, E, o)
        active = np.ones((S, E), bool)
        ret = np.zeros((S, E))
        for _ in range(cfg.max_episode_steps):
            if not active.any():
                break
            a = agent.policy(torch.as_tensor(obs, device=agent.device, dtype=torch.float32)).cpu().numpy()
            for k in range(S):
                for e in range(E):
                    if active[k, e]:
                        o2, r, term, trunc, _ = envs[k][e].step(a[k, e])
                        ret[k, e] += r
                        obs[k, e] = o2
                        active[k, e] = not (term or trunc)
    finally:
        for row in envs:
            for env in row:
                env.close()
    return ret.mean(1)


def actions_per_s(
    algo: str,
    cfg: Config,
    obs_dim: int,
    act_dim: int,
    batch: int,
    device: str,
    budget_s: float,
    info: dict | None = None,
) -> float:
    """Actions per second of one policy (a fresh 1-seed agent: speed does not depend on the
    weights) at ``batch`` states, as the method acts at evaluation."""
    ag = agent_class(algo)(cfg, obs_dim, act_dim, 1, device=device, info=info)
    obs = torch.randn(1, batch, obs_dim, device=device)
    ag.policy(obs)  # warm-up
    n, t0 = 0, time.perf_counter()
    while True:
        ag.policy(obs)
        n += 1
        el = time.perf_counter() - t0
        if el >= budget_s and n >= 3:
            return n * batch / el


# ---------------- checkpoints ----------------


def _meta(cfg: Config, algo: str, seed: int) -> str:
    return json.dumps({"config": config_dict(cfg), "algo": algo, "seed": seed}, sort_keys=True)


def _save(path: Path, agent: OfflineAgent, loop: dict, meta: str) -> None:
    t = agent.state_tensors()
    t["loop.counters"] = torch.tensor(
        [loop["updates"], loop["next_eval"], loop["next_ckpt"], loop["n_eval"]], dtype=torch.int64
    )
    t["loop.times"] = torch.tensor([loop["update_s"]], dtype=torch.float64)
    t["loop.evals"] = torch.as_tensor(np.asarray(loop["evals"], dtype=np.float64).reshape(-1, agent.S + 1))
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in t.items()}, str(tmp), metadata={"icml26": meta})


def _load(
    path: Path, meta: str, head: str = "--resume: ", fix: str = "resume with the same settings or delete it"
) -> dict:
    t, md = safetensors_file.read(path, fix="delete it to start this method over")
    if md.get("icml26") != meta:
        raise InputError(f"{head}{str(path)!r} was written with other settings; {fix}")
    return t


def load_trained(
    cfg: Config, algo: str, data, out: Path, *, seed: int = 0, device: str = "cpu"
) -> tuple[OfflineAgent, int]:
    """The ``cfg.seeds`` batched agents of ``algo`` from the checkpoint that ``train`` wrote into ``out``
    with the same ``cfg`` and ``seed``, and the updates they hold. InputError when the checkpoint is
    missing or was written with other settings."""
    ckpt = Path(out) / CHECKPOINT.format(algo=algo)
    if not ckpt.is_file():
        raise InputError(f"no checkpoint {str(ckpt)!r}: train {algo} with --out {str(out)!r} first")
    gen = torch.Generator(device=device).manual_seed(_algo_seed(seed, algo))
    agent = agent_class(algo)(cfg, data.obs_dim, data.act_dim, cfg.seeds, device=device, generator=gen, info=data.info)
    t = _load(ckpt, _meta(cfg, algo, seed), head="", fix="load it with the Config and seed of the run that wrote it")
    agent.load_state_tensors(t)
    return agent, int(t["loop.counters"][0])


def train(
    cfg: Config,
    algo: str,
    data,
    *,
    seed: int,
    device: str,
    env_id: str | None,
    ref: dict,
    out: Path | None = None,
    resume: bool = False,
    previous: list[dict] | None = None,
    stop_after: int | None = None,
) -> Iterator[dict]:
    """Train ``cfg.seeds`` batched seeds of ``algo`` on ``data`` (``offline_data.Dataset``); yield
    a ``step`` record per seed at each evaluation and one ``result`` at the end (or when a loss or
    Q goes non-finite: ``diverged``). ``stop_after`` (tests): stop after that many updates
    (checkpointed), as an interruption would."""
    S = cfg.seeds
    gen = torch.Generator(device=device).manual_seed(_algo_seed(seed, algo))
    agent = agent_class(algo)(cfg, data.obs_dim, data.act_dim, S, device=device, generator=gen, info=data.info)
    loop = {
        "updates": 0,
        "next_eval": cfg.eval_interval,
        "next_ckpt": cfg.checkpoint_interval or cfg.steps,
        "n_eval": 0,
        "update_s": 0.0,
        "evals": [],
    }
    meta = _meta(cfg, algo, seed)
    ckpt = out / CHECKPOINT.format(algo=algo) if out is not None else None
    if resume and ckpt is not None and ckpt.is_file():
        t = _load(ckpt, meta)
        agent.load_state_tensors(t)
        c = t["loop.counters"].tolist()
        loop.update(updates=c[0], next_eval=c[1], next_ckpt=c[2], n_eval=c[3], update_s=float(t["loop.times"][0]))
        loop["evals"] = t["loop.evals"].tolist()
        for r in previous or ():
            if r.get("kind") == "step" and r.get("algo") == algo and r.get("step", 0) <= loop["updates"]:
                yield r
    sums = {"critic_loss": torch.zeros(S, device=device), "actor_loss": torch.zeros(S, device=device)}
    n_sum = 0
    failed: diverge.Diverged | None = None
    with progress(cfg.steps, f"bfq {algo}") as bar:
        bar.resumed(loop["updates"])
        while loop["updates"] < cfg.steps:
            b = data.sample(S, cfg.batch_size, gen)
            t0 = time.perf_counter()
            losses = agent.train_step(b)
            loop["update_s"] += time.perf_counter() - t0
            try:
                diverge.check(loop["updates"] + 1, **{k: v for k, v in losses.items() if v is not None})
            except diverge.Diverged as e:
                failed = e
                break
            loop["updates"] += 1
            bar.advance(1)
            for k in sums:
                if losses.get(k) is not None:
                    sums[k] += losses[k]
            n_sum += 1
            final = loop["updates"] >= cfg.steps
            if loop["updates"] >= loop["next_eval"] or final:
                rets = evaluate(agent, data, env_id, cfg, seed, loop["n_eval"]) if env_id else np.full(S, np.nan)
                loop["n_eval"] += 1
                loop["evals"].append([loop["updates"], *rets.tolist()])
                for k in range(S):
                    cl = None if losses.get("critic_loss") is None else float(sums["critic_loss"][k]) / n_sum
                    yield {
                        "kind": "step",
                        "step": loop["updates"],
                        "algo": algo,
                        "seed": seed + k,
                        "normalized_score": _score(rets[k], ref),
                        "eval_return": float(rets[k]) if env_id else None,
                        "critic_loss": cl,
                        "actor_loss": float(sums["actor_loss"][k]) / n_sum,
                    }
                sc = _score(float(np.mean(rets)), ref)
                bar.set(score=sc, ret=float(np.mean(rets)) if env_id else None)
                sums = {k: torch.zeros(S, device=device) for k in sums}
                n_sum = 0
                while loop["next_eval"] <= loop["updates"]:
                    loop["next_eval"] += cfg.eval_interval
            stop = stop_after is not None and loop["updates"] >= stop_after
            if ckpt is not None and (loop["updates"] >= loop["next_ckpt"] or final or stop):
                _save(ckpt, agent, loop, meta)
                while loop["next_ckpt"] <= loop["updates"]:
                    loop["next_ckpt"] += cfg.checkpoint_interval or cfg.steps
            if stop:
                return
    timing = {
        "train_hz": loop["updates"] / loop["update_s"] if loop["update_s"] > 0 else None,
        "actions_per_s_b1": actions_per_s(algo, cfg, data.obs_dim, data.act_dim, 1, device, cfg.timing_s, data.info),
        "actions_per_s_b256": actions_per_s(
            algo, cfg, data.obs_dim, data.act_dim, 256, device, cfg.timing_s, data.info
        ),
        "nfe": agent.nfe,
    }
    head = {"kind": "result", "algo": algo, "dataset": data.name, "env": env_id, "seeds": S}
    if failed is not None:
        diverge.warn(failed, f"bfq train {algo} (seeds {seed}-{seed + S - 1})")
        yield {
            **head,
            "steps": failed.step,
            **{k: None for k in ("normalized_score_final", "normalized_score_final_ci", "normalized_score_best")},
            **{k: None for k in ("normalized_score_best_ci", "best_step", "return_final")},
            **{k: None for k in ("normalized_score_d4rl_final", "normalized_score_d4rl_final_ci")},
            **timing,
            **ref,
            "evaluation": f"stopped: training diverged at update {failed.step} ({failed.what} non-finite)",
            **diverge.diverged_fields(failed),
        }
        return
    ev = np.asarray(loop["evals"], dtype=np.float64).reshape(-1, S + 1)
    scores = (
        normalized_score(ev[:, 1:], ref["ref_min_return"], ref["ref_max_return"])
        if ref["score_reference"]
        else np.full_like(ev[:, 1:], np.nan)
    )
    best = int(np.nanargmax(scores.mean(1))) if np.isfinite(scores).any() else len(scores) - 1
    fin = scores[-1]
    ok = bool(np.isfinite(fin).all())
    fam = od.family(env_id)
    d4rl_fin = normalized_score(ev[-1, 1:], *od.D4RL_REF[fam]) if fam and env_id and ok else None
    yield {
        **head,
        "steps": int(ev[-1, 0]),
        "normalized_score_final": float(fin.mean()) if ok else None,
        "normalized_score_final_ci": seed_interval(fin) if ok else None,
        "normalized_score_best": float(scores[best].mean()) if ok else None,
        "normalized_score_best_ci": seed_interval(scores[best]) if ok else None,
        "best_step": int(ev[best, 0]) if ok else None,
        "return_final": float(ev[-1, 1:].mean()) if env_id else None,
        "normalized_score_d4rl_final": float(d4rl_fin.mean()) if d4rl_fin is not None else None,
        "normalized_score_d4rl_final_ci": seed_interval(d4rl_fin) if d4rl_fin is not None else None,
        **timing,
        **ref,
        "evaluation": "done" if env_id else "skipped: the dataset names no environment and no --env was given",
        **diverge.diverged_fields(None),
    }


def _score(ret: float, ref: dict) -> float | None:
    if not ref["score_reference"] or not math.isfinite(ret):
        return None
    return float(normalized_score(ret, ref["ref_min_return"], ref["ref_max_return"]))


def validate(cfg: Config):
    """Load and check the dataset and the environment (InputError before any record): returns
    (dataset, env id or None, reference dict)."""
    if not cfg.dataset:
        raise InputError(
            "--dataset is required: a D4RL hdf5 file or a Minari dataset folder (icml26 bfq make-dataset writes one)"
        )
    data = od.load(cfg.dataset, max_episode_steps=cfg.max_episode_steps, drop_nonfinite=cfg.drop_nonfinite)
    env_id = cfg.env or data.env
    if env_id:
        o, a = env_dims(env_id)
        if (o, a) != (data.obs_dim, data.act_dim):
            raise InputError(
                f"--env {env_id!r} has observations of {o} and actions of {a} dims, "
                f"the dataset {data.obs_dim} and {data.act_dim}"
            )
    if cfg.batch_size > data.size:
        raise InputError(f"batch_size ({cfg.batch_size}) exceeds the dataset's {data.size} transitions")
    check_size(cfg, data.obs_dim, data.act_dim)
    return data, env_id, od.score_reference(data, env_id)


def check_size(cfg: Config, obs_dim: int, act_dim: int) -> None:
    """InputError when the batched seeds' networks would not fit in memory, or the run is beyond any
    machine (a mistyped --steps), at the dataset's dimensions (``offline_config.cost``); estimated
    before anything is written."""
    for w in cost(cfg, obs_dim, act_dim):
        check_work(w.amount, w.limit, w.verb, w.unit, w.settings, detail=w.detail)


def run(
    cfg: Config,
    *,
    seed: int = 0,
    device: str = "cpu",
    out: str | Path | None = None,
    resume: bool = False,
    previous: list[dict] | None = None,
    inputs=None,
) -> Iterator[dict]:
    """Train every ``cfg.algo`` on ``cfg.dataset``: the ``data`` record, ``step`` records, one
    ``result`` per algo, then a ``summary``. ``resume``: finished methods are replayed, an
    unfinished one continues."""
    data, env_id, ref = inputs or validate(cfg)
    data = data.to(device)
    yield data.record()
    out_p = Path(out) if out is not None else None
    results: list[dict] = []
    yield from replay_or_run(
        cfg.algo,
        previous,
        lambda algo: train(
            cfg,
            algo,
            data,
            seed=seed,
            device=device,
            env_id=env_id,
            ref=ref,
            out=out_p,
            resume=resume,
            previous=previous,
        ),
        field="algo",
        key=(("dataset", data.name),),
        results=results,
    )
    yield {
        "kind": "summary",
        "dataset": data.name,
        "env": env_id,
        "algos": list(cfg.algo),
        "seeds": cfg.seeds,
        "steps": cfg.steps,
        **ref,
        **verdict(
            results, "normalized_score_final", "algo", lower=False, ci_key="normalized_score_final_ci", metric="algo"
        ),
        "diverged": [r["algo"] for r in results if r.get("diverged")],
        "normalized_score_final": {r["algo"]: r.get("normalized_score_final") for r in results},
        "train_hz": {r["algo"]: r.get("train_hz") for r in results},
        "actions_per_s_b1": {r["algo"]: r.get("actions_per_s_b1") for r in results},
    }
