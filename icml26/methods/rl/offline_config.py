"""Settings of ``icml26 bfq train`` (torch-free: checked before any heavy import).

Each method has its own networks, as its official code builds them (docs/bfq.md, "Method"):
BFQ and BC use ``hidden`` / ``activation`` (3x256 ReLU: Diffusion-QL's widths; with its Mish, BFQ's
one-step map collapsed on the bandit test, docs/bfq.md); FQL 4x512
GELU with LayerNorm in the critic (seohongpark/fql agents/fql.py ``get_config``); Diffusion-QL
3x256 Mish with a time-embedding MLP (agents/model.py); IQL and TD3+BC 2x256 ReLU
(implicit_q_learning configs/mujoco_config.py, TD3_BC.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from icml26.core.settings import Work, setting
from icml26.methods.rl import check_algos

ALGOS = ("bfq", "fql", "diffusion-ql", "iql", "td3bc", "bc")
ACTIVATIONS = ("relu", "mish", "gelu", "tanh")
MAX_STATE_BYTES = 16 * 2**30  # networks + Adam state of all batched seeds
MAX_TRAIN_FLOPS = 1e18  # ~230 days of one core at 50 GFLOP/s: only a mistyped size is refused (1M updates: ~6e17)
MAX_EVAL_STEPS = 10**9  # evaluation environment steps of one run

# Diffusion-QL's per-dataset gradient-norm clip (Zhendong-Wang/Diffusion-Policies-for-Offline-RL
# main.py ``hyperparameters['<task>-<kind>-v2']['gn']``); other datasets: its constructor's 1.0.
DQL_GRAD_NORM = {
    ("halfcheetah", "medium"): 9.0,
    ("hopper", "medium"): 9.0,
    ("walker2d", "medium"): 1.0,
    ("halfcheetah", "medium-replay"): 2.0,
    ("hopper", "medium-replay"): 4.0,
    ("walker2d", "medium-replay"): 4.0,
    ("halfcheetah", "medium-expert"): 7.0,
    ("hopper", "medium-expert"): 5.0,
    ("walker2d", "medium-expert"): 5.0,
}
DQL_GRAD_NORM_DEFAULT = 1.0


@dataclass(frozen=True)
class Config:
    dataset: str = ""  # a D4RL hdf5 file or a Minari dataset folder (icml26 bfq make-dataset writes the former)
    env: str | None = None  # gymnasium id to evaluate in (None: the dataset's own, else no evaluation)
    algo: tuple[str, ...] = ALGOS  # methods to train: bfq | fql | diffusion-ql | iql | td3bc | bc
    steps: int = setting(100_000, "gradient updates per seed (the papers: 1M)", unit="updates", sized=10**9)
    seeds: int = setting(3, "seeds per method, batched in one process", sized=1000)
    batch_size: int = setting(256, "transitions per update", sized=65536)
    hidden: tuple[int, ...] = setting((256, 256, 256), "hidden widths of BFQ's and BC's networks", sized=65536)
    activation: Literal["relu", "mish", "gelu", "tanh"] = "relu"  # hidden activation of BFQ's and BC's networks
    lr: float = 3e-4  # Adam learning rate of every network
    gamma: float = 0.99  # discount factor
    tau: float = 0.005  # Polyak rate of the target critics
    normalize_obs: bool = True  # BFQ and BC; TD3+BC always (its recipe), FQL / DQL / IQL never (their code)
    drop_nonfinite: bool = False  # drop dataset rows holding NaN / inf (counted in the data record) instead of refusing
    eval_interval: int = 10_000  # updates between evaluations
    eval_episodes: int = setting(10, "episodes per evaluation (per seed)", sized=10**5)
    max_episode_steps: int = setting(
        1000,
        "evaluation episode cap; also the episode length that splits a file without timeouts (D4RL's rule)",
        unit="environment steps",
        sized=10**6,
    )
    checkpoint_interval: int = 10_000  # updates (0: only at the end)
    timing_s: float = setting(0.5, "seconds per inference timing (actions_per_s_*)", sized=3600)
    ema_decay: float = 0.995  # BFQ / DQL EMA actor
    ema_every: int = 5  # BFQ / DQL: updates between EMA actor updates
    ema_start: int = 1000  # BFQ / DQL: update from which the EMA actor averages (before: BFQ copies the actor)
    # BFQ (lam 0.5, D_max 1e-3, eta from {0.001 .. 1} per task; docs/bfq.md for eta, time_scale, onestep_frac)
    bfq_eta: float = 0.1  # BFQ eta: weight of the Q term, over mean |Q| of the dataset actions
    bfq_lam: float = 0.5  # BFQ lambda: probability of the boundary loss (else the composition loss) per update
    bfq_d_max: float = 1e-3  # BFQ D_max: largest time step of the boundary loss
    bfq_time_embed: int = setting(64, "BFQ: sinusoidal features per time input (even)", sized=65536)
    bfq_time_scale: float = 10.0  # BFQ: the time features are of this x t
    bfq_onestep_frac: float = 0.25  # BFQ: share of composition-loss rows at (r, t) = (0, 1)
    # FQL (seohongpark/fql agents/fql.py get_config; normalize_q_loss on as its README advises for new tasks;
    # alpha from the validation grid in docs/bfq.md)
    fql_hidden: tuple[int, ...] = setting((512, 512, 512, 512), "FQL hidden widths (actor and critic)", sized=65536)
    fql_alpha: float = 10.0  # FQL alpha: weight of the distillation loss
    fql_flow_steps: int = setting(10, "FQL: Euler steps of the BC flow", sized=10**4)
    fql_q_agg: Literal["mean", "min"] = "mean"  # FQL: target over the two critics (its default: mean)
    fql_normalize_q: bool = True  # FQL normalize_q_loss: Q term over mean |Q|
    # Diffusion-QL (main.py: N = 5, eta = 1 on locomotion, VP schedule, 50 candidates at evaluation)
    dql_hidden: tuple[int, ...] = setting((256, 256, 256), "Diffusion-QL hidden widths", sized=65536)
    dql_steps: int = setting(5, "Diffusion-QL N: denoising steps", sized=10**4)
    dql_eta: float = 1.0  # Diffusion-QL eta: weight of the Q term
    dql_grad_norm: float | None = None  # None: main.py's value for the dataset (DQL_GRAD_NORM), else 1.0
    dql_candidates: int = setting(
        50, "Diffusion-QL: sampled actions per state at evaluation, picked by softmax(Q)", sized=10**5
    )
    # IQL (implicit_q_learning configs/mujoco_config.py: expectile 0.7, temperature 3; cosine actor lr)
    iql_hidden: tuple[int, ...] = setting((256, 256), "IQL hidden widths", sized=65536)
    iql_expectile: float = 0.7  # IQL tau: expectile of the value loss
    iql_beta: float = 3.0  # IQL inverse temperature of the advantage weights
    iql_reward_norm: bool = True  # IQL: rewards x 1000 / (max - min episode return), as its locomotion code
    iql_cosine_lr: bool = True  # IQL: cosine decay of the actor learning rate over the run
    # TD3+BC (sfujim/TD3_BC main.py)
    td3bc_hidden: tuple[int, ...] = setting((256, 256), "TD3+BC hidden widths", sized=65536)
    td3bc_alpha: float = 2.5  # TD3+BC alpha: Q-term weight over mean |Q|
    td3bc_policy_noise: float = 0.2  # TD3+BC target policy smoothing noise std
    td3bc_noise_clip: float = 0.5  # TD3+BC bound of that noise
    td3bc_policy_freq: int = 2  # TD3+BC: critic updates per actor / target update

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
            "dql_candidates",
            "td3bc_policy_freq",
            "bfq_time_embed",
        ):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        for k in ("checkpoint_interval", "ema_start"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        check_algos(self.algo, ALGOS)
        for k in ("hidden", "fql_hidden", "dql_hidden", "iql_hidden", "td3bc_hidden"):
            v = getattr(self, k)
            if not v or any(h < 1 for h in v):
                raise ValueError(f"{k} must be positive layer widths, got {list(v)}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        if self.fql_q_agg not in ("mean", "min"):
            raise ValueError(f"fql_q_agg must be 'mean' or 'min', got {self.fql_q_agg!r}")
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
        if self.dql_grad_norm is not None and self.dql_grad_norm < 0:
            raise ValueError(f"dql_grad_norm must be >= 0 (0: no clipping) or null, got {self.dql_grad_norm}")
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

    def work(self) -> list[Work]:
        """``cost`` at the smallest dimensions (1-d observations and actions): a lower bound of the
        run's memory and flops, checked before the dataset is read (``offline.check_size`` checks
        them again at the dataset's dimensions)."""
        return cost(self, 1, 1)

    def widths(self, algo: str) -> tuple[int, ...]:
        """The hidden widths of ``algo``'s networks."""
        return {
            "fql": self.fql_hidden,
            "diffusion-ql": self.dql_hidden,
            "iql": self.iql_hidden,
            "td3bc": self.td3bc_hidden,
        }.get(algo, self.hidden)


def cost(cfg: Config, obs_dim: int, act_dim: int) -> list[Work]:
    """The run's memory and work at these dimensions. Per seed and method: about 8 networks of its
    widths, float32, with gradients and Adam's two moments (16 bytes a weight); an update costs ~6
    flops per weight and sample, times the flow / denoising steps of the method; each evaluation
    rolls out eval_episodes x max_episode_steps environment steps per seed and method."""

    def per_net(algo):
        w = (obs_dim + act_dim, *cfg.widths(algo), max(act_dim, 1))
        return sum(a * b + b for a, b in itertools.pairwise(w))

    biggest = max(cfg.algo, key=per_net)
    chain = {"diffusion-ql": cfg.dql_steps, "fql": cfg.fql_flow_steps}
    flops = sum(6.0 * 8 * per_net(a) * cfg.batch_size * cfg.steps * cfg.seeds * chain.get(a, 1) for a in cfg.algo)
    runs = cfg.seeds * len(cfg.algo)
    n_eval = cfg.steps // cfg.eval_interval + 1
    return [
        Work(
            cfg.seeds * 8 * per_net(biggest) * 16,
            MAX_STATE_BYTES,
            "bytes of network and Adam state",
            "seeds or hidden",
            f"{cfg.seeds} batched seeds of {list(cfg.widths(biggest))} networks",
            "hold",
        ),
        Work(
            flops,
            MAX_TRAIN_FLOPS,
            "flops of training",
            "--steps, seeds, batch_size, hidden or --algo",
            f"{len(cfg.algo)} algos x {cfg.seeds} seeds x {cfg.steps} steps x batch {cfg.batch_size}",
            "take",
        ),
        Work(
            n_eval * cfg.eval_episodes * cfg.max_episode_steps * runs,
            MAX_EVAL_STEPS,
            "evaluation environment steps",
            "eval_episodes or max_episode_steps, or raise eval_interval",
            f"{n_eval} evaluations x {cfg.eval_episodes} episodes x {cfg.max_episode_steps} steps x {runs} runs",
            "take",
        ),
    ]


def dql_grad_norm(cfg: Config, family: str | None, kind: str | None) -> float:
    """The gradient-norm clip Diffusion-QL uses on this dataset (0: none)."""
    if cfg.dql_grad_norm is not None:
        return float(cfg.dql_grad_norm)
    return DQL_GRAD_NORM.get((family, kind), DQL_GRAD_NORM_DEFAULT)


KINDS = ("random", "medium", "medium-replay", "expert", "medium-expert")  # D4RL's dataset kinds
MAX_ENV_STEPS = 10**9  # environment steps of one make-dataset run (SAC training plus rollouts)
MAX_SAC_STEPS = 10**7  # the SAC run keeps all its transitions (its buffer is the medium-replay data)


@dataclass(frozen=True)
class MakeConfig:
    """Settings of ``icml26 bfq make-dataset`` (``offline_make``: D4RL's rules on a SAC run)."""

    env: str = "Hopper-v5"  # gymnasium id of the SAC run and the rollouts (Hopper-v5, Walker2d-v5, HalfCheetah-v5)
    kinds: tuple[str, ...] = (
        "random",
        "medium",
        "medium-replay",
        "expert",
    )  # datasets to write: random | medium | medium-replay | expert | medium-expert
    sac_steps: int = setting(
        100_000, "environment steps of the SAC run (without --from)", unit="environment steps", sized=MAX_SAC_STEPS
    )
    eval_interval: int = 5_000  # environment steps between evaluations / snapshots
    eval_episodes: int = setting(5, "deterministic episodes per evaluation of the SAC run", sized=10**5)
    transitions: int = setting(100_000, "transitions per rollout dataset (D4RL: 1M)", sized=10**7)
    medium_fraction: float = 1.0 / 3.0  # medium: the first snapshot whose return reaches this fraction of the reference
    # medium's reference: d4rl (D4RL's expert return, D4RL families) | final (the run's final return)
    medium_reference: Literal["d4rl", "final"] = "d4rl"
    expert_fraction: float = 0.8  # of D4RL's expert reference return (for D4RL families)
    hidden: tuple[int, ...] | None = setting(
        None, "SAC hidden widths (None: dsac-aid's sb3 family defaults, SB3's 256,256)", sized=65536
    )
    batch_size: int = setting(256, "SAC transitions per update", sized=65536)
    warmup_steps: int | None = setting(
        None,
        "SAC transitions before the first update (None: the sb3 family's 100)",
        unit="environment steps",
        sized=MAX_SAC_STEPS,
    )
    env_steps_per_update: int | None = None  # SAC environment steps per update (None: the sb3 family's 1)

    def work(self) -> list[Work]:
        """Environment steps: the SAC run plus one rollout dataset per kind that rolls a policy out."""
        rollouts = sum(k in ("random", "medium", "expert", "medium-expert") for k in self.kinds)
        return [
            Work(
                self.sac_steps + rollouts * self.transitions,
                MAX_ENV_STEPS,
                "environment steps",
                "sac_steps, transitions or kinds",
                f"{self.sac_steps} SAC steps + {rollouts} rollout datasets x {self.transitions}",
                "take",
            )
        ]

    def __post_init__(self):
        for k in ("sac_steps", "eval_interval", "eval_episodes", "transitions", "batch_size", "env_steps_per_update"):
            if getattr(self, k) is not None and getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        if self.medium_reference not in ("d4rl", "final"):
            raise ValueError(f"medium_reference must be 'd4rl' or 'final', got {self.medium_reference!r}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f"kinds {bad[0] if bad else ''!r} is not one of {', '.join(KINDS)}")
        if not 0 < self.medium_fraction < 1 or not 0 < self.expert_fraction <= 1:
            raise ValueError(
                "medium_fraction must be in (0, 1) and expert_fraction in (0, 1], "
                f"got {self.medium_fraction}, {self.expert_fraction}"
            )


def sac_config(mc: MakeConfig):
    """The dsac-aid Config of the SAC run: plain SAC with dsac-aid's ``sb3`` family defaults
    (Stable-Baselines3's SAC), unless ``hidden``, ``warmup_steps`` or ``env_steps_per_update`` are set."""
    from icml26.methods.rl import dsac_config

    over = {k: getattr(mc, k) for k in ("warmup_steps", "env_steps_per_update") if getattr(mc, k) is not None}
    if mc.hidden is not None:
        over["hidden"] = tuple(mc.hidden)
    cfg = dsac_config.Config(
        env=mc.env,
        algo=("sac",),
        family="sb3",
        steps=mc.sac_steps,
        seeds=1,
        num_envs=1,
        buffer_size=max(mc.sac_steps + 1, mc.batch_size),
        batch_size=mc.batch_size,
        eval_interval=mc.eval_interval,
        eval_episodes=mc.eval_episodes,
        bias_horizon=50,
        checkpoint_interval=mc.eval_interval,
        **over,
    )
    return dsac_config.resolve_family(cfg)
