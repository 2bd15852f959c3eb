"""Settings of ``icml26 bfq train`` (torch-free: checked before any heavy import).

Each method has its own networks, as its official code builds them (docs/bfq.md, "Method"):
BFQ and BC use ``hidden`` / ``activation`` (3x256 ReLU: Diffusion-QL's widths; with its Mish, BFQ's
one-step map collapsed on the bandit test, docs/bfq.md); FQL 4x512
GELU with LayerNorm in the critic (seohongpark/fql agents/fql.py ``get_config``); Diffusion-QL
3x256 Mish with a time-embedding MLP (agents/model.py); IQL and TD3+BC 2x256 ReLU
(implicit_q_learning configs/mujoco_config.py, TD3_BC.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from icml26.methods.rl import check_algos

ALGOS = ("bfq", "fql", "diffusion-ql", "iql", "td3bc", "bc")
ACTIVATIONS = ("relu", "mish", "gelu", "tanh")

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
    algo: tuple[str, ...] = ALGOS
    steps: int = 100_000  # gradient updates per seed
    seeds: int = 3  # batched in one process
    batch_size: int = 256
    hidden: tuple[int, ...] = (256, 256, 256)  # BFQ and BC
    activation: str = "relu"
    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    normalize_obs: bool = True  # BFQ and BC; TD3+BC always (its recipe), FQL / DQL / IQL never (their code)
    drop_nonfinite: bool = False  # drop dataset rows holding NaN / inf (counted in the data record) instead of refusing
    eval_interval: int = 10_000  # updates
    eval_episodes: int = 10
    max_episode_steps: int = 1000  # also the episode length that splits a file without timeouts (D4RL's rule)
    checkpoint_interval: int = 10_000  # updates (0: only at the end)
    timing_s: float = 0.5  # seconds per inference timing (actions_per_s_*)
    ema_decay: float = 0.995  # BFQ / DQL EMA actor
    ema_every: int = 5
    ema_start: int = 1000
    # BFQ (lam 0.5, D_max 1e-3, eta from {0.001 .. 1} per task; docs/bfq.md for eta, time_scale, onestep_frac)
    bfq_eta: float = 0.1
    bfq_lam: float = 0.5
    bfq_d_max: float = 1e-3
    bfq_time_embed: int = 64
    bfq_time_scale: float = 10.0
    bfq_onestep_frac: float = 0.25
    # FQL (seohongpark/fql agents/fql.py get_config; normalize_q_loss on as its README advises for new tasks;
    # alpha from the validation grid in docs/bfq.md)
    fql_hidden: tuple[int, ...] = (512, 512, 512, 512)
    fql_alpha: float = 10.0
    fql_flow_steps: int = 10
    fql_q_agg: str = "mean"
    fql_normalize_q: bool = True
    # Diffusion-QL (main.py: N = 5, eta = 1 on locomotion, VP schedule, 50 candidates at evaluation)
    dql_hidden: tuple[int, ...] = (256, 256, 256)
    dql_steps: int = 5
    dql_eta: float = 1.0
    dql_grad_norm: float | None = None  # None: main.py's value for the dataset (DQL_GRAD_NORM), else 1.0
    dql_candidates: int = 50
    # IQL (implicit_q_learning configs/mujoco_config.py: expectile 0.7, temperature 3; cosine actor lr)
    iql_hidden: tuple[int, ...] = (256, 256)
    iql_expectile: float = 0.7
    iql_beta: float = 3.0
    iql_reward_norm: bool = True
    iql_cosine_lr: bool = True
    # TD3+BC (sfujim/TD3_BC main.py)
    td3bc_hidden: tuple[int, ...] = (256, 256)
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

    def widths(self, algo: str) -> tuple[int, ...]:
        """The hidden widths of ``algo``'s networks."""
        return {
            "fql": self.fql_hidden,
            "diffusion-ql": self.dql_hidden,
            "iql": self.iql_hidden,
            "td3bc": self.td3bc_hidden,
        }.get(algo, self.hidden)


def dql_grad_norm(cfg: Config, family: str | None, kind: str | None) -> float:
    """The gradient-norm clip Diffusion-QL uses on this dataset (0: none)."""
    if cfg.dql_grad_norm is not None:
        return float(cfg.dql_grad_norm)
    return DQL_GRAD_NORM.get((family, kind), DQL_GRAD_NORM_DEFAULT)
