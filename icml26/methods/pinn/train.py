"""Race SNG / SPRING against Adam, L-BFGS, ENGD and SGD on a PINN problem under a time budget.

Protocol (docs/sng.md; the paper's own experiments were not
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
from typing import Iterator, Optional

import numpy as np
import torch
from torch import Tensor

from icml26.core import diverge
from icml26.core.output import atomic_path
from icml26.core.progress import progress
from icml26.core.verdict import seed_interval, verdict
from icml26.methods.pinn import baselines as B
from icml26.methods.pinn import optim as O
from icml26.methods.pinn import problems as PR
from icml26.methods.pinn import sampling as S
from icml26.methods.pinn.config import BATCHED, MAX_TOTAL_BUDGET_S, OPTIMS, Config, validate  # noqa: F401

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


def _make_optimizer(cfg: Config, optim: str, theta):
    """The optimizer of ``optim`` on ``theta`` and its learning-rate schedule (adam; else None)."""
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
    return opt, sched


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
    opt, sched = _make_optimizer(cfg, optim, theta)

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
    diverged = None
    label = f"sng {optim}" + (f" b={batch}" if batch else "") + f" seed {seed}"
    with progress(cfg.time_budget_s, f"{label} (optimizer s)") as bar:
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
                bar.update(completed=min(wall, cfg.time_budget_s), iteration=it, loss=loss, rel_l2=rel)
                try:
                    diverge.check(it, loss=loss, rel_l2=rel)
                except diverge.Diverged as exc:  # the run stops here; its result says so
                    diverge.warn(exc, label)
                    diverged = exc
                    break
    # spectral decay of J on (at most) 512 pool rows at the end
    m = min(512, len(pool.Xi))
    mb = max(1, round(m * len(pool.Xb) / pool.N))
    decay = float("nan")
    if diverged is None:
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
        **diverge.diverged_fields(diverged),
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
        "diverged": any(e["diverged"] for e in ends),
        "diverged_step": next((e["diverged_step"] for e in ends if e["diverged"]), None),
        "best_rel_l2_ci": _log_interval([e["best_rel_l2"] for e in ends]),
    }


def _log_interval(values: list[float]) -> list[float] | None:
    """95% interval over seeds of the geometric mean (errors span decades); None with one seed."""
    logs = [math.log10(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    ci = seed_interval(logs) if len(logs) == len(values) else None
    return None if ci is None else [10 ** ci[0], 10 ** ci[1]]


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

    rows = [dict(r, config=f"{r['optim']}" + (f"/b{r['batch']}" if r["batch"] else "")) for r in results]
    best = verdict(rows, "best_rel_l2", "config", ci_key="best_rel_l2_ci", metric="config")
    lead = next((r for r in rows if r["config"] == best["best_config"]), None)
    yield {
        "kind": "summary",
        "problem": cfg.problem,
        "configurations": len(results),
        "seeds": seeds,
        "time_budget_s": cfg.time_budget_s,
        **best,  # best_config: optim[/b<batch>] only when its seed interval separates it (null on ties, one seed)
        "best_rel_l2": lead["best_rel_l2"] if lead else None,
        "diverged": [r["config"] for r in rows if r["diverged"]],
    }


def plot(records: list[dict], out_dir) -> None:
    """rel_l2 against wall time, one line per (optim, batch, seed): ``rel_l2_vs_time.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
