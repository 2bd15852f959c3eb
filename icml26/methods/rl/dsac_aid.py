"""``icml26 dsac-aid``: DSAC-AID (aleatoric impulse damping, ICML 2026, PMLR 306; no arXiv id)
against DSAC-T (arXiv 2310.05858) and SAC on gymnasium MuJoCo and dm_control tasks.

The learner is ``icml26.methods.rl.sac.Learner`` (one learner, ``algo`` a flag); this module is
the harness's training loop and ``run``: vector environments, the replay buffer, evaluations,
checkpoints and ``--resume`` (``dsac_checkpoint``), the records. Settings and per-family defaults
live in ``dsac_config`` (never mixed): ``sb3`` (``auto`` for every gymnasium id) runs SAC as
Stable-Baselines3 2.9.2 ``SAC("MlpPolicy", env)`` does (1 env, one update per step, 100 random
warm-up steps, 2x256 ReLU, lr 3e-4, batch 256, tau 0.005, automatic entropy), DSAC-T and
DSAC-AID in the same data regime with their own losses (alpha0 = e, actor delay 2 as GOPS);
``mujoco``, ``ant``, ``dmc`` follow the official GOPS scripts (yzy-yuzhouyang/GOPS
``example_train/dsacaid/`` at 640e85a: 4 envs x 5 steps per update, 10k policy warm-up
transitions, 3x256 networks, the per-suite lambda / beta / reward scale / loss).

Evaluation (``dsac_eval``, every ``eval_interval`` environment steps): ``eval_return`` = mean
undiscounted return of ``eval_episodes`` deterministic (tanh(mean)) episodes without injected
noise; ``q_bias`` = GOPS ``evaluator_dsacaid.py``'s bias (``official_bias``) of the ensemble-mean
Q, env units; beta anneals on the same estimator of the bound mean Q - lambda std Q (scaled
units); ``sigma_aleatoric`` = sqrt(mean_i sigma_i^2), ``sigma_epistemic`` = sqrt(Var_i Q_i) over
the first ``bias_horizon`` states, env units. Every name of the split modules is importable here.

RECON: see ``sac.py``; the injected reward noise (``envs.py``); the evaluation is synchronous.
"""

from __future__ import annotations

import contextlib
import dataclasses  # noqa: F401 (``dsac_aid.dataclasses`` is used by offline_make)
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from icml26.methods.rl.dsac_checkpoint import _meta, load_checkpoint, save_checkpoint
from icml26.methods.rl.dsac_config import (
    CHECKPOINT,
    Config,
    FAMILIES,
    LEGACY,
    _GOPS,
    _algo_seed,
    _env_seed,
    delay_of,
    effective,
    family_of,
    for_resume,
    help_view,
    learner_spec,
    legacy_fields,
    resolve_family,
    stored_config,
    tune_allocator,
    validate,
)
from icml26.methods.rl.dsac_eval import evaluate, official_bias

__all__ = [
    "CHECKPOINT",
    "Config",
    "FAMILIES",
    "LEGACY",
    "_GOPS",
    "_algo_seed",
    "_env_seed",
    "_meta",
    "delay_of",
    "effective",
    "evaluate",
    "family_of",
    "for_resume",
    "help_view",
    "learner_spec",
    "legacy_fields",
    "load_checkpoint",
    "official_bias",
    "onset_noise",
    "plot",
    "resolve_family",
    "result_record",
    "run",
    "save_checkpoint",
    "stored_config",
    "train",
    "tune_allocator",
    "validate",
    "write_d4rl",
]


def onset_noise(cfg: Config, seed: int, step: int, actions: np.ndarray) -> np.ndarray:
    """The injected reward noise of the environment step ``step`` (all S x N environments) when it
    switches on at ``cfg.reward_noise_from``: reward_noise * (0.5 + mean a^2) * N(0, 1), the
    envs.SeededEnv form, with the normals drawn from a generator seeded by (seed, step) so that a
    resumed run draws the same. actions (S * N, act_dim) in [-1, 1]; returns (S * N,) env units
    (zeros before the onset)."""
    if cfg.reward_noise_from is None or step < cfg.reward_noise_from or cfg.reward_noise <= 0:
        return np.zeros(len(actions))
    eps = np.random.default_rng(np.random.SeedSequence([seed, step, 3])).standard_normal(len(actions))
    a = np.clip(np.asarray(actions, dtype=np.float64), -1.0, 1.0)
    return cfg.reward_noise * (0.5 + (a * a).mean(-1)) * eps


# ---------------- training ----------------


def train(
    cfg: Config,
    algo: str,
    *,
    seed: int,
    device: str,
    obs_dim: int,
    act_dim: int,
    out: Path | None = None,
    resume: bool = False,
    previous: list[dict] | None = None,
    stop_after_steps: int | None = None,
    written_for: Config | None = None,
) -> Iterator[dict]:
    """Train ``cfg.seeds`` batched seeds of ``algo``; yield a ``step`` record per seed at each
    evaluation and a ``result`` record at the end. ``stop_after_steps`` (tests): stop the loop
    there (after checkpointing) without a result, as an interruption would. ``written_for``: with
    ``resume``, the settings the checkpoint was written for when the run now goes on to more
    ``steps`` (``offline_make.extends``: only steps and a replay buffer that never wrapped grow)."""
    import torch

    from icml26.core import diverge
    from icml26.core.progress import progress
    from icml26.methods.rl.envs import make_vector
    from icml26.methods.rl.sac import Learner, ReplayBuffer

    S, N = cfg.seeds, cfg.num_envs
    spec = learner_spec(cfg, algo, obs_dim, act_dim)
    gen = torch.Generator(device=device).manual_seed(_algo_seed(seed, algo))
    learner = Learner(spec, device=device, generator=gen)
    cap = min(cfg.buffer_size, cfg.steps + N)
    cap += (-cap) % N
    buf = ReplayBuffer(S, cap, obs_dim, act_dim, device)
    eval_every = int(cfg.eval_interval)
    loop = {
        "step": 0,
        "updates": 0,
        "next_eval": eval_every,
        "next_ckpt": cfg.checkpoint_interval or cfg.steps,
        "wall_s": 0.0,
        "interval_update_s": 0.0,
        "interval_updates": 0,
        "evals": [],
    }
    meta = _meta(cfg, algo, seed)
    ckpt = out / CHECKPOINT.format(algo=algo) if out is not None else None
    onset = cfg.reward_noise_from is not None  # the harness injects the noise from that step on, else the envs do
    venv = make_vector(
        cfg.env,
        [_env_seed(seed, k, n, 0) for k in range(S) for n in range(N)],
        kind=cfg.vector_env,
        reward_noise=0.0 if onset else cfg.reward_noise,
    )
    stack = contextlib.ExitStack()
    try:
        if resume and ckpt is not None and ckpt.is_file():
            t = load_checkpoint(ckpt, meta if written_for is None else _meta(written_for, algo, seed))
            learner.load_state_tensors(t)
            buf.load_state_tensors(t)
            c = t["loop.counters"].tolist()
            loop.update(step=c[0], updates=c[1], next_eval=c[2], next_ckpt=c[3])
            w = t["loop.times"].tolist()
            loop.update(wall_s=w[0], interval_update_s=w[1], interval_updates=int(w[2]))
            loop["evals"] = t["loop.evals"].tolist()
            states = [(int(t[f"env.{i}.episode"][0]), t[f"env.{i}.actions"].numpy()) for i in range(S * N)]
            venv.set_attr("pending_replay", states)  # the next reset replays each env to its state
            for r in previous or ():  # the records up to the checkpoint, replayed
                if r.get("kind") == "step" and r.get("algo") == algo and r.get("step", 0) <= loop["step"]:
                    yield r
        obs_np, _ = venv.reset()
        obs = torch.as_tensor(obs_np, device=device).view(S, N, obs_dim)
        scale = float(cfg.reward_scale)
        per_iter = cfg.env_steps_per_update // N
        t0 = time.perf_counter()
        bar = stack.enter_context(progress(cfg.steps, f"dsac-aid {algo} {cfg.env}"))
        bar.resumed(loop["step"])
        last_ret = loop["evals"][-1][1:] if loop["evals"] else None
        while loop["step"] < cfg.steps:
            for _ in range(per_iter):
                with torch.no_grad():
                    if cfg.warmup_actions == "uniform" and buf.size < cfg.warmup_steps:  # SB3: random actions
                        a = torch.rand(S, N, act_dim, generator=gen, device=device) * 2 - 1
                    else:
                        a = learner.behaviour_policy(obs)  # (S, N, act)
                a_np = a.reshape(S * N, act_dim).cpu().numpy()
                o2, r, term, trunc, info = venv.step(a_np)
                if onset:
                    r = np.asarray(r, dtype=np.float64) + onset_noise(cfg, seed, loop["step"], a_np)
                nxt = o2.copy()
                if "_final_obs" in info:
                    for i in np.flatnonzero(info["_final_obs"]):
                        nxt[i] = info["final_obs"][i]
                f = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32), device=device).view(
                    S, N, *np.shape(x)[1:]
                )  # noqa: E731
                buf.add(
                    observations=obs,
                    actions=a,
                    rewards=f(r),
                    next_observations=f(nxt),
                    terminals=f(term),
                    timeouts=f(trunc & ~term),
                )
                obs = f(o2)
                loop["step"] += N
                bar.advance(N)
            if buf.size >= max(cfg.warmup_steps, 1):  # with replacement; from step 100 (SB3: 101, one update fewer)
                tu = time.perf_counter()
                b = buf.sample(cfg.batch_size, gen)
                loss_q = learner.update(
                    b["observations"], b["actions"], b["rewards"] * scale, b["next_observations"], b["terminals"]
                )
                diverge.check(loop["step"], critic_loss=loss_q)
                loop["interval_update_s"] += time.perf_counter() - tu
                loop["interval_updates"] += 1
                loop["total_update_s"] = loop.get("total_update_s", 0.0) + time.perf_counter() - tu
                loop["updates"] += 1
                if loop["updates"] % 200 == 0:
                    bar.set(
                        updates=loop["updates"],
                        updates_per_s=round(loop["interval_updates"] / max(loop["interval_update_s"], 1e-9), 1),
                    )
            final = loop["step"] >= cfg.steps
            if loop["step"] >= loop["next_eval"] or final:
                diverge.check_params(loop["step"], learner.parameters())
                ev = evaluate(learner, cfg, seed, device)
                learner.anneal_beta(torch.as_tensor(ev["bias_bound"]))
                ups = (
                    loop["interval_updates"] / loop["interval_update_s"]
                    if loop["interval_update_s"] > 0
                    else float("nan")
                )
                loop["evals"].append([loop["step"], *ev["eval_return"].tolist()])
                last_ret = ev["eval_return"].tolist()
                bar.set(eval_return=round(float(np.mean(last_ret)), 1))
                for k in range(S):
                    yield {
                        "kind": "step",
                        "step": loop["step"],
                        "updates": loop["updates"],
                        "algo": algo,
                        "seed": seed + k,
                        "eval_return": float(ev["eval_return"][k]),
                        "q_bias": float(ev["q_bias"][k]),
                        "sigma_aleatoric": float(ev["sigma_aleatoric"][k]),
                        "sigma_epistemic": float(ev["sigma_epistemic"][k]),
                        "updates_per_s": ups,
                    }
                loop["interval_update_s"], loop["interval_updates"] = 0.0, 0
                while loop["next_eval"] <= loop["step"]:
                    loop["next_eval"] += eval_every
            stop = stop_after_steps is not None and loop["step"] >= stop_after_steps
            if ckpt is not None and (loop["step"] >= loop["next_ckpt"] or final or stop):
                loop["wall_s"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                save_checkpoint(ckpt, learner, buf, venv, loop, meta)
                while loop["next_ckpt"] <= loop["step"]:
                    loop["next_ckpt"] += cfg.checkpoint_interval or cfg.steps
            if stop:
                return
        loop["wall_s"] += time.perf_counter() - t0
        if out is not None and cfg.d4rl:
            write_d4rl(out, cfg, algo, seed, learner, buf, device)
        yield result_record(cfg, algo, loop)
    except diverge.Diverged as exc:
        diverge.warn(exc, f"dsac-aid {algo} on {cfg.env}")
        yield result_record(cfg, algo, loop, exc)
    finally:
        stack.close()
        venv.close()


def result_record(cfg: Config, algo: str, loop: dict, diverged=None) -> dict:
    """The ``result`` of one (algo, env) from its evaluation history (rows: step, return per seed).

    final_return: mean over seeds of the last evaluation's return; max_avg_return: the highest
    mean-over-seeds return over all evaluations (the seed-averaged learning curve's maximum).
    ``_ci``: Student-t 95% interval over seeds (null with one seed). updates_per_s: updates over
    the seconds spent in them. ``diverged``: the ``Diverged`` that stopped the run (no returns)."""
    from icml26.core.diverge import diverged_fields
    from icml26.core.verdict import seed_interval

    ev = np.asarray(loop["evals"], dtype=np.float64).reshape(-1, cfg.seeds + 1)
    rets = ev[:, 1:]
    rec = {"kind": "result", "algo": algo, "env": cfg.env, "seeds": cfg.seeds, **diverged_fields(diverged)}
    if diverged is not None or not len(ev):
        return {
            **rec,
            "final_return": None,
            "final_return_ci": None,
            "max_avg_return": None,
            "max_avg_return_ci": None,
            "steps": int(loop["step"]),
            "updates": int(loop["updates"]),
            "wall_s": float(loop["wall_s"]),
        }
    best = int(np.argmax(rets.mean(1)))
    ts = loop.get("total_update_s", 0.0)
    return {
        **rec,
        "final_return": float(rets[-1].mean()),
        "final_return_ci": seed_interval(rets[-1].tolist()),
        "max_avg_return": float(rets[best].mean()),
        "max_avg_return_ci": seed_interval(rets[best].tolist()),
        "steps": int(ev[-1, 0]),
        "updates": int(loop["updates"]),
        "updates_per_s": float(loop["updates"] / ts) if ts > 0 else None,
        "wall_s": float(loop["wall_s"]),
    }


def write_d4rl(out: Path, cfg: Config, algo: str, seed: int, learner, buf, device: str) -> list[Path]:
    """Each seed's replay buffer (oldest first, each environment's transitions in time order) and,
    with ``d4rl_rollout_steps``, rollouts of its final (stochastic) policy, as D4RL/Minari-layout
    hdf5 files under ``out/d4rl/`` (see ``d4rl.write``)."""
    from icml26.methods.rl import d4rl

    paths = []
    N = cfg.num_envs
    for k in range(cfg.seeds):
        data = {key: v.numpy() for key, v in buf.ordered(k).items()}
        n = len(data["rewards"])
        order = np.concatenate([np.arange(i, n, N) for i in range(N)])  # env-major: whole trajectories
        data = {key: v[order] for key, v in data.items()}
        data["timeouts"][np.cumsum([len(range(i, n, N)) for i in range(N)]) - 1] = 1.0  # each env's cut-off tail
        data["timeouts"] = np.where(data["terminals"] > 0, 0.0, data["timeouts"])
        p = out / "d4rl" / f"{algo}-seed{seed + k}-replay.hdf5"
        d4rl.write(
            p, data, attrs={"env": cfg.env, "algo": algo, "seed": seed + k, "kind": "replay", "steps": cfg.steps}
        )
        paths.append(p)
        if cfg.d4rl_rollout_steps:
            ro = d4rl.rollout(learner, cfg.env, k, cfg.d4rl_rollout_steps, seed=_env_seed(seed, k, 0, 2), device=device)
            p = out / "d4rl" / f"{algo}-seed{seed + k}-policy.hdf5"
            d4rl.write(
                p, ro, attrs={"env": cfg.env, "algo": algo, "seed": seed + k, "kind": "policy", "steps": cfg.steps}
            )
            paths.append(p)
    return paths


def run(
    cfg: Config,
    *,
    seed: int = 0,
    device: str = "cpu",
    out: str | Path | None = None,
    resume: bool = False,
    previous: list[dict] | None = None,
    dims: tuple[int, int] | None = None,
) -> Iterator[dict]:
    """Train every ``cfg.algo`` (``cfg`` resolved by ``resolve_family``) on ``cfg.env``; yield its
    ``step`` records, one ``result`` per algo and a ``summary``. ``resume``: methods whose
    result is in ``previous`` are replayed; an unfinished one continues from its checkpoint."""
    from icml26.core.output import replay_or_run

    obs_dim, act_dim = dims or validate(cfg)
    out_p = Path(out) if out is not None else None
    results: list[dict] = []
    yield from replay_or_run(
        cfg.algo,
        previous,
        lambda algo: train(
            cfg,
            algo,
            seed=seed,
            device=device,
            obs_dim=obs_dim,
            act_dim=act_dim,
            out=out_p,
            resume=resume,
            previous=previous,
        ),
        field="algo",
        key=(("env", cfg.env),),
        results=results,
    )
    from icml26.core.verdict import verdict

    v = verdict(results, "final_return", "algo", lower=False, ci_key="final_return_ci", metric="algo")
    # the leader: the highest final return among the algos that did not diverge; with one algo there is
    # nothing to compare, so best_algo stays null (the leader still names it)
    leader = v["tied_with_best_algo"][0] if v["tied_with_best_algo"] else None
    if len(cfg.algo) < 2:
        v["best_algo"] = None
    yield {
        "kind": "summary",
        "env": cfg.env,
        "family": cfg.family,
        "algos": list(cfg.algo),
        "seeds": cfg.seeds,
        "steps": cfg.steps,
        "leader": leader,
        **v,  # best_algo (only when its interval separates it from another algo's), tied_with_best_algo
        "final_return": {r["algo"]: r["final_return"] for r in results},
        "diverged": [r["algo"] for r in results if r.get("diverged")],
    }


def plot(records: list[dict], out_dir: Path) -> None:
    """returns.png and q_bias.png: seed-mean curves per algo (shaded: min-max over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icml26.core.output import atomic_path

    steps = [r for r in records if r.get("kind") == "step"]
    algos = list(dict.fromkeys(r["algo"] for r in steps))
    for key, fname, ylabel in (
        ("eval_return", "returns.png", "evaluation return"),
        ("q_bias", "q_bias.png", "Q bias (env reward units)"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for algo in algos:
            rows = [r for r in steps if r["algo"] == algo and r.get(key) is not None]
            xs = sorted({r["step"] for r in rows})
            ys = [[r[key] for r in rows if r["step"] == x] for x in xs]
            ax.plot(xs, [np.mean(y) for y in ys], label=algo)
            ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], alpha=0.2)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(ylabel)
        ax.legend()
        env = next((r.get("env") for r in records if r.get("kind") == "config"), "")
        ax.set_title(f"{env}: {ylabel}")
        fig.tight_layout()
        with atomic_path(out_dir / fname) as tmp:
            fig.savefig(tmp, format="png", dpi=110)
        plt.close(fig)
