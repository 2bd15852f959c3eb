"""Race SNG / SPRING against Adam, L-BFGS, ENGD and SGD on a PINN problem under a time budget.

Protocol (shared/methods/sng.md, "Offline here"; the paper's own experiments were not
available, so the settings are ours and RECON where marked):

1. A pool of ``pool_interior`` + ``pool_boundary`` collocation points per seed, redrawn every
   ``pool_resample_every`` steps (0 = fixed); residual rows normalised as in ENGD
   (1/sqrt(n) per kind, problems.py). A separate set of ``eval_points`` fresh interior
   points gives the relative L2 error.
2. Mini-batch optimizers (sng, spring, adam, sgd) draw ``batch`` rows per step: ``uniform``
   takes interior and boundary rows in the pool's proportion (at least one of each), rows
   weighted 1/sqrt(b_kind); ``leverage`` / ``volume`` / ``volume-approx`` (SNG/SPRING only)
   select over the whole pool from its Jacobian, recomputed every ``sampling_refresh_every``
   steps (stale in between; RECON), rows weighted by the pool normalisation x sqrt(N / b).
3. Full-pool optimizers (engd, lbfgs) ignore ``batch``.
4. The clock (``wall_s``) counts optimizer work only (sampling, Jacobians, solves, line
   search); the evaluation of ``loss`` (on the whole pool) and ``rel_l2`` is paused out,
   every ``eval_interval_s`` of optimizer time (and at the first 10 steps and the end).
5. A run stops at ``time_budget_s`` or ``max_iterations``. One ``result`` per
   (problem, optim, batch) pools its seeds: medians of the final / best errors and of the
   times to 1e-3 / 1e-5 (null when the median run never got there).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import torch
from torch import Tensor

from icml26.methods.pinn import baselines as B
from icml26.methods.pinn import optim as O
from icml26.methods.pinn import problems as PR
from icml26.methods.pinn import sampling as S

OPTIMS = ("sng", "spring", "adam", "lbfgs", "engd", "sgd")
BATCHED = ("sng", "spring", "adam", "sgd")
MAX_TOTAL_BUDGET_S = 6 * 3600.0  # up-front limit: time_budget_s x runs


@dataclass(frozen=True)
class Config:
    problem: str = "poisson2d"  # poisson2d | poisson5d | heat1d | allencahn2d
    optim: tuple[str, ...] = ("sng", "spring", "adam", "lbfgs", "engd")  # any of OPTIMS
    batch: tuple[int, ...] = (64, 256)  # mini-batch sizes b (rows per step)
    seeds: int = 1  # runs per configuration: seeds seed .. seed+seeds-1
    time_budget_s: float = 300.0  # optimizer time per run (s)
    max_iterations: int = 1_000_000  # hard cap on steps per run
    width: int = 64  # tanh MLP width
    depth: int = 2  # hidden layers
    pool_interior: int = 1000  # collocation pool N (interior rows)
    pool_boundary: int = 200  # collocation pool (boundary rows)
    pool_resample_every: int = 100  # redraw the pool every R steps (0 = fixed)
    eval_points: int = 4096  # fresh interior points for the relative L2 error
    eval_interval_s: float = 1.0  # optimizer seconds between evaluations
    sampling: str = "uniform"  # uniform | leverage | volume | volume-approx (sng/spring)
    sampling_refresh_every: int = 10  # steps between pool Jacobians (leverage/volume)
    sketch_factor: int = 2  # volume-approx: sketch columns = factor x batch
    damping: float = 1e-8  # lam (ENGD-Woodbury Poisson sweeps: 1e-8 .. 1e-12)
    damping_schedule: str = "constant"  # constant | exponential
    damping_decay: float = 1.0  # exponential: lam_t = max(damping_min, damping decay^t)
    damping_min: float = 0.0
    momentum: float = 0.99  # SPRING mu (SPRING paper Sec. 4); sng uses 0
    lr: float = 0.0  # sng/spring/engd step size; 0 = grid line search 2^0..2^-30
    norm_constraint: float = 0.0  # SPRING's C (with a fixed lr; 0 = off)
    engd_damping: float = 1e-10  # full-batch ENGD's lam
    adam_lr: float = 1e-3
    adam_lr_final: float = 1e-5
    adam_decay_steps: int = 20000
    sgd_lr: float = 1e-3
    sgd_momentum: float = 0.9
    lbfgs_history: int = 100
    dtype: str = "float64"  # float64 | float32

    def __post_init__(self):
        if self.problem not in PR.PROBLEMS:
            raise ValueError(f"problem {self.problem!r} is not one of {', '.join(PR.PROBLEMS)}")
        if not self.optim:
            raise ValueError(f"optim: give at least one of {', '.join(OPTIMS)}")
        for o in self.optim:
            if o not in OPTIMS:
                raise ValueError(f"optim {o!r} is not one of {', '.join(OPTIMS)}")
        if len(set(self.optim)) != len(self.optim):
            raise ValueError(f"optim lists a name twice: {', '.join(self.optim)}")
        if not self.batch or any(b < 2 for b in self.batch):
            raise ValueError(f"batch sizes must be >= 2, got {list(self.batch)}")
        if len(set(self.batch)) != len(self.batch):
            raise ValueError(f"batch lists a size twice: {list(self.batch)}")
        for name in (
            "damping",
            "damping_min",
            "norm_constraint",
            "engd_damping",
            "lr",
            "adam_lr",
            "adam_lr_final",
            "sgd_lr",
            "time_budget_s",
            "eval_interval_s",
        ):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        if self.time_budget_s <= 0:
            raise ValueError(f"time_budget_s must be > 0, got {self.time_budget_s}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if not 0.0 < self.damping_decay <= 1.0:
            raise ValueError(f"damping_decay must be in (0, 1], got {self.damping_decay}")
        if not 0.0 <= self.sgd_momentum < 1.0:
            raise ValueError(f"sgd_momentum must be in [0, 1), got {self.sgd_momentum}")
        if self.damping_schedule not in ("constant", "exponential"):
            raise ValueError(f"damping_schedule must be constant or exponential, got {self.damping_schedule!r}")
        if self.sampling not in S.SAMPLINGS:
            raise ValueError(f"sampling {self.sampling!r} is not one of {', '.join(S.SAMPLINGS)}")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be float64 or float32, got {self.dtype!r}")
        for name, lo in (
            ("seeds", 1),
            ("max_iterations", 1),
            ("width", 1),
            ("depth", 1),
            ("pool_interior", 2),
            ("pool_boundary", 1),
            ("pool_resample_every", 0),
            ("eval_points", 1),
            ("sampling_refresh_every", 1),
            ("sketch_factor", 1),
            ("adam_decay_steps", 1),
            ("lbfgs_history", 1),
        ):
            if getattr(self, name) < lo:
                raise ValueError(f"{name} must be >= {lo}, got {getattr(self, name)}")
        if any(b > self.pool_interior + self.pool_boundary for b in self.batch):
            raise ValueError(
                f"batch sizes {list(self.batch)} exceed the pool of {self.pool_interior + self.pool_boundary} rows"
            )
        if self.width * self.depth > 4096:
            raise ValueError(f"width x depth = {self.width * self.depth} is beyond this command's CPU scope (<= 4096)")


def validate(cfg: Config) -> None:
    """Checks that need more than one field, before the config record (InputError)."""
    from icml26.core.limits import check_work

    runs = cfg.seeds * sum(len(cfg.batch) if o in BATCHED else 1 for o in cfg.optim)
    check_work(
        runs * cfg.time_budget_s,
        MAX_TOTAL_BUDGET_S,
        "take",
        "s of optimizer time",
        "--time-budget, --seeds, --batch or --optim",
        detail=f"{runs} runs x {cfg.time_budget_s:g} s",
    )


# --------------------------------------------------------------------------------------


class _Pool:
    """Collocation pool of one run: interior / boundary points and the per-kind weights."""

    def __init__(self, problem: PR.Problem, cfg: Config, gen: torch.Generator, dtype, device):
        self.problem, self.cfg, self.gen, self.dtype, self.device = problem, cfg, gen, dtype, device
        self.redraw()

    def redraw(self) -> None:
        self.Xi = self.problem.interior(self.cfg.pool_interior, self.gen).to(self.device, self.dtype)
        self.Xb = self.problem.on_boundary(self.cfg.pool_boundary, self.gen).to(self.device, self.dtype)

    @property
    def N(self) -> int:
        return len(self.Xi) + len(self.Xb)

    def split(self, b: int) -> tuple[int, int]:
        bb = min(len(self.Xb), max(1, round(b * len(self.Xb) / self.N)))
        return b - bb, bb


def _run_one(
    cfg: Config, problem: PR.Problem, optim: str, batch: Optional[int], seed: int, device: str
) -> Iterator[dict]:
    """Yield ``step`` records of one run, then a private ``_end`` record with its summary."""
    dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
    torch.manual_seed(seed)
    model = PR.FlatModel(PR.mlp(problem.dim, cfg.width, cfg.depth, dtype=dtype).to(device))
    res = PR.Residuals(problem, model)
    theta = torch.nn.Parameter(model.theta0())
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    pool = _Pool(problem, cfg, gen, dtype, device)
    X_eval = problem.interior(cfg.eval_points, torch.Generator().manual_seed(10**6 + seed)).to(device, dtype)

    # 1. the optimizer and its step
    opt = sched = None
    if optim in ("sng", "spring", "engd"):
        lam = cfg.engd_damping if optim == "engd" else cfg.damping
        opt = O.SNG(
            [theta],
            lr=cfg.lr if cfg.lr > 0 else None,
            damping=lam,
            momentum=cfg.momentum if optim == "spring" else 0.0,
            norm_constraint=cfg.norm_constraint,
            damping_schedule=cfg.damping_schedule if optim != "engd" else "constant",
            damping_decay=cfg.damping_decay,
            damping_min=cfg.damping_min,
        )
    elif optim == "adam":
        opt, sched = B.adam(theta, cfg.adam_lr, cfg.adam_lr_final, cfg.adam_decay_steps)
    elif optim == "sgd":
        opt = B.sgd(theta, cfg.sgd_lr, cfg.sgd_momentum)
    elif optim == "lbfgs":
        opt = B.lbfgs(theta, cfg.lbfgs_history, min(5, cfg.max_iterations))

    pool_J: Optional[Tensor] = None

    def uniform_batch(b: int):
        bi, bb = pool.split(b)
        ii = torch.from_numpy(rng.choice(len(pool.Xi), size=bi, replace=False))
        ib = torch.from_numpy(rng.choice(len(pool.Xb), size=bb, replace=False))
        return pool.Xi[ii], pool.Xb[ib], 1.0 / math.sqrt(bi), 1.0 / math.sqrt(bb)

    def selected_batch(b: int, it: int):
        nonlocal pool_J
        wi, wb = 1.0 / math.sqrt(len(pool.Xi)), 1.0 / math.sqrt(len(pool.Xb))
        if pool_J is None or it % cfg.sampling_refresh_every == 0:
            _, pool_J = res.jacobian(theta.detach(), pool.Xi, pool.Xb, wi, wb)
        idx = np.array(
            S.select(pool_J.cpu(), b, cfg.sampling, lam=opt.current_damping(), rng=rng, sketch_factor=cfg.sketch_factor)
        )
        ni = len(pool.Xi)
        ii, ib = idx[idx < ni], idx[idx >= ni] - ni
        scale = math.sqrt(pool.N / b)
        return pool.Xi[torch.from_numpy(ii)], pool.Xb[torch.from_numpy(ib)], wi * scale, wb * scale

    next_redraw = cfg.pool_resample_every

    def one_step(it: int) -> int:
        """One step from iteration ``it``; returns the iterations done (L-BFGS: several)."""
        nonlocal pool_J, next_redraw
        if cfg.pool_resample_every and it >= next_redraw:
            pool.redraw()
            pool_J = None
            while next_redraw <= it:
                next_redraw += cfg.pool_resample_every
        if optim in ("sng", "spring"):
            if cfg.sampling == "uniform":
                Xi, Xb, wi, wb = uniform_batch(batch)
            else:
                Xi, Xb, wi, wb = selected_batch(batch, it)
            opt.step(
                lambda: res.jacobian(theta.detach(), Xi, Xb, wi, wb),
                residual_fn=lambda: res.vector(theta.detach(), Xi, Xb, wi, wb),
            )
        elif optim == "engd":
            wi, wb = 1.0 / math.sqrt(len(pool.Xi)), 1.0 / math.sqrt(len(pool.Xb))
            opt.step(
                lambda: res.jacobian(theta.detach(), pool.Xi, pool.Xb, wi, wb),
                residual_fn=lambda: res.vector(theta.detach(), pool.Xi, pool.Xb, wi, wb),
            )
        elif optim in ("adam", "sgd"):
            Xi, Xb, wi, wb = uniform_batch(batch)
            opt.zero_grad(set_to_none=True)
            r = res.vector(theta, Xi, Xb, wi, wb)
            (0.5 * (r * r).sum()).backward()
            opt.step()
            if sched is not None:
                sched.step()
        elif optim == "lbfgs":

            def closure():
                opt.zero_grad(set_to_none=True)
                loss = res.loss(theta, pool.Xi, pool.Xb)
                loss.backward()
                return loss

            before = B.lbfgs_iterations(opt)
            opt.step(closure)
            return max(1, B.lbfgs_iterations(opt) - before)
        return 1

    def evaluate() -> tuple[float, float]:
        with torch.no_grad():
            loss = float(res.loss(theta.detach(), pool.Xi, pool.Xb))
        return loss, PR.relative_l2(model, theta.detach(), problem, X_eval)

    head = {"kind": "step", "problem": problem.name, "optim": optim, "batch": batch, "seed": seed}
    wall, it, last_eval = 0.0, 0, -math.inf
    best, t3, t5 = math.inf, None, None
    loss, rel = evaluate()
    yield {**head, "iteration": 0, "wall_s": 0.0, "loss": loss, "rel_l2": rel}
    best = rel
    diverged = False
    while it < cfg.max_iterations and wall < cfg.time_budget_s:
        t0 = time.perf_counter()
        it += one_step(it)
        wall += time.perf_counter() - t0
        done = it >= cfg.max_iterations or wall >= cfg.time_budget_s
        if done or it <= 10 or wall - last_eval >= cfg.eval_interval_s:
            last_eval = wall
            loss, rel = evaluate()
            if math.isfinite(rel):
                best = min(best, rel)
                if t3 is None and rel <= 1e-3:
                    t3 = wall
                if t5 is None and rel <= 1e-5:
                    t5 = wall
            yield {**head, "iteration": it, "wall_s": round(wall, 4), "loss": loss, "rel_l2": rel}
            if not (math.isfinite(loss) and math.isfinite(rel)):
                diverged = True
                break
    # spectral decay of J on (at most) 512 pool rows at the end
    m = min(512, len(pool.Xi))
    mb = max(1, round(m * len(pool.Xb) / pool.N))
    decay = float("nan")
    if not diverged:
        _, Jend = res.jacobian(
            theta.detach(), pool.Xi[: m - mb], pool.Xb[:mb], 1.0 / math.sqrt(m - mb), 1.0 / math.sqrt(mb)
        )
        decay = B.spectral_decay(Jend)
    yield {
        "kind": "_end",
        "final_rel_l2": rel,
        "best_rel_l2": best,
        "t3": t3,
        "t5": t5,
        "iterations": it,
        "wall_s": wall,
        "decay": decay,
        "diverged": diverged,
    }


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return float("nan")
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def result_record(
    problem: str, optim: str, batch: Optional[int], sampling: Optional[str], ends: list[dict], seeds: list[int]
) -> dict:
    """One ``result`` over the seeds of a configuration (medians; a time is null when the
    median run did not reach the threshold)."""

    def med_time(key):
        m = _median([e[key] if e[key] is not None else math.inf for e in ends])
        return m if math.isfinite(m) else None

    return {
        "kind": "result",
        "problem": problem,
        "optim": optim,
        "batch": batch,
        "sampling": sampling,
        "final_rel_l2": _median([e["final_rel_l2"] for e in ends]),
        "best_rel_l2": _median([e["best_rel_l2"] for e in ends]),
        "time_to_1e-3_s": med_time("t3"),
        "time_to_1e-5_s": med_time("t5"),
        "iterations": int(_median([e["iterations"] for e in ends])),
        "seeds": seeds,
        "jacobian_spectral_decay": _median([e["decay"] for e in ends]),
        "per_seed_final_rel_l2": [e["final_rel_l2"] for e in ends],
        "diverged_runs": sum(bool(e["diverged"]) for e in ends),
    }


def configurations(cfg: Config) -> list[tuple[str, Optional[int]]]:
    out = []
    for o in cfg.optim:
        for b in cfg.batch if o in BATCHED else (None,):
            out.append((o, b))
    return out


def run(cfg: Config, *, seed: int = 0, device: str = "cpu") -> Iterator[dict]:
    """Yield ``step`` records of every run, one ``result`` per (problem, optim, batch), then a ``summary``."""
    problem = PR.get_problem(cfg.problem)
    seeds = list(range(seed, seed + cfg.seeds))
    results = []
    for optim, batch in configurations(cfg):
        ends = []
        for s in seeds:
            for rec in _run_one(cfg, problem, optim, batch, s, device):
                if rec["kind"] == "_end":
                    ends.append(rec)
                else:
                    yield rec
        sampling = cfg.sampling if optim in ("sng", "spring") else ("uniform" if optim in ("adam", "sgd") else None)
        r = result_record(cfg.problem, optim, batch, sampling, ends, seeds)
        results.append(r)
        yield r
    best = min(results, key=lambda r: r["best_rel_l2"] if math.isfinite(r["best_rel_l2"]) else math.inf)
    yield {
        "kind": "summary",
        "problem": cfg.problem,
        "configurations": len(results),
        "seeds": seeds,
        "time_budget_s": cfg.time_budget_s,
        "best_optim": best["optim"],
        "best_batch": best["batch"],
        "best_rel_l2": best["best_rel_l2"],
    }


def plot(records: list[dict], out_dir) -> None:
    """rel_l2 against wall time, one line per (optim, batch, seed): ``rel_l2_vs_time.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icml26.core.output import atomic_path

    steps = [r for r in records if r.get("kind") == "step" and r.get("rel_l2") is not None]
    if not steps:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = sorted({(r["optim"], r["batch"] or 0) for r in steps})
    colors = dict(zip(keys, plt.cm.tab10.colors * 3))
    labelled = set()
    for o, b, s in sorted({(r["optim"], r["batch"] or 0, r["seed"]) for r in steps}):
        pts = [
            (max(r["wall_s"], 1e-3), r["rel_l2"])
            for r in steps
            if r["optim"] == o and (r["batch"] or 0) == b and r["seed"] == s
        ]
        lab = f"{o}" + (f" b={b}" if b else "")
        ax.plot(*zip(*pts), color=colors[(o, b)], label=None if lab in labelled else lab, lw=1.2)
        labelled.add(lab)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer wall time (s)")
    ax.set_ylabel("relative L2 error")
    ax.axhline(1e-5, color="gray", ls=":", lw=0.8)
    ax.set_title(f"{steps[0]['problem']}: relative L2 vs time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out_dir / "rel_l2_vs_time.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
