"""``jacobian-spectrum``: deep Jacobian spectra of piecewise-linear networks, measured
against the theory of Haas, Gatine, Cosse & Bouraoui, "Why Deep Jacobian Spectra Separate"
(ICML 2026, arXiv 2602.12384); protocol and formulas in docs/theory.md.

For each depth L (and each phase: at init, after training; each gates mode: fixed / free):
  1. the core Jacobian's factors M_l = D_l W_l (jacobian.core_factors; Prop 4.1);
  2. Lyapunov exponents of the top k by Benettin QR (lyapunov.lyap_qr), averaged over
     n_samples probe inputs (fixed gates) or mask draws (free gates);
  3. the closed-form exponents of the masked model (Thm 5.3; RECON closed form, checked
     against Monte Carlo in the notes), for Gaussian init and ReLU gates only;
  4. the finite-depth top-k singular values (lyapunov.top_singular), their log-gap ratios
     s_k / s_{k+1} (depth-induced scaling) and the RECON Haar-minor finite-depth prediction;
  5. alignment (Thm 6.1): context diagonality (RECON metric, the follow-up repository's) and
     the overlap of the top right singular vectors of J_{L/2} and J_L;
  6. training (optional): Adam/SGD on MNIST / Fashion-MNIST / a user's images; ``step``
     records carry the top-k log singular values of the core at a fixed probe and, for the
     fgln arch (input-independent J), the gradient-flow rate ds_k/dt exactly, its decoupled
     reduction -c_k <G, u_k v_k^T> and the balanced law -L s_k^(2-2/L) <G, u_k v_k^T> (Prop 7.1).
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch.nn import functional as F

from icml26.core import diverge
from icml26.core import safetensors_file as stf
from icml26.core.data.images import load_images
from icml26.core.errors import InputError
from icml26.core.limits import check_work as _check
from icml26.core.output import atomic_path
from icml26.core.progress import progress
from icml26.methods.theory import jacobian as jac
from icml26.methods.theory import lyapunov as ly
from icml26.methods.theory.spectrum_config import Config  # noqa: F401

COLUMNS = (
    "arch",
    "depth",
    "phase",
    "gates",
    "lyapunov",
    "lyapunov_pred",
    "max_abs_err",
    "log_sv",
    "log_sv_pred",
    "alignment",
    "overlap_half",
)


# ----------------------------------------------------------------------------- data
def _flat_images(name: str, split: str, n: int, *, need_28: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(x (N, D) standardised float32, labels or None) from icml26.core.data.images."""
    s = load_images(name, split)
    x = torch.from_numpy(s.images[:n]).float().div_(255.0)
    if need_28 and tuple(x.shape[1:]) != (1, 28, 28):
        raise InputError(f"data {name!r}: the cnn arch takes 1x28x28 images, got {tuple(x.shape[1:])}")
    x = x.reshape(x.shape[0], -1)
    x = (x - x.mean()) / x.std().clamp_min(1e-6)
    y = torch.from_numpy(s.labels[: x.shape[0]]) if s.labels is not None else None
    return x, y


def probe_inputs(cfg: Config, in_dim: int, seed: int) -> torch.Tensor:
    """n_samples probe inputs (n_samples, in_dim): test images of the training set (or of
    ``data``), or N(0, 1) noise when ``data`` is ``noise``."""
    name = cfg.train or cfg.data
    if name == "noise":
        g = torch.Generator().manual_seed(seed + 7)
        return torch.randn(cfg.n_samples, in_dim, generator=g)
    x, _ = _flat_images(name, "test", cfg.n_samples, need_28=cfg.arch == "cnn" and cfg.model is None)
    if x.shape[1] != in_dim:
        raise InputError(f"data {name!r}: images have {x.shape[1]} values, the network takes {in_dim}")
    if x.shape[0] < cfg.n_samples:
        raise InputError(f"data {name!r}: {x.shape[0]} test images, n_samples needs {cfg.n_samples}")
    return x


def check_train_data(cfg: Config) -> int:
    """The input size of ``cfg.train``'s images; InputError unless they load as labelled images
    the network can take."""
    x, y = _flat_images(cfg.train, "train", 1, need_28=cfg.arch == "cnn")
    _, yt = _flat_images(cfg.train, "test", 1, need_28=cfg.arch == "cnn")
    if y is None or yt is None:
        raise InputError(
            f"train {cfg.train!r}: the images need class labels (sub-folders, labels array or IDX labels file)"
        )
    return int(x.shape[1])


def check_work(cfg: Config) -> None:
    """Refuse (InputError) a run estimated at hours of CPU: QR passes over every depth, gates
    mode and sample, plus training (6 flops per weight per example)."""
    # multiply-adds of one core layer applied to one column: n^2 (dense) or 9 C^2 196 (3x3 conv, 14x14)
    per_col = cfg.width * cfg.width * (9 * 196 if cfg.arch == "cnn" else 1)
    kk = cfg.top_k + cfg.oversample
    per_layer = 2.0 * per_col * (cfg.top_k + 1.5 * (2 * cfg.qr_sweeps + 1) * kk + 2 * cfg.top_k)
    phases = 1 + (cfg.train is not None)
    flops = sum(d for d in cfg.depths) * per_layer * len(cfg.gates) * cfg.n_samples * phases
    if cfg.train is not None:
        flops += sum(d for d in cfg.depths) * 6.0 * per_col * cfg.batch_size * cfg.train_steps
    _check(flops, 3e13, "spend", "flops", "depths, width, n_samples, train_steps or top_k")


# ----------------------------------------------------------------------------- user model
def load_user_mlp(path: str) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """A user's MLP from a .safetensors file: every 2-D tensor whose name ends in ``weight``,
    in natural order of the name (``layers.2.weight`` before ``layers.10.weight``), with the
    ``bias`` of the same prefix when present. Raises InputError for a bad file or shapes that
    do not chain."""
    fix = "give a .safetensors file of an MLP (2-D tensors named ...weight, optional ...bias)"
    tensors, _ = stf.read(path, fix=fix)
    names = [k for k, v in tensors.items() if k.endswith("weight") and v.ndim == 2]
    if not names:
        raise InputError(f"{path!r}: no 2-D ...weight tensors: {fix}")
    key = lambda s: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]
    names.sort(key=key)
    ws = [tensors[k].to(torch.float64) for k in names]
    bs = []
    for k, w in zip(names, ws):
        b = tensors.get(k[: -len("weight")] + "bias")
        if b is not None and tuple(b.shape) != (w.shape[0],):
            raise InputError(f"{path!r}: {k[:-6]}bias has shape {tuple(b.shape)}, expected ({w.shape[0]},)")
        bs.append(None if b is None else b.to(torch.float64))
    for i in range(1, len(ws)):
        if ws[i].shape[1] != ws[i - 1].shape[0]:
            raise InputError(
                f"{path!r}: {names[i]} takes {ws[i].shape[1]} inputs but {names[i - 1]} gives {ws[i - 1].shape[0]}: "
                "not a chain of layers"
            )
    for k, w in zip(names, ws):
        if not torch.isfinite(w).all():
            raise InputError(f"{path!r}: {k} holds NaN or infinity")
    return ws, bs


# ----------------------------------------------------------------------------- measurement
def measure(factor_draws, cfg: Config, gen: torch.Generator) -> dict:
    """Steps 2, 4, 5 over the draws (each a list of factors). Returns a flat dict."""
    k = cfg.top_k
    lyap, logsv, align, over = [], [], [], []
    for factors in factor_draws:
        L = len(factors)
        lyap.append(ly.lyap_qr(factors, k, gen=gen).numpy())
        ts = ly.top_singular(factors, k, sweeps=cfg.qr_sweeps, oversample=cfg.oversample, gen=gen)
        logsv.append(ts.log_s.numpy())
        if L >= 2:
            left, right = jac.context_diagonality(factors, ts.u, ts.v)
            align.append(float(np.mean(left + right)))
            half = ly.top_singular(factors[: L // 2], k, sweeps=cfg.qr_sweeps, oversample=cfg.oversample, gen=gen)
            over.append(torch.abs((half.v * ts.v).sum(0)).numpy())
    lyap, logsv = np.array(lyap), np.array(logsv)
    L = len(factor_draws[0])
    with np.errstate(invalid="ignore"):
        gaps = (logsv[:, :-1] - logsv[:, 1:]).mean(0)
    return {
        "lyapunov": lyap.mean(0).tolist(),
        "lyapunov_se": (lyap.std(0, ddof=1) / math.sqrt(len(lyap))).tolist() if len(lyap) > 1 else None,
        "log_sv": (logsv.mean(0) / L).tolist(),
        "gap_ratio": np.exp(gaps).tolist(),
        "log_gap": gaps.tolist(),
        "alignment": float(np.mean(align)) if align else None,
        "overlap_half": np.mean(over, 0).tolist() if over else None,
    }


def prediction(
    cfg: Config, phase: str, gates: str, depth: int, n: int
) -> tuple[np.ndarray | None, np.ndarray | None, bool]:
    """(lambda_pred (k,), finite-depth (1/L) log s_pred (k,), exact) or (None, None, False).

    Applies to ReLU gates and Gaussian iid weights at init (mlp/fgln); ``exact`` is True where
    the masked model is the network's own law (free gates; fgln's frozen masks), False for a
    real ReLU MLP's own gates (correlated with the weights: a comparison, not a theorem)."""
    s2 = jac.INIT_SIGMA2.get(cfg.init)
    if phase != "init" or s2 is None or cfg.act != "relu" or cfg.arch == "cnn" or cfg.model is not None:
        return None, None, False
    p = cfg.gate_p if (gates == "free" or cfg.arch == "fgln") else 0.5
    k = cfg.top_k
    lam = ly.lyap_closed(n, p, s2, k, r=k)
    fin = ly.finite_depth_log_sv(n, p, s2, k, depth, r=k)
    return lam, fin, gates == "free" or cfg.arch == "fgln"


def _result(cfg: Config, arch: str, depth: int, phase: str, gates: str, meas: dict, n: int, secs: float) -> dict:
    lam, fin, exact = prediction(cfg, phase, gates, depth, n)
    rec = {
        "kind": "result",
        "arch": arch,
        "act": cfg.act,
        "init": cfg.init if cfg.model is None else None,
        "width": n,
        "depth": depth,
        "phase": phase,
        "gates": gates,
        "top_k": cfg.top_k,
    }
    rec.update(meas)
    rec["lyapunov_pred"] = lam.tolist() if lam is not None else None
    rec["log_sv_pred"] = fin.tolist() if fin is not None else None
    rec["pred_exact"] = exact if lam is not None else None
    if lam is not None:
        d = np.abs(np.array(meas["lyapunov"]) - lam)
        rec["max_abs_err"] = float(d.max()) if np.isfinite(d).all() else None
        d2 = np.abs(np.array(meas["log_sv"]) - fin)
        rec["max_abs_err_log_sv"] = float(d2.max()) if np.isfinite(d2).all() else None
        rec["log_gap_pred"] = (depth * (fin[:-1] - fin[1:])).tolist()
    else:
        rec["max_abs_err"] = rec["max_abs_err_log_sv"] = rec["log_gap_pred"] = None
    rec["seconds"] = round(secs, 3)
    return rec


# ----------------------------------------------------------------------------- dynamics
def fgln_rates(
    net: jac.GatedNet, x: torch.Tensor, y: torch.Tensor, k: int, sweeps: int, oversample: int, gen: torch.Generator
) -> dict:
    """Prop 7.1 for a fixed-gates linear network (J independent of the input), on batch (x, y).

    Returns log_sv (k,) and three gradient-flow rates ds_k/dt (k,): ``exact`` = -sum_l
    a_l^T grad_{W_l} b_l (a_l = A_l^T u_k, b_l = B_l v_k, the gradient from autograd),
    ``decoupled`` = -c_k g_k with c_k = sum_l |a_l|^2 |b_l|^2, g_k = u_k^T G v_k, G = dloss/dJ,
    and ``balanced`` = -L s_k^(2 - 2/L) g_k."""
    net.zero_grad()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    factors = jac.core_factors(net, None, "fixed")
    L = len(factors)
    ts = ly.top_singular(factors, k, sweeps=sweeps, oversample=oversample, gen=gen)
    u, v = ts.u, ts.v
    with torch.no_grad():
        h0 = net.embed(x).to(torch.float64)  # (B, n)
        logits = net(x).to(torch.float64)
        delta = (torch.softmax(logits, 1) - F.one_hot(y, logits.shape[1]).to(torch.float64)) / x.shape[0]
        g_mat = (delta @ net.head.weight.to(torch.float64)).T @ h0  # G = dloss/dJ (n, n)
        a = [None] * L
        z = net.masks[L - 1].to(torch.float64)[:, None] * u  # a_L = D_L u
        a[L - 1] = z
        for l in range(L - 2, -1, -1):  # a_l = D_l W_{l+1}^T a_{l+1}
            z = net.masks[l].to(torch.float64)[:, None] * (net.core[l + 1].weight.to(torch.float64).T @ z)
            a[l] = z
        b = [v]
        for l in range(L - 1):  # b_{l+1} = M_l b_l
            b.append(factors[l] @ b[-1])
        exact = torch.zeros(k, dtype=torch.float64)
        c = torch.zeros(k, dtype=torch.float64)
        for l in range(L):
            gw = net.core[l].weight.grad.to(torch.float64)
            exact -= ((gw @ b[l]) * a[l]).sum(0)
            c += (a[l] ** 2).sum(0) * (b[l] ** 2).sum(0)
        g = ((g_mat @ v) * u).sum(0)
        s = torch.exp(ts.log_s)
    net.zero_grad()
    return {
        "log_sv": ts.log_s.numpy(),
        "exact": exact.numpy(),
        "decoupled": (-c * g).numpy(),
        "balanced": (-L * s ** (2.0 - 2.0 / L) * g).numpy(),
        "loss": float(loss.detach()),
    }


def train(
    net: jac.GatedNet,
    cfg: Config,
    xs: torch.Tensor,
    ys: torch.Tensor,
    probe: torch.Tensor,
    seed: int,
    arch: str,
    depth: int,
    gen: torch.Generator,
    bar=None,
) -> Iterator[dict]:
    """Train on (xs, ys); yield ``step`` records; the last yielded dict is
    ``{"kind": "_train_done", ...}`` with the dynamics summary (``diverged``: the
    ``diverge.Diverged`` of a non-finite loss, else None). ``bar``: advanced per step."""
    g = torch.Generator().manual_seed(seed + 1000 + depth)
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr) if cfg.optimizer == "adam" else torch.optim.SGD(params, lr=cfg.lr)
    red_err, bal_err = [], []
    k = cfg.top_k
    for step in range(cfg.train_steps + 1):
        idx = torch.randint(0, xs.shape[0], (cfg.batch_size,), generator=g)
        xb, yb = xs[idx], ys[idx]
        if step % cfg.log_every == 0 or step == cfg.train_steps:
            rec = {"kind": "step", "arch": arch, "depth": depth, "step": step}
            if net.arch == "fgln":
                r = fgln_rates(net, xb, yb, k, cfg.qr_sweeps, cfg.oversample, gen)
                rec.update(
                    {
                        "loss": r["loss"],
                        "log_s": r["log_sv"].tolist(),
                        "sdot_exact": r["exact"].tolist(),
                        "sdot_decoupled": r["decoupled"].tolist(),
                        "sdot_balanced": r["balanced"].tolist(),
                    }
                )
                ne = np.linalg.norm(r["exact"])
                if ne > 0:
                    red_err.append(float(np.linalg.norm(r["exact"] - r["decoupled"]) / ne))
                    bal_err.append(float(np.linalg.norm(r["exact"] - r["balanced"]) / ne))
            else:
                with torch.no_grad():
                    loss = float(F.cross_entropy(net(xb), yb))
                fs = jac.core_factors(net, probe[:1], "fixed")
                ts = ly.top_singular(fs, k, sweeps=cfg.qr_sweeps, oversample=cfg.oversample, gen=gen)
                rec.update(
                    {
                        "loss": loss,
                        "log_s": ts.log_s.tolist(),
                        "sdot_exact": None,
                        "sdot_decoupled": None,
                        "sdot_balanced": None,
                    }
                )
            yield rec
        if step == cfg.train_steps:
            break
        opt.zero_grad()
        loss = F.cross_entropy(net(xb), yb)
        try:
            diverge.check(step, loss=loss)
        except diverge.Diverged as exc:
            yield {"kind": "_train_done", "diverged": exc, "reduction_error": None, "balanced_error": None}
            return
        loss.backward()
        opt.step()
        if bar is not None:
            bar.advance(1, depth=depth, loss=float(loss.detach()))
    yield {
        "kind": "_train_done",
        "diverged": None,
        "reduction_error": float(np.median(red_err)) if red_err else None,
        "balanced_error": float(np.median(bal_err)) if bal_err else None,
    }


@torch.no_grad()
def accuracy(net: jac.GatedNet, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((net(x).argmax(1) == y).float().mean())


# ----------------------------------------------------------------------------- run
def run(cfg: Config, *, seed: int = 0, device: str = "cpu", user_model=None) -> Iterator[dict]:
    """Yield ``step`` records (training), one ``result`` per (arch, depth, phase, gates), then
    the ``summary``. user_model: (weights, biases) from :func:`load_user_mlp` (else cfg.model
    is read here). CPU float64 throughout (``device`` is accepted for the common signature)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    t_all = time.time()
    results: list[dict] = []
    train_info: dict = {}
    if cfg.model is not None:
        ws, bs = user_model if user_model is not None else load_user_mlp(cfg.model)
        probes = probe_inputs(cfg, ws[0].shape[1], seed)
        for gates in cfg.gates:
            t0 = time.time()
            draws = [
                jac.mlp_factors_from_weights(
                    ws,
                    bs,
                    probes[i] if gates == "fixed" else None,
                    gates,
                    act=cfg.act,
                    slope=cfg.negative_slope,
                    p=cfg.gate_p,
                    r=cfg.top_k,
                    gen=gen,
                )
                for i in range(cfg.n_samples)
            ]
            rec = _result(
                cfg,
                "user",
                len(ws),
                "trained",
                gates,
                measure(draws, cfg, gen),
                min(w.shape[0] for w in ws),
                time.time() - t0,
            )
            results.append(rec)
            yield rec
        yield summarize(cfg, results, train_info, time.time() - t_all)
        return
    xs = ys = xt = yt = None
    if cfg.train is not None:
        xs, ys = _flat_images(cfg.train, "train", cfg.train_examples, need_28=cfg.arch == "cnn")
        xt, yt = _flat_images(cfg.train, "test", 2000, need_28=cfg.arch == "cnn")
        if ys is None or yt is None:
            raise InputError(f"train {cfg.train!r}: the images need class labels")
    in_dim = 784 if xs is None else xs.shape[1]
    probes = probe_inputs(cfg, in_dim, seed)
    n_core = cfg.width * (196 if cfg.arch == "cnn" else 1)
    total = len(cfg.depths) * cfg.train_steps if cfg.train is not None else None
    with progress(total, "jacobian-spectrum training steps") as bar:
        for depth in cfg.depths:
            net = jac.GatedNet(
                cfg.arch,
                cfg.width,
                depth,
                in_dim=in_dim,
                out_dim=10 if ys is None else max(10, int(ys.max()) + 1),
                init=cfg.init,
                act=cfg.act,
                negative_slope=cfg.negative_slope,
                gate_p=cfg.gate_p,
                seed=seed + depth,
            )
            phases = ["init"] + (["trained"] if cfg.train is not None else [])
            for phase in phases:
                extra = {}
                if phase == "trained":
                    done = {}
                    for rec in train(net, cfg, xs, ys, probes, seed, cfg.arch, depth, gen, bar=bar):
                        if rec["kind"] == "_train_done":
                            done = rec
                        else:
                            yield rec
                    if done.get("diverged") is not None:  # no measurement of a diverged network
                        diverge.warn(done["diverged"], f"jacobian-spectrum depth {depth}")
                        rec = {"kind": "result", "arch": cfg.arch, "depth": depth, "phase": phase}
                        rec.update({"train_steps": cfg.train_steps, **diverge.diverged_fields(done["diverged"])})
                        train_info[depth] = {"test_accuracy": None, "diverged_step": done["diverged"].step}
                        results.append(rec)
                        yield rec
                        continue
                    extra = {
                        "test_accuracy": accuracy(net, xt, yt),
                        "train_steps": cfg.train_steps,
                        "diverged": False,
                        "diverged_step": None,
                        "dynamics_reduction_error": done.get("reduction_error"),
                        "dynamics_balanced_error": done.get("balanced_error"),
                    }
                    train_info[depth] = extra
                for gates in cfg.gates:
                    t0 = time.time()
                    draws = [
                        jac.core_factors(net, probes[i : i + 1], gates, p=cfg.gate_p, r=cfg.top_k, gen=gen)
                        for i in range(cfg.n_samples)
                    ]
                    if gates == "fixed" and cfg.arch == "fgln":
                        draws = draws[:1]  # input-independent
                    rec = _result(
                        cfg, cfg.arch, depth, phase, gates, measure(draws, cfg, gen), n_core, time.time() - t0
                    )
                    rec.update(extra)
                    results.append(rec)
                    yield rec
    yield summarize(cfg, results, train_info, time.time() - t_all)


def summarize(cfg: Config, results: list[dict], train_info: dict, seconds: float) -> dict:
    """Summary: the largest |measured - predicted| exponent error where the masked model is the
    network's law (free gates, fgln), at depth >= 32 and overall; whether the log-gap grows
    with depth (depth-induced separation); test accuracy after training."""
    exact = [r for r in results if r.get("pred_exact") and r.get("max_abs_err") is not None]
    deep = [r["max_abs_err"] for r in exact if r["depth"] >= 32]
    init_fixed = [
        r
        for r in results
        if r["phase"] == "init"
        and r["gates"] == "fixed"
        and r.get("max_abs_err") is not None
        and not r.get("pred_exact")
    ]
    by_depth = sorted(
        (r["depth"], r["log_gap"][0])
        for r in results
        if r["phase"] == "init" and r["gates"] == results[0]["gates"] and r.get("log_gap")
    )
    grows = None
    if len(by_depth) >= 2:
        grows = bool(
            all(b[1] >= a[1] - 1e-9 for a, b in zip(by_depth, by_depth[1:])) and by_depth[-1][1] > by_depth[0][1]
        )
    return {
        "kind": "summary",
        "n_results": len(results),
        "max_abs_err_masked": max((r["max_abs_err"] for r in exact), default=None),
        "max_abs_err_masked_depth_ge_32": max(deep) if deep else None,
        "target_masked_depth_ge_32_met": (max(deep) <= 0.02) if deep else None,
        "max_abs_err_relu_own_gates": max((r["max_abs_err"] for r in init_fixed), default=None),
        "top_gap_grows_with_depth": grows,
        "test_accuracy": {str(d): v["test_accuracy"] for d, v in train_info.items()} or None,
        "diverged": [r["depth"] for r in results if r.get("diverged")],
        "seconds": round(seconds, 2),
    }


def plot(records: list[dict], out_dir: Path) -> None:
    """``exponents_vs_depth.png``: measured (markers) and predicted (lines) exponents of the
    top k against depth, one panel per (phase, gates); ``sv_trajectories.png`` when trained."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = [r for r in records if r.get("kind") == "result" and not r.get("diverged")]
    keys = sorted({(r["phase"], r["gates"]) for r in res})
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4), squeeze=False, constrained_layout=True)
    for ax, (ph, gt) in zip(axes[0], keys):
        rows = sorted((r for r in res if r["phase"] == ph and r["gates"] == gt), key=lambda r: r["depth"])
        d = np.array([r["depth"] for r in rows])
        lam = np.array([[np.nan if v is None else v for v in r["lyapunov"]] for r in rows])
        k = lam.shape[1]
        for j in range(k):
            c = plt.cm.viridis(j / max(k - 1, 1))
            ax.plot(d, lam[:, j], "o", color=c, ms=4)
            if rows[0].get("lyapunov_pred") is not None:
                ax.plot(d, [r["lyapunov_pred"][j] for r in rows], "-", color=c, lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("depth L")
        ax.set_ylabel("lambda_k (nats / layer)")
        ax.set_title(f"{rows[0]['arch']} {ph}, gates {gt} (dots: QR, lines: closed form)", fontsize=9)
    with atomic_path(out_dir / "exponents_vs_depth.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    steps = [r for r in records if r.get("kind") == "step"]
    if steps:
        depths = sorted({r["depth"] for r in steps})
        fig, axes = plt.subplots(
            1, len(depths), figsize=(4.5 * len(depths), 3.6), squeeze=False, constrained_layout=True
        )
        for ax, dd in zip(axes[0], depths):
            ss = [r for r in steps if r["depth"] == dd]
            t = [r["step"] for r in ss]
            sv = np.array([r["log_s"] for r in ss])
            for j in range(sv.shape[1]):
                ax.plot(t, sv[:, j], color=plt.cm.viridis(j / max(sv.shape[1] - 1, 1)), lw=1)
            ax.set_title(f"depth {dd}: log s_k of the core Jacobian", fontsize=9)
            ax.set_xlabel("step")
        with atomic_path(out_dir / "sv_trajectories.png") as tmp:
            fig.savefig(tmp, format="png", dpi=120)
        plt.close(fig)
