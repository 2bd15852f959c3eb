"""Settings of ``icml26 dsac-aid``: the ``Config`` dataclass, the per-family defaults (``sb3``:
Stable-Baselines3 2.9.2's SAC data regime; ``mujoco``, ``ant``, ``dmc``: the official GOPS scripts
``example_train/dsacaid/`` at 640e85a), their resolution for a run and for ``--resume``, the
learner spec they build, and the seeds derived from them. Torch-free: settings are checked before
heavy imports.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from icml26.core.errors import InputError
from icml26.core.settings import Work, setting
from icml26.methods.rl.dsac_names import ALGOS, SIGMA_LOSSES  # noqa: F401  (re-exported)

MAX_STEPS = 10**10  # environment steps of one run, all seeds and learners (the official MuJoCo script: 3e7 a seed)
MAX_NET_BYTES = 64 * 2**30  # network state (weights, gradients, Adam moments) of one run

FAMILIES = ("auto", "sb3", "mujoco", "ant", "dmc")
# family -> defaults, each written once: what every family shares (the GOPS MuJoCo script's loss,
# networks and learning rates), the GOPS scripts' data regime, then each family's own values
_COMMON = dict(
    tanh_epsilon=1e-6,  # log(1 - tanh^2 + 1e-6): SB3, CleanRL and GOPS (action_distributions EPS) alike
    sigma_loss="gradient",
    dsact_huber=False,
    norm_affine=False,
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
)
_GOPS = dict(  # example_train/dsacaid/ (mujoco, ant, dmc): 4 envs x 5 steps per update, 10k policy warm-up
    _COMMON,
    num_envs=4,
    env_steps_per_update=20,
    warmup_steps=10_000,
    warmup_actions="policy",
    hidden=(256, 256, 256),
    delay_update=2,
    log_std_max=0.5,  # GOPS's policy bound, for every learner
    update_order="simultaneous",  # GOPS: every gradient of an iteration before any step
)
PRESETS: dict[str, dict] = {
    "sb3": dict(  # SAC as Stable-Baselines3 2.9.2 runs it
        _COMMON,
        num_envs=1,
        env_steps_per_update=1,
        warmup_steps=100,  # SB3 learning_starts=100 (CleanRL: 5e3)
        warmup_actions="uniform",
        hidden=(256, 256),
        delay_update=None,  # per algorithm: sac 1 (SB3), dsac-t / dsac-aid 2 (their official code)
        norm_groups=0,
        init="default",
        reward_scale=1.0,
        eval_interval=5_000,
    ),
    "mujoco": dict(_GOPS, eval_interval=50_000),
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
        eval_interval=50_000,
    ),
    "dmc": dict(_GOPS, lam=1e-4, beta_lr=2e-3, eval_interval=200_000),
}
# settings added with the sb3 family: a run recorded before they existed ran with these values
LEGACY = {
    "warmup_actions": "policy",
    "sigma_loss": "variance",
    "norm_affine": True,
    "dsact_huber": False,
    "log_std_max": 0.5,
    "update_order": "simultaneous",
    "tanh_epsilon": 0.0,
}
# settings whose unset value (None, recorded as null) means "per algorithm", not "recorded before it existed"
PER_ALGO = frozenset({"delay_update", "log_std_max", "update_order"})
CHECKPOINT = "checkpoint-{algo}.safetensors"


@dataclass(frozen=True)
class Config:
    env: str = "Hopper-v5"  # gymnasium id (Hopper-v5, InvertedPendulum-v5, ...) or dmc:domain-task
    algo: tuple[str, ...] = ("dsac-aid", "dsac-t", "sac")  # learners to train: sac | dsac-t | dsac-aid | dsac-aid-epi
    steps: int = setting(200_000, "environment steps per seed", unit="environment steps", sized=MAX_STEPS)
    seeds: int = setting(3, "seeds per learner, batched in one process", sized=1000)
    family: Literal["auto", "sb3", "mujoco", "ant", "dmc"] = (
        "auto"  # whose defaults fill the settings left unset: auto (dmc: ids -> dmc, else sb3), sb3, or a GOPS script
    )
    num_envs: int | None = setting(None, "environments per seed (vector env); sb3 1, GOPS 4", sized=1024)
    vector_env: Literal["sync", "async"] = "sync"  # gymnasium SyncVectorEnv (one process) or AsyncVectorEnv
    env_steps_per_update: int | None = None  # environment steps per update (sb3 1; GOPS 20 = 4 envs x 5)
    warmup_steps: int | None = setting(
        None,
        "transitions collected before the first update (sb3 100; GOPS 10k)",
        unit="environment steps",
        sized=MAX_STEPS,
    )
    warmup_actions: Literal["uniform", "policy"] | None = (
        None  # how warm-up acts: uniform (random actions, SB3) | policy (the untrained policy, GOPS)
    )
    buffer_size: int = setting(1_000_000, "replay buffer capacity per seed (transitions)", sized=10**8)
    batch_size: int = setting(256, "transitions per critic / actor update", sized=65536)
    hidden: tuple[int, ...] | None = setting(
        None, "hidden layer widths of every network (sb3 256,256; GOPS 256,256,256)", sized=65536
    )
    num_q: int = setting(4, "dsac-aid: critics in the ensemble (sac and dsac-t use 2)", sized=1024)
    gamma: float = 0.99  # discount factor
    tau: float = 0.005  # Polyak rate of the target networks (and of DSAC-T's / AID's running statistics)
    delay_update: int | None = None  # actor/alpha/targets every k updates (sb3: sac 1, dsac-* 2; GOPS 2)
    log_std_max: float | None = None  # policy log std upper clamp (sb3: sac 2 as SB3 / CleanRL, dsac-* 0.5; GOPS 0.5)
    tanh_epsilon: float | None = setting(
        None, "policy log-density: log(1 - tanh(u)^2 + eps) as SB3 / CleanRL / GOPS (1e-6); 0 = exact", ge=0, le=1
    )
    update_order: Literal["sequential", "simultaneous"] | None = (
        None  # sequential: critic step, then the actor loss on it (SB3, CleanRL); simultaneous: grads first (GOPS)
    )
    sigma_loss: Literal["gradient", "variance"] | None = (
        None  # dsac-aid Huber sigma loss: gradient (GOPS 1ea49ca) | variance (640e85a)
    )
    dsact_huber: bool | None = None  # dsac-t: dsact.py's Huber branch (its MuJoCo script: false)
    norm_affine: bool | None = None  # GroupNorm learnable affine (GOPS: false)
    activation: Literal["relu", "gelu", "tanh", "elu"] | None = None  # hidden-layer activation (sb3, mujoco: relu)
    norm_groups: int | None = None  # GroupNorm groups per hidden layer (0: no normalisation; GOPS MuJoCo 16)
    init: Literal["default", "orthogonal"] | None = (
        None  # weight init: default (torch.nn.Linear) | orthogonal (GOPS: gain sqrt 2 hidden, 1 heads)
    )
    lam: float | None = None  # dsac-aid lambda: weight of the epistemic std in the bounds (GOPS MuJoCo 0.71)
    beta0: float | None = None  # dsac-aid: initial weight of the aleatoric std in the behaviour bound
    beta_lr: float | None = None  # dsac-aid: Adam learning rate of beta's annealing step after each evaluation
    reward_scale: float | None = None  # rewards are multiplied by this for learning (sb3 1; GOPS MuJoCo 50)
    huber: bool | None = None  # dsac-aid: Huber (delta 50) critic losses with clamped gradient ratios (GOPS: on)
    homogeneous: bool | None = None  # dsac-aid: sigma-loss ratio over sigma^2, not sigma^3 (GOPS: on; huber needs it)
    lr_q: float | None = field(default=None, metadata={"gt": 0})  # critic learning rate (None: the family preset)
    lr_pi: float | None = field(default=None, metadata={"gt": 0})  # actor learning rate (None: the family preset)
    lr_alpha: float | None = field(default=None, metadata={"gt": 0})  # entropy-temperature learning rate (None: preset)
    eval_interval: int | None = None  # environment steps between evaluations (sb3 5k, GOPS MuJoCo 50k)
    eval_episodes: int = setting(10, "deterministic evaluation episodes per evaluation", sized=10**5)
    bias_horizon: int = setting(200, "evaluation states whose Q bias and sigmas are measured", sized=10**6)
    checkpoint_interval: int = 50_000  # environment steps (0: only at the end)
    reward_noise: float = 0.0  # injected heteroscedastic reward noise (controlled test)
    reward_noise_from: int | None = None  # environment step at which that noise switches on (None: from the start)
    d4rl: bool = False  # write the replay buffers (and policy rollouts) in the D4RL layout
    d4rl_rollout_steps: int = setting(
        0, "steps of final-policy rollouts per seed (0: none)", unit="environment steps", sized=10**8
    )

    def work(self) -> list[Work]:
        """Environment steps of the run (steps x seeds x learners) and the memory of the networks
        (weights, gradients and two Adam moments of the actor and critics: 16 bytes a weight)."""
        runs = self.seeds * len(self.algo)
        hidden = self.hidden or (256, 256, 256)
        per_net = sum(a * b for a, b in zip(hidden, hidden[1:])) + 64 * (hidden[0] + hidden[-1])
        nets = runs * (1 + 2 * max(self.num_q, 2))  # actor, critics and their targets
        return [
            Work(
                self.steps * runs,
                MAX_STEPS,
                "environment steps",
                "steps, seeds or algo",
                f"{self.steps} steps x {self.seeds} seeds x {len(self.algo)} learners",
                "take",
            ),
            Work(
                16 * per_net * nets,
                MAX_NET_BYTES,
                "bytes of network state",
                "hidden, num_q or seeds",
                f"{nets} networks of widths {list(hidden)}",
                "allocate",
            ),
        ]

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
        if self.update_order not in (None, "sequential", "simultaneous"):
            raise ValueError(f"update_order must be sequential or simultaneous, got {self.update_order!r}")
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


def legacy_fields(stored: dict) -> list[str]:
    """The LEGACY settings a run's config record ``stored`` was written without: absent, or null
    where null is not a per-algorithm value (PER_ALGO); they take the values that run used."""
    return [k for k in LEGACY if k not in stored or (stored[k] is None and k not in PER_ALGO)]


def for_resume(cfg: Config, stored: dict, given: set[str]) -> tuple[Config, Config]:
    """``--resume`` of the run whose config record is ``stored``: every setting not ``given`` now
    (recipe, --set, options) keeps the run's value, so a run made under earlier defaults goes on
    under them. Returns (the resolved Config to run, the Config to compare with the record: the
    settings the run was recorded without left None)."""
    fields = {f.name for f in dataclasses.fields(Config)}
    absent = legacy_fields(stored)
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


def log_std_max_of(cfg: Config, algo: str) -> float:
    """The upper clamp of the policy's log std for ``algo``: ``cfg.log_std_max``, or when the
    family leaves it per algorithm (sb3): 2 for sac (SB3's LOG_STD_MAX, CleanRL's), 0.5 for the
    distributional learners (GOPS's policy, as the GOPS families set for every algorithm)."""
    if cfg.log_std_max is not None:
        return float(cfg.log_std_max)
    return 2.0 if algo == "sac" else 0.5


def update_order_of(cfg: Config, algo: str) -> str:
    """When ``algo``'s actor loss reads the critics: ``cfg.update_order``, or when the family
    leaves it per algorithm (sb3): ``sequential`` for sac (SB3's ``SAC.train`` and CleanRL step the
    critics, then compute the actor loss on the stepped critics), ``simultaneous`` for the
    distributional learners (GOPS: every gradient of an iteration before any step)."""
    if cfg.update_order is not None:
        return cfg.update_order
    return "sequential" if algo == "sac" else "simultaneous"


def help_view(cfg: Config) -> Config:
    """``cfg`` for ``--set help``: a per-algorithm value (delay_update, log_std_max, update_order under sb3)
    shown as the values each selected algorithm uses, never None."""
    view = copy.copy(cfg)
    for k, of in (("delay_update", delay_of), ("log_std_max", log_std_max_of), ("update_order", update_order_of)):
        if getattr(cfg, k) is None:
            vals = ((a, of(cfg, a)) for a in cfg.algo)
            object.__setattr__(
                view, k, ", ".join(f"{a} {v:g}" if not isinstance(v, str) else f"{a} {v}" for a, v in vals)
            )
    return view


def effective(cfg: Config) -> dict:
    """Per algorithm, the values that differ between algorithms under ``cfg`` (the config
    record's ``effective`` field)."""
    out = {}
    for algo in cfg.algo:
        e = {"delay_update": delay_of(cfg, algo), "alpha0": 1.0 if algo == "sac" else round(math.e, 6)}
        e["log_std_max"] = log_std_max_of(cfg, algo)
        e["update_order"] = update_order_of(cfg, algo)
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
        log_std_max=log_std_max_of(cfg, algo),
        tanh_epsilon=float(cfg.tanh_epsilon or 0.0),
        sequential=update_order_of(cfg, algo) == "sequential",
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
