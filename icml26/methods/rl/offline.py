"""``icml26 bfq train``: one harness for offline RL on D4RL-style datasets, BFQ beside FQL,
Diffusion-QL, IQL, TD3+BC and BC (shared/methods/bfq.md; docs/bfq.md).

Every method is a small ``OfflineAgent`` (``bfq.py``, ``offline_baselines.py``) on the same
pieces: ``nets.BatchedMLP`` networks (S seeds batched in one process, one ``baddbmm`` per layer),
the same hidden widths, batch size (256), Adam (lr 3e-4), discount (0.99) and target rate
(0.005) for all (DQL's and BFQ's settings, which TD3+BC, IQL and FQL share up to network size;
FQL's 4x512 + LayerNorm critic is not used: same networks for all), observations normalised by
the dataset's mean/std for every method (TD3+BC's and IQL's recipe; RECON for the others).

Protocol: evaluation every ``eval_interval`` updates, ``eval_episodes`` episodes per seed with
deterministic actions (noise = 0 for the generative policies, the mean for IQL), ``max_episode_steps``
per episode; normalised score 100 (R - R_min) / (R_max - R_min) with D4RL's v2 reference returns
(``D4RL_REF``, cited) when the environment is a D4RL task family and the dataset brings none,
else the random/expert returns stored in a dataset made here (``score_reference`` says which).
``normalized_score_final`` = the seed-mean score at the last evaluation; ``normalized_score_best``
= the highest seed-mean score over evaluations (max of the averaged learning curve, an optimistic
protocol that the literature often reports; ``final`` is the unbiased one). ``_ci``: 95%
percentile-bootstrap interval over seeds. ``train_hz``: gradient updates per second of the run
(each update steps every batched seed once; wall time of the updates only). ``actions_per_s_b1``
/ ``_b256``: inference of one policy (a fresh one-seed copy of the same networks: speed does not
depend on the weights) at batch 1 / 256; ``nfe``: network evaluations per action.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from icml26.core.errors import InputError

ALGOS = ("bfq", "fql", "diffusion-ql", "iql", "td3bc", "bc")
CHECKPOINT = "checkpoint-{algo}.safetensors"


@dataclass(frozen=True)
class Config:
    dataset: str = ""  # a D4RL hdf5 file or a Minari dataset folder (icml26 bfq make-dataset writes the former)
    env: str | None = None  # gymnasium id to evaluate in (None: the dataset's own, else no evaluation)
    algo: tuple[str, ...] = ALGOS
    steps: int = 100_000  # gradient updates per seed
    seeds: int = 3  # batched in one process
    batch_size: int = 256
    hidden: tuple[int, ...] = (256, 256, 256)  # DQL / BFQ: 3 x 256
    activation: str = "relu"  # DQL uses Mish; not among nets.ACTIVATIONS (RECON)
    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    normalize_obs: bool = True
    eval_interval: int = 10_000  # updates
    eval_episodes: int = 10
    max_episode_steps: int = 1000
    checkpoint_interval: int = 10_000  # updates (0: only at the end)
    timing_s: float = 0.5  # seconds per inference timing (actions_per_s_*)
    ema_decay: float = 0.995  # BFQ / DQL EMA actor
    ema_every: int = 5
    ema_start: int = 1000
    # BFQ (bfq.md: lam 0.5, D_max 1e-3, eta grid {0.001 .. 1} per task). eta 0.1: at 1 the Q term
    # outweighs the behaviour term at the one-step query and saturates the actions (docs/bfq.md).
    # time_scale 10: features of 10 t for t in [0, 1] (1000 t, DDPM's integer scale, made the query
    # (t, r) = (1, 0) an input no training time comes near); onestep_frac: the share of L_comp rows
    # at that query (RECON both, docs/bfq.md "What was wrong").
    bfq_eta: float = 0.1
    bfq_lam: float = 0.5
    bfq_d_max: float = 1e-3
    bfq_time_embed: int = 64
    bfq_time_scale: float = 10.0
    bfq_onestep_frac: float = 0.25
    # FQL (seohongpark/fql agents/fql.py: alpha 10, 10 Euler steps, normalize_q_loss as its README recommends)
    fql_alpha: float = 10.0
    fql_flow_steps: int = 10
    fql_normalize_q: bool = True
    # Diffusion-QL (Wang et al. 2023, arXiv 2208.06193: N = 5, eta = 1 on locomotion, VP schedule)
    dql_steps: int = 5
    dql_eta: float = 1.0
    # IQL (Kostrikov et al. 2022, arXiv 2110.06169: locomotion expectile 0.7, temperature 3, rewards x 1000 / return range)
    iql_expectile: float = 0.7
    iql_beta: float = 3.0
    iql_reward_norm: bool = True
    # TD3+BC (Fujimoto & Gu 2021, arXiv 2106.06860)
    td3bc_alpha: float = 2.5
    td3bc_policy_noise: float = 0.2
    td3bc_noise_clip: float = 0.5
    td3bc_policy_freq: int = 2

    def __post_init__(self):
        for k in (
            "steps",
            "seeds",
            "batch_size",
            "eval_interval",
            "eval_episodes",
            "max_episode_steps",
            "ema_every",
            "fql_flow_steps",
            "dql_steps",
            "td3bc_policy_freq",
            "bfq_time_embed",
        ):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        for k in ("checkpoint_interval", "ema_start"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        from icml26.methods.rl import check_algos

        check_algos(self.algo, ALGOS)
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden must be positive layer widths, got {list(self.hidden)}")
        from icml26.methods.rl.nets import ACTIVATIONS

        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        if not 0 < self.gamma <= 1 or not 0 < self.tau <= 1 or not 0 < self.ema_decay < 1:
            raise ValueError(
                f"gamma, tau must be in (0, 1] and ema_decay in (0, 1), got {self.gamma}, {self.tau}, {self.ema_decay}"
            )
        if not 0.0 <= self.bfq_lam <= 1.0:
            raise ValueError(f"bfq_lam must be in [0, 1], got {self.bfq_lam}")
        if not 0.0 <= self.bfq_onestep_frac <= 1.0:
            raise ValueError(f"bfq_onestep_frac must be in [0, 1], got {self.bfq_onestep_frac}")
        if not self.bfq_time_scale > 0:
            raise ValueError(f"bfq_time_scale must be > 0, got {self.bfq_time_scale}")
        if not 0.0 <= self.bfq_d_max < 1.0:
            raise ValueError(f"bfq_d_max must be in [0, 1), got {self.bfq_d_max}")
        if not 0.5 <= self.iql_expectile < 1.0:
            raise ValueError(f"iql_expectile must be in [0.5, 1), got {self.iql_expectile}")
        if self.bfq_time_embed % 2:
            raise ValueError(f"bfq_time_embed must be even, got {self.bfq_time_embed}")
        for k in ("lr", "timing_s"):
            if not getattr(self, k) > 0:
                raise ValueError(f"{k} must be > 0, got {getattr(self, k)}")
        for k in (
            "bfq_eta",
            "fql_alpha",
            "dql_eta",
            "iql_beta",
            "td3bc_alpha",
            "td3bc_policy_noise",
            "td3bc_noise_clip",
        ):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")


# ---------------- the shared pieces of every method ----------------


class DoubleQ(nn.Module):
    """Two critics per seed (one BatchedMLP with G = 2 S) and their EMA targets."""

    def __init__(self, S: int, in_features: int, make):
        super().__init__()
        self.S = S
        self.net = make(2 * S, in_features, 1)
        self.target = make(2 * S, in_features, 1)
        self.target.load_state_dict(self.net.state_dict())
        self.target.requires_grad_(False)

    def q(self, obs, act, *, target: bool = False, detach: bool = False):
        """obs (S, B, o), act (S, B, a) -> (S, 2, B). ``detach``: the weights without gradient
        (the actor's loss sees a frozen critic, differentiable in the action)."""
        S, B, _ = obs.shape
        x = torch.cat([obs, act], -1).unsqueeze(1).expand(S, 2, B, obs.shape[-1] + act.shape[-1]).reshape(2 * S, B, -1)
        return (self.target if target else self.net)(x, detach).view(S, 2, B)

    @torch.no_grad()
    def soft_update(self, tau: float) -> None:
        torch._foreach_lerp_(list(self.target.parameters()), list(self.net.parameters()), tau)


class OfflineAgent(nn.Module):
    """Base of the offline methods: S batched seeds of one method. A subclass defines ``build``
    (networks, ``self.optimizers``), ``update(batch) -> {"critic_loss": (S,), "actor_loss": (S,)}``
    and ``act(obs (S, B, o), deterministic) -> (S, B, a)`` in [-1, 1]; ``nfe``: network calls per action."""

    name = "agent"
    nfe = 1

    def __init__(
        self,
        cfg: Config,
        obs_dim: int,
        act_dim: int,
        seeds: int,
        *,
        device: str = "cpu",
        generator=None,
        info: dict | None = None,
    ):
        super().__init__()
        self.cfg, self.obs_dim, self.act_dim, self.S, self.device = cfg, obs_dim, act_dim, seeds, device
        self.gen = generator if generator is not None else torch.Generator(device=device).manual_seed(0)
        self.info = info or {}
        self.optimizers: dict = {}
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))
        self.build()
        self.to(device)

    def build(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def mlp(self, groups: int, in_features: int, out_features: int):
        from icml26.methods.rl.nets import BatchedMLP

        g = self.gen if self.gen.device.type == "cpu" else None
        return BatchedMLP(
            groups, in_features, tuple(self.cfg.hidden), out_features, activation=self.cfg.activation, generator=g
        )

    def double_q(self) -> DoubleQ:
        return DoubleQ(self.S, self.obs_dim + self.act_dim, self.mlp)

    def noise(self, *shape):
        return torch.randn(*shape, generator=self.gen, device=self.device)

    def td_target(self, b: dict, q_next):
        """r + gamma (1 - terminal) q_next; timeouts do not stop bootstrapping. (S, B)."""
        return b["rewards"] + self.cfg.gamma * (1.0 - b["terminals"]) * q_next

    def step(self, name: str, loss) -> None:
        opt = self.optimizers[name]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    @torch.no_grad()
    def ema_update(self, ema, net) -> None:
        """DQL's EMA actor: every ``ema_every`` updates, a copy until ``ema_start``, then decay ``ema_decay``."""
        c = self.cfg
        it = int(self.updates)
        self.updates += 1
        if it % c.ema_every:
            return
        if it < c.ema_start:
            ema.load_state_dict(net.state_dict())
        else:
            torch._foreach_lerp_(list(ema.parameters()), list(net.parameters()), 1.0 - c.ema_decay)

    # ----- checkpoints -----
    def state_tensors(self) -> dict:
        out = {f"model.{k}": v.detach().clone() for k, v in self.state_dict().items()}
        for name, opt in self.optimizers.items():
            for i, st in opt.state_dict()["state"].items():
                for k, v in st.items():
                    out[f"opt.{name}.{i}.{k}"] = v.detach().clone() if torch.is_tensor(v) else torch.tensor(v)
        out["rng.torch"] = self.gen.get_state()
        return {k: v.contiguous().cpu() for k, v in out.items()}

    def load_state_tensors(self, t: dict) -> None:
        self.load_state_dict({k[6:]: v for k, v in t.items() if k.startswith("model.")})
        for name, opt in self.optimizers.items():
            sd = opt.state_dict()
            state: dict = {}
            for i in range(sum(len(g["params"]) for g in sd["param_groups"])):
                keys = [k for k in t if k.startswith(f"opt.{name}.{i}.")]
                if keys:
                    state[i] = {
                        k.rsplit(".", 1)[1]: (t[k] if k.endswith(".step") else t[k].to(self.device)) for k in keys
                    }
            opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
        self.gen.set_state(t["rng.torch"])


def agent_class(algo: str) -> type[OfflineAgent]:
    from icml26.methods.rl import bfq, offline_baselines as ob

    return {
        "bfq": bfq.BFQ,
        "fql": ob.FQL,
        "diffusion-ql": ob.DiffusionQL,
        "iql": ob.IQL,
        "td3bc": ob.TD3BC,
        "bc": ob.BC,
    }[algo]


# ---------------- seeds, evaluation, timing ----------------


def _algo_seed(seed: int, algo: str) -> int:
    return int(np.random.SeedSequence([seed, ALGOS.index(algo), 21]).generate_state(1, np.uint32)[0])


def _eval_seed(seed: int, k: int, e: int, n: int) -> int:
    return int(np.random.SeedSequence([seed + k, e, n, 7]).generate_state(1, np.uint32)[0])


def normalized_score(ret, ref_min: float, ref_max: float):
    """D4RL's normalised score 100 (R - R_min) / (R_max - R_min) (d4rl/infos.py, get_normalized_score x 100)."""
    return 100.0 * (np.asarray(ret, dtype=np.float64) - ref_min) / (ref_max - ref_min)


def evaluate(agent: OfflineAgent, data, env_id: str, cfg: Config, seed: int, n_eval: int) -> np.ndarray:
    """Mean undiscounted return per seed (S,) of ``eval_episodes`` deterministic episodes each,
    all S x E environments stepped together (one batched policy call per time step)."""
    from icml26.methods.rl.envs import SeededEnv

    S, E = agent.S, cfg.eval_episodes
    envs = [[SeededEnv(env_id, _eval_seed(seed, k, e, n_eval)) for e in range(E)] for k in range(S)]
    try:
        obs = np.stack([np.stack([env.reset()[0] for env in row]) for row in envs])  # (S, E, o)
        active = np.ones((S, E), bool)
        ret = np.zeros((S, E))
        for _ in range(cfg.max_episode_steps):
            if not active.any():
                break
            a = agent.act(data.normalize(torch.as_tensor(obs, device=agent.device)), deterministic=True).cpu().numpy()
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
    algo: str, cfg: Config, obs_dim: int, act_dim: int, batch: int, device: str, budget_s: float
) -> float:
    """Deterministic actions per second of one policy (a fresh 1-seed agent) at ``batch`` states."""
    ag = agent_class(algo)(cfg, obs_dim, act_dim, 1, device=device)
    obs = torch.randn(1, batch, obs_dim, device=device)
    ag.act(obs)  # warm-up
    n, t0 = 0, time.perf_counter()
    while True:
        ag.act(obs)
        n += 1
        el = time.perf_counter() - t0
        if el >= budget_s and n >= 3:
            return n * batch / el


# ---------------- checkpoints ----------------


def _meta(cfg: Config, algo: str, seed: int) -> str:
    from icml26.core.recipe import config_dict

    return json.dumps({"config": config_dict(cfg), "algo": algo, "seed": seed}, sort_keys=True)


def _save(path: Path, agent: OfflineAgent, loop: dict, meta: str) -> None:
    from safetensors.torch import save_file

    from icml26.core.output import atomic_path

    t = agent.state_tensors()
    t["loop.counters"] = torch.tensor(
        [loop["updates"], loop["next_eval"], loop["next_ckpt"], loop["n_eval"]], dtype=torch.int64
    )
    t["loop.times"] = torch.tensor([loop["update_s"]], dtype=torch.float64)
    t["loop.evals"] = torch.as_tensor(np.asarray(loop["evals"], dtype=np.float64).reshape(-1, agent.S + 1))
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in t.items()}, str(tmp), metadata={"icml26": meta})


def _load(path: Path, meta: str) -> dict:
    from icml26.core import safetensors_file

    t, md = safetensors_file.read(path, fix="delete it to start this method over")
    if md.get("icml26") != meta:
        raise InputError(
            f"--resume: {str(path)!r} was written with other settings; resume with the same settings or delete it"
        )
    return t


# ---------------- training ----------------


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
    a ``step`` record per seed at each evaluation and one ``result`` at the end. ``stop_after``
    (tests): stop after that many updates (checkpointed), as an interruption would."""
    from icml26.core.stats import bootstrap_mean_ci

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
    while loop["updates"] < cfg.steps:
        b = data.sample(S, cfg.batch_size, gen)
        t0 = time.perf_counter()
        losses = agent.update(b)
        loop["update_s"] += time.perf_counter() - t0
        loop["updates"] += 1
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
    ev = np.asarray(loop["evals"], dtype=np.float64).reshape(-1, S + 1)
    scores = (
        normalized_score(ev[:, 1:], ref["ref_min_return"], ref["ref_max_return"])
        if ref["score_reference"]
        else np.full_like(ev[:, 1:], np.nan)
    )
    best = int(np.nanargmax(scores.mean(1))) if np.isfinite(scores).any() else len(scores) - 1
    fin = scores[-1]
    ok = bool(np.isfinite(fin).all())
    yield {
        "kind": "result",
        "algo": algo,
        "dataset": data.name,
        "env": env_id,
        "steps": int(ev[-1, 0]),
        "seeds": S,
        "normalized_score_final": float(fin.mean()) if ok else None,
        "normalized_score_final_ci": list(bootstrap_mean_ci(fin)) if ok else None,
        "normalized_score_best": float(scores[best].mean()) if ok else None,
        "normalized_score_best_ci": list(bootstrap_mean_ci(scores[best])) if ok else None,
        "best_step": int(ev[best, 0]) if ok else None,
        "return_final": float(ev[-1, 1:].mean()) if env_id else None,
        "train_hz": loop["updates"] / loop["update_s"] if loop["update_s"] > 0 else None,
        "actions_per_s_b1": actions_per_s(algo, cfg, data.obs_dim, data.act_dim, 1, device, cfg.timing_s),
        "actions_per_s_b256": actions_per_s(algo, cfg, data.obs_dim, data.act_dim, 256, device, cfg.timing_s),
        "nfe": agent.nfe,
        **ref,
        "evaluation": "done" if env_id else "skipped: the dataset names no environment and no --env was given",
    }


def _score(ret: float, ref: dict) -> float | None:
    if not ref["score_reference"] or not math.isfinite(ret):
        return None
    return float(normalized_score(ret, ref["ref_min_return"], ref["ref_max_return"]))


def validate(cfg: Config):
    """Load and check the dataset and the environment (InputError before any record): returns
    (dataset, env id or None, reference dict)."""
    from icml26.methods.rl import offline_data as od
    from icml26.methods.rl.envs import env_dims

    if not cfg.dataset:
        raise InputError(
            "--dataset is required: a D4RL hdf5 file or a Minari dataset folder (icml26 bfq make-dataset writes one)"
        )
    data = od.load(cfg.dataset, normalize_obs=cfg.normalize_obs)
    env_id = cfg.env or data.env
    if env_id:
        o, a = env_dims(env_id)
        if (o, a) != (data.obs_dim, data.act_dim):
            raise InputError(
                f"--env {env_id!r} has observations of {o} and actions of {a} dims, the dataset {data.obs_dim} and {data.act_dim}"
            )
    if cfg.batch_size > data.size:
        raise InputError(f"batch_size ({cfg.batch_size}) exceeds the dataset's {data.size} transitions")
    check_size(cfg, data.obs_dim, data.act_dim)
    return data, env_id, od.score_reference(data, env_id)


MAX_STATE_BYTES = 16 * 2**30  # networks + Adam state of all batched seeds
MAX_TRAIN_FLOPS = (
    1e18  # ~230 days of one core at 50 GFLOP/s: only a mistyped size is refused (the paper's D4RL setting is ~6e17)
)


def check_size(cfg: Config, obs_dim: int, act_dim: int) -> None:
    """InputError when the batched seeds' networks would not fit in memory, or the run is beyond any
    machine (a mistyped --steps); estimated before anything is written. Per seed: an actor / flow network
    and twin critics with target copies (about 8 networks of ``hidden``), float32, with gradients and
    Adam's two moments (x4); an update costs ~6 flops per parameter and sample (forward + backward),
    times the flow / denoising steps of the slowest method asked for."""
    from icml26.core.limits import check_work

    widths = (obs_dim + act_dim, *cfg.hidden, max(act_dim, 1))
    per_net = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
    state = cfg.seeds * 8 * per_net * 4 * 4
    if state > MAX_STATE_BYTES:
        raise InputError(
            f"{cfg.seeds} batched seeds of {list(cfg.hidden)} networks would hold ~{state / 2**30:.0f} GiB "
            f"(limit {MAX_STATE_BYTES // 2**30} GiB); lower seeds or hidden"
        )
    chain = max(
        [1]
        + [cfg.dql_steps for a in cfg.algo if a == "diffusion-ql"]
        + [cfg.fql_flow_steps for a in cfg.algo if a == "fql"]
    )
    flops = 6.0 * 8 * per_net * cfg.batch_size * cfg.steps * cfg.seeds * len(cfg.algo) * chain
    check_work(
        flops,
        MAX_TRAIN_FLOPS,
        "take",
        "flops of training",
        "--steps, seeds, batch_size, hidden or --algo",
        detail=f"{len(cfg.algo)} algos x {cfg.seeds} seeds x {cfg.steps} steps x batch {cfg.batch_size}",
    )


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
    """Train every ``cfg.algo`` on ``cfg.dataset``: ``step`` records, one ``result`` per algo,
    then a ``summary``. ``resume``: finished methods are replayed, an unfinished one continues."""
    from icml26.core.output import replay_or_run

    data, env_id, ref = inputs or validate(cfg)
    data = data.to(device)
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
    scored = [r for r in results if r.get("normalized_score_final") is not None]
    best = max(scored, key=lambda r: r["normalized_score_final"]) if scored else None
    yield {
        "kind": "summary",
        "dataset": data.name,
        "env": env_id,
        "algos": list(cfg.algo),
        "seeds": cfg.seeds,
        "steps": cfg.steps,
        **ref,
        "best_algo": best["algo"] if best else None,
        "normalized_score_final": {r["algo"]: r.get("normalized_score_final") for r in results},
        "train_hz": {r["algo"]: r.get("train_hz") for r in results},
        "actions_per_s_b1": {r["algo"]: r.get("actions_per_s_b1") for r in results},
    }
