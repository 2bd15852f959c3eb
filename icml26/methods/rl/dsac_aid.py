"""``icml26 dsac-aid``: DSAC-AID (aleatoric impulse damping, ICML 2026, PMLR 306; no arXiv id)
against DSAC-T (arXiv 2310.05858) and SAC on gymnasium MuJoCo and dm_control tasks.

The learner is ``icml26.methods.rl.sac.Learner`` (one learner, ``algo`` a flag); this module is
the harness: vector environments, the replay buffer, evaluation with the bias/uncertainty
diagnostics, checkpoints and ``--resume``, the records. Defaults per family, never mixed:

- ``sb3`` (``auto`` for every gymnasium id): SAC as Stable-Baselines3 2.9.2 ``SAC("MlpPolicy",
  env)`` runs it: 1 env, one update per environment step, 100 uniform-random warm-up steps
  (SB3 learning_starts; CleanRL uses 5e3), reward scale 1, 2x256 ReLU, lr 3e-4, batch 256,
  tau 0.005, automatic entropy; DSAC-T and DSAC-AID in the same data regime with their own
  losses, alpha0 = e and actor delay 2 (GOPS), AID's MuJoCo lambda / beta / Huber settings.
- ``mujoco``, ``ant``, ``dmc``: the official GOPS scripts (example_train/dsacaid/, as summarised
  in shared/methods/dsac_aid.md): 4 envs x 5 steps per update, 10k warm-up transitions acting
  with the untrained policy, 3x256 networks; mujoco: GroupNorm(16, no affine) + ReLU, orthogonal
  init, lambda 0.71, beta0 0.1, beta lr 5e-3, reward scale 50, Huber; ant: GELU, lambda 0.5,
  beta0 0.03, beta lr 1.5e-4, reward scale 0.1, plain loss with sigma^3, lr 1e-4; dmc: as
  mujoco with lambda 1e-4, beta lr 2e-3, evaluation every 200k steps.

Evaluation (every ``eval_interval`` environment steps): ``eval_return`` = mean undiscounted
return of ``eval_episodes`` deterministic (tanh(mean)) episodes without injected noise;
``q_bias`` = GOPS evaluator_dsacaid.py's bias (``official_bias``) of the ensemble-mean Q, env
units; beta anneals on the same estimator of the bound mean Q - lambda std Q in scaled units;
``sigma_aleatoric`` = sqrt(mean_i sigma_i^2), ``sigma_epistemic`` = sqrt(Var_i Q_i) over the
first ``bias_horizon`` states, env units.

RECON: see ``sac.py``; the injected reward noise (``envs.py``); the evaluation is synchronous.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from icml26.core.errors import InputError
from icml26.methods.rl.sac import ALGOS

FAMILIES = ("auto", "sb3", "mujoco", "ant", "dmc")
# the GOPS scripts' data regime (shared by the mujoco, ant and dmc families)
_GOPS = dict(
    num_envs=4,
    env_steps_per_update=20,
    warmup_steps=10_000,
    warmup_actions="policy",
    hidden=(256, 256, 256),
    delay_update=2,
    sigma_loss="gradient",
    dsact_huber=False,
    norm_affine=False,
)
# family -> defaults; sb3: SAC as Stable-Baselines3 2.9.2 runs it, the others: the official scripts
PRESETS: dict[str, dict] = {
    "sb3": dict(
        num_envs=1,
        env_steps_per_update=1,
        warmup_steps=100,  # SB3 learning_starts=100 (CleanRL: 5e3)
        warmup_actions="uniform",
        hidden=(256, 256),
        delay_update=None,  # per algorithm: sac 1 (SB3), dsac-t / dsac-aid 2 (their official code)
        sigma_loss="gradient",
        dsact_huber=False,
        norm_affine=False,
        activation="relu",
        norm_groups=0,
        init="default",
        lam=0.71,
        beta0=0.1,
        beta_lr=5e-3,
        reward_scale=1.0,
        huber=True,
        homogeneous=True,
        lr_q=3e-4,
        lr_pi=3e-4,
        lr_alpha=3e-4,
        eval_interval=5_000,
    ),
    "mujoco": dict(
        _GOPS,
        activation="relu",
        norm_groups=16,
        init="orthogonal",
        lam=0.71,
        beta0=0.1,
        beta_lr=5e-3,
        reward_scale=50.0,
        huber=True,
        homogeneous=True,
        lr_q=3e-4,
        lr_pi=3e-4,
        lr_alpha=3e-4,
        eval_interval=50_000,
    ),
    "ant": dict(
        _GOPS,
        activation="gelu",
        norm_groups=0,
        init="default",
        lam=0.5,
        beta0=0.03,
        beta_lr=1.5e-4,
        reward_scale=0.1,
        huber=False,
        homogeneous=False,
        lr_q=1e-4,
        lr_pi=1e-4,
        lr_alpha=3e-4,
        eval_interval=50_000,
    ),
    "dmc": dict(
        _GOPS,
        activation="relu",
        norm_groups=16,
        init="orthogonal",
        lam=1e-4,
        beta0=0.1,
        beta_lr=2e-3,
        reward_scale=50.0,
        huber=True,
        homogeneous=True,
        lr_q=3e-4,
        lr_pi=3e-4,
        lr_alpha=3e-4,
        eval_interval=200_000,
    ),
}
# settings added with the sb3 family: a run recorded before they existed ran with these values
LEGACY = {"warmup_actions": "policy", "sigma_loss": "variance", "norm_affine": True, "dsact_huber": False}
CHECKPOINT = "checkpoint-{algo}.safetensors"


@dataclass(frozen=True)
class Config:
    env: str = "Hopper-v5"  # gymnasium id or dmc:domain-task
    algo: tuple[str, ...] = ("dsac-aid", "dsac-t", "sac")
    steps: int = 200_000  # environment steps per seed
    seeds: int = 3  # batched in one process
    family: str = "auto"  # auto (dmc: -> dmc, else sb3) | sb3 | mujoco | ant | dmc: whose defaults apply
    num_envs: int | None = None  # environments per seed (vector env); None: the family's (sb3 1, GOPS 4)
    vector_env: str = "sync"  # sync | async (gymnasium SyncVectorEnv / AsyncVectorEnv)
    env_steps_per_update: int | None = None  # environment steps per update (sb3 1; GOPS 20 = 4 envs x 5)
    warmup_steps: int | None = None  # transitions before the first update (sb3 100; GOPS 10k)
    warmup_actions: str | None = None  # uniform (random actions, SB3) | policy (the untrained policy, GOPS)
    buffer_size: int = 1_000_000
    batch_size: int = 256
    hidden: tuple[int, ...] | None = None  # sb3 (256, 256); GOPS (256, 256, 256)
    num_q: int = 4
    gamma: float = 0.99
    tau: float = 0.005
    delay_update: int | None = None  # actor/alpha/targets every k updates (sb3: sac 1, dsac-* 2; GOPS 2)
    sigma_loss: str | None = None  # dsac-aid Huber sigma loss: gradient (GOPS 1ea49ca) | variance (640e85a)
    dsact_huber: bool | None = None  # dsac-t: dsact.py's Huber branch (its MuJoCo script: false)
    norm_affine: bool | None = None  # GroupNorm learnable affine (GOPS: false)
    activation: str | None = None  # None: the family's
    norm_groups: int | None = None
    init: str | None = None
    lam: float | None = None
    beta0: float | None = None
    beta_lr: float | None = None
    reward_scale: float | None = None
    huber: bool | None = None
    homogeneous: bool | None = None
    lr_q: float | None = field(default=None, metadata={"gt": 0})  # critic learning rate (None: the family preset)
    lr_pi: float | None = field(default=None, metadata={"gt": 0})  # actor learning rate (None: the family preset)
    lr_alpha: float | None = field(default=None, metadata={"gt": 0})  # entropy-temperature learning rate (None: preset)
    eval_interval: int | None = None  # environment steps
    eval_episodes: int = 10
    bias_horizon: int = 200
    checkpoint_interval: int = 50_000  # environment steps (0: only at the end)
    reward_noise: float = 0.0  # injected heteroscedastic reward noise (controlled test)
    reward_noise_from: int | None = None  # environment step at which that noise switches on (None: from the start)
    d4rl: bool = False  # write the replay buffers (and policy rollouts) in the D4RL layout
    d4rl_rollout_steps: int = 0  # steps of final-policy rollouts per seed (0: none)

    def __post_init__(self):
        for k in (
            "steps",
            "seeds",
            "num_envs",
            "env_steps_per_update",
            "batch_size",
            "num_q",
            "eval_episodes",
            "bias_horizon",
            "delay_update",
        ):
            if getattr(self, k) is not None and getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        for k in ("warmup_steps", "checkpoint_interval", "d4rl_rollout_steps"):
            if getattr(self, k) is not None and getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        from icml26.methods.rl import check_algos

        check_algos(self.algo, ALGOS)
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if self.vector_env not in ("sync", "async"):
            raise ValueError(f"vector_env must be sync or async, got {self.vector_env!r}")
        if self.warmup_actions not in (None, "uniform", "policy"):
            raise ValueError(f"warmup_actions must be uniform or policy, got {self.warmup_actions!r}")
        from icml26.methods.rl.sac import SIGMA_LOSSES

        if self.sigma_loss is not None and self.sigma_loss not in SIGMA_LOSSES:
            raise ValueError(f"sigma_loss must be one of {', '.join(SIGMA_LOSSES)}, got {self.sigma_loss!r}")
        if self.num_envs and self.env_steps_per_update and self.env_steps_per_update % self.num_envs:
            raise ValueError(
                f"env_steps_per_update ({self.env_steps_per_update}) must be a multiple of num_envs ({self.num_envs})"
            )
        if self.hidden is not None and (not self.hidden or any(h < 1 for h in self.hidden)):
            raise ValueError(f"hidden must be positive layer widths, got {list(self.hidden)}")
        if self.buffer_size < self.batch_size:
            raise ValueError(f"buffer_size ({self.buffer_size}) must be >= batch_size ({self.batch_size})")
        if not 0 < self.gamma <= 1 or not 0 < self.tau <= 1:
            raise ValueError(f"gamma and tau must be in (0, 1], got {self.gamma}, {self.tau}")
        if self.reward_noise < 0 or not math.isfinite(self.reward_noise):
            raise ValueError(f"reward_noise must be >= 0, got {self.reward_noise}")
        if self.reward_noise_from is not None and self.reward_noise_from < 0:
            raise ValueError(f"reward_noise_from must be >= 0 environment steps, got {self.reward_noise_from}")
        if self.reward_noise_from is not None and self.reward_noise_from >= self.steps:
            raise ValueError(
                f"reward_noise_from ({self.reward_noise_from}) must be below steps ({self.steps}): "
                "the noise would never switch on"
            )
        if self.reward_noise_from is not None and self.reward_noise == 0:
            raise ValueError(
                "reward_noise_from needs reward_noise > 0 (the noise it switches on): add --set reward_noise=X"
            )
        if self.eval_interval is not None and self.eval_interval < 1:
            raise ValueError(f"eval_interval must be >= 1, got {self.eval_interval}")
        if self.reward_scale is not None and not self.reward_scale > 0:
            raise ValueError(f"reward_scale must be > 0, got {self.reward_scale}")
        if self.norm_groups and self.hidden and any(h % self.norm_groups for h in self.hidden):
            raise ValueError(f"hidden widths {list(self.hidden)} must be multiples of norm_groups ({self.norm_groups})")


def family_of(env_id: str) -> str:
    """``auto``'s family: dmc for dm_control ids, sb3 (SAC as SB3 / CleanRL run it) otherwise."""
    return "dmc" if env_id.startswith("dmc:") else "sb3"


def resolve_family(cfg: Config, legacy: Sequence[str] = ()) -> Config:
    """The Config with every None field set from its family's defaults (the values used are the
    ones in the config record). ``legacy``: fields a resumed run was recorded without; they take
    the value that run used (``LEGACY``)."""
    fam = family_of(cfg.env) if cfg.family == "auto" else cfg.family
    preset = {**PRESETS[fam], **{k: LEGACY[k] for k in legacy if k in LEGACY}}
    vals = {k: v for k, v in preset.items() if getattr(cfg, k) is None}
    cfg = dataclasses.replace(cfg, family=fam, **vals)
    if cfg.norm_groups and any(h % cfg.norm_groups for h in cfg.hidden):
        raise InputError(
            f"dsac-aid config: hidden widths {list(cfg.hidden)} must be multiples of norm_groups "
            f"({cfg.norm_groups}, family {fam}); set norm_groups=0 or other widths"
        )
    return cfg


def stored_config(out) -> dict | None:
    """The config record of the run in ``out`` (its records.jsonl's first line), or None."""
    p = Path(out) / "records.jsonl" if out is not None else None
    if p is None or not p.is_file():
        return None
    try:
        first = json.loads(p.read_text().split("\n", 1)[0])
    except ValueError:
        return None  # resume_records names the damaged file
    return first if isinstance(first, dict) and first.get("kind") == "config" else None


def for_resume(cfg: Config, stored: dict, given: set[str]) -> tuple[Config, Config]:
    """``--resume`` of the run whose config record is ``stored``: every setting not ``given`` now
    (recipe, --set, options) keeps the run's value, so a run made under earlier defaults goes on
    under them. Returns (the resolved Config to run, the Config to compare with the record: the
    settings the run was recorded without left None)."""
    fields = {f.name for f in dataclasses.fields(Config)}
    absent = [k for k in LEGACY if stored.get(k) is None]  # recorded before the setting existed (or as null)
    vals = {k: stored[k] for k in fields if k in stored and k not in given and k not in absent}
    for k in ("algo", "hidden"):
        if isinstance(vals.get(k), list):
            vals[k] = tuple(vals[k])
    cfg = dataclasses.replace(cfg, **vals)
    cfg = resolve_family(cfg, legacy=[k for k in absent if k not in given])
    return cfg, dataclasses.replace(cfg, **dict.fromkeys(k for k in absent if getattr(cfg, k) == LEGACY[k]))


def validate(cfg: Config) -> tuple[int, int]:
    """Check the environment id (InputError) and return (obs_dim, act_dim)."""
    from icml26.methods.rl.envs import env_dims

    return env_dims(cfg.env)


def delay_of(cfg: Config, algo: str) -> int:
    """The actor / alpha / target delay ``algo`` uses: ``cfg.delay_update``, or when the family
    leaves it per algorithm (sb3): 1 for sac (SB3's target_update_interval 1), 2 for the
    distributional learners (GOPS dsact.py / dsacaid.py delay_update=2)."""
    if cfg.delay_update is not None:
        return int(cfg.delay_update)
    return 1 if algo == "sac" else 2


def help_view(cfg: Config) -> Config:
    """``cfg`` for ``--set help``: a per-algorithm value (delay_update under sb3) shown as the
    values each selected algorithm uses, never None."""
    view = copy.copy(cfg)
    if cfg.delay_update is None:
        object.__setattr__(view, "delay_update", ", ".join(f"{a} {delay_of(cfg, a)}" for a in cfg.algo))
    return view


def effective(cfg: Config) -> dict:
    """Per algorithm, the values that differ between algorithms under ``cfg`` (the config
    record's ``effective`` field)."""
    out = {}
    for algo in cfg.algo:
        e = {"delay_update": delay_of(cfg, algo), "alpha0": 1.0 if algo == "sac" else round(math.e, 6)}
        if algo == "sac":
            e["critic_loss"] = "0.5 MSE to min twin target (SB3 / CleanRL)"
        elif algo == "dsac-t":
            e["critic_loss"] = "dsact.py " + ("Huber" if cfg.dsact_huber else "plain")
        else:
            e["critic_loss"] = f"dsacaid.py {'Huber, sigma ' + str(cfg.sigma_loss) if cfg.huber else 'plain'}"
            e["ensemble"] = cfg.num_q
        out[algo] = e
    return out


def learner_spec(cfg: Config, algo: str, obs_dim: int, act_dim: int, *, fused_adam: bool = True):
    """The ``LearnerSpec`` of ``algo`` under ``cfg`` (resolved); ``fused_adam``: torch's fused Adam
    kernel (the same update up to float rounding, ~8% faster per update on CPU)."""
    from icml26.methods.rl.sac import LearnerSpec

    return LearnerSpec(
        sigma_loss=cfg.sigma_loss or "gradient",
        dsact_huber=bool(cfg.dsact_huber),
        norm_affine=bool(cfg.norm_affine),
        fused_adam=fused_adam,
        algo=algo,
        obs_dim=obs_dim,
        act_dim=act_dim,
        seeds=cfg.seeds,
        hidden=tuple(cfg.hidden),
        activation=cfg.activation,
        norm_groups=cfg.norm_groups,
        init=cfg.init,
        lr_q=cfg.lr_q,
        lr_pi=cfg.lr_pi,
        lr_alpha=cfg.lr_alpha,
        gamma=cfg.gamma,
        tau=cfg.tau,
        tau_b=cfg.tau,
        delay_update=delay_of(cfg, algo),
        num_q=cfg.num_q,
        lam=cfg.lam,
        beta0=cfg.beta0,
        beta_lr=cfg.beta_lr,
        huber=cfg.huber,
        homogeneous=cfg.homogeneous,
    )


def tune_allocator() -> bool:
    """Keep freed heap memory in the process (glibc ``mallopt``: mmap threshold 64 MiB, trim
    threshold 1 GiB) so that the update's many 0.1-4 MiB temporaries reuse pages instead of
    faulting fresh zeroed ones on every allocation (~15% of a one-seed update on CPU). A process
    setting: the command calls it, the library does not. Returns whether it applied (glibc only)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, 64 << 20)) and bool(
            libc.mallopt(-1, 1 << 30)
        )  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False


def _algo_seed(seed: int, algo: str) -> int:
    return int(np.random.SeedSequence([seed, ALGOS.index(algo)]).generate_state(1, np.uint32)[0])


def _env_seed(seed: int, k: int, n: int, kind: int) -> int:
    """Base seed of environment n of seed k (kind 0: training, 1: evaluation episode n)."""
    return int(np.random.SeedSequence([seed + k, n, kind]).generate_state(1, np.uint32)[0])


# ---------------- evaluation ----------------


def official_bias(q: np.ndarray, r: np.ndarray, logp: np.ndarray, alpha: float, gamma: float, horizon: int) -> float:
    """One episode's Q bias as GOPS's evaluator_dsacaid.py (640e85a) computes it.

    q: (L,) the critic's value at every state of the episode (the bound mean Q - lam std Q, or
    the mean Q); r: (L,) scaled rewards; logp: (L,) log pi of the actions taken. The soft
    Monte-Carlo return is bootstrapped from q at the episode's last state, after a termination
    too, and the last reward is dropped: G_{L-2} = r_{L-2} + gamma (q_{L-1} - alpha logp_{L-1}),
    G_t = r_t + gamma (G_{t+1} - alpha logp_{t+1}). Returns mean_{t < N} (q_t - G_t) with
    N = min(horizon, L - 1); NaN for a one-step episode."""
    L = len(r)
    n = min(horizon, L - 1)
    if n < 1:
        return float("nan")
    g = np.zeros(L - 1)
    nxt = q[-1] - alpha * logp[-1]
    for t in range(L - 2, -1, -1):
        g[t] = r[t] + gamma * nxt
        nxt = g[t] - alpha * logp[t]
    return float(np.mean(q[:n] - g[:n]))


def evaluate(learner, cfg: Config, seed: int, device: str) -> dict[str, np.ndarray]:
    """Deterministic evaluation of the S batched policies: ``eval_episodes`` episodes each (no
    injected noise), all stepped together. Returns per-seed arrays (S,): eval_return, q_bias
    (ensemble-mean Q, env units), bias_bound (the bound mean Q - lam std Q, scaled units: beta's
    signal B), both by ``official_bias`` averaged over episodes, and sigma_aleatoric,
    sigma_epistemic (env units) over the first ``bias_horizon`` states."""
    import torch

    from icml26.methods.rl.envs import SeededEnv

    S, E, H = cfg.seeds, cfg.eval_episodes, cfg.bias_horizon
    scale = float(cfg.reward_scale)
    envs = [[SeededEnv(cfg.env, _env_seed(seed, k, e, 1)) for e in range(E)] for k in range(S)]
    try:
        obs = np.stack([np.stack([env.reset()[0] for env in row]) for row in envs])  # (S, E, o)
        active = np.ones((S, E), bool)
        ret = np.zeros((S, E))
        length = np.zeros((S, E), int)
        hist: dict[str, list] = {"obs": [], "act": [], "r": [], "logp": []}  # r, logp: every step; obs, act: < H
        last_obs, last_act = np.zeros_like(obs), None  # each episode's last state and action
        t = 0
        while active.any():
            with torch.no_grad():
                a, logp = learner.policy(torch.as_tensor(obs, device=device), deterministic=True)
            a_np, logp_np = a.cpu().numpy(), logp.cpu().numpy()
            if last_act is None:
                last_act = np.zeros_like(a_np)
            last_obs[active], last_act[active] = obs[active], a_np[active]
            if t < H:
                hist["obs"].append(obs.copy()), hist["act"].append(a_np)
            hist["logp"].append(np.where(active, logp_np, 0.0))
            r_t = np.zeros((S, E))
            for k in range(S):
                for e in range(E):
                    if active[k, e]:
                        o2, r, term, trunc, _ = envs[k][e].step(a_np[k, e])
                        ret[k, e] += r
                        r_t[k, e] = r * scale
                        obs[k, e] = o2
                        length[k, e] += 1
                        if term or trunc:
                            active[k, e] = False
            hist["r"].append(r_t)
            t += 1
    finally:
        for row in envs:
            for env in row:
                env.close()
    T = len(hist["obs"])
    O, A = np.stack(hist["obs"], 1), np.stack(hist["act"], 1)  # (S, T, E, ...), T = min(H, longest)
    R, LP = np.stack(hist["r"], 1), np.stack(hist["logp"], 1)  # (S, longest, E)
    sp = learner.spec

    def critic(o, a):  # (S, n, ...) -> Q (S, M, n), sigma^2 or None
        q, sig = learner.critic_forward(
            learner.critic, torch.as_tensor(o, device=device), torch.as_tensor(a, device=device)
        )
        q = q.cpu().numpy().astype(np.float64)
        return q, None if sig is None else sig.cpu().numpy().astype(np.float64) ** 2

    with torch.no_grad():
        q, sig2 = critic(O.reshape(S, T * E, -1), A.reshape(S, T * E, -1))
        q, sig2 = q.reshape(S, -1, T, E), None if sig2 is None else sig2.reshape(S, -1, T, E)
        ql, _ = critic(last_obs, last_act)  # (S, M, E)
    lam = sp.lam if sp.aid else 0.0

    def bound(x, axis):  # mean - lam std over the ensemble (the evaluator: sqrt(var), unbiased)
        return x.mean(axis) - lam * np.sqrt(x.var(axis, ddof=1))

    qmean, qvar, qb = q.mean(1), q.var(1, ddof=1), bound(q, 1)  # (S, T, E)
    lmean, lb = ql.mean(1), bound(ql, 1)  # (S, E)
    alpha = np.exp(learner.log_alpha.detach().cpu().numpy().astype(np.float64))  # (S,)
    out = {k: np.zeros(S) for k in ("eval_return", "q_bias", "sigma_aleatoric", "sigma_epistemic", "bias_bound")}
    for k in range(S):
        d_mean, d_bound, ale, epi = [], [], [], []
        for e in range(E):
            L = int(length[k, e])
            n = min(H, L)
            r, lp = R[k, :L, e], LP[k, :L, e]
            # the states beyond the first H enter only through the last state's bootstrap
            qm = np.concatenate([qmean[k, :n, e], np.zeros(L - n)]) if L > n else qmean[k, :L, e].copy()
            qbb = np.concatenate([qb[k, :n, e], np.zeros(L - n)]) if L > n else qb[k, :L, e].copy()
            qm[-1], qbb[-1] = lmean[k, e], lb[k, e]
            d_mean.append(official_bias(qm, r, lp, alpha[k], cfg.gamma, H))
            d_bound.append(official_bias(qbb, r, lp, alpha[k], cfg.gamma, H))
            epi.append(qvar[k, :n, e])
            if sig2 is not None:
                ale.append(sig2[k, :, :n, e].mean(0))
        out["eval_return"][k] = ret[k].mean()
        dm, db = np.asarray(d_mean), np.asarray(d_bound)
        out["q_bias"][k] = np.nanmean(dm) / scale if np.isfinite(dm).any() else float("nan")
        out["bias_bound"][k] = np.nanmean(db) if np.isfinite(db).any() else float("nan")
        out["sigma_epistemic"][k] = math.sqrt(np.concatenate(epi).mean()) / scale
        out["sigma_aleatoric"][k] = math.sqrt(np.concatenate(ale).mean()) / scale if ale else float("nan")
    return out


# ---------------- checkpoints ----------------


def _meta(cfg: Config, algo: str, seed: int) -> str:
    from icml26.core.recipe import config_dict

    c = config_dict(cfg)
    if c.get("reward_noise_from") is None:  # unset: the meta of checkpoints written before the setting existed
        c.pop("reward_noise_from", None)
    for k, v in LEGACY.items():  # at the value runs had before the setting existed: the meta they wrote
        if k in c and c[k] == v:
            c.pop(k)
    return json.dumps({"config": c, "algo": algo, "seed": seed}, sort_keys=True)


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
) -> Iterator[dict]:
    """Train ``cfg.seeds`` batched seeds of ``algo``; yield a ``step`` record per seed at each
    evaluation and a ``result`` record at the end. ``stop_after_steps`` (tests): stop the loop
    there (after checkpointing) without a result, as an interruption would."""
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
            t = load_checkpoint(ckpt, meta)
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
        bar.advance(loop["step"])
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
            if buf.size >= max(cfg.warmup_steps, 1):  # sampled with replacement (SB3 updates from step 101)
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
    yield {
        "kind": "summary",
        "env": cfg.env,
        "family": cfg.family,
        "algos": list(cfg.algo),
        "seeds": cfg.seeds,
        "steps": cfg.steps,
        **v,  # best_algo (only when its interval separates it), tied_with_best_algo
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
